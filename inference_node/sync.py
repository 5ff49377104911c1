"""Follow a library log on chain + IPFS and serve only what verifies (docs/design.md "Flow 3:
node operator").

``ChainLibrarySource`` implements ``inference_node.library.LibrarySource`` over one log of the
ExperienceLedger:

- a *curated* log (``LogKind.CURATED``): ``LeafAppended`` events name each leaf's hash and entry
  CID; every append call ends with a ``CuratedCheckpoint`` (size, root);
- a *publisher* log the operator chooses to trust: each ``Anchored`` event names a batch
  manifest (``ledger.batches``) listing the CIDs of the leaves that checkpoint added.

For every checkpoint, in chain order and *before* any experience of it is used: each entry is
fetched from the content store (which checks the bytes against the CID), decoded (canonical
bytes, known type), its RFC 9162 leaf hash computed (and compared with the event's, for a
curated log); the root over all leaves so far is recomputed and compared with the event's root
and with ``rootAt(logId, size)`` read from the contract; then the experience ops are folded
(``ledger.entries.fold_library``, which refuses an op on an unknown target). Only then is the new
``LibrarySnapshot`` swapped in, atomically: a request holds the snapshot it started with.

Failures. A verification failure (bad bytes, bad leaf hash, root mismatch, a batch that does not
match its checkpoint, an invalid op) means the log cannot be trusted: the source serves *nothing*
from it (an empty snapshot), ``status()`` carries the reason and the offending leaf, which
``/health`` shows as ``degraded``, and the entry is logged. A transport failure (chain or content
store unreachable, a block nobody has) keeps the last verified snapshot and reports the error.
Each ``refresh()`` after a failure starts again from the log's first leaf.

>>> # source = ChainLibrarySource(contract, content, log_id=3, kind=LogKind.PUBLISHER)
>>> # source.refresh(); source.current().experiences
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from inference_node.errors import InferenceNodeError
from inference_node.library import (
    EMPTY_LIBRARY,
    LibrarySnapshot,
    LibraryStatus,
    snapshot_version,
)
from ledger import rfc9162
from ledger.batches import BatchError, fetch_batch, verify_batch
from ledger.chain import (
    AnchoredEvent,
    CuratedCheckpointEvent,
    LeafAppendedEvent,
    LedgerContract,
    LogKind,
)
from ledger.entries import Entry, decode_entry, entry_cid, fold_library
from ledger.errors import EntryError, LedgerError, NotFoundError, VerificationError

if TYPE_CHECKING:
    from ledger.content import ContentStore

log = logging.getLogger(__name__)


REJECTED = "rejected"  # the version of the empty snapshot a log that failed verification serves


class LibrarySyncError(InferenceNodeError, VerificationError):
    """A followed log does not verify; ``leaf`` is the offending leaf index when there is one."""

    def __init__(self, message: str, *, leaf: int | None = None, expected: object = None,
                 computed: object = None):
        where = f"leaf {leaf}: " if leaf is not None else ""
        super().__init__(where + message, expected=expected, computed=computed)
        self.leaf = leaf


def _hex(value: bytes) -> str:
    return "0x" + value.hex()


@dataclass
class _Replica:
    """The verified prefix of the log: leaves, entries and the block to scan from."""

    leaf_hashes: list[bytes] = field(default_factory=list)
    entries: list[tuple[str, Entry]] = field(default_factory=list)
    root: bytes = rfc9162.EMPTY_ROOT
    next_block: int = 0
    staged: list = field(default_factory=list)  # curated leaves read since the last checkpoint


class ChainLibrarySource:
    """The verified library of ``log_id`` (see the module docstring)."""

    def __init__(self, contract: LedgerContract, content: ContentStore, log_id: int,
                 kind: LogKind, *, from_block: int = 0, poll_s: float = 10.0) -> None:
        self.contract, self.content = contract, content
        self.log_id, self.kind = log_id, LogKind(kind)
        self.from_block, self.poll_s = from_block, poll_s
        self._replica = _Replica(next_block=from_block)
        self._snapshot = EMPTY_LIBRARY
        self._status = LibraryStatus(last_sync=None, error="not synced yet")
        self._lock = threading.Lock()  # one refresh at a time

    # -- LibrarySource -------------------------------------------------------------------

    def current(self) -> LibrarySnapshot:
        return self._snapshot

    def status(self) -> LibraryStatus:
        return self._status

    # -- sync --------------------------------------------------------------------------------

    def refresh(self) -> LibrarySnapshot:
        """Read new checkpoints, verify them, swap in the new snapshot; the current one."""
        with self._lock:
            replica = self._replica
            try:
                head = self.contract.w3.eth.block_number
                changed = self._follow(replica, head)
            except (VerificationError, EntryError, BatchError) as exc:
                self._fail_closed(exc)
                return self._snapshot
            except LedgerError as exc:  # unreachable chain or store, a missing block
                replica.staged = []  # the events are read again from next_block
                log.warning("library log %d: sync failed, keeping size %d: %s", self.log_id,
                            len(replica.leaf_hashes), exc)
                self._status = LibraryStatus(self._status.last_sync, f"sync failed: {exc}")
                return self._snapshot
            replica.next_block = head + 1
            if changed or self._snapshot is EMPTY_LIBRARY:
                self._snapshot = self._render(replica)
            self._status = LibraryStatus(last_sync=time.time())
            return self._snapshot

    def _fail_closed(self, exc: Exception) -> None:
        leaf = getattr(exc, "leaf", None)
        log.error("library log %d failed verification; serving nothing from it: %s",
                  self.log_id, exc)
        self._replica = _Replica(next_block=self.from_block)  # next refresh starts over
        self._snapshot = LibrarySnapshot(version=REJECTED, log_id=str(self.log_id), size=0,
                                         root="", experiences=())
        reason = f"log {self.log_id} failed verification, serving no experiences: {exc}"
        self._status = LibraryStatus(last_sync=self._status.last_sync, error=reason)
        if leaf is not None:
            log.error("offending leaf %d of log %d", leaf, self.log_id)

    def _follow(self, replica: _Replica, head: int) -> bool:
        if replica.next_block > head:
            return False
        if self.kind == LogKind.PUBLISHER:
            events = self.contract.anchored(self.log_id, replica.next_block, head)
            for event in events:
                self._apply_batch(replica, event)
        else:
            events = self.contract.curated_events(self.log_id, replica.next_block, head)
            for event in events:
                if isinstance(event, LeafAppendedEvent):
                    self._apply_leaf(replica, event)
                else:
                    self._check_checkpoint(replica, event)
        return bool(events)

    def _fetch(self, cid: str | None, index: int) -> tuple[bytes, Entry]:
        if cid is None:
            raise LibrarySyncError("the event's entry CID is not a CID", leaf=index)
        try:
            data = self.content.cat(cid)  # verified against the CID by the store
            entry = decode_entry(data)
        except (VerificationError, EntryError) as exc:
            raise LibrarySyncError(f"entry {cid}: {exc}", leaf=index) from None
        except NotFoundError as exc:  # stays a LedgerError: a sync retries, it does not fail
            raise NotFoundError(f"fetching entry {cid} of leaf {index}: {exc}") from None
        if entry_cid(data) != cid:  # a store that does not verify would be a bug; be sure
            raise LibrarySyncError(f"entry bytes do not have CID {cid}", leaf=index,
                                   expected=cid, computed=entry_cid(data))
        return data, entry

    def _apply_batch(self, replica: _Replica, event: AnchoredEvent) -> None:
        size = len(replica.leaf_hashes)
        if event.batch_cid is None:
            raise LibrarySyncError(f"checkpoint {event.size}: batch CID is not a CID")
        try:
            batch = fetch_batch(self.content, event.batch_cid)
            verify_batch(batch, log_id=self.log_id, from_size=size, to_size=event.size)
        except (VerificationError, BatchError) as exc:
            raise LibrarySyncError(f"checkpoint {event.size}: batch {event.batch_cid}: {exc}"
                                   ) from None
        except NotFoundError as exc:
            raise NotFoundError(f"fetching batch manifest {event.batch_cid} of checkpoint "
                                f"{event.size}: {exc}") from None
        staged = []
        for offset, cid in enumerate(batch.entries):
            data, entry = self._fetch(cid, size + offset)
            staged.append((rfc9162.leaf_hash(data), cid, entry))
        self._commit(replica, staged, event.size, event.root)

    def _apply_leaf(self, replica: _Replica, event: LeafAppendedEvent) -> None:
        expected_index = len(replica.leaf_hashes) + len(replica.staged)
        if event.index != expected_index:
            raise LibrarySyncError(f"LeafAppended index {event.index}, expected {expected_index}",
                                   leaf=event.index)
        data, entry = self._fetch(event.entry_cid, event.index)
        computed = rfc9162.leaf_hash(data)
        if computed != event.leaf_hash:
            raise LibrarySyncError("entry does not hash to the leaf hash on chain",
                                   leaf=event.index, expected=_hex(event.leaf_hash),
                                   computed=_hex(computed))
        replica.staged.append((computed, event.entry_cid, entry))

    def _check_checkpoint(self, replica: _Replica, event: CuratedCheckpointEvent) -> None:
        self._commit(replica, replica.staged, event.size, event.root)
        replica.staged = []

    def _commit(self, replica: _Replica, staged: list, size: int, event_root: bytes) -> None:
        """Check the root over the verified leaves plus ``staged`` at ``size``, then fold."""
        leaf_hashes = replica.leaf_hashes + [leaf for leaf, _, _ in staged]
        if len(leaf_hashes) != size:
            raise LibrarySyncError(f"checkpoint {size} follows {len(leaf_hashes)} leaves")
        computed = rfc9162.root(leaf_hashes)
        anchored = self.contract.root_at(self.log_id, size)
        for what, expected in (("the checkpoint event", event_root), ("rootAt", anchored)):
            if computed != expected:
                raise LibrarySyncError(
                    f"root over the fetched entries at size {size} differs from {what}",
                    expected=_hex(expected), computed=_hex(computed))
        entries = replica.entries + [(cid, entry) for _, cid, entry in staged]
        try:
            fold_library(entries)  # refuses an op on an unknown target before it is served
        except EntryError as exc:
            raise LibrarySyncError(f"library ops do not fold: {exc}") from None
        replica.leaf_hashes, replica.entries, replica.root = leaf_hashes, entries, computed

    def _render(self, replica: _Replica) -> LibrarySnapshot:
        state = fold_library(replica.entries)
        experiences = tuple(state.items())
        root = _hex(replica.root)
        log_id = str(self.log_id)
        size = len(replica.leaf_hashes)
        return LibrarySnapshot(snapshot_version(log_id, size, root, experiences), log_id, size,
                               root, experiences)

    async def run_polling(self) -> None:
        """``refresh()`` every ``poll_s`` until cancelled (a task the server starts)."""
        while True:
            await asyncio.sleep(self.poll_s)
            await asyncio.to_thread(self.refresh)


def library_at(contract: LedgerContract, content: ContentStore, log_id: int, kind: LogKind,
               size: int, *, from_block: int = 0) -> dict[str, str]:
    """The verified active set (id -> text) of ``log_id`` at checkpoint ``size``; raises
    ``LibrarySyncError`` when the log does not verify up to there or has no such checkpoint."""
    source = ChainLibrarySource(contract, content, log_id, kind, from_block=from_block)
    replica = _Replica(next_block=from_block)
    head = contract.w3.eth.block_number
    if kind == LogKind.PUBLISHER:
        for event in contract.anchored(log_id, from_block, head):
            if len(replica.leaf_hashes) >= size:
                break
            source._apply_batch(replica, event)
    else:
        for event in contract.curated_events(log_id, from_block, head):
            if len(replica.leaf_hashes) >= size:
                break
            if isinstance(event, LeafAppendedEvent):
                source._apply_leaf(replica, event)
            else:
                source._check_checkpoint(replica, event)
    if len(replica.leaf_hashes) != size:
        raise LibrarySyncError(f"log {log_id} has no verified checkpoint at size {size} "
                               f"(verified up to {len(replica.leaf_hashes)})")
    return fold_library(replica.entries)
