"""The publishing path: entries in, content stored, leaves appended, checkpoints anchored.

``append_entries`` validates entries, stores their bytes in the content store, then appends
them to the log in one transaction: all or nothing. A batch with experience entries must keep
the log's library foldable (DESIGN.md "Entries"; ``check_library_fold``): an update or delete
of an experience that is not live at that point, or a second add of the same entry, refuses
the whole batch. ``publish`` anchors everything appended
since the last recorded checkpoint:

1. the new leaves ``[old_size, size)`` become a batch manifest (``ledger.batches``), stored
   and pinned in the content store, after checking that every entry they name is there;
2. the local record and the chain must agree on the last anchored checkpoint: when the chain
   holds a larger size (another key or another installation anchored), publishing stops and
   says so instead of sending a transaction the contract would refuse;
3. ``anchor(logId, size, root, batchCid, consistencyProof)`` is sent with the RFC 9162
   consistency proof from the last anchored size (empty for the first anchor), computed by
   the ``LogStore``;
4. only after the transaction succeeded is the checkpoint recorded locally.

A log gets its on-chain id from ``gym ledger create`` (which calls ``ensure_chain_log``); a
log created locally only (``gym ledger create --offline``, or a trainer calling
``LogStore.create_log``) is created on-chain by its first ``publish``.

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
from ledger.chain import ContractRevertError, LedgerContract, LogKind
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
from ledger.logstore import LogChangedError, LogStore
from ledger.rfc9162 import EMPTY_ROOT

if TYPE_CHECKING:
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


def read_entry_files(paths: Iterable[str | Path]) -> list[bytes]:
    """Canonical bytes of every entry in ``paths``, in order; ``EntryError`` naming the file
    (and line, for JSONL) of the first bad entry."""
    out: list[bytes] = []
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
                raise EntryError(f"{where}: {detail}") from None
            try:
                out.append(entry_from_json(obj))
            except EntryError as exc:
                raise EntryError(f"{where}: {exc}") from None
    return out


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


def ensure_chain_log(store: LogStore, contract: LedgerContract, name: str) -> int:
    """The on-chain id of log ``name``, creating the log on-chain first if it has none."""
    log = store.get_log(name)
    if log.chain_log_id is not None:
        return log.chain_log_id
    log_id, _ = contract.create_log(name, LogKind.PUBLISHER)
    store.set_chain_log_id(name, log_id)
    return log_id


def publish(store: LogStore, content: ContentStore, contract: LedgerContract, name: str
            ) -> PublishResult:
    """Anchor every leaf of log ``name`` appended since its last recorded checkpoint."""
    log = store.get_log(name)
    size = log.size  # a snapshot: entries appended meanwhile wait for the next publish
    recorded = store.checkpoints(name)
    old_size = recorded[-1].size if recorded else 0
    old_root = recorded[-1].root if recorded else EMPTY_ROOT
    if size == old_size:
        what = f"its checkpoint at size {old_size}" if recorded else "it was created"
        raise NothingToPublishError(f"log {name!r} has no entries appended since {what}: append "
                                    f"some with `gym ledger append {name} FILE...`")

    log_id = ensure_chain_log(store, contract, name)
    on_chain = contract.log_info(log_id)
    if on_chain.kind != LogKind.PUBLISHER:
        raise PublishError(f"log {name!r} is on-chain log {log_id}, a curated log: only "
                           "publisher logs are anchored")
    if on_chain.size != old_size or on_chain.root != old_root:
        signer = contract.account.address if contract.account else "no key"
        raise CheckpointMismatchError(
            f"log {name!r} (on-chain log {log_id}) is anchored on chain at size {on_chain.size} "
            f"but the last checkpoint recorded here is size {old_size}: someone else anchored "
            f"it (owner {on_chain.owner}, this key {signer}); nothing was sent. Check with "
            f"`gym audit --log-id {log_id}`")

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
                         tx.block_number, len(proof))
