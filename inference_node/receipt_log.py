"""The node's receipt log: every signed receipt appended to a publisher log, anchored periodically.

Each receipt's canonical bytes (``ledger.entries.encode_entry``) go into the content store and
onto the node's own log in the ``LogStore`` (``ledger.publish.append_entries``), so an auditor
fetches them by CID like any entry. ``anchor()`` runs ``ledger.publish.publish``: batch manifest,
RFC 9162 consistency proof, ``anchor`` on the ExperienceLedger. The server calls ``anchor()``
every ``interval_s`` from a background task and once more on graceful shutdown (``flush``), so
a receipt is anchored at most one interval after it was served.

Appends and anchors are serialised by one lock and run in a worker thread (SQL and RPC are
blocking); a failed anchor is logged and retried at the next tick, the receipts stay appended.
``proof(cid)`` gives a client the inclusion proof document of its receipt (``ledger.proofs``)
against the newest anchored checkpoint, which ``gym verify receipt`` checks against ``rootAt``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from typing import TYPE_CHECKING

from ledger.entries import ReceiptEntry, encode_entry, entry_cid
from ledger.errors import LedgerError, NotFoundError
from ledger.logstore import LogStore
from ledger.proofs import proof_document
from ledger.publish import NothingToPublishError, PublishResult, append_entries, publish

if TYPE_CHECKING:
    from ledger.chain import LedgerContract
    from ledger.content import ContentStore

log = logging.getLogger(__name__)


class ReceiptLog:
    """Log ``name`` in ``store`` (created if missing) holding this node's receipts."""

    def __init__(self, store: LogStore, content: ContentStore, contract: LedgerContract | None,
                 name: str, *, interval_s: float = 60.0) -> None:
        self.store, self.content, self.contract, self.name = store, content, contract, name
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._index: dict[str, int] = {}  # receipt CID -> leaf index (this process's receipts)
        self.last_anchor: PublishResult | None = None
        self.last_error: str | None = None
        try:
            store.get_log(name)
        except NotFoundError:
            store.create_log(name)

    def append(self, receipt: ReceiptEntry) -> str:
        """Store and append ``receipt``; its CID."""
        data = encode_entry(receipt)
        with self._lock:
            result = append_entries(self.store, self.content, self.name, [data])
        cid = entry_cid(data)
        self._index[cid] = result.old_size
        return cid

    def pending(self) -> int:
        """Receipts appended but not yet anchored."""
        checkpoints = self.store.checkpoints(self.name)
        return self.store.get_log(self.name).size - (checkpoints[-1].size if checkpoints else 0)

    def anchor(self) -> PublishResult | None:
        """Anchor everything pending; None when nothing was pending or no chain is configured."""
        if self.contract is None:
            return None
        with self._lock:
            try:
                self.last_anchor = publish(self.store, self.content, self.contract, self.name)
            except NothingToPublishError:
                return None
            except LedgerError as exc:
                self.last_error = str(exc)
                raise
        self.last_error = None
        return self.last_anchor

    def flush(self) -> PublishResult | None:
        """Anchor pending receipts now (graceful shutdown)."""
        return self.anchor()

    def proof(self, cid: str) -> dict:
        """Inclusion proof document of receipt ``cid`` at the newest anchored checkpoint
        that holds it (or the current size, unanchored, when none does yet)."""
        index = self._index.get(cid)
        if index is None:
            index = next((leaf.index for leaf in self.store.leaves(self.name)
                          if leaf.cid == cid), None)
        if index is None:
            raise NotFoundError(f"receipt {cid} is not in log {self.name!r}")
        sizes = [cp.size for cp in self.store.checkpoints(self.name) if cp.size > index]
        chain = self.contract
        chain_id = chain.w3.eth.chain_id if chain is not None and sizes else None
        return proof_document(self.store, self.content, self.name, index,
                              max(sizes) if sizes else None, chain_id=chain_id,
                              contract_address=chain.address if chain is not None else None)

    def status(self) -> dict:
        log_info = self.store.get_log(self.name)
        return {"log": self.name, "log_id": log_info.chain_log_id, "size": log_info.size,
                "pending": self.pending(), "error": self.last_error}

    async def run_anchoring(self) -> None:
        """Anchor every ``interval_s`` until cancelled (a task the server starts)."""
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await asyncio.to_thread(self.anchor)
            except LedgerError as exc:
                log.warning("anchoring receipt log %r failed, retrying in %ss: %s", self.name,
                            self.interval_s, exc)

    @contextlib.asynccontextmanager
    async def anchoring(self):
        """Run ``run_anchoring`` for the block's duration, then ``flush``."""
        task = asyncio.create_task(self.run_anchoring())
        try:
            yield self
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            try:
                await asyncio.to_thread(self.flush)
            except LedgerError as exc:
                log.error("final anchor of receipt log %r failed: %s", self.name, exc)
