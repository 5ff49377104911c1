"""CAR v1: header bytes, round trips, interop with aleph-cid's CARs, tampering and truncation."""

from __future__ import annotations

import io
import random

import pytest

from ledger.blockstore import LocalBlockStore
from ledger.car import CarError, decode_header, encode_header, read_car, write_car
from ledger.errors import ContentIntegrityError, VerificationError
from ledger.multiformats import CID, RAW, encode_varint
from ledger.unixfs import CHUNK_SIZE, iter_file_blocks

aleph_cid = pytest.importorskip("aleph_cid")


def car_bytes(roots, blocks) -> bytes:
    out = io.BytesIO()
    write_car(roots, blocks, out)
    return out.getvalue()


def test_header_is_canonical_dag_cbor():
    root = CID.parse("bafkreifzjut3te2nhyekklss27nh3k72ysco7y32koao5eei66wof36n5e")
    header = encode_header([root])
    # a2 | 65 "roots" | 81 d8 2a 58 25 00 <36-byte CID> | 67 "version" | 01
    assert header == (b"\xa2\x65roots\x81\xd8\x2a\x58\x25\x00" + root.to_bytes()
                      + b"\x67version\x01")
    assert decode_header(header) == [root]


def test_round_trip_of_a_multi_chunk_file():
    data = random.Random(1).randbytes(3 * CHUNK_SIZE + 10)
    blocks = list(iter_file_blocks(data))
    root = blocks[-1][0]
    roots, read_back = read_car(io.BytesIO(car_bytes([root], blocks)))
    assert roots == [root]
    assert list(read_back) == blocks


def test_cidv0_root_and_blocks_round_trip():
    blocks = list(iter_file_blocks(b"x" * (CHUNK_SIZE + 1), cid_version=0))
    root = blocks[-1][0]
    assert root.version == 0
    roots, read_back = read_car(io.BytesIO(car_bytes([root], blocks)))
    assert roots == [root] and list(read_back) == blocks


def test_aleph_cid_reads_our_car_and_we_read_theirs(tmp_path):
    folder = tmp_path / "site"
    folder.mkdir()
    (folder / "a.bin").write_bytes(random.Random(2).randbytes(CHUNK_SIZE * 2 + 5))
    (folder / "b.txt").write_text("hello\n")
    theirs = tmp_path / "theirs.car"
    root = aleph_cid.write_folder_car(folder, theirs)
    with open(theirs, "rb") as stream:
        roots, blocks = read_car(stream)
        blocks = list(blocks)
    assert [str(r) for r in roots] == [root]
    assert len(blocks) == 3 + 1 + 1 + 1  # three leaves, their file node, b.txt, the directory

    ours = tmp_path / "ours.car"
    ours.write_bytes(car_bytes(roots, blocks))
    assert aleph_cid.read_carv1_root(ours) == root


def test_export_and_import_between_stores(tmp_path):
    data = random.Random(3).randbytes(5 * CHUNK_SIZE + 77)
    source = LocalBlockStore(tmp_path / "a")
    root = source.add_file(data)
    out = io.BytesIO()
    source.export_car(root, out)
    target = LocalBlockStore(tmp_path / "b")
    assert target.import_car(io.BytesIO(out.getvalue())) == [root]
    assert target.cat(root) == data


def test_export_writes_parents_first_and_each_block_once(tmp_path):
    store = LocalBlockStore(tmp_path)
    root = store.add_file(bytes(4 * CHUNK_SIZE))  # four identical zero leaves
    out = io.BytesIO()
    store.export_car(root, out)
    _, blocks = read_car(io.BytesIO(out.getvalue()))
    cids = [str(cid) for cid, _ in blocks]
    assert cids[0] == root
    assert len(cids) == 2


def test_tampered_block_is_refused():
    blocks = list(iter_file_blocks(b"y" * (CHUNK_SIZE + 1)))
    data = bytearray(car_bytes([blocks[-1][0]], blocks))
    data[-5] ^= 0x01  # inside the root block, the last section
    _, read_back = read_car(io.BytesIO(bytes(data)))
    with pytest.raises(ContentIntegrityError):
        list(read_back)


def test_tampered_car_imports_nothing_after_the_bad_block(tmp_path):
    leaf = b"z" * 100
    cid = CID.for_block(RAW, leaf)
    data = car_bytes([cid], [(cid, leaf[:-1] + b"Z")])
    store = LocalBlockStore(tmp_path)
    with pytest.raises(ContentIntegrityError):
        store.import_car(io.BytesIO(data))
    assert not store.has(cid)


def test_truncated_car_raises():
    blocks = list(iter_file_blocks(b"q" * 1000))
    data = car_bytes([blocks[-1][0]], blocks)
    _, read_back = read_car(io.BytesIO(data[:-10]))
    with pytest.raises(CarError):
        list(read_back)


def _header_car(header: bytes) -> bytes:
    return encode_varint(len(header)) + header


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x80",
        _header_car(b"\xa2\x65roots\x80\x67version\x02"),  # CARv2 pragma-like version
        _header_car(b"\xa1\x67version\x01"),  # no roots
        _header_car(b"\x80"),  # not a map
        _header_car(b"\xa2\x65roots\x81\x01\x67version\x01"),  # a root that is not a CID
        _header_car(b"\xa2\x65roots\x81\xd8\x2a\x42\x01\x55\x67version\x01"),  # broken CID
        _header_car(b"\xa2\x65roots\x80\x67version\x01\x00"),  # trailing byte
        _header_car(b"\xa2\x65roots\x80\x67version\xfb"),  # float
        encode_varint(10) + b"\xa2",  # header shorter than announced
    ],
)
def test_malformed_headers_raise_car_error(data):
    with pytest.raises(VerificationError):
        read_car(io.BytesIO(data))
