"""Batch manifests: what an anchored checkpoint's ``batchCid`` points to.

A checkpoint carries the CID of the batch of entries that it added; docs/design.md "3.3 Batch
manifests" fixes the batch's format and this module implements it. A batch manifest is the
RFC 8785 canonical JSON of::

    {"type": "batch", "v": 1, "log": <local log name>, "log_id": <ExperienceLedger log id>,
     "from": <previous anchored size>, "to": <new anchored size>,
     "entries": [<entry CID of leaf from>, ..., <entry CID of leaf to - 1>]}

stored in the content store with ``add_file``: up to 256 KiB it is one raw block (CID
``bafkrei...``), beyond that a UnixFS file whose CID is the file CID Kubo gives for the same
bytes (``bafybei...``). About 4,000 entries fit in one block; a 1M-entry batch is ~62 MB.

Rules (``decode_batch`` checks them all, raising ``BatchError``): canonical bytes only (one
manifest, one CID); exactly those seven keys; ``log`` a non-empty string; ``log_id`` >= 1;
``0 <= from < to``; ``len(entries) == to - from``; every entry CID a sha2-256 raw CIDv1 in
lowercase base32, the one spelling ``entry_cid`` produces. A manifest is not an entry (its
type is not an entry type) and is never a leaf of any log.

``verify_batch`` checks a decoded manifest against the checkpoint that names it (log id,
previous and new size) and raises ``BatchMismatchError`` with expected and computed values.

The entries DAG (``batch_dag``): a tree of dag-pb nodes whose leaves are the manifest's
entries, in order, so that a Kubo node can hand an auditor a thousand entries in one CAR
(``ipfs dag export``) instead of one request each. Each node holds only links (``Hash``; no
``Name``, ``Tsize`` or ``Data``), at most ``ENTRY_DAG_FANOUT`` = 1024 of them; level 1 groups
the entries 1024 by 1024, each level above groups the one below the same way, up to one root.
The tree is a function of the entry CIDs alone, so the manifest fixes its root: the auditor
recomputes it and never trusts a DAG the endpoint offers. ``store_batch`` stores and pins it
beside the manifest; a batch without it (published before it existed) is read entry by entry.

>>> from ledger.entries import entry_cid
>>> cids = [entry_cid(b'{"n":%d}' % i) for i in range(2)]
>>> batch = BatchManifest(log="alice/math", log_id=1, from_size=0, to_size=2, entries=cids)
>>> data = encode_batch(batch)
>>> data[:13], data[-40:]
(b'{"entries":["', b',"log_id":1,"to":2,"type":"batch","v":1}')
>>> decode_batch(data) == batch
True
>>> verify_batch(batch, log_id=1, from_size=0, to_size=2)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ledger.canonical_json import canonical_bytes
from ledger.errors import LedgerError, VerificationError
from ledger.json_input import JSONInputError, parse_json
from ledger.multiformats import CID, DAG_PB, MultiformatError, raw_sha256_cid_bytes

if TYPE_CHECKING:
    from ledger.content import ContentStore

BATCH_TYPE = "batch"
BATCH_VERSION = 1
_KEYS = {"type", "v", "log", "log_id", "from", "to", "entries"}
# Largest manifest read back (~62 bytes an entry): about 4M entries, far more than one anchor
# carries; a manifest nests two levels (the object, its list of CIDs).
MAX_BATCH_BYTES = 256 * 1024 * 1024


class BatchError(LedgerError, ValueError):
    """Bytes are not a valid batch manifest."""


class BatchMismatchError(VerificationError):
    """A valid manifest does not describe the checkpoint that points to it."""


@dataclass(frozen=True)
class BatchManifest:
    log: str  # the publisher's name for the log (informative; the chain knows it by log_id)
    log_id: int  # the log's id in ExperienceLedger
    from_size: int  # size of the previous anchored checkpoint (0 for the first)
    to_size: int  # size of the checkpoint this batch completes
    entries: Sequence[str] = field(default_factory=tuple)  # CIDs of leaves from_size..to_size-1

    def __post_init__(self) -> None:
        object.__setattr__(self, "entries", tuple(self.entries))


def _check_entry_cid(value: object, position: int) -> None:
    if not isinstance(value, str):
        raise BatchError(f"entries[{position}]: an entry CID is a string, got {value!r}")
    try:
        raw_sha256_cid_bytes(value)  # the fast path: the one spelling that is accepted
        return
    except MultiformatError:
        pass
    try:
        CID.parse(value)
    except MultiformatError as exc:
        raise BatchError(f"entries[{position}]: not a CID ({exc})") from None
    raise BatchError(f"entries[{position}]: {value!r} is not an entry CID "
                     "(raw sha2-256 CIDv1 in lowercase base32, bafkrei...)")


def _check(batch: BatchManifest) -> None:
    if not isinstance(batch.log, str) or not batch.log:
        raise BatchError("log: must be a non-empty string")
    for name, value, low in (("log_id", batch.log_id, 1), ("from", batch.from_size, 0),
                             ("to", batch.to_size, 1)):
        if type(value) is not int or value < low:
            raise BatchError(f"{name}: must be an integer >= {low}, got {value!r}")
    if batch.from_size >= batch.to_size:
        raise BatchError(f"from ({batch.from_size}) must be below to ({batch.to_size})")
    if len(batch.entries) != batch.to_size - batch.from_size:
        raise BatchError(f"entries: {len(batch.entries)} CIDs for sizes {batch.from_size} to "
                         f"{batch.to_size}, expected {batch.to_size - batch.from_size}")
    for position, cid in enumerate(batch.entries):
        _check_entry_cid(cid, position)


def encode_batch(batch: BatchManifest) -> bytes:
    """Canonical RFC 8785 bytes of ``batch``; ``BatchError`` if it breaks a rule."""
    _check(batch)
    return canonical_bytes({"type": BATCH_TYPE, "v": BATCH_VERSION, "log": batch.log,
                          "log_id": batch.log_id, "from": batch.from_size, "to": batch.to_size,
                          "entries": list(batch.entries)})


def decode_batch(data: bytes) -> BatchManifest:
    """The manifest ``data`` encodes; ``BatchError`` unless ``data`` is a valid, canonical one."""
    try:
        obj = parse_json(data, max_bytes=MAX_BATCH_BYTES, max_depth=2, what="batch manifest")
    except JSONInputError as exc:
        raise BatchError(f"a batch manifest is UTF-8 JSON: {exc}" if exc.reason == "invalid"
                         else str(exc)) from None
    if not isinstance(obj, dict):
        raise BatchError(f"a batch manifest is a JSON object, got {type(obj).__name__}")
    if obj.get("type") != BATCH_TYPE or obj.get("v") != BATCH_VERSION:
        raise BatchError(f"not a batch manifest v{BATCH_VERSION}: type {obj.get('type')!r}, "
                         f"v {obj.get('v')!r}")
    if set(obj) != _KEYS:
        missing, extra = sorted(_KEYS - set(obj)), sorted(set(obj) - _KEYS)
        raise BatchError(f"batch manifest keys: missing {missing}, unknown {extra}")
    if not isinstance(obj["entries"], list):
        raise BatchError("entries: must be a list of CIDs")
    batch = BatchManifest(log=obj["log"], log_id=obj["log_id"], from_size=obj["from"],
                          to_size=obj["to"], entries=obj["entries"])
    if encode_batch(batch) != data:
        raise BatchError("bytes are not the canonical RFC 8785 encoding of the manifest")
    return batch


def verify_batch(batch: BatchManifest, *, log_id: int, from_size: int, to_size: int) -> None:
    """Check that ``batch`` describes the checkpoint (``log_id``, ``from_size`` → ``to_size``)."""
    for what, expected, computed in (("log id", log_id, batch.log_id),
                                     ("from", from_size, batch.from_size),
                                     ("to", to_size, batch.to_size)):
        if expected != computed:
            raise BatchMismatchError(f"batch manifest {what} is {computed}, the checkpoint "
                                     f"says {expected}", expected=expected, computed=computed)


ENTRY_DAG_FANOUT = 1024  # links per node of a batch's entries DAG (a node is ~38 KiB)


@dataclass(frozen=True)
class EntryChunk:
    """A level-1 node of the entries DAG: leaves ``start .. start + count - 1`` of the batch."""

    cid: CID
    start: int  # offset in the batch (leaf ``from + start`` of the log)
    count: int


@dataclass(frozen=True)
class BatchDag:
    root: CID
    chunks: tuple[EntryChunk, ...]  # level 1, in entry order
    nodes: tuple[tuple[CID, bytes], ...]  # every node, children before parents, root last
    entry_cids: tuple[bytes, ...]  # the entries' binary CIDs, in order (the leaves)


def _links_node(children: Sequence[bytes]) -> bytes:
    """A dag-pb node of links only: field 2 (PBLink) holding field 1 (Hash), in order."""
    parts = []
    for child in children:
        link = b"\x0a" + bytes((len(child),)) + child  # a CIDv1 sha2-256 is 36 bytes < 128
        parts.append(b"\x12" + bytes((len(link),)) + link)
    return b"".join(parts)


def batch_dag(entries: Sequence[str]) -> BatchDag:
    """The entries DAG of a batch (see the module docstring); ``entries`` as in a manifest."""
    if not entries:
        raise BatchError("a batch has at least one entry")
    level = leaves = [raw_sha256_cid_bytes(cid) for cid in entries]
    nodes: list[tuple[CID, bytes]] = []
    level_number = 1
    chunks: list[EntryChunk] = []
    while True:
        parents: list[bytes] = []
        for start in range(0, len(level), ENTRY_DAG_FANOUT):
            children = level[start:start + ENTRY_DAG_FANOUT]
            block = _links_node(children)
            cid = CID.for_block(DAG_PB, block)
            nodes.append((cid, block))
            parents.append(cid.to_bytes())
            if level_number == 1:
                chunks.append(EntryChunk(cid, start, len(children)))
        if len(parents) == 1:
            return BatchDag(nodes[-1][0], tuple(chunks), tuple(nodes), tuple(leaves))
        level, level_number = parents, level_number + 1


def store_batch(content: ContentStore, batch: BatchManifest) -> str:
    """Encode ``batch``, add it to ``content`` (pinned) with its entries DAG (stored and
    pinned, which keeps every entry of the batch) and return the manifest's CID."""
    cid = content.add_file(encode_batch(batch), pin=True)
    dag = batch_dag(batch.entries)
    for node_cid, block in dag.nodes:
        content.put_block(node_cid, block)
    content.pin_add(dag.root)
    return cid


def fetch_batch(content: ContentStore, cid: str) -> BatchManifest:
    """Read and decode the manifest ``cid`` (the store verifies the bytes against the CID)."""
    return decode_batch(content.cat(cid, max_bytes=MAX_BATCH_BYTES))
