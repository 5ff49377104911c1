"""LocalBlockStore: Kubo-identical add, verified reads, tampering, missing blocks, pins and
their owners, the pin bounds."""

from __future__ import annotations

import random

import pytest
from gym_helpers import kubo_cid

from ledger import blockstore
from ledger.blockstore import LOCAL_OWNER, LocalBlockStore, PinOwnerError
from ledger.errors import ContentIntegrityError, NotFoundError
from ledger.multiformats import CID, DAG_PB, RAW
from ledger.unixfs import (
    CHUNK_SIZE,
    MAX_LINKS,
    DagBoundError,
    PBLink,
    PBNode,
    encode_pbnode,
    iter_file_blocks,
)

aleph_cid = pytest.importorskip("aleph_cid")


@pytest.fixture
def store(tmp_path) -> LocalBlockStore:
    return LocalBlockStore(tmp_path / "store")


@pytest.mark.parametrize("size", [0, 1, CHUNK_SIZE - 1, CHUNK_SIZE, CHUNK_SIZE + 1,
                                  3 * 1024 * 1024 + 7])
def test_add_file_matches_kubo_and_cats_back(store, size):
    data = random.Random(size).randbytes(size)
    cid = store.add_file(data)
    assert cid == kubo_cid(data)
    assert store.cat(cid) == data
    assert b"".join(store.cat_iter(cid)) == data


def test_multi_level_file_from_a_path(store, tmp_path):
    data = random.Random(9).randbytes((MAX_LINKS + 2) * CHUNK_SIZE + 3)
    path = tmp_path / "weights.bin"
    path.write_bytes(data)
    cid = store.add_file(path)
    assert cid == kubo_cid(data)
    assert CID.parse(cid).codec == DAG_PB
    assert store.cat(cid) == data


def test_no_temp_files_are_left(store):
    store.add_file(random.Random(1).randbytes(2 * CHUNK_SIZE + 1))
    assert not [p for p in (store.root / "blocks").iterdir() if p.name.startswith(".")]


def _block_file(store: LocalBlockStore, cid: str):
    return store.root / "blocks" / cid


def _flip_bit(path, byte: int = 0, bit: int = 3) -> None:
    data = bytearray(path.read_bytes())
    data[byte] ^= 1 << bit
    path.write_bytes(bytes(data))


def test_flipped_bit_in_a_raw_block_raises_on_get_and_cat(store):
    cid = store.add_file(b"an entry of the ledger")
    _flip_bit(_block_file(store, cid))
    with pytest.raises(ContentIntegrityError):
        store.get_block(cid)
    with pytest.raises(ContentIntegrityError):
        store.cat(cid)


def test_flipped_bit_in_a_leaf_of_a_large_file_raises_on_cat(store):
    data = random.Random(2).randbytes(3 * CHUNK_SIZE)
    root = store.add_file(data)
    second_leaf = CID.for_block(RAW, data[CHUNK_SIZE : 2 * CHUNK_SIZE])
    _flip_bit(_block_file(store, str(second_leaf)), byte=1000, bit=0)
    stream = store.cat_iter(root)
    assert next(stream) == data[:CHUNK_SIZE]  # the first leaf is intact and comes out
    with pytest.raises(ContentIntegrityError):
        next(stream)
    with pytest.raises(ContentIntegrityError):
        store.cat(root)


def test_flipped_bit_in_the_root_node_raises(store):
    root = store.add_file(random.Random(3).randbytes(CHUNK_SIZE + 1))
    _flip_bit(_block_file(store, root), byte=10)
    with pytest.raises(ContentIntegrityError):
        store.cat(root)


def test_missing_blocks_raise_not_found(store):
    data = random.Random(4).randbytes(2 * CHUNK_SIZE)
    root = store.add_file(data)
    absent = CID.for_block(RAW, b"never stored")
    with pytest.raises(NotFoundError):
        store.get_block(absent)
    with pytest.raises(NotFoundError):
        store.cat(absent)
    store.delete_block(CID.for_block(RAW, data[CHUNK_SIZE:]))
    with pytest.raises(NotFoundError):
        store.cat(root)
    with pytest.raises(NotFoundError):
        store.pin_add(root)
    assert store.pin_ls() == []


def test_put_block_refuses_bytes_that_do_not_match(store):
    cid = CID.for_block(RAW, b"right")
    with pytest.raises(ContentIntegrityError):
        store.put_block(cid, b"wrong")
    assert not store.has(cid)
    store.put_block(str(cid), b"right")
    assert store.has(cid) and store.get_block(cid) == b"right"
    assert store.put(b"right") == cid


def test_cidv0_files_are_stored_and_read_by_their_qm_cid(store):
    data = random.Random(5).randbytes(CHUNK_SIZE + 9)
    blocks = list(iter_file_blocks(data, cid_version=0))
    for cid, block in blocks:
        store.put_block(cid, block)
    root = str(blocks[-1][0])
    assert root.startswith("Qm")
    assert root == aleph_cid.compute_cid(data)
    assert store.cat(root) == data
    assert store.has(CID.parse(root).to_v1())


def test_pins(store):
    first = store.add_file(b"one", pin=True)
    second = store.add_file(random.Random(6).randbytes(CHUNK_SIZE + 1))
    assert store.pin_ls() == [first]
    store.pin_add(second)
    assert store.pin_ls() == sorted([first, second])
    store.pin_rm(first)
    assert store.pin_ls() == [second]
    with pytest.raises(NotFoundError):
        store.pin_rm(first)


def test_a_pin_belongs_to_its_owners(store):
    cid = store.add_file(b"shared evidence")
    store.pin_add(cid, owner="alice")
    store.pin_add(cid, owner="bob")
    assert store.pin_owners(cid) == {"alice", "bob"}
    with pytest.raises(PinOwnerError, match="pinned by other parties, not by 'carol'"):
        store.pin_rm(cid, owner="carol")
    assert store.pin_rm(cid, owner="alice") is True  # bob still holds it
    assert store.pin_ls() == [cid] and store.pin_owners(cid) == {"bob"}
    assert store.pin_rm(cid, owner="bob") is False
    assert store.pin_ls() == [] and store.pin_owners(cid) == frozenset()
    with pytest.raises(PinOwnerError, match="cannot own a pin"):
        store.pin_add(cid, owner="two\nlines")


def test_a_pin_from_before_owners_is_the_hosts(store):
    cid = store.add_file(b"pinned by an old store")
    (store.root / "pins" / cid).touch()  # the format before owners: an empty file
    assert store.pin_ls() == [cid] and store.pin_owners(cid) == {LOCAL_OWNER}
    with pytest.raises(PinOwnerError):
        store.pin_rm(cid, owner="alice")
    store.pin_add(cid, owner="alice")
    assert store.pin_owners(cid) == {LOCAL_OWNER, "alice"}
    assert store.pin_rm(cid) is False  # the operator's removal: whatever its owners
    assert store.pin_ls() == []


def test_pinning_stopped_early_pins_nothing(store):
    cid = store.add_file(random.Random(4).randbytes(3 * CHUNK_SIZE))
    steps = store.pinning(cid, owner="alice")
    next(steps)
    steps.close()
    assert store.pin_ls() == []


def _chain(store, levels: int, fanout: int = 1) -> CID:
    cid = store.put(b"x")
    for _ in range(levels):
        cid = store.put(encode_pbnode(PBNode((PBLink(cid, "", 1),) * fanout)), DAG_PB)
    return cid


def test_pins_are_bounded_in_depth_and_blocks(store, monkeypatch):
    monkeypatch.setattr(blockstore, "MAX_PIN_DEPTH", 5)
    monkeypatch.setattr(blockstore, "MAX_PIN_BLOCKS", 20)
    store.pin_add(_chain(store, 5))
    with pytest.raises(DagBoundError, match="more than 5 levels"):
        store.pin_add(_chain(store, 6))
    wide = store.put(encode_pbnode(PBNode(tuple(PBLink(store.put(bytes([n])), "", 1)
                                               for n in range(25)))), DAG_PB)
    with pytest.raises(DagBoundError, match="more than 20 blocks"):
        store.pin_add(wide)
    # a node linking one child thousands of times is walked once per distinct block
    repeating = _chain(store, 3, fanout=5000)
    assert len(list(store.walk_bounded(repeating))) == 4


@pytest.mark.parametrize("module", ["multiformats", "unixfs", "car", "blockstore"])
def test_module_docstring_examples_run(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(f"ledger.{module}"))
    assert result.attempted > 0 and result.failed == 0
