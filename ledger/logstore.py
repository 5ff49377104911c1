"""Persistent RFC 9162 logs in SQL: many logs per database, atomic batch appends, and
roots and proofs at any historical size from O(log n) stored hashes.

Perfect-subtree hashes are packed in tiles (``ledger.schema``): rows of up to TILE_WIDTH
hashes of one tree level out of every TILE_HEIGHT. An append hashes the entries (leaf hash and
CID digest), reads the log's right edge (the one partial tile of each tile level), hashes the
new interior nodes level by level, and writes the touched tiles and the new size in one
transaction, so a batch killed half-way leaves the log exactly as it was. Appends to one log
are serialised across processes: an append first takes the log row's write lock (SQLite's
database write lock, PostgreSQL's row lock) and only then reads the size and the edge, so it
never pairs a size from before another writer's commit with tiles from after it. A root, inclusion or
consistency proof at any size <= the current one reads, in one query, the O(log n) tiles that
hold the subtrees ``ledger._subtrees`` names, and rebuilds each subtree from at most
2^TILE_HEIGHT - 1 hashes of its tile.

Where the time of an append goes (10k entries of ~80 bytes, CPython 3.11): about two thirds
in SHA-256 (three calls per entry: leaf hash, CID digest, one interior node), the rest mostly
in writing ~66 bytes per entry to the database, in rows wide enough to fill whole pages.

Usage::

    store = LogStore("sqlite:///ledger.sqlite")
    store.create_log("alice/math")
    store.append("alice/math", [entry_bytes, ...])
    store.root("alice/math"), store.inclusion_proof("alice/math", 0)
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from sqlalchemy import (
    Engine,
    bindparam,
    create_engine,
    delete,
    event,
    insert,
    select,
    text,
    union_all,
    update,
)
from sqlalchemy.exc import DBAPIError, IntegrityError

from ledger import _subtrees
from ledger.errors import LedgerError, NotFoundError
from ledger.multiformats import CID, RAW
from ledger.rfc9162 import EMPTY_ROOT, node_hash
from ledger.schema import TILE_HEIGHT, TILE_WIDTH, checkpoints, logs, tiles

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


@dataclass(frozen=True)
class ChainBinding:
    """Which ExperienceLedger a log id belongs to: a chain id alone does not say (a devnet
    restarted from scratch has the same one, and the same contract address)."""

    chain_id: int
    genesis_hash: str  # hash of block 0, 0x-prefixed lowercase hex
    ledger_address: str  # the ExperienceLedger contract, checksummed

    def describe(self) -> str:
        return (f"chain {self.chain_id} (genesis {self.genesis_hash[:10]}…, ledger "
                f"{self.ledger_address})")


@dataclass(frozen=True)
class LogInfo:
    id: int  # row id in this database
    name: str  # unique name, e.g. "alice/math"
    size: int  # number of leaves
    chain_log_id: int | None  # the log's id in ExperienceLedger, once created on chain
    created_at: datetime
    chain: ChainBinding | None = None  # the chain chain_log_id belongs to; None: not yet known


def _log_info(row) -> LogInfo:
    chain = (None if row.chain_id is None else
             ChainBinding(row.chain_id, row.chain_genesis, row.chain_ledger))
    return LogInfo(row.id, row.name, row.size, row.chain_log_id, row.created_at, chain)


@dataclass(frozen=True)
class Leaf:
    index: int
    leaf_hash: bytes  # RFC 9162 leaf hash of the entry bytes
    cid: str  # CID of the entry bytes


@dataclass(frozen=True)
class Checkpoint:
    size: int
    root: bytes
    batch_cid: str | None
    tx_hash: str | None
    block_number: int | None
    anchored_at: datetime


# The newest Alembic revision in ledger/migrations (tests/ledger/test_logstore.py checks it is
# the scripts' head): a database already there is opened without importing Alembic, about
# half a second of every `gym` command that reads the log index.
HEAD_REVISION = "0004"


def _migration_config(connection):
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


class LogChangedError(LedgerError):
    """The log grew between a caller's check and its append; nothing was appended."""

    def __init__(self, name: str, expected: int, size: int):
        super().__init__(f"log {name!r} grew from {expected} to {size} leaves while this batch "
                         "was being checked; nothing was appended, run it again")
        self.expected, self.size = expected, size


def _no_log(name: str) -> NotFoundError:
    return NotFoundError(f"no log named {name!r}: create it with `gym ledger create {name}`")


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")  # readers never block the appender
    # In WAL mode NORMAL keeps every commit atomic and the file uncorrupted across crashes; a
    # power cut may lose the newest commits, which the chain and the content store can replay.
    cursor.execute("PRAGMA synchronous=NORMAL")
    # Checkpoint the WAL into the database every ~16 MiB instead of SQLite's default ~4 MiB:
    # a quarter of the checkpoint fsyncs on bulk appends, same durability (commits are
    # durable in the WAL either way), a larger WAL file between checkpoints.
    cursor.execute("PRAGMA wal_autocheckpoint=4000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


class LogStore:
    """The SQL index of every log this installation publishes or follows."""

    def __init__(self, url: str | Engine):
        if isinstance(url, Engine):
            self.engine = url
        else:
            if url.startswith("sqlite:///"):
                Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
            # A writer waits for the one before it (appends are serialised), up to a minute.
            connect_args = {"timeout": 60} if url.startswith("sqlite") else {}
            self.engine = create_engine(url, connect_args=connect_args)
        if self.engine.dialect.name == "sqlite":
            event.listen(self.engine, "connect", _sqlite_pragmas)
        self.migrate()

    def migrate(self) -> None:
        """Bring the schema to the newest Alembic revision (a no-op when it is there)."""
        if self.schema_revision() == HEAD_REVISION:
            return
        from alembic import command
        from alembic.runtime.migration import MigrationContext
        from alembic.script import ScriptDirectory

        head = ScriptDirectory.from_config(_migration_config(None)).get_current_head()
        with self.engine.begin() as conn:
            if MigrationContext.configure(conn).get_current_revision() != head:
                command.upgrade(_migration_config(conn), "head")

    def schema_revision(self) -> str | None:
        """The Alembic revision the database is at (None: no schema yet), read with one query."""
        with self.engine.connect() as conn:
            try:
                return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
            except DBAPIError:
                conn.rollback()
                return None

    # -- logs -------------------------------------------------------------------------------

    def create_log(self, name: str) -> LogInfo:
        if not name or len(name) > 200:
            raise LedgerError(f"log name must be 1 to 200 characters, got {len(name)}")
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(logs).values(name=name))
        except IntegrityError:
            raise LedgerError(f"log {name!r} already exists") from None
        return self.get_log(name)

    def has_log(self, name: str) -> bool:
        with self.engine.connect() as conn:
            return conn.execute(select(logs.c.id).where(logs.c.name == name)).first() is not None

    def get_log(self, name: str) -> LogInfo:
        with self.engine.connect() as conn:
            row = conn.execute(select(logs).where(logs.c.name == name)).one_or_none()
        if row is None:
            raise _no_log(name)
        return _log_info(row)

    def list_logs(self) -> list[LogInfo]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(logs).order_by(logs.c.id)).all()
        return [_log_info(r) for r in rows]

    def set_chain_log_id(self, name: str, chain_log_id: int, chain: ChainBinding | None = None
                         ) -> None:
        """Record the log's on-chain id and the chain it belongs to."""
        self.bind_chain(name, chain, chain_log_id=chain_log_id)

    def bind_chain(self, name: str, chain: ChainBinding | None, *,
                   chain_log_id: int | None = None, forget_checkpoints: bool = False) -> None:
        """Bind log ``name`` to ``chain`` (and, given, to on-chain id ``chain_log_id``), in one
        transaction; ``forget_checkpoints`` also deletes the checkpoints recorded on its
        previous chain (the log is re-created on another chain: they belong to the old one)."""
        values = {"chain_id": chain and chain.chain_id, "chain_genesis": chain and chain.genesis_hash,
                  "chain_ledger": chain and chain.ledger_address}
        if chain_log_id is not None:
            values["chain_log_id"] = chain_log_id
        with self.engine.begin() as conn:
            row = conn.execute(_LOG_BY_NAME, {"name": name}).one_or_none()
            if row is None:
                raise _no_log(name)
            conn.execute(update(logs).where(logs.c.id == row.id).values(**values))
            if forget_checkpoints:
                conn.execute(delete(checkpoints).where(checkpoints.c.log_id == row.id))

    # -- appending --------------------------------------------------------------------------

    def append(self, name: str, entries: Sequence[bytes], *, at_size: int | None = None) -> int:
        """Append entries (their canonical bytes) atomically; returns the new size.

        The log keeps each entry's RFC 9162 leaf hash and SHA-256 digest (hence its CID); the
        bytes themselves belong in the content store. Appends to one log, from any number of
        processes, are serialised: each waits for the one before it to commit.

        ``at_size``: append only if the log has exactly that many leaves when the append
        takes its lock (``LogChangedError`` otherwise, nothing appended), for a caller that
        validated the batch against the leaves before it.
        """
        if not entries:
            size = self.get_log(name).size
            if at_size is not None and size != at_size:
                raise LogChangedError(name, at_size, size)
            return size
        sha256 = hashlib.sha256
        leaf_hashes = [sha256(b"\x00" + entry).digest() for entry in entries]
        digests = [sha256(entry).digest() for entry in entries]
        with self.engine.begin() as conn:
            # Lock the log's row before reading anything: a write as the transaction's first
            # statement takes SQLite's write lock (waiting for another writer's commit) and
            # PostgreSQL's row lock, so the size and the edge tiles read below are those of
            # the last committed append. Read first, and each SELECT may see a different
            # commit: a size from before another process's append and tiles from after it.
            if conn.execute(_LOCK_LOG, {"b_name": name}).rowcount != 1:
                raise _no_log(name)
            log_id, old_size = conn.execute(_LOG_BY_NAME, {"name": name}).one()
            if at_size is not None and old_size != at_size:
                raise LogChangedError(name, at_size, old_size)
            edge = self._fetch_tiles(conn, log_id, _edge_tiles(old_size), digests=True)
            grown = _grow_tiles(edge, old_size, leaf_hashes, digests)
            rows = [{"log_id": log_id, "level": level, "idx": idx, "hashes": hashes, "digests": d}
                    for (level, idx), (hashes, d) in grown.items() if (level, idx) not in edge]
            if rows:
                conn.execute(_INSERT_TILE, rows)
            rows = [{"b_log_id": log_id, "b_level": level, "b_idx": idx, "b_hashes": hashes,
                     "b_digests": d} for (level, idx), (hashes, d) in grown.items() if (level, idx) in edge]
            if rows:
                conn.execute(_UPDATE_TILE, rows)
            size = old_size + len(entries)
            bumped = conn.execute(_BUMP_SIZE, {"b_id": log_id, "b_old": old_size, "b_new": size})
            if bumped.rowcount != 1:  # cannot happen while the lock holds; never write past it
                raise LedgerError(f"log {name!r} changed during the append; nothing was appended")
        return size

    # -- reading ----------------------------------------------------------------------------

    @staticmethod
    def _fetch_tiles(conn, log_id: int, keys: set[tuple[int, int]], *, digests: bool = False
                     ) -> dict[tuple[int, int], Tile]:
        """Tiles ``keys`` of a log, in one query; their digests only when asked for."""
        if not keys:
            return {}
        params = {"log_id": log_id}
        for k, (level, idx) in enumerate(keys):
            params[f"level_{k}"], params[f"idx_{k}"] = level, idx
        rows = conn.execute(_tile_query(len(keys), digests), params).all()
        return {(row[0], row[1]): (row[2], row[3] if digests else None) for row in rows}

    def _hashes(self, name: str, size: int | None,
                ranges_at: Callable[[int], list[_subtrees.Range]]) -> list[bytes]:
        """Hashes of the ranges ``ranges_at(size)`` names, read in one transaction that also
        checks ``size`` (default: the current size) against the log."""
        with self.engine.connect() as conn:
            row = conn.execute(_LOG_BY_NAME, {"name": name}).one_or_none()
            if row is None:
                raise _no_log(name)
            log_id, current = row
            size = current if size is None else size
            if not 0 <= size <= current:
                raise LedgerError(f"log {name!r} has {current} leaves; size {size} is out of range")
            ranges = ranges_at(size)
            needed = _subtrees.nodes_for(ranges)
            loaded = _TileSet(self._fetch_tiles(conn, log_id, {_tile_of(*node) for node in needed}))
        return [_subtrees.range_hash(rng, loaded.node, node_hash) for rng in ranges]

    def root(self, name: str, size: int | None = None) -> bytes:
        """RFC 9162 root at ``size`` (default: the current size)."""
        hashes = self._hashes(name, size, lambda n: [(0, n)] if n else [])
        return hashes[0] if hashes else EMPTY_ROOT

    def inclusion_proof(self, name: str, index: int, size: int | None = None) -> list[bytes]:
        """Audit path of leaf ``index`` in the tree of ``size`` leaves (default: current)."""

        def ranges(n: int) -> list[_subtrees.Range]:
            if not 0 <= index < n:
                raise LedgerError(f"leaf index {index} is out of range for size {n}")
            return _subtrees.inclusion_ranges(index, n)

        return self._hashes(name, size, ranges)

    def consistency_proof(self, name: str, old_size: int, new_size: int | None = None) -> list[bytes]:
        """Consistency proof from ``old_size`` to ``new_size`` (default: current)."""

        def ranges(n: int) -> list[_subtrees.Range]:
            if not 0 <= old_size <= n:
                raise LedgerError(f"old size {old_size} must be between 0 and new size {n}")
            return _subtrees.consistency_ranges(old_size, n)

        return self._hashes(name, new_size, ranges)

    def leaf(self, name: str, index: int) -> Leaf:
        found = list(self.leaves(name, index, index + 1))
        if not found:
            raise NotFoundError(f"log {name!r} has no leaf {index}")
        return found[0]

    def leaves(self, name: str, start: int = 0, end: int | None = None) -> Iterator[Leaf]:
        """Leaves ``[start, end)`` in order, streamed tile by tile."""
        log = self.get_log(name)
        end = log.size if end is None else min(end, log.size)
        if start >= end:
            return
        query = (
            select(tiles.c.idx, tiles.c.hashes, tiles.c.digests)
            .where(tiles.c.log_id == log.id, tiles.c.level == 0,
                   tiles.c.idx >= start // TILE_WIDTH, tiles.c.idx <= (end - 1) // TILE_WIDTH)
            .order_by(tiles.c.idx)
        )
        with self.engine.connect() as conn:
            for idx, hashes, digests in conn.execution_options(yield_per=64).execute(query):
                first = idx * TILE_WIDTH
                for k in range(max(start - first, 0), min(end - first, len(hashes) // 32)):
                    cid = CID(1, RAW, b"\x12\x20" + bytes(digests[32 * k:32 * k + 32]))
                    yield Leaf(first + k, bytes(hashes[32 * k:32 * k + 32]), str(cid))

    # -- checkpoints ------------------------------------------------------------------------

    def record_checkpoint(self, name: str, size: int, root: bytes, *, batch_cid: str | None = None,
                          tx_hash: str | None = None, block_number: int | None = None) -> None:
        log = self.get_log(name)
        with self.engine.begin() as conn:
            conn.execute(insert(checkpoints).values(
                log_id=log.id, size=size, root=root, batch_cid=batch_cid, tx_hash=tx_hash,
                block_number=block_number))

    def checkpoints(self, name: str) -> list[Checkpoint]:
        log = self.get_log(name)
        with self.engine.connect() as conn:
            rows = conn.execute(select(checkpoints).where(checkpoints.c.log_id == log.id)
                                .order_by(checkpoints.c.size)).all()
        return [Checkpoint(r.size, bytes(r.root), r.batch_cid, r.tx_hash, r.block_number,
                           r.anchored_at) for r in rows]


# -- tiles --------------------------------------------------------------------------------

Tile = tuple[bytes, bytes | None]  # (hashes, entry digests: tile level 0 only)


def _tile_of(level: int, index: int) -> tuple[int, int]:
    """The tile holding the stored subtrees that perfect subtree (level, index) is built from."""
    tile_level, rest = divmod(level, TILE_HEIGHT)
    return tile_level, (index << rest) // TILE_WIDTH


def _edge_tiles(size: int) -> set[tuple[int, int]]:
    """The partial tile of each tile level at ``size``: the tiles an append extends, which
    also hold the right-edge perfect subtrees that new subtrees pair with."""
    keys = set()
    tile_level = 0
    while stored := size >> (tile_level * TILE_HEIGHT):
        if stored % TILE_WIDTH:
            keys.add((tile_level, stored // TILE_WIDTH))
        tile_level += 1
    return keys


def _grow_tiles(edge: dict[tuple[int, int], Tile], size: int, leaf_hashes: list[bytes],
                digests: list[bytes]) -> dict[tuple[int, int], list]:
    """The tiles that appending ``leaf_hashes`` (entry ``digests`` beside them) to a log of
    ``size`` leaves changes or creates, with their new ``[hashes, digests]``.

    ``edge`` holds the log's tiles ``_edge_tiles(size)``. Pure: no I/O.
    """
    sha256 = hashlib.sha256
    loaded = _TileSet(edge)
    grown: dict[tuple[int, int], list] = {}

    def store(tile_level: int, first: int, hashes: list[bytes], new_digests=None) -> None:
        """Append stored subtrees ``first, first+1, ...`` of a tile level to its tiles."""
        at = 0
        while at < len(hashes):
            idx, offset = divmod(first + at, TILE_WIDTH)
            key = (tile_level, idx)
            if key not in grown:
                old = edge.get(key, (b"", b"" if tile_level == 0 else None))
                if len(old[0]) != 32 * offset:
                    raise LedgerError(f"log index tile {key} holds {len(old[0]) // 32} hashes "
                                      f"where the log's size says {offset} (corrupted)")
                grown[key] = list(old)
            take = TILE_WIDTH - offset
            grown[key][0] += b"".join(hashes[at:at + take])
            if new_digests is not None:
                grown[key][1] += b"".join(new_digests[at:at + take])
            at += take

    store(0, size, leaf_hashes, digests)
    # Layer by layer, one list comprehension each: the new subtrees of a level pair up into
    # the next level's; every TILE_HEIGHT levels a layer is stored.
    layer, first, level = leaf_hashes, size, 0
    while layer:
        if first & 1:  # its first subtree's left sibling is on the old right edge
            layer = [loaded.node(level, first - 1), *layer]
            first -= 1
        layer = [sha256(b"\x01" + left + right).digest()
                 for left, right in zip(layer[0::2], layer[1::2])]
        first >>= 1
        level += 1
        if level % TILE_HEIGHT == 0 and layer:
            store(level // TILE_HEIGHT, first, layer)
    return grown


# Statements an append or a proof runs, built once: building one costs as much as running it.
_LOG_BY_NAME = select(logs.c.id, logs.c.size).where(logs.c.name == bindparam("name"))
_LOCK_LOG = (  # a write that changes nothing, for its lock
    update(logs).where(logs.c.name == bindparam("b_name")).values(size=logs.c.size)
)
_INSERT_TILE = insert(tiles)
_UPDATE_TILE = (
    update(tiles)
    .where(tiles.c.log_id == bindparam("b_log_id"), tiles.c.level == bindparam("b_level"),
           tiles.c.idx == bindparam("b_idx"))
    .values(hashes=bindparam("b_hashes"), digests=bindparam("b_digests"))
)
_BUMP_SIZE = (  # compare-and-set: a concurrent append makes this match no row
    update(logs).where(logs.c.id == bindparam("b_id"), logs.c.size == bindparam("b_old"))
    .values(size=bindparam("b_new"))
)
_tile_queries: dict[tuple[int, bool], object] = {}


def _tile_query(count: int, digests: bool):
    """The statement reading ``count`` tiles of one log, built once per shape: a UNION ALL of
    primary-key lookups (SQLite answers an OR of keys, or a row-value IN, with a scan of the
    whole log; an expanding IN would be re-rendered on every call)."""
    if (count, digests) not in _tile_queries:
        columns = [tiles.c.level, tiles.c.idx, tiles.c.hashes] + ([tiles.c.digests] if digests else [])
        lookups = [select(*columns).where(tiles.c.log_id == bindparam("log_id"),
                                          tiles.c.level == bindparam(f"level_{k}"),
                                          tiles.c.idx == bindparam(f"idx_{k}"))
                   for k in range(count)]
        _tile_queries[(count, digests)] = union_all(*lookups) if count > 1 else lookups[0]
    return _tile_queries[(count, digests)]


class _TileSet:
    """Loaded tiles; rebuilds any perfect subtree from the hashes of the tile that holds it."""

    def __init__(self, loaded: dict[tuple[int, int], Tile]):
        self.tiles = loaded

    def node(self, level: int, index: int) -> bytes:
        key = _tile_of(level, index)
        try:
            hashes = self.tiles[key][0]
        except KeyError:
            raise LedgerError(f"log index is missing tile {key} (corrupted)") from None
        rest = level % TILE_HEIGHT
        offset = 32 * ((index << rest) % TILE_WIDTH)
        layer = [hashes[offset + 32 * k: offset + 32 * k + 32] for k in range(1 << rest)]
        if len(layer[-1]) != 32:
            raise LedgerError(f"log index tile {key} is shorter than its size says (corrupted)")
        while len(layer) > 1:
            layer = [node_hash(layer[k], layer[k + 1]) for k in range(0, len(layer), 2)]
        return layer[0]
