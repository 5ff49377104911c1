"""Wide tiles: 256 hashes a row instead of 16.

Revision ID: 0002
Revises: 0001

The tile at ``(level, idx)`` held stored subtrees ``idx*16 .. idx*16+15`` of its tile level; it
now holds ``idx*256 .. idx*256+255`` (``ledger.schema.TILE_WIDTH``): a sixteenth of the rows,
each large enough to fill whole database pages instead of spilling a mostly empty overflow
page apiece. Same table, same columns, same hashes: rows are concatenated in order (and split
again on downgrade), nothing is rehashed. Rows move a chunk at a time, so memory stays bounded;
the migration is one transaction, and a level whose rows are not contiguous and full (a
corrupted index) stops it with the database unchanged.
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

NARROW, WIDE = 16, 256
CHUNK = 64  # wide rows moved per statement: ~1 MiB of hashes

tiles = sa.table(
    "tiles",
    sa.column("log_id", sa.Integer), sa.column("level", sa.Integer), sa.column("idx", sa.BigInteger),
    sa.column("hashes", sa.LargeBinary), sa.column("digests", sa.LargeBinary),
)


def upgrade() -> None:
    _regroup(NARROW, WIDE)


def downgrade() -> None:
    _regroup(WIDE, NARROW)


def _regroup(old_width: int, new_width: int) -> None:
    conn = op.get_bind()
    levels = conn.execute(sa.select(tiles.c.log_id, tiles.c.level, sa.func.max(tiles.c.idx))
                          .group_by(tiles.c.log_id, tiles.c.level)).all()
    for log_id, level, last in levels:
        _regroup_level(conn, log_id, level, last, old_width, new_width)


def _regroup_level(conn, log_id: int, level: int, last: int, old_width: int, new_width: int) -> None:
    """Rewrite rows ``0..last`` of one tile level of one log from ``old_width`` hashes a row to
    ``new_width``. Merging walks up from row 0 and splitting walks down from the last row, so a
    new row's key is always free by the time it is written."""
    this_level = (tiles.c.log_id == log_id) & (tiles.c.level == level)
    step = CHUNK * max(new_width // old_width, 1)
    spans = [(lo, min(lo + step, last + 1)) for lo in range(0, last + 1, step)]
    if new_width < old_width:
        spans.reverse()
    for lo, hi in spans:
        rows = conn.execute(sa.select(tiles.c.idx, tiles.c.hashes, tiles.c.digests)
                            .where(this_level, tiles.c.idx >= lo, tiles.c.idx < hi)
                            .order_by(tiles.c.idx)).all()
        if [row.idx for row in rows] != list(range(lo, hi)) or any(
                len(row.hashes) != 32 * old_width for row in rows if row.idx != last):
            raise RuntimeError(f"log {log_id}: tiles of level {level} are not contiguous and full "
                               f"in rows {lo}..{hi - 1}; the log index is corrupted, not migrating")
        hashes = b"".join(bytes(row.hashes) for row in rows)
        digests = None if rows[0].digests is None else b"".join(bytes(row.digests) for row in rows)
        first = lo * old_width // new_width
        new_rows = [{"log_id": log_id, "level": level, "idx": first + k // (32 * new_width),
                     "hashes": hashes[k:k + 32 * new_width],
                     "digests": None if digests is None else digests[k:k + 32 * new_width]}
                    for k in range(0, len(hashes), 32 * new_width)]
        conn.execute(sa.delete(tiles).where(this_level, tiles.c.idx >= lo, tiles.c.idx < hi))
        if new_rows:
            conn.execute(sa.insert(tiles), new_rows)
