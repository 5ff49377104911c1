"""Reading a file from outside is bounded by the work its declared size allows (issue "judges
that cannot be stalled": reads bounded by work)."""

from __future__ import annotations

import time

import pytest
from hostile_dags import deep_dag, honest_repeating_dag, repeating_dag

from ledger import LocalBlockStore
from ledger.multiformats import DAG_PB, RAW
from ledger.unixfs import (
    BLOCKS_BASE,
    CHUNK_SIZE,
    MAX_DAG_DEPTH,
    UNIXFS_FILE,
    DagBoundError,
    DagError,
    PBLink,
    PBNode,
    UnixFSData,
    encode_pbnode,
    encode_unixfs,
)


@pytest.fixture
def store(tmp_path):
    return LocalBlockStore(tmp_path / "blocks")


def test_links_that_declare_zero_bytes_are_refused_at_once(store):
    root = repeating_dag(store, levels=4, fanout=2000)  # 1.6e13 empty leaves behind 320 KB
    started = time.monotonic()
    with pytest.raises(DagError, match="link 0 of .* declares 0 bytes"):
        list(store.cat_iter(root))
    with pytest.raises(DagError, match="declares 0 bytes"):
        store.cat(root)
    assert time.monotonic() - started < 5  # two root blocks decoded, nothing more


def test_a_file_declaring_more_than_the_read_allows_is_refused_before_any_byte(store):
    root, size = honest_repeating_dag(store, levels=3, fanout=1000)  # 1e9 declared bytes
    chunks = store.cat_iter(root, max_bytes=4 << 20)
    with pytest.raises(DagBoundError, match=f"file of {size} bytes, over the 4194304-byte"):
        next(chunks)
    with pytest.raises(DagBoundError, match="over the 67108864-byte limit"):
        store.cat(root)  # cat holds a file in memory: 64 MiB unless the caller says more


def test_revisits_count_against_a_budget_set_by_the_bytes_returned(store):
    """Sizes that add up, one-byte leaves revisited: the read stops after the few blocks its
    bytes pay for, instead of visiting 1e9 leaves."""
    root, size = honest_repeating_dag(store, levels=3, fanout=1000)
    returned = 0
    started = time.monotonic()
    with pytest.raises(DagBoundError, match=f"took {BLOCKS_BASE} block visits .* for "
                                            r"\d+ bytes: refused as too costly"):
        for chunk in store.cat_iter(root):
            returned += len(chunk)
    assert 0 < returned < BLOCKS_BASE < size
    assert time.monotonic() - started < 5


def test_a_dag_deeper_than_the_bound_is_refused(store):
    with pytest.raises(DagBoundError, match=f"more than {MAX_DAG_DEPTH} levels deep"):
        store.cat(deep_dag(store, MAX_DAG_DEPTH + 2))
    assert store.cat(deep_dag(store, MAX_DAG_DEPTH - 2)) == b"x"  # within the bound: read


def test_a_link_declaring_more_than_its_tsize_is_refused(store):
    leaf = store.put(b"abc", RAW)
    data = encode_unixfs(UnixFSData(UNIXFS_FILE, filesize=6, blocksizes=(3, 3)))
    liar = store.put(encode_pbnode(PBNode(links=(PBLink(leaf, "", 3), PBLink(leaf, "", 2)),
                                          data=data)), DAG_PB)
    with pytest.raises(DagError, match="link 1 of .* declares 3 bytes under a Tsize of 2"):
        store.cat(liar)
    honest = store.put(encode_pbnode(PBNode(links=(PBLink(leaf, "", 3),) * 2, data=data)),
                       DAG_PB)
    assert store.cat(honest) == b"abcabc"  # the same leaf twice, sizes that agree: a file


def test_kubo_files_that_repeat_their_leaves_still_read(store):
    """A file of zeros repeats one leaf (and, past 174 leaves, one interior node): the budget
    is per declared byte, so real files with repeated content are not refused."""
    data = bytes(CHUNK_SIZE * 180 + 7)  # 181 leaves, two levels, 180 of them one block
    cid = store.add_file(data)
    assert store.cat(cid) == data
    assert sum(map(len, store.cat_iter(cid, max_bytes=len(data)))) == len(data)
    with pytest.raises(DagBoundError, match="over the"):
        next(store.cat_iter(cid, max_bytes=len(data) - 1))
