"""SQL schema of the log index (SQLAlchemy Core; SQLite by default, PostgreSQL at scale).

Migrations under ``ledger/migrations`` (Alembic) create exactly these tables; a test checks
that the migrated database and this metadata agree.

- ``logs``: one row per log; ``size`` is the committed size, bumped in the same transaction
  as the rows of an append, so a batch is all there or not at all. ``chain_log_id`` is the
  log's id in an ExperienceLedger, and ``chain_id``, ``chain_genesis`` (block 0's hash) and
  ``chain_ledger`` (the contract's address) name that ledger: an id means nothing on another
  chain, and a devnet restarted from scratch reuses ids (same chain id, same address, another
  genesis).
- ``tiles``: perfect-subtree hashes packed in rows: the tile at ``(level, idx)`` holds, in
  order, the hashes of the perfect subtrees of height ``level * TILE_HEIGHT`` numbered
  ``idx * TILE_WIDTH ..``, up to TILE_WIDTH of them; a partial tile grows as the log does.
  Level-0 tiles hold leaf hashes and, in ``digests``, the SHA-256 of each entry (its CID is
  CIDv1 raw sha2-256, so the digest is the CID). A subtree of any height is at most
  2^TILE_HEIGHT - 1 hashes away from a stored one, and a root or proof at any size reads at
  most two tiles per tile level. Rows are wide (8 KiB of hashes, 16 KiB with digests) so that
  an append writes whole database pages: 16-hash rows of 0001 each spilled a mostly empty
  overflow page, which made the database 4x the size of its hashes and appends slow.
- ``checkpoints``: every anchored (size, root), with where it was anchored.
- ``index_records`` and ``index_blocks`` (since 0004): durable indexes of chain events
  (``ledger.event_index``; the dashboard's): per ``source`` (one event stream of one chain)
  the decoded record of each indexed event, and the hash of the blocks where indexing
  stopped, to resume there and to find the fork point after a reorganisation.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    ForeignKey,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    func,
)

metadata = MetaData()

logs = Table(
    "logs", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(200), nullable=False, unique=True),
    Column("size", BigInteger, nullable=False, server_default="0"),
    Column("chain_log_id", BigInteger, nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    # The chain ``chain_log_id`` belongs to (since 0003): set with it, or on the first contact
    # with the chain for a log recorded before 0003.
    Column("chain_id", BigInteger, nullable=True),
    Column("chain_genesis", String(66), nullable=True),  # block 0's hash, 0x-prefixed
    Column("chain_ledger", String(42), nullable=True),  # ExperienceLedger, checksummed
)

TILE_HEIGHT = 4  # tree levels between stored levels: <= 15 hashes rebuild any subtree
TILE_WIDTH = 256  # hashes a tile (since migration 0002; 16 before): ~n/240 rows per log

tiles = Table(
    "tiles", metadata,
    Column("log_id", Integer, ForeignKey("logs.id"), primary_key=True),
    Column("level", Integer, primary_key=True, autoincrement=False),
    Column("idx", BigInteger, primary_key=True, autoincrement=False),
    Column("hashes", LargeBinary, nullable=False),
    Column("digests", LargeBinary, nullable=True),
    sqlite_with_rowid=False,
)

checkpoints = Table(
    "checkpoints", metadata,
    Column("log_id", Integer, ForeignKey("logs.id"), primary_key=True),
    Column("size", BigInteger, primary_key=True, autoincrement=False),
    Column("root", LargeBinary(32), nullable=False),
    Column("batch_cid", String(100), nullable=True),
    Column("tx_hash", String(66), nullable=True),
    Column("block_number", BigInteger, nullable=True),
    Column("anchored_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)

index_records = Table(
    "index_records", metadata,
    Column("source", String(200), primary_key=True),
    Column("block_number", BigInteger, primary_key=True, autoincrement=False),
    Column("log_index", Integer, primary_key=True, autoincrement=False),
    Column("record", Text, nullable=False),  # JSON
)

index_blocks = Table(
    "index_blocks", metadata,
    Column("source", String(200), primary_key=True),
    Column("block_number", BigInteger, primary_key=True, autoincrement=False),
    Column("block_hash", String(66), nullable=False),  # 0x-prefixed
)
