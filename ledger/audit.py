"""Auditing from public data alone: replay a whole log, or check one proof offline.

``audit_log`` rebuilds a log from the chain's events and the content store, with no local
database, and lists every discrepancy it finds rather than stopping at the first.
``print_audit_report`` shows a report the way ``gym audit`` does (``gym demo`` uses it too).

Publisher log, for every ``Anchored`` event in chain order:

1. the ``anchor`` call that emitted the event gives the consistency proof (events do not
   carry it); it must link the previous anchored (size, root) to this one (RFC 9162 §2.1.4,
   ``verify_consistency``), an independent recheck of what the contract verified. The call
   is the transaction itself when the owner sent it, else an inner call found with the
   node's call tracer (``LedgerContract.anchor_calls``): a log owned by the DAO timelock or
   a multisig anchors through ``execute``/``executeBatch``, several checkpoints per
   transaction at times, and each event is matched to its call by (log id, size). Through
   a node without the tracer such a checkpoint is flagged ``calldata``, saying why;
2. the batch manifest (``ledger.batches``) named by ``batchCid`` must be fetchable, valid,
   and describe this checkpoint: same log id, ``from`` = previous size, ``to`` = this size;
3. every entry it names is fetched by CID (the store re-hashes the bytes against the CID),
   decoded and validated as an entry (type, version, field rules, canonical bytes; a
   ``contribution`` entry's EIP-712 signature must recover to its contributor), and its
   leaf hash appended to an in-memory RFC 9162 tree;
4. the tree's root at this size must equal the anchored root.

Finally the contract's ``logInfo`` must be where the replay ended (a later start block, or
a node that dropped logs, would leave checkpoints out).

Curated log: ``LeafAppended`` events give each leaf's hash and entry CID; each entry is
fetched, validated, and must hash to the event's leaf hash; the leaves must be numbered
0, 1, ...; each ``CuratedCheckpoint`` root must equal the replayed tree's root.

A leaf that cannot be hashed (missing or corrupt content) stops the tree; later roots are
then reported as not checkable rather than as mismatches. Per entry the work is one block
read and SHA-256, one JSON parse with pydantic validation and one RFC 8785 re-encoding (the
canonical-bytes check), and two SHA-256 for the tree: about 60 µs, so 100k entries audit in
about 6 s (``benchmarks/bench_audit.py``); full validation was kept, it does not dominate.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ledger import batches
from ledger.audit_state import AuditState, AuditStateError
from ledger.batches import (
    BatchError,
    BatchMismatchError,
    EntryChunk,
    fetch_batch,
    verify_batch,
)
from ledger.chain import (
    AnchorCall,
    AnchoredEvent,
    ChainError,
    LeafAppendedEvent,
    LedgerContract,
    LogKind,
)
from ledger.contributions import recover_contributor
from ledger.entries import MAX_ENTRY_BYTES, ContributionEntry, decode_entry
from ledger.errors import (
    ContentIntegrityError,
    ContentStoreError,
    ContentStoreUnreachableError,
    EntryError,
    LedgerError,
    NotFoundError,
    VerificationError,
)
from ledger.multiformats import MultiformatError
from ledger.rfc9162 import EMPTY_ROOT, verify_consistency

if TYPE_CHECKING:
    from rich.console import Console

    from ledger.content import ContentStore

Progress = Callable[[int, int], None]  # (leaves replayed, leaves on chain)
EntryHook = Callable[[int, str, bytes], None]  # (leaf index, CID, bytes) of each valid entry


@dataclass(frozen=True)
class Discrepancy:
    kind: str  # e.g. "root-mismatch", "entry-missing", "batch-mismatch", "consistency-proof"
    message: str
    checkpoint: int | None = None  # size of the checkpoint concerned
    leaf: int | None = None  # leaf index concerned
    expected: object = None
    computed: object = None
    entry_cid: str | None = None  # the entry concerned, where one is


@dataclass(frozen=True)
class CheckpointAudit:
    size: int
    root: bytes
    tx_hash: str
    block_number: int
    batch_cid: str | None  # None for curated checkpoints
    ok: bool


@dataclass
class AuditReport:
    log_id: int
    name: str
    kind: LogKind
    owner: str
    size: int  # on-chain size (logInfo)
    root: bytes  # on-chain root (logInfo)
    leaves: int = 0  # leaves replayed
    checkpoints: list[CheckpointAudit] = field(default_factory=list)
    discrepancies: list[Discrepancy] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.discrepancies


class _Tree:
    """An append-only RFC 9162 tree kept as the roots of its perfect subtrees."""

    def __init__(self) -> None:
        self.size = 0
        self._stack: list[bytes] = []

    def append(self, leaf_hash: bytes) -> None:
        self._stack.append(leaf_hash)
        self.size += 1
        count, sha = self.size, hashlib.sha256
        while count & 1 == 0:  # each trailing zero bit closes a perfect subtree
            right = self._stack.pop()
            self._stack.append(sha(b"\x01" + self._stack.pop() + right).digest())
            count >>= 1

    def stack(self) -> list[bytes]:
        return list(self._stack)

    def load(self, size: int, stack: list[bytes]) -> None:
        self.size, self._stack = size, list(stack)

    def root(self) -> bytes:
        if not self._stack:
            return EMPTY_ROOT
        acc = self._stack[-1]
        for left in reversed(self._stack[:-1]):
            acc = hashlib.sha256(b"\x01" + left + acc).digest()
        return acc


def _hex(value: bytes) -> str:
    return "0x" + value.hex()


class _Replay:
    """State shared by the publisher and curated replays."""

    def __init__(self, report: AuditReport, content: ContentStore, progress: Progress | None,
                 on_entry: EntryHook | None = None):
        self.report, self.content, self.progress = report, content, progress
        self.on_entry = on_entry
        self.tree = _Tree()
        self.broken_at: int | None = None  # first leaf that could not be hashed
        self.diverged_at: int | None = None  # first checkpoint whose root did not match

    def flag(self, kind: str, message: str, **where: Any) -> None:
        self.report.discrepancies.append(Discrepancy(kind, message, **where))

    def read_entry(self, index: int, cid: str, checkpoint: int, data: bytes | None = None
                   ) -> bytes | None:
        """Validate entry ``cid`` at leaf ``index``: ``data`` when it came verified with its
        batch's CAR, else fetched by CID; None when unreadable."""
        try:
            if data is None:
                data = self.content.cat(cid)
        except (NotFoundError, ContentStoreError) as exc:
            if isinstance(exc, ContentStoreUnreachableError):
                raise  # the endpoint is down: not a fault of the log
            self.flag("entry-missing", f"fetching entry {cid} of leaf {index}: {exc}",
                      checkpoint=checkpoint, leaf=index, entry_cid=cid)
            return None
        except (ContentIntegrityError, MultiformatError) as exc:
            self.flag("entry-corrupt", f"entry {cid}: {exc}", checkpoint=checkpoint, leaf=index,
                      expected=exc.expected, computed=exc.computed, entry_cid=cid)
            return None
        try:
            entry = decode_entry(data)
            if isinstance(entry, ContributionEntry):  # signed by its contributor, or no entry
                recover_contributor(entry)
        except EntryError as exc:
            self.flag("entry-invalid", f"entry {cid}: {exc}", checkpoint=checkpoint, leaf=index,
                      entry_cid=cid)
        else:
            if self.on_entry is not None:
                self.on_entry(index, cid, data)
        return data

    def leaf_done(self) -> None:
        self.report.leaves += 1
        if self.progress is not None:
            self.progress(self.report.leaves, self.report.size)

    def check_root(self, size: int, root: bytes) -> bool:
        if self.broken_at is not None:
            self.flag("root-unverifiable", f"root at size {size} cannot be recomputed: leaf "
                      f"{self.broken_at} could not be read", checkpoint=size)
            return False
        if self.tree.size != size:
            self.flag("root-unverifiable", f"the replay holds {self.tree.size} leaves at the "
                      f"checkpoint of size {size}", checkpoint=size, expected=size,
                      computed=self.tree.size)
            return False
        computed = self.tree.root()
        if computed != root:
            after = (f" (the replay diverged at checkpoint {self.diverged_at})"
                     if self.diverged_at is not None else "")
            self.flag("root-mismatch", f"anchored root at size {size} differs from the root "
                      f"recomputed from the entries{after}", checkpoint=size,
                      expected=_hex(root), computed=_hex(computed))
            if self.diverged_at is None:
                self.diverged_at = size
            return False
        return True


def audit_log(contract: LedgerContract, content: ContentStore, log_id: int, *,
              from_block: int = 0, to_block: int | None = None,
              progress: Progress | None = None, on_entry: EntryHook | None = None,
              resume: AuditState | None = None,
              save: Callable[[AuditState], None] | None = None,
              save_every_s: float = 1.0) -> AuditReport:
    """Replay log ``log_id`` from chain events (from ``from_block``) and ``content``.
    ``on_entry`` is called with every valid entry read (leaf index, CID, bytes), in order: what
    checks a log's entries further (``gym audit`` checks a receipt log's signatures with it).

    A publisher log's replay can be resumed: ``save`` is called with its state
    (``ledger.audit_state``) at chunk and checkpoint boundaries, at most once per
    ``save_every_s``, and at the end; ``resume`` continues from such a state
    (``AuditStateError`` if it belongs to another log or chain, or its last checkpoint is not
    on chain any more). Entries replayed
    before the resume are not passed to ``on_entry`` again. A curated log is always replayed
    whole (``resume`` and ``save`` are ignored)."""
    state = contract.log_info(log_id)
    report = AuditReport(log_id, state.name, state.kind, state.owner, state.size, state.root)
    replay = _Replay(report, content, progress, on_entry)
    if state.kind == LogKind.PUBLISHER:
        base = (AuditState(contract.w3.eth.chain_id, contract.address, log_id)
                if resume is not None or save is not None else None)
        if resume is not None:
            if not resume.belongs_to(base.chain_id, base.ledger, log_id):
                raise AuditStateError(
                    f"the saved audit is of log {resume.log_id} of ledger {resume.ledger} on "
                    f"chain {resume.chain_id}, not of log {log_id} of {base.ledger} on chain "
                    f"{base.chain_id}")
            _restore(replay, resume)
        saver = _Saver(base, save, save_every_s) if save is not None else None
        _audit_publisher(contract, replay, log_id, from_block, to_block, resume, saver)
    else:
        _audit_curated(contract, replay, log_id, from_block, to_block)
    checkpoints = report.checkpoints
    end_size = checkpoints[-1].size if checkpoints else 0
    end_root = checkpoints[-1].root if checkpoints else EMPTY_ROOT
    if to_block is None and (end_size, end_root) != (state.size, state.root):
        replay.flag("head-mismatch", f"the contract says log {log_id} is at size {state.size}, "
                    f"the events replayed end at size {end_size}: events before block "
                    f"{from_block} or dropped by the node are missing", expected=state.size,
                    computed=end_size)
    return report


def print_audit_report(report: AuditReport, console: Console) -> None:
    """The report on ``console`` as ``gym audit`` shows it: a line, a checkpoint table and, if
    any, a table of discrepancies."""
    from rich.table import Table

    from ledger.tables import print_table

    kind = report.kind.name.lower()
    console.print(f"log {report.log_id} ({kind}, {report.name!r}, owner {report.owner}): "
                  f"size {report.size}, root {_hex(report.root)}", highlight=False)
    table = Table("size", "root", "tx", "block", "ok", title="checkpoints")
    for c in report.checkpoints:
        table.add_row(str(c.size), _hex(c.root), c.tx_hash, str(c.block_number),
                      "yes" if c.ok else "NO")
    print_table(table, console)
    if report.ok:
        console.print(f"[green]audit clean[/green]: {len(report.checkpoints)} checkpoints, "
                      f"{report.leaves} entries replayed from chain + content store")
        return
    problems = Table("checkpoint", "leaf", "problem", "detail", "expected", "computed",
                     title="discrepancies")
    for d in report.discrepancies:
        problems.add_row("-" if d.checkpoint is None else str(d.checkpoint),
                         "-" if d.leaf is None else str(d.leaf), d.kind, d.message,
                         "" if d.expected is None else str(d.expected),
                         "" if d.computed is None else str(d.computed))
    print_table(problems, console)
    bad = first_bad_entry(report)
    if bad is not None:
        console.print(f"first bad entry: leaf {bad.leaf}, {bad.entry_cid} ({bad.kind})",
                      highlight=False)
    console.print(f"[red]audit failed[/red]: {len(report.discrepancies)} discrepancies")


def first_bad_entry(report: AuditReport) -> Discrepancy | None:
    """The discrepancy of the lowest leaf that names an entry, if any."""
    named = [d for d in report.discrepancies if d.entry_cid is not None and d.leaf is not None]
    return min(named, key=lambda d: d.leaf) if named else None


def audit_report_json(report: AuditReport) -> dict[str, Any]:
    """The report as `gym audit --json` prints it: every value in full."""
    def plain(value: object) -> object:
        return value if value is None or isinstance(value, (int, str)) else str(value)

    return {
        "log_id": report.log_id, "name": report.name, "kind": report.kind.name.lower(),
        "owner": report.owner, "size": report.size, "root": _hex(report.root),
        "leaves_replayed": report.leaves, "ok": report.ok,
        "first_bad_entry": None if (bad := first_bad_entry(report)) is None else {
            "leaf": bad.leaf, "entry_cid": bad.entry_cid, "kind": bad.kind},
        "checkpoints": [{"size": c.size, "root": _hex(c.root), "tx_hash": c.tx_hash,
                         "block_number": c.block_number, "batch_cid": c.batch_cid, "ok": c.ok}
                        for c in report.checkpoints],
        "discrepancies": [{"kind": d.kind, "message": d.message, "checkpoint": d.checkpoint,
                           "leaf": d.leaf, "entry_cid": d.entry_cid, "expected": plain(d.expected),
                           "computed": plain(d.computed)} for d in report.discrepancies],
    }


def _audit_publisher(contract: LedgerContract, replay: _Replay, log_id: int, from_block: int,
                     to_block: int | None, resume: AuditState | None,
                     saver: _Saver | None) -> None:
    prev_size, prev_root, position = 0, EMPTY_ROOT, 0
    resumed_at: int | None = None  # the checkpoint a resumed replay had passed
    flagged_at: int | None = None  # resumed inside a checkpoint: its findings started here
    if resume is not None:
        prev_size, prev_root = resume.prev_size, bytes.fromhex(resume.prev_root[2:])
        resumed_at, position = resume.prev_size, resume.position
        flagged_at = resume.flagged_at if position else None
    calls_by_tx: dict[str, list[AnchorCall] | ChainError] = {}  # one trace per transaction
    for event in contract.anchored(log_id, from_block, to_block):
        if resumed_at is not None and event.size <= resumed_at:  # replayed before the resume
            if event.size == resumed_at and event.root != prev_root:
                raise AuditStateError(
                    f"the saved audit passed log {log_id}'s checkpoint at size {resumed_at} "
                    f"with root {_hex(prev_root)}; the chain now anchors {_hex(event.root)} "
                    "there: audit again without --resume")
            continue
        resumed_at = None
        if flagged_at is not None:  # its anchor call was checked before the state was saved
            flagged, flagged_at = flagged_at, None
        else:
            flagged = len(replay.report.discrepancies)
            if event.tx_hash not in calls_by_tx:
                try:
                    calls_by_tx[event.tx_hash] = contract.anchor_calls(event.tx_hash)
                except ChainError as exc:
                    calls_by_tx[event.tx_hash] = exc
            _check_anchor_call(replay, event, calls_by_tx[event.tx_hash], prev_size, prev_root)
        cids = _batch_entries(replay, event, log_id, prev_size)
        if cids is None:  # without the manifest these leaves are unknown
            replay.broken_at = prev_size if replay.broken_at is None else replay.broken_at
            replay.report.leaves += event.size - prev_size - position
        else:
            for offset, cid, fetched in _entry_stream(replay.content, cids, position):
                index = prev_size + offset
                data = replay.read_entry(index, cid, event.size, fetched)
                if data is None:
                    replay.broken_at = index if replay.broken_at is None else replay.broken_at
                elif replay.broken_at is None:
                    replay.tree.append(hashlib.sha256(b"\x00" + data).digest())
                replay.leaf_done()
                done = offset + 1
                if saver is not None and done % batches.ENTRY_DAG_FANOUT == 0 and done < len(cids):
                    saver.boundary(replay, prev_size, prev_root, done, flagged)
        position = 0
        replay.check_root(event.size, event.root)
        replay.report.checkpoints.append(CheckpointAudit(
            event.size, event.root, event.tx_hash, event.block_number, event.batch_cid,
            ok=len(replay.report.discrepancies) == flagged))
        prev_size, prev_root = event.size, event.root
        if saver is not None:
            saver.boundary(replay, prev_size, prev_root, 0, len(replay.report.discrepancies))
    if saver is not None:
        saver.boundary(replay, prev_size, prev_root, position,
                       len(replay.report.discrepancies), force=True)


class _Saver:
    """Saves the replay's state (``ledger.audit_state``) at boundaries, at most once per
    ``every_s`` seconds unless forced."""

    def __init__(self, base: AuditState, save: Callable[[AuditState], None],
                 every_s: float = 1.0):
        self.base, self.save, self.every_s = base, save, every_s
        self.last = time.monotonic()

    def boundary(self, replay: _Replay, prev_size: int, prev_root: bytes, position: int,
                 flagged_at: int, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last < self.every_s:
            return
        self.last = now
        report = replay.report
        json_report = audit_report_json(report)
        self.save(dataclasses.replace(
            self.base, prev_size=prev_size, prev_root=_hex(prev_root), position=position,
            flagged_at=flagged_at, tree_size=replay.tree.size,
            tree=[_hex(h) for h in replay.tree.stack()], broken_at=replay.broken_at,
            diverged_at=replay.diverged_at, leaves=report.leaves,
            checkpoints=json_report["checkpoints"], discrepancies=json_report["discrepancies"]))


def _restore(replay: _Replay, state: AuditState) -> None:
    report = replay.report
    report.leaves = state.leaves
    report.checkpoints = [CheckpointAudit(c["size"], bytes.fromhex(c["root"][2:]), c["tx_hash"],
                                          c["block_number"], c["batch_cid"], c["ok"])
                          for c in state.checkpoints]
    report.discrepancies = [Discrepancy(d["kind"], d["message"], d["checkpoint"], d["leaf"],
                                        d["expected"], d["computed"], d["entry_cid"])
                            for d in state.discrepancies]
    replay.tree.load(state.tree_size, [bytes.fromhex(h[2:]) for h in state.tree])
    replay.broken_at, replay.diverged_at = state.broken_at, state.diverged_at


PREFETCH_CHUNKS = 2  # CARs of a thousand entries fetched ahead while the entries are checked


def _export_chunk(export, chunk: EntryChunk) -> dict[bytes, bytes]:
    """The blocks of one level-1 node's CAR, by binary CID (each verified on arrival)."""
    blocks: dict[bytes, bytes] = {}
    for cid, block in export(chunk.cid, max_blocks=chunk.count + 1,
                             max_bytes=(chunk.count + 1) * (MAX_ENTRY_BYTES + 64)):
        blocks[cid.to_v1().to_bytes()] = block
    return blocks


def _entry_stream(content: ContentStore, cids: Sequence[str], start: int
                  ) -> Iterator[tuple[int, str, bytes | None]]:
    """``(offset, cid, bytes or None)`` for the batch's entries from ``start`` on, in order.

    Through a store that can export DAGs (``KuboStore``: a Kubo node, ``gym ipfs serve``),
    the entries arrive a thousand per request: the CAR of each level-1 node of the batch's
    entries DAG (``ledger.batches.batch_dag``, recomputed here from the manifest), fetched
    ``PREFETCH_CHUNKS`` ahead in threads. ``None`` means "read it by CID": a store without
    exports, an entry its CAR lacked (the read names why), and, once an export fails (a batch
    published without its DAG, a node without ``dag/export``, a block that does not hash),
    the rest of the batch."""
    export = getattr(content, "export_dag", None)
    if export is None:
        for offset in range(start, len(cids)):
            yield offset, cids[offset], None
        return
    from concurrent.futures import ThreadPoolExecutor

    dag = batches.batch_dag(cids)
    chunks = [c for c in dag.chunks if c.start + c.count > start]
    with ThreadPoolExecutor(PREFETCH_CHUNKS, thread_name_prefix="audit-car") as pool:
        pending = deque(pool.submit(_export_chunk, export, c) for c in chunks[:PREFETCH_CHUNKS])
        for number, chunk in enumerate(chunks):
            blocks: dict[bytes, bytes] = {}
            if pending:
                try:
                    blocks = pending.popleft().result()
                except (LedgerError, OSError):  # no DAG there, or no dag/export
                    for future in pending:
                        future.cancel()
                    pending.clear()
                else:
                    ahead = number + PREFETCH_CHUNKS
                    if ahead < len(chunks):
                        pending.append(pool.submit(_export_chunk, export, chunks[ahead]))
            for offset in range(max(start, chunk.start), chunk.start + chunk.count):
                yield offset, cids[offset], blocks.get(dag.entry_cids[offset])


def _check_anchor_call(replay: _Replay, event: AnchoredEvent,
                       calls: list[AnchorCall] | ChainError, prev_size: int,
                       prev_root: bytes) -> None:
    """Recheck the consistency proof carried by the anchor call that emitted ``event``."""
    if isinstance(calls, ChainError):
        replay.flag("calldata", str(calls), checkpoint=event.size)
        return
    call = next((c for c in calls if (c.log_id, c.size) == (event.log_id, event.size)), None)
    if call is None:
        made = ", ".join(f"log {c.log_id} size {c.size}" for c in calls) or "none"
        replay.flag("calldata", f"transaction {event.tx_hash} made no anchor call of log "
                    f"{event.log_id} size {event.size}, which its event records (anchor calls "
                    f"found: {made})", checkpoint=event.size)
        return
    if call.root != event.root:
        replay.flag("calldata", f"transaction {event.tx_hash} anchors log {call.log_id} size "
                    f"{call.size} with another root than its event records",
                    checkpoint=event.size, expected=_hex(event.root), computed=_hex(call.root))
        return
    try:
        verify_consistency(prev_size, event.size, prev_root, event.root, call.consistency_proof)
    except VerificationError as exc:
        replay.flag("consistency-proof", f"checkpoint {prev_size} -> {event.size}: {exc}",
                    checkpoint=event.size, expected=exc.expected, computed=exc.computed)


def _batch_entries(replay: _Replay, event: AnchoredEvent, log_id: int, prev_size: int
                   ) -> list[str] | None:
    """The entry CIDs of the batch this checkpoint names, or None (flagged) if unusable."""
    where = {"checkpoint": event.size}
    if event.batch_cid is None:
        replay.flag("batch-invalid", f"batchCid 0x{event.batch_cid_bytes.hex()} is not a CID",
                    **where)
        return None
    try:
        batch = fetch_batch(replay.content, event.batch_cid)
    except NotFoundError as exc:
        replay.flag("batch-missing", f"fetching batch manifest {event.batch_cid} of checkpoint "
                    f"{event.size}: {exc}", **where)
        return None
    except (ContentIntegrityError, MultiformatError) as exc:
        replay.flag("batch-corrupt", f"batch manifest {event.batch_cid}: {exc}", **where)
        return None
    except BatchError as exc:
        replay.flag("batch-invalid", f"batch manifest {event.batch_cid}: {exc}", **where)
        return None
    try:
        verify_batch(batch, log_id=log_id, from_size=prev_size, to_size=event.size)
    except BatchMismatchError as exc:
        replay.flag("batch-mismatch", f"batch manifest {event.batch_cid}: {exc}",
                    expected=exc.expected, computed=exc.computed, **where)
        if len(batch.entries) != event.size - prev_size:
            return None
    return list(batch.entries)


def _audit_curated(contract: LedgerContract, replay: _Replay, log_id: int, from_block: int,
                   to_block: int | None) -> None:
    flagged = 0
    for event in contract.curated_events(log_id, from_block, to_block):
        if isinstance(event, LeafAppendedEvent):
            expected_index = replay.report.leaves
            if event.index != expected_index:
                replay.flag("leaf-index", f"LeafAppended numbers leaf {event.index}, the replay "
                            f"is at {expected_index}", leaf=event.index, expected=expected_index,
                            computed=event.index)
            if event.entry_cid is None:
                replay.flag("entry-cid-invalid", f"entryCid 0x{event.entry_cid_bytes.hex()} is "
                            "not a CID", leaf=event.index)
            else:
                data = replay.read_entry(event.index, event.entry_cid, event.index + 1)
                if data is not None:
                    computed = hashlib.sha256(b"\x00" + data).digest()
                    if computed != event.leaf_hash:
                        replay.flag("leaf-hash-mismatch", f"entry {event.entry_cid} does not "
                                    "hash to the leaf hash in LeafAppended", leaf=event.index,
                                    expected=_hex(event.leaf_hash), computed=_hex(computed),
                                    entry_cid=event.entry_cid)
            # The chain folded the event's leaf hash: replay the same to check its roots.
            replay.tree.append(event.leaf_hash)
            replay.leaf_done()
        else:
            replay.check_root(event.size, event.root)
            replay.report.checkpoints.append(CheckpointAudit(
                event.size, event.root, event.tx_hash, event.block_number, None,
                ok=len(replay.report.discrepancies) == flagged))
            flagged = len(replay.report.discrepancies)
