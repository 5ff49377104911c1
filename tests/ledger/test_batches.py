"""Batch manifests: canonical bytes, every rule, checkpoint checks, storage as UnixFS files."""

from __future__ import annotations

import json

import pytest
import rfc8785
from hypothesis import given
from hypothesis import strategies as st

from ledger import LocalBlockStore, batches, entry_cid
from ledger.batches import (
    BatchError,
    BatchManifest,
    BatchMismatchError,
    batch_dag,
    decode_batch,
    encode_batch,
    fetch_batch,
    store_batch,
    verify_batch,
)
from ledger.errors import ContentIntegrityError, NotFoundError, VerificationError
from ledger.multiformats import CID, DAG_PB, RAW, raw_sha256_cid_bytes
from ledger.unixfs import decode_pbnode, encode_pbnode, walk_dag


def cids(n: int, start: int = 0) -> list[str]:
    return [entry_cid(b'{"n":%d}' % i) for i in range(start, start + n)]


def stored(store: LocalBlockStore, n: int, start: int = 0) -> list[str]:
    """``cids(n, start)``, their entries in ``store`` (a batch's entries DAG pins them)."""
    return [store.add_file(b'{"n":%d}' % i) for i in range(start, start + n)]


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
    small = BatchManifest("a", 1, 0, 10, stored(store, 10))
    small_cid = store_batch(store, small)
    assert CID.parse(small_cid).codec == RAW and small_cid in store.pin_ls()
    assert fetch_batch(store, small_cid) == small

    large = BatchManifest("a", 1, 0, 6000, stored(store, 6000))  # ~370 KB: two chunks
    large_cid = store_batch(store, large)
    assert CID.parse(large_cid).codec == DAG_PB and large_cid.startswith("bafybei")
    assert fetch_batch(store, large_cid) == large


def test_fetch_detects_a_tampered_manifest(tmp_path):
    store = LocalBlockStore(tmp_path)
    cid = store_batch(store, BatchManifest("a", 1, 0, 2, stored(store, 2)))
    (tmp_path / "blocks" / cid).write_bytes(encode_batch(BatchManifest("a", 1, 0, 2, cids(2, 7))))
    with pytest.raises(ContentIntegrityError):
        fetch_batch(store, cid)


# --- the entries DAG --------------------------------------------------------------------------


def test_entries_dag_groups_entries_1024_by_1024_in_order():
    entries = cids(2500)
    dag = batch_dag(entries)
    assert [(c.start, c.count) for c in dag.chunks] == [(0, 1024), (1024, 1024), (2048, 452)]
    blocks = dict(dag.nodes)
    assert dag.nodes[-1][0] == dag.root and len(dag.nodes) == 4
    for chunk in dag.chunks:
        node = decode_pbnode(blocks[chunk.cid])
        assert [str(link.cid) for link in node.links] == entries[chunk.start:chunk.start + chunk.count]
        assert node.data is None and {(link.name, link.tsize) for link in node.links} == {(None, None)}
        # the canonical dag-pb bytes, as the reference encoder writes them
        assert encode_pbnode(node) == blocks[chunk.cid]
    assert [link.cid for link in decode_pbnode(blocks[dag.root]).links] == [c.cid for c in dag.chunks]
    # a function of the entries alone: any change of one entry or of the order changes the root
    assert batch_dag(list(entries)).root == dag.root
    assert batch_dag(entries[:-1] + cids(1, 9999)).root != dag.root
    assert batch_dag(entries[1:2] + entries[:1] + entries[2:]).root != dag.root
    one = batch_dag(entries[:1])
    assert one.chunks[0].cid == one.root and len(one.nodes) == 1


def test_entries_dag_has_three_levels_past_fanout_squared(monkeypatch):
    """Past 1024 * 1024 entries a third level: shown with a fan-out of 4 (17 = 4 * 4 + 1)."""
    monkeypatch.setattr(batches, "ENTRY_DAG_FANOUT", 4)
    entries = cids(17)
    dag = batch_dag(entries)
    blocks = dict(dag.nodes)
    assert [(c.start, c.count) for c in dag.chunks] == [(0, 4), (4, 4), (8, 4), (12, 4), (16, 1)]
    top = decode_pbnode(blocks[dag.root]).links
    assert len(top) == 2 and len(dag.nodes) == 5 + 2 + 1
    middle = [decode_pbnode(blocks[link.cid]).links for link in top]
    assert [[link.cid for link in m] for m in middle] == [[c.cid for c in dag.chunks[:4]],
                                                          [dag.chunks[4].cid]]


def test_stored_batch_keeps_its_entries_dag_pinned(tmp_path):
    store = LocalBlockStore(tmp_path)
    entries = stored(store, 1500)
    batch = BatchManifest("a", 1, 0, 1500, entries)
    store_batch(store, batch)
    dag = batch_dag(entries)
    assert str(dag.root) in store.pin_ls()
    walked = [str(cid) for cid, _ in walk_dag(dag.root, store.get_block) if cid.codec == RAW]
    assert walked == entries


def test_a_batch_whose_entries_are_absent_is_not_stored_half(tmp_path):
    """The DAG's pin checks every entry is there (Kubo would fetch them): nothing pinned."""
    store = LocalBlockStore(tmp_path)
    with pytest.raises(NotFoundError):
        store_batch(store, BatchManifest("a", 1, 0, 2, cids(2)))
    assert str(batch_dag(cids(2)).root) not in store.pin_ls()


@given(st.binary(min_size=1, max_size=64))
def test_fast_entry_cid_decoding_agrees_with_the_cid_parser(data):
    text = entry_cid(data)
    assert raw_sha256_cid_bytes(text) == CID.parse(text).to_bytes()


@pytest.mark.parametrize("text", [
    entry_cid(b"x").upper(),  # base32 upper: a valid CID, not the one spelling
    entry_cid(b"x")[:-1],  # too short
    entry_cid(b"x") + "a",  # too long
    entry_cid(b"x")[:-1] + "b",  # padding bits set
    "bafybeiaqo7u7lebhz73utc7dvahm7oavyqd3jaeah52atet2liizi575wu",  # dag-pb
    "bafkrei" + "1" * 52,  # not base32
    None,
])
def test_fast_entry_cid_decoding_refuses_every_other_spelling(text):
    with pytest.raises(VerificationError):
        raw_sha256_cid_bytes(text)
