"""Persistent RFC 9162 logs in SQL: many logs per database, atomic batch appends, and
roots and proofs at any historical size from O(log n) stored hashes.

Perfect-subtree hashes are packed in tiles (``ledger.schema``): an append reads the log's
right edge (one partial tile per tile level), computes the new subtrees in memory, and writes
the touched tiles and the new size in one transaction, so a batch killed half-way leaves the
log exactly as it was. A root, inclusion or consistency proof at any size <= the current one
reads the O(log n) tiles that hold the subtrees ``ledger._subtrees`` names, in one query, and
rebuilds each subtree from at most 2^H - 1 hashes of its tile.

Usage::

    store = LogStore("sqlite:///ledger.sqlite")
    store.create_log("alice/math")
    store.append("alice/math", [entry_bytes, ...])
    store.root("alice/math"), store.inclusion_proof("alice/math", 0)
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, bindparam, create_engine, event, insert, select, union_all, update
from sqlalchemy.exc import IntegrityError

from ledger import _subtrees
from ledger.errors import LedgerError, NotFoundError
from ledger.multiformats import CID, RAW
from ledger.rfc9162 import EMPTY_ROOT, node_hash
from ledger.schema import TILE_HEIGHT, checkpoints, logs, tiles

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


@dataclass(frozen=True)
class LogInfo:
    id: int  # row id in this database
    name: str  # unique name, e.g. "alice/math"
    size: int  # number of leaves
    chain_log_id: int | None  # the log's id in ExperienceLedger, once created on chain
    created_at: datetime


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


def _migration_config(connection) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    return config


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")  # readers never block the appender
    # In WAL mode NORMAL keeps every commit atomic and the file uncorrupted across crashes; a
    # power cut may lose the newest commits, which the chain and the content store can replay.
    cursor.execute("PRAGMA synchronous=NORMAL")
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
            self.engine = create_engine(url)
        if self.engine.dialect.name == "sqlite":
            event.listen(self.engine, "connect", _sqlite_pragmas)
        self.migrate()

    def migrate(self) -> None:
        """Bring the schema to the newest Alembic revision (a no-op when it is there)."""
        head = ScriptDirectory.from_config(_migration_config(None)).get_current_head()
        with self.engine.begin() as conn:
            if MigrationContext.configure(conn).get_current_revision() != head:
                command.upgrade(_migration_config(conn), "head")

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

    def get_log(self, name: str) -> LogInfo:
        with self.engine.connect() as conn:
            row = conn.execute(select(logs).where(logs.c.name == name)).one_or_none()
        if row is None:
            raise NotFoundError(f"no log named {name!r}: create it with `gym ledger create {name}`")
        return LogInfo(row.id, row.name, row.size, row.chain_log_id, row.created_at)

    def list_logs(self) -> list[LogInfo]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(logs).order_by(logs.c.id)).all()
        return [LogInfo(r.id, r.name, r.size, r.chain_log_id, r.created_at) for r in rows]

    def set_chain_log_id(self, name: str, chain_log_id: int) -> None:
        with self.engine.begin() as conn:
            conn.execute(update(logs).where(logs.c.name == name).values(chain_log_id=chain_log_id))

    # -- appending --------------------------------------------------------------------------

    def append(self, name: str, entries: Sequence[bytes]) -> int:
        """Append entries (their canonical bytes) atomically; returns the new size.

        The log keeps each entry's RFC 9162 leaf hash and SHA-256 digest (hence its CID); the
        bytes themselves belong in the content store. Fails without changing anything when
        another writer appended concurrently.
        """
        if not entries:
            return self.get_log(name).size
        sha256 = hashlib.sha256
        with self.engine.begin() as conn:
            row = conn.execute(select(logs.c.id, logs.c.size).where(logs.c.name == name)).one_or_none()
            if row is None:
                raise NotFoundError(f"no log named {name!r}")
            log_id, size = row
            old_size, size = size, size + len(entries)
            # Tiles to extend: the partial tile of every tile level. Subtrees to pair with:
            # the old right edge (one perfect subtree per set bit of the old size).
            edge = _subtrees.perfect_decomposition(0, old_size)
            partial = {(level, (old_size >> (level * TILE_HEIGHT)) >> TILE_HEIGHT)
                       for level in range(_tile_levels(old_size))}
            loaded = _TileSet(self._fetch_tiles(conn, log_id, partial | _tiles_for(edge)))
            edge_hash = {level: loaded.node(level, index) for level, index in edge}
            tile_of = {key: [h, d] for key, (h, d) in loaded.tiles.items() if key in partial}
            existing = set(tile_of)

            def store(tile_level: int, first: int, hashes: list[bytes], digests=None) -> None:
                """Append subtree hashes ``first, first+1, ...`` of a tile level to its tiles."""
                width = 1 << TILE_HEIGHT
                at = 0
                while at < len(hashes):
                    idx = (first + at) >> TILE_HEIGHT
                    take = width - (first + at) % width
                    tile = tile_of.setdefault((tile_level, idx), [b"", b"" if digests else None])
                    tile[0] += b"".join(hashes[at:at + take])
                    if digests is not None:
                        tile[1] += b"".join(digests[at:at + take])
                    at += take

            # Layer by layer: the new subtrees of each level pair up into the next level's.
            layer = [sha256(b"\x00" + entry).digest() for entry in entries]
            store(0, old_size, layer, [sha256(entry).digest() for entry in entries])
            first, level = old_size, 0
            while layer:
                if first & 1:  # its first subtree's left sibling is on the old right edge
                    layer.insert(0, edge_hash[level])
                    first -= 1
                layer = [sha256(b"\x01" + left + right).digest()
                         for left, right in zip(layer[0::2], layer[1::2])]
                first >>= 1
                level += 1
                if level % TILE_HEIGHT == 0 and layer:
                    store(level // TILE_HEIGHT, first, layer)
            inserts, updates = [], []
            for (level, idx), (hashes, digests) in tile_of.items():
                row_values = {"level": level, "idx": idx, "hashes": hashes, "digests": digests}
                (updates if (level, idx) in existing else inserts).append(row_values)
            if inserts:
                conn.execute(insert(tiles), [{"log_id": log_id, **v} for v in inserts])
            if updates:
                conn.execute(
                    update(tiles).where(tiles.c.log_id == log_id, tiles.c.level == bindparam("b_level"),
                                        tiles.c.idx == bindparam("b_idx"))
                    .values(hashes=bindparam("b_hashes"), digests=bindparam("b_digests")),
                    [{"b_level": v["level"], "b_idx": v["idx"], "b_hashes": v["hashes"],
                      "b_digests": v["digests"]} for v in updates],
                )
            bumped = conn.execute(
                update(logs).where(logs.c.id == log_id, logs.c.size == row.size).values(size=size)
            )
            if bumped.rowcount != 1:
                raise LedgerError(f"log {name!r} changed during the append; nothing was appended")
        return size

    # -- reading ----------------------------------------------------------------------------

    @staticmethod
    def _fetch_tiles(conn, log_id: int, keys: set[tuple[int, int]]) -> dict:
        if not keys:
            return {}
        by_level: dict[int, list[int]] = {}
        for level, idx in sorted(keys):
            by_level.setdefault(level, []).append(idx)
        # One primary-key lookup per tile level, in one statement: SQLite answers an OR of
        # levels, or a row-value IN, with a scan of the whole log.
        rows = conn.execute(union_all(*(
            select(tiles.c.level, tiles.c.idx, tiles.c.hashes, tiles.c.digests)
            .where(tiles.c.log_id == log_id, tiles.c.level == level, tiles.c.idx.in_(idxs))
            for level, idxs in by_level.items()
        ))).all()
        return {(lvl, idx): (bytes(h), None if d is None else bytes(d)) for lvl, idx, h, d in rows}

    def _hashes(self, name: str, ranges: list[_subtrees.Range]) -> list[bytes]:
        with self.engine.connect() as conn:
            log_id = conn.execute(select(logs.c.id).where(logs.c.name == name)).scalar_one_or_none()
            if log_id is None:
                raise NotFoundError(f"no log named {name!r}")
            needed = _subtrees.nodes_for(ranges)
            loaded = _TileSet(self._fetch_tiles(conn, log_id, _tiles_for(needed)))
        return [_subtrees.range_hash(rng, loaded.node, node_hash) for rng in ranges]

    def _size(self, name: str, size: int | None) -> int:
        current = self.get_log(name).size
        size = current if size is None else size
        if not 0 <= size <= current:
            raise LedgerError(f"log {name!r} has {current} leaves; size {size} is out of range")
        return size

    def root(self, name: str, size: int | None = None) -> bytes:
        """RFC 9162 root at ``size`` (default: the current size)."""
        size = self._size(name, size)
        return self._hashes(name, [(0, size)])[0] if size else EMPTY_ROOT

    def inclusion_proof(self, name: str, index: int, size: int | None = None) -> list[bytes]:
        """Audit path of leaf ``index`` in the tree of ``size`` leaves (default: current)."""
        size = self._size(name, size)
        if not 0 <= index < size:
            raise LedgerError(f"leaf index {index} is out of range for size {size}")
        return self._hashes(name, _subtrees.inclusion_ranges(index, size))

    def consistency_proof(self, name: str, old_size: int, new_size: int | None = None) -> list[bytes]:
        """Consistency proof from ``old_size`` to ``new_size`` (default: current)."""
        new_size = self._size(name, new_size)
        if not 0 <= old_size <= new_size:
            raise LedgerError(f"old size {old_size} must be between 0 and new size {new_size}")
        return self._hashes(name, _subtrees.consistency_ranges(old_size, new_size))

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
                   tiles.c.idx >= start >> TILE_HEIGHT, tiles.c.idx <= (end - 1) >> TILE_HEIGHT)
            .order_by(tiles.c.idx)
        )
        with self.engine.connect() as conn:
            for idx, hashes, digests in conn.execution_options(yield_per=1000).execute(query):
                first = idx << TILE_HEIGHT
                for k in range(len(hashes) // 32):
                    if start <= first + k < end:
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


def _tile_levels(size: int) -> int:
    """Number of tile levels that hold at least one hash at ``size``."""
    levels = 0
    while size >> (levels * TILE_HEIGHT):
        levels += 1
    return levels


def _tiles_for(nodes_needed) -> set[tuple[int, int]]:
    """The tiles holding the stored subtrees that each (level, index) node is built from."""
    keys = set()
    for level, index in nodes_needed:
        tile_level, rest = divmod(level, TILE_HEIGHT)
        keys.add((tile_level, (index << rest) >> TILE_HEIGHT))
    return keys


class _TileSet:
    """Loaded tiles; rebuilds any perfect subtree from the hashes of the tile that holds it."""

    def __init__(self, loaded: dict):
        self.tiles = loaded

    def node(self, level: int, index: int) -> bytes:
        tile_level, rest = divmod(level, TILE_HEIGHT)
        first = index << rest  # index of its leftmost stored subtree within the tile level
        key = (tile_level, first >> TILE_HEIGHT)
        try:
            hashes = self.tiles[key][0]
        except KeyError:
            raise LedgerError(f"log index is missing tile {key} (corrupted)") from None
        offset = 32 * (first & ((1 << TILE_HEIGHT) - 1))
        layer = [hashes[offset + 32 * k: offset + 32 * k + 32] for k in range(1 << rest)]
        if len(layer[-1]) != 32:
            raise LedgerError(f"log index tile {key} is shorter than its size says (corrupted)")
        while len(layer) > 1:
            layer = [node_hash(layer[k], layer[k + 1]) for k in range(0, len(layer), 2)]
        return layer[0]
