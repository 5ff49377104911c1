"""``pin/add``, ``pin/ls`` and ``pin/rm`` of ``gym ipfs serve``: pins that belong to the parties
that made them, listed without walking every pinned DAG on every call.

Owners: a pin records the name of each caller that pinned it (its authorization name,
``content_endpoint.authorizations``; ``anonymous`` without credentials) in the store
(``ledger.blockstore``: pins survive restarts, an old store's pins are ``local``'s).
``pin/rm`` removes the caller's own pin only; the content is unpinned when no owner remains.
Removing a pin that only others hold is refused (403), and ``anonymous`` removes nothing: a
caller without credentials cannot be told apart from any other, so its removal would be
everyone's. No other removal exists here (no ``block/rm``, ``repo/gc`` or MFS).

``pin/ls``: recursive pins are the pin files; indirect ones come from ``PinIndex``, every block
under the pinned roots, kept between calls and brought up to date per call. A DAG under a CID
never changes, so a new root is walked once (stopping at blocks already indexed) and only a
removed root makes the index start over; each walk visits each distinct block once, within the
store's pin bounds and ``EndpointLimits.max_listed_pins`` (past which ``pin/ls`` of indirect
pins is an error naming ``type=recursive``), and stops when its client leaves.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

from fastapi import FastAPI, Request, Response
from starlette.concurrency import run_in_threadpool

from content_endpoint.authorizations import ANONYMOUS, party_of
from content_endpoint.kubo_rpc import (
    Args,
    RpcError,
    in_work_thread,
    parse_cid,
    run_while_connected,
)
from content_endpoint.limits import EndpointLimits
from ledger.blockstore import LocalBlockStore

_TYPES = ("all", "recursive", "indirect", "direct")


class PinIndex:
    """Every block under the store's pinned roots (CIDv1 strings), kept between calls."""

    def __init__(self, store: LocalBlockStore, max_blocks: int):
        self._store = store
        self._max_blocks = max_blocks
        self._lock = threading.Lock()
        self.roots: frozenset[str] = frozenset()
        self.blocks: frozenset[str] = frozenset()  # closed under links: whole DAGs only

    def refresh(self) -> Iterator[None]:
        """Bring the index up to the store's pins, a step per block walked (stopping between
        steps leaves it as it was). Raises ``RpcError`` past ``max_blocks``."""
        while not self._lock.acquire(timeout=0.1):  # another call is walking: wait for it
            yield
        try:
            roots = frozenset(self._store.pin_ls())
            if roots == self.roots:
                return
            grown = roots >= self.roots
            blocks = set(self.blocks) if grown else set()
            for root in sorted(roots - self.roots if grown else roots):
                for cid, _ in self._store.walk_bounded(root, known=blocks, read_leaves=False):
                    blocks.add(str(cid.to_v1()))
                    if len(blocks) > self._max_blocks:
                        raise RpcError(f"the pinned DAGs hold more than {self._max_blocks} "
                                       "blocks, more than this endpoint lists: ask for "
                                       "type=recursive")
                    yield
            self.roots, self.blocks = roots, frozenset(blocks)
        finally:
            self._lock.release()


def _pin_ls_body(roots: frozenset[str], blocks: frozenset[str], kind: str, wanted: list[str],
                 stream: bool) -> bytes:
    """``pin/ls``'s answer (built in a work thread: a million keys take a second)."""
    def kind_of(key: str) -> str | None:
        return "recursive" if key in roots else "indirect" if key in blocks else None

    if wanted:
        keys = {}
        for path in wanted:
            cid = parse_cid(path)
            found = kind_of(str(cid.to_v1()))
            if found is None or kind not in ("all", found):
                raise RpcError(f"path '{path}' is not pinned")
            keys[str(cid)] = found
    else:
        if kind == "all":
            listed = roots | blocks
        elif kind == "indirect":
            listed = blocks - roots
        else:  # recursive; and direct pins do not exist here
            listed = roots if kind == "recursive" else frozenset()
        keys = {key: kind_of(key) for key in sorted(listed)}
    if stream:
        return "".join(json.dumps({"Cid": cid, "Type": found}, separators=(",", ":")) + "\n"
                       for cid, found in keys.items()).encode()
    return json.dumps({"Keys": {cid: {"Type": found} for cid, found in keys.items()}},
                      separators=(",", ":")).encode()


def add_pin_routes(app: FastAPI, store: LocalBlockStore, limits: EndpointLimits) -> None:
    """Register ``pin/add``, ``pin/ls`` and ``pin/rm`` on ``app``; see the module docstring."""
    index = PinIndex(store, limits.max_listed_pins)

    @app.post("/api/v0/pin/add")
    async def pin_add(request: Request) -> dict:
        args = Args(request)
        if not args.flag("recursive", True):
            raise RpcError("direct (non-recursive) pins are not supported by this store")
        cids = [parse_cid(path) for path in args.args("ipfs-path")]
        owner = party_of(request)
        for cid in cids:  # each DAG walked within the pin bounds; stops if the client leaves
            await run_while_connected(request, lambda cid=cid: store.pinning(cid, owner=owner))
        return {"Pins": [str(cid) for cid in cids]}

    @app.post("/api/v0/pin/ls")
    async def pin_ls(request: Request) -> Response:
        args = Args(request)
        kind = args.text("type", "all")
        if kind not in _TYPES:
            raise RpcError(f"invalid type '{kind}', must be one of {{direct, indirect, "
                           "recursive, all}}", code=1)
        if kind == "recursive":
            roots, blocks = frozenset(await run_in_threadpool(store.pin_ls)), frozenset()
        else:
            await run_while_connected(request, index.refresh)
            roots, blocks = index.roots, index.blocks

        wanted = args.args("ipfs-path", required=False)
        body = await in_work_thread(_pin_ls_body, roots, blocks, kind, wanted,
                                    args.flag("stream", False))
        return Response(body, media_type="application/json")

    @app.post("/api/v0/pin/rm")
    async def pin_rm(request: Request) -> dict:
        args = Args(request)
        cids = [parse_cid(path) for path in args.args("ipfs-path")]
        owner = party_of(request)
        if owner == ANONYMOUS:
            raise RpcError("anonymous callers cannot remove pins (they would remove everyone's): "
                           "call with credentials from the endpoint's --authorizations",
                           status=403)
        pinned = set(await run_in_threadpool(store.pin_ls))
        for cid in cids:  # every check before any removal
            if str(cid.to_v1()) not in pinned:
                raise RpcError("not pinned or pinned indirectly")
            if not args.flag("recursive", True):
                raise RpcError(f"{cid} is pinned recursively")
            if owner not in await run_in_threadpool(store.pin_owners, cid):
                raise RpcError(f"{cid} is pinned by other parties, not by {owner!r}: only they "
                               "can unpin it", status=403)
        for cid in cids:
            await run_in_threadpool(lambda cid=cid: store.pin_rm(cid, owner=owner))
        return {"Pins": [str(cid) for cid in cids]}
