"""The publishing path: entries in, content stored, leaves appended, checkpoints anchored.

``append_entries`` validates entries, stores their bytes in the content store, then appends
them to the log in one transaction: all or nothing. A batch with experience entries must keep
the log's library foldable (docs/design.md "3.2 Library fold"; ``check_library_fold``): an
update or delete of an experience that is not live at that point, or a second add of the same
entry, refuses the whole batch. ``publish`` anchors everything appended
since the last recorded checkpoint:

1. the new leaves ``[old_size, size)`` become a batch manifest (``ledger.batches``), stored
   and pinned in the content store, after checking that every entry they name is there;
2. the local record and the chain must agree on the last anchored checkpoint. Checkpoints
   the chain holds beyond the last one recorded here are adopted when they are this log's
   tree (size within the local log, root equal to the local root at that size): a publish
   that died after its anchor transaction was mined recovers on the next run. Any other
   difference (another history anchored by another key or installation, a chain that lost
   a checkpoint) stops publishing with a message instead of a transaction the contract would
   refuse;
3. ``anchor(logId, size, root, batchCid, consistencyProof)`` is sent with the RFC 9162
   consistency proof from the last anchored size (empty for the first anchor), computed by
   the ``LogStore``;
4. only after the transaction succeeded is the checkpoint recorded locally.

A log gets its on-chain id from ``gym ledger create`` (which calls ``ensure_chain_log``); a
log created locally only (``gym ledger create --offline``, or a trainer calling
``LogStore.create_log``) is created on-chain by its first ``publish``. The id is bound to that
chain (``LogInfo.chain``: chain id, genesis hash, ledger address), and every step that talks
to the chain about the log checks the binding first (``check_chain_binding``): after a chain
reset (a devnet restarted from scratch has the same chain id and addresses and hands out the
same ids again) the log's id names another log, and anchoring there would put this log's
entries in it. ``rebind_log`` (``gym ledger rebind``) re-creates the log on the new chain.

User-written entry files are parsed by ``read_entry_files``: a ``.jsonl``/``.ndjson`` file
holds one entry per line, any other file one JSON object, each parsed by
``ledger.json_input.parse_json`` (at most ``MAX_INPUT_ENTRY_BYTES``, nested at most
``MAX_ENTRY_DEPTH`` levels, no member name twice in one object). Entries need not be canonical on
input (key order, whitespace, explicit nulls for absent optional fields); they are validated
into the entry model and re-encoded canonically.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ledger.batches import BatchManifest, store_batch
from ledger.entries import (
    ENTRY_TYPES,
    MAX_ENTRY_BYTES,
    MAX_ENTRY_DEPTH,
    ExperienceEntry,
    decode_entry,
    encode_entry,
    entry_cid,
    fold_library,
)
from ledger.errors import EntryError, LedgerError
from ledger.json_input import JSONInputError, parse_json
from ledger.logstore import ChainBinding, LogChangedError, LogStore
from ledger.rfc9162 import EMPTY_ROOT

if TYPE_CHECKING:  # web3 loads when a function here first talks to the chain
    from ledger.chain import AnchoredEvent, LedgerContract
    from ledger.content import ContentStore

# An entry as a user writes it (indented, keys in any order) may be larger than its canonical
# bytes; anything beyond this is refused before it is parsed.
MAX_INPUT_ENTRY_BYTES = 4 * MAX_ENTRY_BYTES


class PublishError(LedgerError):
    """Publishing cannot proceed; the message says why and what to run."""


class NothingToPublishError(PublishError):
    """The log has no leaves beyond its last anchored checkpoint."""


class CheckpointMismatchError(PublishError):
    """The chain's anchored checkpoint is not the one recorded locally."""


class ChainBindingError(PublishError):
    """The log was created on another chain (or one since reset): its on-chain id names
    another log, or none, on the configured chain."""


@dataclass(frozen=True)
class PublishResult:
    log: str
    log_id: int  # the log's id in ExperienceLedger
    old_size: int  # previous anchored size
    size: int  # new anchored size
    root: bytes
    batch_cid: str
    tx_hash: str
    block_number: int
    proof_length: int  # hashes in the consistency proof sent
    # Sizes of checkpoints found anchored on chain but not recorded here (a publish that died
    # after its transaction was mined), checked against the local tree and recorded first.
    recovered: tuple[int, ...] = ()
    sent: bool = True  # False: everything was anchored already; the fields describe the last


@dataclass(frozen=True)
class AppendResult:
    log: str
    old_size: int
    size: int
    cids: list[str]


# -- entries --------------------------------------------------------------------------------


def entry_from_json(obj: Any) -> bytes:
    """Canonical bytes of the entry that the parsed JSON ``obj`` describes (validated).

    Raises ``EntryError`` for a non-object, an unknown type or version, a broken field rule,
    or canonical bytes over ``MAX_ENTRY_BYTES``.
    """
    if not isinstance(obj, dict):
        raise EntryError(f"an entry is a JSON object, got {type(obj).__name__}")
    approx = len(json.dumps(obj))
    if approx > 4 * MAX_ENTRY_BYTES:  # far over the limit: not worth validating
        raise EntryError(f"entry is about {approx} bytes, the limit is {MAX_ENTRY_BYTES}")
    kind, version = obj.get("type"), obj.get("v")
    if not isinstance(kind, str) or kind not in ENTRY_TYPES:
        raise EntryError(f"unknown entry type {kind!r}; known types: "
                         f"{', '.join(sorted(ENTRY_TYPES))}", field="type")
    if type(version) is not int or version not in ENTRY_TYPES[kind]:
        raise EntryError(f"unknown version {version!r} of {kind!r} entries; known versions: "
                         f"{', '.join(map(str, sorted(ENTRY_TYPES[kind])))}", field="v")
    data = encode_entry(ENTRY_TYPES[kind][version](**obj))
    decode_entry(data)  # the same check every reader makes, so nothing unreadable is stored
    return data


MAX_LISTED_PROBLEMS = 20  # `gym ledger append` lists this many problems, then counts the rest


def read_entry_files(paths: Iterable[str | Path]) -> list[bytes]:
    """Canonical bytes of every entry in ``paths``, in order.

    Every entry is checked; if any is bad, one ``EntryError`` lists every problem of every bad
    entry (file, and line for JSONL; field; message), the first ``MAX_LISTED_PROBLEMS`` of
    them, then how many more. A single problem stays a single line."""
    out: list[bytes] = []
    bad: list[tuple[str, str | None, str]] = []  # (where, field, message)
    for path in map(Path, paths):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise EntryError(f"{path}: cannot read ({exc})") from None
        if path.suffix in (".jsonl", ".ndjson"):
            items = [(f"{path}:{n}", line) for n, line in enumerate(text.splitlines(), 1)
                     if line.strip()]
        else:
            items = [(str(path), text)]
        if not items:
            raise EntryError(f"{path}: holds no entries")
        for where, chunk in items:
            try:
                obj = parse_json(chunk, max_bytes=MAX_INPUT_ENTRY_BYTES, max_depth=MAX_ENTRY_DEPTH,
                                 what="entry")
            except JSONInputError as exc:
                detail = f"not valid JSON ({exc})" if exc.reason == "invalid" else str(exc)
                bad.append((where, None, detail))
                continue
            try:
                out.append(entry_from_json(obj))
            except EntryError as exc:
                bad += [(where, field, message) for field, message in exc.problems]
    if bad:
        raise EntryError(_problem_report(bad))
    return out


def _problem_report(bad: list[tuple[str, str | None, str]]) -> str:
    lines = [f"{where}: {field}: {message}" if field else f"{where}: {message}"
             for where, field, message in bad]
    if len(lines) == 1:
        return lines[0]
    entries = len({where for where, _, _ in bad})
    listed = lines[:MAX_LISTED_PROBLEMS]
    if len(lines) > MAX_LISTED_PROBLEMS:
        listed.append(f"and {len(lines) - MAX_LISTED_PROBLEMS} more")
    return (f"{len(lines)} problems in {entries} entr{'y' if entries == 1 else 'ies'}:\n"
            + "\n".join(f"  {line}" for line in listed))


def check_library_fold(store: LogStore, content: ContentStore, name: str, size: int,
                       entries: list[bytes]) -> None:
    """Check that the experience ops of log ``name``'s first ``size`` leaves followed by
    ``entries`` fold into a library (``fold_library``): every update/delete names an
    experience live at that point, no experience is added twice. ``EntryError`` otherwise.

    The existing leaves are read from ``content``; a leaf it lacks makes the check impossible
    and raises ``LedgerError``. Costs one read and decode per leaf, so callers skip it for
    batches without experience entries (they cannot break the fold).
    """
    existing = []
    for leaf in store.leaves(name, 0, size):
        if not content.has(leaf.cid):
            raise LedgerError(f"cannot check the batch against log {name!r}'s library: the "
                              f"content store lacks leaf {leaf.index} ({leaf.cid})")
        existing.append((leaf.cid, decode_entry(content.cat(leaf.cid))))
    try:
        fold_library(existing)
    except EntryError as exc:
        rule = str(exc).removeprefix(f"{exc.field}: ")
        raise EntryError(f"log {name!r} already holds experience ops that do not fold ({rule}); "
                         "experience entries cannot be checked against it: start a new log") from None
    batch = [(entry_cid(data), decode_entry(data)) for data in entries]
    try:
        fold_library(existing + batch)
    except EntryError as exc:
        rule = str(exc).removeprefix(f"{exc.field}: ")
        held = f"leaves 0..{size - 1}" if size else "no leaves"
        raise EntryError(f"the batch breaks the library of log {name!r}: {rule} (the log holds "
                         f"{held}, the batch would be leaves {size}..{size + len(entries) - 1}); "
                         "nothing was appended") from None


def append_entries(store: LogStore, content: ContentStore, name: str, entries: list[bytes]
                   ) -> AppendResult:
    """Store ``entries`` (canonical bytes) in ``content`` and append them to log ``name`` in
    one database transaction. Content first: a leaf never names bytes the store lacks.

    A batch holding experience entries must keep the log's library foldable
    (``check_library_fold``), all or nothing. The check is made against the log at a size
    and the append happens only at that size; when another writer appended in between, the
    check is made again against the grown log.
    """
    old_size = store.get_log(name).size
    checks_fold = any(isinstance(decode_entry(data), ExperienceEntry) for data in entries)
    if checks_fold:
        check_library_fold(store, content, name, old_size, entries)
    cids = []
    for data in entries:
        cid = content.add_file(data, pin=True)
        if cid != entry_cid(data):
            raise LedgerError(f"content store returned CID {cid} for an entry whose CID is "
                              f"{entry_cid(data)}; it must add with --cid-version=1 raw leaves")
        cids.append(cid)
    if not checks_fold:
        size = store.append(name, entries)
        return AppendResult(name, size - len(entries), size, cids)
    while True:
        try:
            size = store.append(name, entries, at_size=old_size)
        except LogChangedError as changed:
            old_size = changed.size
            check_library_fold(store, content, name, old_size, entries)
            continue
        return AppendResult(name, old_size, size, cids)


# -- anchoring ------------------------------------------------------------------------------


def _bound_elsewhere(name: str, log_id: int, bound: ChainBinding | None, here: ChainBinding,
                     why: str) -> ChainBindingError:
    where = bound.describe() if bound else "a chain this index did not record"
    return ChainBindingError(
        f"log {name!r} is on-chain log {log_id} of {where}, but the configured chain "
        f"is {here.describe()}: {why}. Nothing was sent. Re-create the log on this chain with "
        f"`gym ledger rebind {name}` (keeps its entries; the next publish anchors them all)")


def check_chain_binding(store: LogStore, contract: LedgerContract, name: str) -> int:
    """The on-chain id of log ``name``, after checking that it belongs to ``contract``'s chain.

    ``LogInfo.chain`` must be ``contract.binding()``; otherwise ``ChainBindingError`` says how
    to re-create the log there. A log recorded before bindings existed (migration 0003) is
    bound now if the chain's log of that id is this log as far as the chain can tell: a
    publisher log of the same name whose root at the last recorded checkpoint is that
    checkpoint's root (a log never anchored: same name, size 0). ``PublishError`` for a log
    not yet created on chain.
    """
    from ledger.chain import ContractRevertError, LogKind

    log = store.get_log(name)
    if log.chain_log_id is None:
        raise PublishError(f"log {name!r} is not on chain yet: `gym ledger publish {name}` "
                           "creates it")
    here = contract.binding()
    if log.chain is not None:
        if log.chain != here:
            why = ("the chain was restarted from scratch or replaced"
                   if log.chain.chain_id == here.chain_id else "this is another chain")
            raise _bound_elsewhere(name, log.chain_log_id, log.chain, here, why)
        return log.chain_log_id
    recorded = store.checkpoints(name)
    try:
        info = contract.log_info(log.chain_log_id)
        anchored_root = (contract.root_at(log.chain_log_id, recorded[-1].size) if recorded
                         else None)
    except ContractRevertError:  # no such log, or no checkpoint at that size
        info, anchored_root = None, None
    if (info is None or info.kind != LogKind.PUBLISHER or info.name != name
            or (recorded and anchored_root != recorded[-1].root)
            or (not recorded and info.size != 0)):
        raise _bound_elsewhere(name, log.chain_log_id, None, here,
                               f"it was recorded before logs were bound to a chain, and log "
                               f"{log.chain_log_id} there is not it")
    store.bind_chain(name, here)
    return log.chain_log_id


def ensure_chain_log(store: LogStore, contract: LedgerContract, name: str) -> int:
    """The on-chain id of log ``name`` on ``contract``'s chain, creating the log there first
    if it has none; ``ChainBindingError`` when it was created on another chain
    (``check_chain_binding``)."""
    from ledger.chain import LogKind

    log = store.get_log(name)
    if log.chain_log_id is not None:
        return check_chain_binding(store, contract, name)
    here = contract.binding()
    log_id, _ = contract.create_log(name, LogKind.PUBLISHER)
    store.set_chain_log_id(name, log_id, here)
    return log_id


def rebind_log(store: LogStore, contract: LedgerContract, name: str) -> int:
    """Re-create log ``name`` on ``contract``'s chain after its own chain was reset or
    replaced: a new on-chain log, the binding moved to it, and the checkpoints recorded on the
    old chain forgotten, in one database transaction. The leaves stay; the next ``publish``
    anchors them all. Refuses (``PublishError``) a log that belongs to this chain."""
    from ledger.chain import LogKind

    log = store.get_log(name)
    if log.chain_log_id is None:
        raise PublishError(f"log {name!r} is not on any chain yet: `gym ledger publish {name}` "
                           "creates it on this one")
    try:
        check_chain_binding(store, contract, name)
    except ChainBindingError:
        pass
    else:
        raise PublishError(f"log {name!r} is on-chain log {log.chain_log_id} of this chain "
                           f"already: nothing to re-create")
    here = contract.binding()
    log_id, _ = contract.create_log(name, LogKind.PUBLISHER)
    store.bind_chain(name, here, chain_log_id=log_id, forget_checkpoints=True)
    return log_id


def _adopt_anchored(store: LogStore, contract: LedgerContract, name: str, log_id: int,
                    recorded: list, size: int) -> list[AnchoredEvent]:
    """The checkpoints of log ``log_id`` anchored on chain beyond the last one recorded here,
    each checked to be this log's tree (its size at most ``size``, its root the local root at
    that size), then recorded. ``CheckpointMismatchError`` when one is not."""
    old_size = recorded[-1].size if recorded else 0
    since = (recorded[-1].block_number or 0) if recorded else 0
    events = [e for e in contract.anchored(log_id, from_block=since) if e.size > old_size]
    for event in events:
        if event.size > size or store.root(name, event.size) != event.root:
            signer = contract.account.address if contract.account else "no key"
            what = (f"beyond the {size} leaves of this log" if event.size > size
                    else "with a root that is not this log's root at that size")
            raise CheckpointMismatchError(
                f"log {name!r} (on-chain log {log_id}) is anchored on chain at size "
                f"{event.size} {what}, and the last checkpoint recorded here is size "
                f"{old_size}: someone else anchored it (this key {signer}); nothing was sent. "
                f"Check with `gym audit --log-id {log_id}`")
    for event in events:
        store.record_checkpoint(name, event.size, event.root, batch_cid=event.batch_cid,
                                tx_hash=event.tx_hash, block_number=event.block_number)
    return events


def publish(store: LogStore, content: ContentStore, contract: LedgerContract, name: str
            ) -> PublishResult:
    """Anchor every leaf of log ``name`` appended since its last recorded checkpoint.

    Starts by reconciling with the chain: checkpoints anchored on chain but not recorded here
    (a publish that died after its transaction was mined) are adopted when they are this
    log's tree, and only what lies beyond them is anchored.
    """
    from ledger.chain import ContractRevertError, LogKind

    log = store.get_log(name)
    size = log.size  # a snapshot: entries appended meanwhile wait for the next publish
    recorded = store.checkpoints(name)
    old_size = recorded[-1].size if recorded else 0
    old_root = recorded[-1].root if recorded else EMPTY_ROOT
    if size == old_size and log.chain_log_id is None:
        raise NothingToPublishError(f"log {name!r} has no entries appended since it was "
                                    f"created: append some with `gym ledger append {name} FILE...`")

    log_id = ensure_chain_log(store, contract, name)
    on_chain = contract.log_info(log_id)
    if on_chain.kind != LogKind.PUBLISHER:
        raise PublishError(f"log {name!r} is on-chain log {log_id}, a curated log: only "
                           "publisher logs are anchored")
    recovered: list[AnchoredEvent] = []
    if on_chain.size != old_size or on_chain.root != old_root:
        if on_chain.size < old_size:
            raise CheckpointMismatchError(
                f"log {name!r} (on-chain log {log_id}) is anchored on chain at size "
                f"{on_chain.size} but checkpoint {old_size} is recorded here: the chain lost "
                f"it; nothing was sent. Check with `gym audit --log-id {log_id}`")
        recovered = _adopt_anchored(store, contract, name, log_id, recorded, size)
        if not recovered or recovered[-1].size != on_chain.size:
            raise CheckpointMismatchError(
                f"log {name!r} (on-chain log {log_id}) is anchored on chain at size "
                f"{on_chain.size} but no Anchored event since the last checkpoint recorded "
                f"here (size {old_size}) says so; nothing was sent")
        old_size, old_root = on_chain.size, on_chain.root
    if size == old_size:
        if recovered:
            last = recovered[-1]
            previous = recovered[-2].size if len(recovered) > 1 else (
                recorded[-1].size if recorded else 0)
            return PublishResult(name, log_id, previous, last.size, last.root,
                                 last.batch_cid or "", last.tx_hash, last.block_number, 0,
                                 recovered=tuple(e.size for e in recovered), sent=False)
        what = f"its checkpoint at size {old_size}" if old_size else "it was created"
        raise NothingToPublishError(f"log {name!r} has no entries appended since {what}: append "
                                    f"some with `gym ledger append {name} FILE...`")

    leaves = list(store.leaves(name, old_size, size))
    missing = [leaf for leaf in leaves if not content.has(leaf.cid)]
    if missing:
        raise PublishError(f"the content store lacks {len(missing)} of the {len(leaves)} new "
                           f"entries (first: leaf {missing[0].index}, {missing[0].cid}); anchoring "
                           "them would publish entries nobody can fetch")
    batch = BatchManifest(log=name, log_id=log_id, from_size=old_size, to_size=size,
                          entries=[leaf.cid for leaf in leaves])
    batch_cid = store_batch(content, batch)
    root = store.root(name, size)
    proof = store.consistency_proof(name, old_size, size) if old_size else []
    try:
        tx = contract.anchor(log_id, size, root, batch_cid, proof)
    except ContractRevertError as exc:
        if exc.name == "ExperienceLedgerNotLogOwner":
            raise exc.with_hint("set GYM_PUBLISHER_KEY to the key of the log's owner") from None
        raise
    store.record_checkpoint(name, size, root, batch_cid=batch_cid, tx_hash=tx.tx_hash,
                            block_number=tx.block_number)
    return PublishResult(name, log_id, old_size, size, root, batch_cid, tx.tx_hash,
                         tx.block_number, len(proof), recovered=tuple(e.size for e in recovered))
