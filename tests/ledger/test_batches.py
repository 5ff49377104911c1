"""Batch manifests: canonical bytes, every rule, checkpoint checks, storage as UnixFS files."""

from __future__ import annotations

import json

import pytest
import rfc8785
from hypothesis import given
from hypothesis import strategies as st

from ledger import LocalBlockStore, entry_cid
from ledger.batches import (
    BatchError,
    BatchManifest,
    BatchMismatchError,
    decode_batch,
    encode_batch,
    fetch_batch,
    store_batch,
    verify_batch,
)
from ledger.errors import ContentIntegrityError, VerificationError
from ledger.multiformats import CID, DAG_PB, RAW


def cids(n: int, start: int = 0) -> list[str]:
    return [entry_cid(b'{"n":%d}' % i) for i in range(start, start + n)]


def manifest(**changes) -> dict:
    obj = {"type": "batch", "v": 1, "log": "alice/math", "log_id": 3, "from": 2, "to": 5,
           "entries": cids(3)}
    obj.update(changes)
    return obj


@given(st.text(min_size=1, max_size=20), st.integers(1, 2**40), st.integers(0, 2**40),
       st.integers(1, 20))
def test_roundtrip(log, log_id, from_size, count):
    batch = BatchManifest(log, log_id, from_size, from_size + count, cids(count))
    data = encode_batch(batch)
    assert data == rfc8785.dumps(json.loads(data))
    assert decode_batch(data) == batch


def test_wire_format_is_the_documented_object():
    batch = BatchManifest("alice/math", 3, 2, 5, cids(3))
    assert json.loads(encode_batch(batch)) == manifest()


@pytest.mark.parametrize(("name", "obj", "message"), [
    ("wrong-type", manifest(type="experience"), "not a batch manifest"),
    ("wrong-version", manifest(v=2), "not a batch manifest"),
    ("extra-key", {**manifest(), "root": "0x"}, "unknown ['root']"),
    ("missing-key", {k: v for k, v in manifest().items() if k != "log"}, "missing ['log']"),
    ("empty-log", manifest(log=""), "log: must be a non-empty string"),
    ("log-id-zero", manifest(log_id=0), "log_id: must be an integer >= 1"),
    ("from-negative", manifest(**{"from": -1}), "from: must be an integer >= 0"),
    ("float-size", manifest(to=5.5), "to: must be an integer"),
    ("bool-size", manifest(log_id=True), "log_id: must be an integer"),
    ("empty-batch", manifest(**{"from": 5, "entries": []}), "from (5) must be below to (5)"),
    ("count-off-by-one", manifest(entries=cids(2)), "2 CIDs for sizes 2 to 5, expected 3"),
    ("entries-not-list", manifest(entries="bafy"), "entries: must be a list"),
    ("not-a-cid", manifest(entries=[*cids(2), "hello"]), "entries[2]: not a CID"),
    ("dag-pb-cid", manifest(entries=[*cids(2), str(CID(1, DAG_PB, CID.parse(cids(1)[0]).multihash))]),
     "entries[2]"),
    ("uppercase-cid", manifest(entries=[*cids(2), "B" + cids(1)[0][1:].upper()]), "entries[2]"),
])
def test_rejects(name, obj, message):
    with pytest.raises(BatchError) as excinfo:
        decode_batch(rfc8785.dumps(obj))
    assert message in str(excinfo.value), name


@pytest.mark.parametrize("data", [b"\xff", b"[1]", b"{not json", b""])
def test_rejects_non_objects(data):
    with pytest.raises(BatchError):
        decode_batch(data)


def test_rejects_non_canonical_bytes():
    canonical = rfc8785.dumps(manifest())
    spaced = json.dumps(manifest(), indent=1).encode()
    assert decode_batch(canonical)
    with pytest.raises(BatchError, match="canonical"):
        decode_batch(spaced)


def test_verify_against_the_checkpoint():
    batch = decode_batch(rfc8785.dumps(manifest()))
    verify_batch(batch, log_id=3, from_size=2, to_size=5)
    for kwargs, expected, computed in (({"log_id": 4}, 4, 3), ({"from_size": 1}, 1, 2),
                                       ({"to_size": 6}, 6, 5)):
        args = {"log_id": 3, "from_size": 2, "to_size": 5, **kwargs}
        with pytest.raises(BatchMismatchError) as excinfo:
            verify_batch(batch, **args)
        assert isinstance(excinfo.value, VerificationError)
        assert (excinfo.value.expected, excinfo.value.computed) == (expected, computed)


def test_small_batch_is_one_raw_block_and_large_one_a_unixfs_file(tmp_path):
    store = LocalBlockStore(tmp_path)
    small = BatchManifest("a", 1, 0, 10, cids(10))
    small_cid = store_batch(store, small)
    assert CID.parse(small_cid).codec == RAW and small_cid in store.pin_ls()
    assert fetch_batch(store, small_cid) == small

    large = BatchManifest("a", 1, 0, 6000, cids(6000))  # ~370 KB: two chunks
    large_cid = store_batch(store, large)
    assert CID.parse(large_cid).codec == DAG_PB and large_cid.startswith("bafybei")
    assert fetch_batch(store, large_cid) == large


def test_fetch_detects_a_tampered_manifest(tmp_path):
    store = LocalBlockStore(tmp_path)
    cid = store_batch(store, BatchManifest("a", 1, 0, 2, cids(2)))
    (tmp_path / "blocks" / cid).write_bytes(encode_batch(BatchManifest("a", 1, 0, 2, cids(2, 7))))
    with pytest.raises(ContentIntegrityError):
        fetch_batch(store, cid)
