"""Initial log index: logs, tiles, checkpoints.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "logs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(200), nullable=False, unique=True),
        sa.Column("size", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("chain_log_id", sa.BigInteger, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.now()),
    )
    op.create_table(
        "tiles",
        sa.Column("log_id", sa.Integer, sa.ForeignKey("logs.id"), primary_key=True),
        sa.Column("level", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("idx", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("hashes", sa.LargeBinary, nullable=False),
        sa.Column("digests", sa.LargeBinary, nullable=True),
        sqlite_with_rowid=False,
    )
    op.create_table(
        "checkpoints",
        sa.Column("log_id", sa.Integer, sa.ForeignKey("logs.id"), primary_key=True),
        sa.Column("size", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("root", sa.LargeBinary(32), nullable=False),
        sa.Column("batch_cid", sa.String(100), nullable=True),
        sa.Column("tx_hash", sa.String(66), nullable=True),
        sa.Column("block_number", sa.BigInteger, nullable=True),
        sa.Column("anchored_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.now()),
    )


def downgrade() -> None:
    for table in ("checkpoints", "tiles", "logs"):
        op.drop_table(table)
