"""CAR v1 (Content Addressable aRchive) export and import.

Spec: https://ipld.io/specs/transport/car/carv1/. A CAR is
``varint(len(header)) header`` then sections ``varint(len(cid) + len(block)) cid block``.
The header is the dag-cbor map ``{"roots": [CID, …], "version": 1}``; a CID in dag-cbor is
tag 42 over a byte string holding ``0x00`` (the identity multibase) and the binary CID. Only
the dag-cbor needed for that header is here: a canonical encoder for the header, and a strict
decoder for maps, arrays, strings, byte strings, integers, booleans, null and tag 42.

``read_car`` verifies every block against its CID before yielding it, so an archive from
anywhere can be imported safely. CARv2 is refused with a clear error.

>>> import io
>>> out = io.BytesIO()
>>> root = CID.for_block(RAW, b"hi")
>>> write_car([root], [(root, b"hi")], out)
>>> roots, blocks = read_car(io.BytesIO(out.getvalue()))
>>> roots == [root] and list(blocks) == [(root, b"hi")]
True
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from typing import BinaryIO

from ledger.errors import VerificationError
from ledger.multiformats import (
    CID,
    RAW,
    RAW_SHA256_CID_PREFIX,
    MultiformatError,
    decode_varint,
    encode_varint,
    verify_block,
)

_CID_TAG = 42
_MAX_HEADER = 1 << 20  # a header holds a few roots; refuse absurd lengths before reading them
_MAX_SECTION = 1 << 23  # 8 MiB: far above any IPFS block (Kubo's limit is 2 MiB)


class CarError(VerificationError):
    """A CAR archive is malformed, truncated or of an unsupported version."""


# --- minimal dag-cbor ------------------------------------------------------------------------


def _cbor_head(major: int, value: int) -> bytes:
    if value < 24:
        return bytes((major << 5 | value,))
    for extra, size in ((24, 1), (25, 2), (26, 4), (27, 8)):
        if value < 1 << (8 * size):
            return bytes((major << 5 | extra,)) + value.to_bytes(size, "big")
    raise CarError(f"integer too large for CBOR: {value}")


def _cbor_text(text: str) -> bytes:
    data = text.encode("utf-8")
    return _cbor_head(3, len(data)) + data


def encode_header(roots: list[CID]) -> bytes:
    """dag-cbor bytes of ``{"roots": roots, "version": 1}`` (keys in dag-cbor order)."""
    out = bytearray(_cbor_head(5, 2))
    out += _cbor_text("roots") + _cbor_head(4, len(roots))
    for cid in roots:
        link = b"\x00" + cid.to_bytes()
        out += _cbor_head(6, _CID_TAG) + _cbor_head(2, len(link)) + link
    out += _cbor_text("version") + _cbor_head(0, 1)
    return bytes(out)


def _cbor_decode(buf: bytes, pos: int, depth: int = 0) -> tuple[object, int]:
    if depth > 16:
        raise CarError("CBOR nested too deeply")
    if pos >= len(buf):
        raise CarError("truncated CBOR")
    initial = buf[pos]
    major, info = initial >> 5, initial & 0x1F
    pos += 1
    if info < 24:
        value = info
    elif info <= 27:
        size = 1 << (info - 24)
        if pos + size > len(buf):
            raise CarError("truncated CBOR")
        value = int.from_bytes(buf[pos : pos + size], "big")
        pos += size
    else:
        raise CarError(f"unsupported CBOR item 0x{initial:02x} (indefinite length or float)")
    if major == 0:
        return value, pos
    if major == 1:
        return -1 - value, pos
    if major in (2, 3):
        if pos + value > len(buf):
            raise CarError("truncated CBOR string")
        raw = buf[pos : pos + value]
        if major == 2:
            return raw, pos + value
        try:
            return raw.decode("utf-8"), pos + value
        except UnicodeDecodeError as exc:
            raise CarError("CBOR text is not UTF-8") from exc
    if major == 4:
        items = []
        for _ in range(value):
            item, pos = _cbor_decode(buf, pos, depth + 1)
            items.append(item)
        return items, pos
    if major == 5:
        mapping: dict[str, object] = {}
        for _ in range(value):
            key, pos = _cbor_decode(buf, pos, depth + 1)
            if not isinstance(key, str) or key in mapping:
                raise CarError("dag-cbor map keys must be distinct strings")
            mapping[key], pos = _cbor_decode(buf, pos, depth + 1)
        return mapping, pos
    if major == 6:
        if value != _CID_TAG:
            raise CarError(f"unsupported CBOR tag {value}")
        link, pos = _cbor_decode(buf, pos, depth + 1)
        if not isinstance(link, bytes) or not link.startswith(b"\x00"):
            raise CarError("tag 42 must wrap a byte string starting 0x00")
        return CID.from_bytes(link[1:]), pos
    if major == 7 and info in (20, 21, 22):
        return {20: False, 21: True, 22: None}[info], pos
    raise CarError(f"unsupported CBOR item 0x{initial:02x}")


def decode_header(data: bytes) -> list[CID]:
    """Parse a CARv1 header; returns its roots. Raises ``CarError`` on anything else."""
    try:
        header, end = _cbor_decode(data, 0)
    except MultiformatError as exc:
        raise CarError(f"bad CID in CAR header: {exc}") from exc
    if end != len(data):
        raise CarError("trailing bytes after the CAR header")
    if not isinstance(header, dict):
        raise CarError("CAR header is not a map")
    version = header.get("version")
    if version != 1:
        raise CarError(f"unsupported CAR version {version!r} (only CARv1 is read)")
    roots = header.get("roots")
    if not isinstance(roots, list) or not all(isinstance(r, CID) for r in roots):
        raise CarError("CAR header roots must be a list of CIDs")
    return roots


# --- framing ---------------------------------------------------------------------------------


def write_car(roots: list[CID], blocks: Iterable[tuple[CID, bytes]], out: BinaryIO) -> None:
    """Write a CARv1 with ``roots`` and the given blocks, in the order given."""
    header = encode_header(roots)
    out.write(encode_varint(len(header)) + header)
    for cid, block in blocks:
        cid_bytes = cid.to_bytes()
        out.write(encode_varint(len(cid_bytes) + len(block)) + cid_bytes)
        out.write(block)


def _read_varint(stream: BinaryIO) -> int | None:
    """Read a varint from a stream byte by byte; ``None`` at a clean end of stream."""
    raw = bytearray()
    while True:
        byte = stream.read(1)
        if not byte:
            if raw:
                raise CarError("truncated varint in CAR")
            return None
        raw += byte
        if byte[0] < 0x80:
            try:
                return decode_varint(raw)[0]
            except MultiformatError as exc:
                raise CarError(f"bad varint in CAR: {exc}") from exc
        if len(raw) >= 9:
            raise CarError("varint longer than 9 bytes in CAR")


def _read_exact(stream: BinaryIO, size: int) -> bytes:
    data = stream.read(size)
    while len(data) < size:
        more = stream.read(size - len(data))
        if not more:
            raise CarError(f"CAR truncated: wanted {size} bytes, got {len(data)}")
        data += more
    return data


def read_car(stream: BinaryIO) -> tuple[list[CID], Iterator[tuple[CID, bytes]]]:
    """Read a CARv1 header now; return its roots and a lazy iterator over verified blocks.

    Each block is hashed against its CID before it is yielded; a mismatch raises
    ``ContentIntegrityError`` and a malformed section ``CarError``.
    """
    length = _read_varint(stream)
    if length is None or length == 0:
        raise CarError("empty CAR: no header")
    if length > _MAX_HEADER:
        raise CarError(f"CAR header of {length} bytes is too large")
    roots = decode_header(_read_exact(stream, length))
    return roots, _iter_sections(stream)


def _iter_sections(stream: BinaryIO) -> Iterator[tuple[CID, bytes]]:
    while (length := _read_varint(stream)) is not None:
        if length > _MAX_SECTION:
            raise CarError(f"CAR section of {length} bytes is too large")
        section = _read_exact(stream, length)
        try:
            cid, start = CID.read(section)
        except MultiformatError as exc:
            raise CarError(f"bad CID in CAR section: {exc}") from exc
        block = section[start:]
        verify_block(cid, block)
        yield cid, block


def read_car_bytes(data: bytes) -> tuple[list[CID], list[tuple[CID, bytes]]]:
    """``read_car`` over a CAR held in memory: its roots and its blocks, each verified against
    its CID; a CAR cut inside a section gives the blocks before the cut.

    Several times faster than the stream reader on archives of small blocks (a thousand
    entries per archive in an audit): offsets into one buffer, and raw sha2-256 blocks hashed
    without building a ``CID`` first."""
    view = memoryview(data)
    try:
        length, pos = decode_varint(view, 0)
    except MultiformatError as exc:
        raise CarError(f"empty or bad CAR header length: {exc}") from exc
    if length == 0 or length > _MAX_HEADER or pos + length > len(data):
        raise CarError(f"bad CAR header length {length}")
    roots = decode_header(bytes(view[pos:pos + length]))
    pos += length
    blocks: list[tuple[CID, bytes]] = []
    end = len(data)
    sha256 = hashlib.sha256
    while pos < end:
        try:
            length, start = decode_varint(view, pos)
        except MultiformatError:
            return roots, blocks
        if length > _MAX_SECTION:
            raise CarError(f"CAR section of {length} bytes is too large")
        if start + length > end:
            return roots, blocks
        pos = start + length
        if length > 36 and data[start:start + 4] == RAW_SHA256_CID_PREFIX:
            block = data[start + 36:pos]
            if sha256(block).digest() != data[start + 4:start + 36]:
                cid = CID.from_bytes(data[start:start + 36])
                verify_block(cid, block)  # raises, naming the CID
            blocks.append((CID(1, RAW, data[start + 2:start + 36]), block))
            continue
        try:
            cid, block_start = CID.read(view[start:pos])
        except MultiformatError as exc:
            raise CarError(f"bad CID in CAR section: {exc}") from exc
        block = data[start + block_start:pos]
        verify_block(cid, block)
        blocks.append((cid, block))
    return roots, blocks
