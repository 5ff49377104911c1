"""Which library one request is prompted with: the node's own, none, or a published log
(the ``X-Gym-Library`` request header).

A request may name its library:

- no header, or ``default``: the node's library (`--library FILE` or `--follow-log N`);
- ``none``: no library, the base model alone (the receipt names log 0, no experiences);
- a log id (decimal, ``7``): that ExperienceLedger log, curated or publisher, replayed and
  verified from chain + content store exactly as `--follow-log` verifies its log
  (``inference_node.sync.ChainLibrarySource``) before any of it reaches a prompt.

The receipt binds the library the request ran with (log, size, root, the active experience
ids), so a client cannot be told one library and served another. This is what lets
`gym eval --base-url NODE` run every arm of an evaluation on one registered node: the
baseline with ``none``, a library proposed to the DAO with its log id, each generation's
receipt naming its arm's library (docs/design.md "3.1 Entries", ``evaluation``).

Bounds, for requests from anyone: a log is verified once and kept (its snapshot re-synced on
the first request after ``refresh_s``), at most ``max_logs`` logs at a time (the least recently
used one dropped), one sync of a log at a time; a log of more than ``max_leaves`` leaves is
refused before any of it is fetched. A node without a chain serves only ``default`` and
``none``. Refusals are ``LibraryChoiceError`` with the HTTP status and code the server answers:
400 ``invalid_value`` (a malformed header), 400 ``library_unavailable`` (no chain, or the
operator turned choice off), 404 ``library_not_found``, 413 ``library_too_large``, 409
``library_unverified`` (the log fails verification: nothing of it is served), 503
``library_unreachable`` (chain or content store unreachable, nothing verified yet).
"""

from __future__ import annotations

import collections
import threading
import time
from typing import TYPE_CHECKING, Any

from inference_node.errors import InferenceNodeError
from inference_node.library import EMPTY_LIBRARY, LibrarySnapshot, LibrarySource

if TYPE_CHECKING:
    from inference_node.sync import ChainLibrarySource

LIBRARY_HEADER = "x-gym-library"
DEFAULT_MAX_LOGS = 4
DEFAULT_MAX_LEAVES = 4096
DEFAULT_REFRESH_S = 30.0
_ZERO_ADDRESS = "0x" + "0" * 40


class LibraryChoiceError(InferenceNodeError):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code = status, code


def parse_choice(value: str | None) -> str | int | None:
    """``None`` (the node's library), ``"none"`` or a log id from a header value; the one
    ``LibraryChoiceError`` 400 for anything else."""
    text = (value or "").strip().lower()
    if text in ("", "default"):
        return None
    if text == "none":
        return "none"
    if text.isascii() and text.isdigit() and len(text) <= 18 and int(text) >= 1:
        return int(text)
    raise LibraryChoiceError(400, "invalid_value", f"{LIBRARY_HEADER}: {value[:40]!r} is not "
                             "'default', 'none' or a log id (a positive decimal number)")


class LibraryChoices:
    """The snapshot for each request's ``X-Gym-Library`` (module docstring)."""

    def __init__(self, default: LibrarySource, contract: Any = None, content: Any = None, *,
                 from_block: int = 0, enabled: bool = True, max_logs: int = DEFAULT_MAX_LOGS,
                 max_leaves: int = DEFAULT_MAX_LEAVES,
                 refresh_s: float = DEFAULT_REFRESH_S) -> None:
        self.default, self.contract, self.content = default, contract, content
        self.from_block, self.enabled = from_block, enabled
        self.max_logs, self.max_leaves, self.refresh_s = max_logs, max_leaves, refresh_s
        self._logs: collections.OrderedDict[int, tuple[ChainLibrarySource, threading.Lock]] = \
            collections.OrderedDict()
        self._synced: dict[int, float] = {}
        self._lock = threading.Lock()

    @property
    def chooses_logs(self) -> bool:
        return self.enabled and self.contract is not None and self.content is not None

    def snapshot(self, header: str | None) -> LibrarySnapshot:
        """The library a request with this header value runs with. Blocking (a log's first
        sync reads the chain and the content store): call it off the event loop."""
        choice = parse_choice(header)
        if choice is None:
            return self.default.current()
        if choice == "none":
            return EMPTY_LIBRARY
        if not self.chooses_logs:
            why = ("this node has no chain" if self.contract is None
                   else "its operator turned library choice off (--no-library-choice)")
            raise LibraryChoiceError(400, "library_unavailable", f"{LIBRARY_HEADER}: {choice}: "
                                     f"{why}; it serves its own library ('default') or 'none'")
        return self._log_snapshot(choice)

    def _log_snapshot(self, log_id: int) -> LibrarySnapshot:
        from inference_node.sync import REJECTED, ChainLibrarySource
        from ledger.errors import LedgerError

        with self._lock:
            held = self._logs.get(log_id)
            if held is not None:
                self._logs.move_to_end(log_id)
        if held is None:
            try:
                if log_id > self.contract.log_count():
                    raise LibraryChoiceError(404, "library_not_found",
                                             f"{LIBRARY_HEADER}: no log {log_id} on this chain")
                state = self.contract.log_info(log_id)
            except LedgerError as exc:
                raise LibraryChoiceError(503, "library_unreachable",
                                         f"log {log_id}: the chain is unreachable: {exc}") from None
            if state.owner.lower() == _ZERO_ADDRESS:
                raise LibraryChoiceError(404, "library_not_found",
                                         f"{LIBRARY_HEADER}: no log {log_id} on this chain")
            if state.size > self.max_leaves:
                raise LibraryChoiceError(413, "library_too_large", f"log {log_id} has "
                                         f"{state.size} leaves; this node verifies chosen logs "
                                         f"of at most {self.max_leaves}")
            source = ChainLibrarySource(self.contract, self.content, log_id, state.kind,
                                        from_block=self.from_block)
            with self._lock:
                held = self._logs.setdefault(log_id, (source, threading.Lock()))
                self._logs.move_to_end(log_id)
                while len(self._logs) > self.max_logs:
                    dropped, _ = self._logs.popitem(last=False)
                    self._synced.pop(dropped, None)
        source, syncing = held
        with syncing:  # one sync of a log at a time; the others wait for its result
            if time.monotonic() - self._synced.get(log_id, -1e18) >= self.refresh_s:
                source.refresh()
                self._synced[log_id] = time.monotonic()
        snapshot, status = source.current(), source.status()
        if snapshot.version == REJECTED:  # failed verification: nothing of it is served
            self._synced.pop(log_id, None)  # verified again from the start next time
            raise LibraryChoiceError(409, "library_unverified", f"log {log_id} does not verify "
                                     f"from chain + content store: {status.error}")
        if status.error is not None and snapshot is EMPTY_LIBRARY:
            self._synced.pop(log_id, None)  # try again on the next request
            raise LibraryChoiceError(503, "library_unreachable", f"log {log_id}: {status.error}")
        return snapshot
