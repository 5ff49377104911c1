"""The SQL log index, on SQLite and PostgreSQL alike (each test runs on both backends)."""

from __future__ import annotations

import hashlib
import json
import math
import random
import subprocess
import sys
import textwrap

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import create_engine, event, insert, select

from ledger import rfc9162
from ledger.errors import LedgerError, NotFoundError
from ledger.logstore import LogStore, _migration_config
from ledger.multiformats import raw_cid
from ledger.schema import TILE_HEIGHT, TILE_WIDTH, checkpoints, logs, metadata, tiles


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


def test_tile_row_and_level_boundaries(store):
    """Rows hold TILE_WIDTH hashes and tile levels are TILE_HEIGHT tree levels apart: cross
    several rows of the first two tile levels with batches that start and end mid-row."""
    store.create_log("a")
    n = 2 * TILE_WIDTH * 2 ** TILE_HEIGHT + 77
    entries = _entries(n)
    at = 0
    for size in (1, TILE_WIDTH - 2, 3, TILE_WIDTH * 2 ** TILE_HEIGHT, 999, n):
        store.append("a", entries[at:min(at + size, n)])
        at = min(at + size, n)
    assert store.get_log("a").size == n
    hashes = _hashes(entries)
    rng = random.Random(1)
    sizes = {1, TILE_WIDTH - 1, TILE_WIDTH, TILE_WIDTH + 1, TILE_WIDTH * 2 ** TILE_HEIGHT,
             TILE_WIDTH * 2 ** TILE_HEIGHT + 1, n} | {rng.randrange(1, n + 1) for _ in range(12)}
    for size in sorted(sizes):
        assert store.root("a", size) == rfc9162.root(hashes[:size])
        for index in {0, size - 1, rng.randrange(size)}:
            assert store.inclusion_proof("a", index, size) == rfc9162.inclusion_proof(hashes[:size], index)
        for old in {1, size, rng.randrange(size + 1)}:
            assert (store.consistency_proof("a", old, size)
                    == rfc9162.consistency_proof(hashes[:size], old))
    leaves = list(store.leaves("a", TILE_WIDTH - 3, TILE_WIDTH + 2))
    assert [(leaf.index, leaf.leaf_hash, leaf.cid) for leaf in leaves] == [
        (i, hashes[i], raw_cid(entries[i])) for i in range(TILE_WIDTH - 3, TILE_WIDTH + 2)]


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
@given(batches=st.lists(st.integers(1, 600), min_size=1, max_size=8), data=st.data())
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


def test_an_append_onto_a_damaged_tile_fails_and_changes_nothing(store):
    store.create_log("a")
    store.append("a", _entries(TILE_WIDTH + 5))
    with store.engine.begin() as conn:  # the partial tile loses its last hash
        partial = (tiles.c.level == 0) & (tiles.c.idx == 1)
        hashes = conn.execute(select(tiles.c.hashes).where(partial)).scalar_one()
        conn.execute(tiles.update().where(partial).values(hashes=bytes(hashes)[:-32]))
    before = _tile_rows(store.engine)
    with pytest.raises(LedgerError, match=r"tile \(0, 1\) holds 4 hashes where the log's size says 5"):
        store.append("a", _entries(3, b"new"))
    assert store.get_log("a").size == TILE_WIDTH + 5
    assert _tile_rows(store.engine) == before


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


def test_proofs_read_logarithmically_many_tiles(store, monkeypatch):
    store.create_log("big")
    n = 5000
    store.append("big", _entries(n))
    queries, tiles_read = [], []
    fetch = LogStore._fetch_tiles

    def spy_fetch(conn, log_id, keys, **kwargs):
        found = fetch(conn, log_id, keys, **kwargs)
        tiles_read.append(len(found))
        return found

    def spy(conn, cursor, statement, parameters, context, executemany):
        if "FROM tiles" in statement:
            queries.append(statement)

    monkeypatch.setattr(LogStore, "_fetch_tiles", staticmethod(spy_fetch))
    event.listen(store.engine, "before_cursor_execute", spy)
    store.inclusion_proof("big", 1234, 4999)
    store.consistency_proof("big", 1000, 4999)
    store.consistency_proof("big", 4096, 4999)  # old size on a row boundary of two tile levels
    store.root("big", 3333)
    event.remove(store.engine, "before_cursor_execute", spy)
    assert len(queries) == 4  # one query each
    # at most two tiles per tile level, and a 5000-leaf log has four tile levels
    assert math.ceil(math.log(n, 2 ** TILE_HEIGHT)) == 4
    assert 0 < max(tiles_read) <= 2 * 4


def test_migrated_schema_matches_the_metadata(store):
    with store.engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), metadata) == []
    LogStore(store.engine.url.render_as_string(hide_password=False))  # re-opening is a no-op


def _tiles_of_revision_0001(entries: list[bytes]) -> list[dict]:
    """The rows revision 0001's LogStore wrote, computed from the reference: tile level T
    held the roots of the perfect subtrees of 16^T leaves, 16 a row; level 0 also held each
    entry's SHA-256."""
    hashes = _hashes(entries)
    digests = [hashlib.sha256(e).digest() for e in entries]
    rows, level, layer = [], 0, hashes
    while layer:
        rows += [{"level": level, "idx": k // 16, "hashes": b"".join(layer[k:k + 16]),
                  "digests": b"".join(digests[k:k + 16]) if level == 0 else None}
                 for k in range(0, len(layer), 16)]
        level += 1
        span = 16 ** level
        layer = [rfc9162.root(hashes[k:k + span]) for k in range(0, len(hashes) - span + 1, span)]
    return rows


def _database_at_0001(url: str, logs_entries: dict[str, list[bytes]]):
    """A database migrated to revision 0001 only, holding ``logs_entries`` as 0001 stored them."""
    engine = create_engine(url)
    with engine.begin() as conn:
        command.upgrade(_migration_config(conn), "0001")
        for name, entries in logs_entries.items():
            log_id = conn.execute(insert(logs).values(name=name, size=len(entries))
                                  .returning(logs.c.id)).scalar_one()
            rows = _tiles_of_revision_0001(entries)
            if rows:
                conn.execute(insert(tiles), [{"log_id": log_id, **row} for row in rows])
    return engine


def _tile_rows(engine) -> list[tuple]:
    with engine.connect() as conn:
        return [(log_id, level, idx, bytes(h), d if d is None else bytes(d)) for log_id, level, idx, h, d
                in conn.execute(select(tiles).order_by(tiles.c.log_id, tiles.c.level, tiles.c.idx))]


def test_migration_0002_keeps_every_root_proof_and_leaf(database_url):
    big, small = _entries(5000, b"big"), _entries(7, b"small")
    engine = _database_at_0001(database_url, {"big": big, "small": small, "empty": []})
    with engine.begin() as conn:
        conn.execute(insert(checkpoints).values(log_id=1, size=4000,
                                                root=rfc9162.root(_hashes(big[:4000]))))
    store = LogStore(engine)  # upgrades to head
    hashes = _hashes(big)
    rng = random.Random(2)
    for size in {1, 16, 255, 256, 257, 4095, 4096, 4097, 5000} | {rng.randrange(1, 5001) for _ in range(5)}:
        assert store.root("big", size) == rfc9162.root(hashes[:size])
        index, old = rng.randrange(size), rng.randrange(size + 1)
        assert store.inclusion_proof("big", index, size) == rfc9162.inclusion_proof(hashes[:size], index)
        assert store.consistency_proof("big", old, size) == rfc9162.consistency_proof(hashes[:size], old)
    assert [leaf.cid for leaf in store.leaves("big")] == [raw_cid(e) for e in big]
    assert store.root("small") == rfc9162.root(_hashes(small))
    assert store.root("empty") == rfc9162.EMPTY_ROOT
    assert store.checkpoints("big")[0].root == store.root("big", 4000)
    with engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), metadata) == []
        assert conn.execute(select(tiles.c.idx).where(tiles.c.log_id == 1, tiles.c.level == 0)
                            ).scalars().all() == list(range(-(-5000 // TILE_WIDTH)))
    more = _entries(300, b"more")
    store.append("big", more)  # the log goes on normally...
    assert store.root("big") == rfc9162.root(hashes + _hashes(more))

    with engine.begin() as conn:  # ...and a downgrade writes exactly what 0001 would have
        command.downgrade(_migration_config(conn), "0001")
    assert _tile_rows(engine) == [
        (log_id, row["level"], row["idx"], row["hashes"], row["digests"])
        for log_id, entries in ((1, big + more), (2, small))
        for row in sorted(_tiles_of_revision_0001(entries), key=lambda r: (r["level"], r["idx"]))]
    store = LogStore(engine)
    assert store.root("big") == rfc9162.root(hashes + _hashes(more))
    engine.dispose()


def test_migration_0002_refuses_a_corrupted_index_and_changes_nothing(database_url):
    engine = _database_at_0001(database_url, {"a": _entries(100)})
    with engine.begin() as conn:  # lose a row in the middle of level 0
        conn.execute(tiles.delete().where(tiles.c.level == 0, tiles.c.idx == 3))
    before = _tile_rows(engine)
    with pytest.raises(RuntimeError, match="log 1: tiles of level 0 are not contiguous"):
        LogStore(engine)
    with engine.connect() as conn:
        assert MigrationContext.configure(conn).get_current_revision() == "0001"
    assert _tile_rows(engine) == before
    engine.dispose()


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


def test_proof_from_options_reads_the_log_or_the_file_and_names_the_options(tmp_path):
    from ledger.errors import LedgerError
    from ledger.proofs import proof_from_options

    store = LogStore(f"sqlite:///{tmp_path / 'p.sqlite'}")
    store.create_log("alice/math")
    store.append("alice/math", [b"a", b"b", b"c"])
    doc = proof_from_options(store, None, log="alice/math", index=1, proof_file=None)
    assert (doc["log"], doc["index"], doc["size"]) == ("alice/math", 1, 3)
    saved = tmp_path / "proof.json"
    saved.write_text(json.dumps(doc))
    assert proof_from_options(store, None, log=None, index=None, proof_file=saved) == doc
    assert proof_from_options(store, None, log=None, index=None, proof_file=None) is None
    names = ("--adapter-log", "--adapter-index", "--adapter-proof")
    with pytest.raises(LedgerError, match="--adapter-log and --adapter-index go together"):
        proof_from_options(store, None, log="alice/math", index=None, proof_file=None,
                           names=names)
    with pytest.raises(LedgerError, match="or --adapter-proof, not both"):
        proof_from_options(store, None, log="alice/math", index=1, proof_file=saved, names=names)
    saved.write_text("{not json")
    with pytest.raises(LedgerError, match="not a readable JSON proof document"):
        proof_from_options(store, None, log=None, index=None, proof_file=saved)


APPEND_LOOP = textwrap.dedent("""
    import sys
    from ledger.logstore import LogStore
    url, tag, rounds = sys.argv[1], sys.argv[2].encode(), int(sys.argv[3])
    store = LogStore(url)
    for i in range(rounds):  # batches of 1..37 entries, so appends cross tile boundaries
        store.append("shared", [tag + b"%d.%d" % (i, k) for k in range(1 + (i * 7) % 37)])
""")


def test_two_processes_appending_to_one_log_are_serialised(store):
    """Two real processes append to one log concurrently, many times: every append succeeds,
    none reports a corruption that is not there, and the log holds each process's entries in
    its order with a root and proofs that match the reference."""
    rounds = 150
    store.create_log("shared")
    url = store.engine.url.render_as_string(hide_password=False)
    procs = [subprocess.Popen([sys.executable, "-c", APPEND_LOOP, url, tag, str(rounds)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for tag in ("a", "b")]
    results = [proc.communicate(timeout=600) for proc in procs]
    for proc, (_, stderr) in zip(procs, results, strict=True):
        assert proc.returncode == 0, stderr.decode()[-2000:]

    expected = {tag: [tag.encode() + b"%d.%d" % (i, k) for i in range(rounds)
                      for k in range(1 + (i * 7) % 37)] for tag in ("a", "b")}
    leaves = list(store.leaves("shared"))
    assert store.get_log("shared").size == len(leaves) == sum(map(len, expected.values()))
    by_cid = {raw_cid(e): e for entries in expected.values() for e in entries}
    order = [by_cid[leaf.cid] for leaf in leaves]
    for tag, entries in expected.items():
        assert [e for e in order if e.startswith(tag.encode())] == entries
    hashes = _hashes(order)
    assert [leaf.leaf_hash for leaf in leaves] == hashes
    assert store.root("shared") == rfc9162.root(hashes)
    for index in (0, 255, 256, len(hashes) // 2, len(hashes) - 1):
        assert store.inclusion_proof("shared", index) == rfc9162.inclusion_proof(hashes, index)


def test_append_at_a_stale_size_appends_nothing(store):
    from ledger.logstore import LogChangedError

    store.create_log("a")
    store.append("a", _entries(3), at_size=0)
    with pytest.raises(LogChangedError, match="grew from 2 to 3 leaves"):
        store.append("a", _entries(5)[3:], at_size=2)
    assert store.get_log("a").size == 3
    assert store.append("a", _entries(5)[3:], at_size=3) == 5


def test_head_revision_is_the_migration_scripts_head():
    from alembic.script import ScriptDirectory

    from ledger.logstore import HEAD_REVISION

    assert ScriptDirectory.from_config(_migration_config(None)).get_current_head() == HEAD_REVISION


def test_a_migrated_database_opens_without_alembic(tmp_path, database_url):
    """A database at the head revision is opened with one query; a fresh one is migrated."""
    from ledger.logstore import HEAD_REVISION

    fresh = LogStore(database_url)  # migrates
    assert fresh.schema_revision() == HEAD_REVISION
    fresh.engine.dispose()
    code = textwrap.dedent(f"""
        import sys
        from ledger.logstore import LogStore
        store = LogStore({database_url!r})
        store.create_log("x")
        print("alembic" in sys.modules, store.schema_revision())
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", HEAD_REVISION]
