"""The SQL log index, on SQLite and PostgreSQL alike (each test runs on both backends)."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import event

from ledger import rfc9162
from ledger.errors import LedgerError, NotFoundError
from ledger.logstore import LogStore
from ledger.multiformats import raw_cid
from ledger.schema import TILE_HEIGHT, metadata


def _entries(n: int, salt: bytes = b"") -> list[bytes]:
    return [salt + i.to_bytes(8, "big") for i in range(n)]


def _hashes(entries: list[bytes]) -> list[bytes]:
    return [rfc9162.leaf_hash(e) for e in entries]


@pytest.fixture
def store(database_url):
    store = LogStore(database_url)
    yield store
    store.engine.dispose()


def test_roots_and_proofs_at_every_size_match_rfc9162(store):
    store.create_log("a")
    entries = _entries(70)
    for batch in ((0, 1), (1, 2), (2, 33), (33, 64), (64, 65), (65, 70)):
        store.append("a", entries[slice(*batch)])
    hashes = _hashes(entries)
    assert store.get_log("a").size == 70
    assert store.root("a", 0) == rfc9162.EMPTY_ROOT
    for n in range(1, 71):
        assert store.root("a", n) == rfc9162.root(hashes[:n])
        for m in range(n):
            assert store.inclusion_proof("a", m, n) == rfc9162.inclusion_proof(hashes[:n], m)
        for old in range(n + 1):
            assert store.consistency_proof("a", old, n) == rfc9162.consistency_proof(hashes[:n], old)


def test_leaves_carry_leaf_hash_and_cid(store):
    store.create_log("a")
    entries = [b'{"type":"experience"}', b"x" * 100, b""] + _entries(40)
    store.append("a", entries[:2])
    store.append("a", entries[2:])
    leaves = list(store.leaves("a"))
    assert [leaf.index for leaf in leaves] == list(range(43))
    assert [leaf.leaf_hash for leaf in leaves] == _hashes(entries)
    assert [leaf.cid for leaf in leaves] == [raw_cid(e) for e in entries]
    assert [leaf.index for leaf in store.leaves("a", 15, 18)] == [15, 16, 17]
    assert store.leaf("a", 17).cid == raw_cid(entries[17])
    with pytest.raises(NotFoundError):
        store.leaf("a", 43)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.integers(1, 40), min_size=1, max_size=8), data=st.data())
def test_random_batches_prove_like_the_reference(tmp_path_factory, batches, data):
    store = LogStore(f"sqlite:///{tmp_path_factory.mktemp('h') / 'l.sqlite'}")
    store.create_log("r")
    entries = _entries(sum(batches))
    at = 0
    for size in batches:
        store.append("r", entries[at:at + size])
        at += size
    hashes = _hashes(entries)
    n = data.draw(st.integers(1, at))
    m = data.draw(st.integers(0, n - 1))
    old = data.draw(st.integers(0, n))
    assert store.root("r", n) == rfc9162.root(hashes[:n])
    rfc9162.verify_inclusion(hashes[m], m, n, store.inclusion_proof("r", m, n), store.root("r", n))
    rfc9162.verify_consistency(old, n, store.root("r", old), store.root("r", n),
                               store.consistency_proof("r", old, n))
    store.engine.dispose()


def test_many_logs_are_independent(store):
    store.create_log("alice/math")
    store.create_log("bob/code")
    a, b = _entries(5, b"a"), _entries(9, b"b")
    store.append("alice/math", a)
    store.append("bob/code", b)
    assert store.root("alice/math") == rfc9162.root(_hashes(a))
    assert store.root("bob/code") == rfc9162.root(_hashes(b))
    assert [log.name for log in store.list_logs()] == ["alice/math", "bob/code"]
    assert [leaf.cid for leaf in store.leaves("bob/code", 7)] == [raw_cid(b[7]), raw_cid(b[8])]


def test_errors(store):
    store.create_log("a")
    with pytest.raises(LedgerError, match="already exists"):
        store.create_log("a")
    with pytest.raises(NotFoundError, match="gym ledger create nope"):
        store.get_log("nope")
    with pytest.raises(KeyError):  # NotFoundError is also the builtin
        store.append("nope", _entries(1))
    store.append("a", _entries(3))
    with pytest.raises(LedgerError, match="size 4 is out of range"):
        store.root("a", 4)
    with pytest.raises(LedgerError, match="leaf index 3 is out of range"):
        store.inclusion_proof("a", 3)
    with pytest.raises(LedgerError, match="old size 3 must be between 0 and new size 2"):
        store.consistency_proof("a", 3, 2)


def test_checkpoints_are_kept_per_size(store):
    store.create_log("a")
    store.append("a", _entries(4))
    store.record_checkpoint("a", 4, store.root("a"), batch_cid="bafy", tx_hash="0x" + "ab" * 32,
                            block_number=7)
    store.append("a", _entries(6)[4:])
    store.record_checkpoint("a", 6, store.root("a"))
    cps = store.checkpoints("a")
    assert [(c.size, c.root) for c in cps] == [(4, store.root("a", 4)), (6, store.root("a", 6))]
    assert cps[0].tx_hash == "0x" + "ab" * 32 and cps[0].block_number == 7


def test_proofs_read_logarithmically_many_tiles(store):
    store.create_log("big")
    n = 5000
    store.append("big", _entries(n))
    tiles_read = []

    def spy(conn, cursor, statement, parameters, context, executemany):
        if "FROM tiles" in statement:
            tiles_read.append(statement.count("?") + statement.count("%("))

    event.listen(store.engine, "before_cursor_execute", spy)
    store.inclusion_proof("big", 1234, 4999)
    store.consistency_proof("big", 1000, 4999)
    store.root("big", 3333)
    event.remove(store.engine, "before_cursor_execute", spy)
    assert len(tiles_read) == 3  # one query each
    # log_id plus (level, idx) pairs: at most two tiles per tile level
    assert max(tiles_read) <= 1 + 2 * 2 * math.ceil(math.log(n, 2 ** TILE_HEIGHT))


def test_migrated_schema_matches_the_metadata(store):
    with store.engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), metadata) == []
    LogStore(store.engine.url.render_as_string(hide_password=False))  # re-opening is a no-op


KILL_MID_BATCH = textwrap.dedent("""
    import os, signal, sys
    from sqlalchemy import event
    from ledger.logstore import LogStore
    store = LogStore(sys.argv[1])
    def die(conn, cursor, statement, *args):
        if statement.startswith("INSERT INTO tiles"):  # tiles written, size not yet bumped
            os.kill(os.getpid(), signal.SIGKILL)
    event.listen(store.engine, "after_cursor_execute", die)
    store.append("a", [i.to_bytes(8, "big") for i in range(10, 5000)])
""")


def test_a_batch_killed_half_way_leaves_the_log_as_it_was(store):
    store.create_log("a")
    store.append("a", _entries(10))
    before = (store.root("a"), list(store.leaves("a")))
    url = store.engine.url.render_as_string(hide_password=False)
    store.engine.dispose()
    proc = subprocess.run([sys.executable, "-c", KILL_MID_BATCH, url], capture_output=True, check=False)
    assert proc.returncode == -9, proc.stderr
    reopened = LogStore(url)
    assert reopened.get_log("a").size == 10
    assert (reopened.root("a"), list(reopened.leaves("a"))) == before
    reopened.append("a", _entries(12)[10:])  # and it goes on normally
    assert reopened.root("a") == rfc9162.root(_hashes(_entries(12)))
    reopened.engine.dispose()
