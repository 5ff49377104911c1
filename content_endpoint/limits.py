"""The bounds of ``gym ipfs serve``: what one request may send, how long it may stall, how much
work one call may cost, and the HTTP protocol that enforces the connection-level ones.

Every party shares one endpoint, so no client may hold what others need:

- uploads stream (``content_endpoint.kubo_rpc.Upload``): a block is at most
  ``max_block_bytes`` even with ``allow-big-block`` (Kubo's own limit is 1 MiB, which that
  flag lifts without end), a request body at most ``max_upload_bytes``, and a body that sends
  nothing for ``stall_timeout_s`` or averages under ``min_upload_rate`` is cut (408);
- a request's headers must be complete within ``stall_timeout_s`` of its connection opening
  (or of the previous answer), an answer the client stops reading for that long is dropped,
  and a connection whose request body was not read to the end is closed after its answer
  (``content_endpoint.protocol.BoundedH11Protocol``): uvicorn itself times only idle
  keep-alive connections;
- at most ``max_connections`` connections (uvicorn's ``limit_concurrency``; more get 503);
- DAG walks visit each distinct block once within ``ledger.blockstore.MAX_PIN_BLOCKS`` and
  ``MAX_PIN_DEPTH``; ``pin/ls`` lists at most ``max_listed_pins`` blocks; long work runs on at
  most ``WORK_THREADS`` threads and stops when its client leaves
  (``kubo_rpc.run_while_connected``), so quick calls never queue behind it.
"""

from __future__ import annotations

from dataclasses import dataclass

from content_endpoint.errors import ContentEndpointError

WORK_THREADS = 8  # threads for DAG walks and imports; quick calls keep the default pool


@dataclass(frozen=True)
class EndpointLimits:
    """The per-request bounds of one endpoint (``gym ipfs serve`` options)."""

    max_block_bytes: int = 4 << 20  # one block, even with allow-big-block (Kubo: 1 MiB without)
    max_upload_bytes: int = 8 << 30  # one request body (add's files, a batch of block/puts)
    stall_timeout_s: float = 30.0  # headers, a body or an answer that moves nothing this long
    min_upload_rate: int = 16 << 10  # bytes/s an upload averages while the server waits on it
    max_connections: int = 512  # open connections; more are answered 503
    max_listed_pins: int = 1 << 20  # blocks pin/ls walks and lists (recursive + indirect)

    def __post_init__(self) -> None:
        if not 1 << 20 <= self.max_block_bytes <= self.max_upload_bytes:
            raise ContentEndpointError("--max-block-bytes must be at least 1 MiB (Kubo's block "
                                       "limit) and at most --max-upload-bytes")
        if self.stall_timeout_s <= 0 or self.max_connections < 1 or self.min_upload_rate < 0:
            raise ContentEndpointError("--stall-timeout and --max-connections must be positive")
