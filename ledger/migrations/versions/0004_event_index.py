"""Durable indexes of chain events (``ledger.event_index``: the dashboard's governor index).

Revision ID: 0004
Revises: 0003

``index_records``: per source (one event stream of one chain) and event position, the decoded
record as JSON. ``index_blocks``: the hash of each block where indexing stopped, so an index
resumes after its last block and, when the chain reorganised, from the newest block whose hash
still matches.
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "index_records",
        sa.Column("source", sa.String(200), primary_key=True),
        sa.Column("block_number", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("log_index", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("record", sa.Text, nullable=False),
    )
    op.create_table(
        "index_blocks",
        sa.Column("source", sa.String(200), primary_key=True),
        sa.Column("block_number", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("block_hash", sa.String(66), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("index_blocks")
    op.drop_table("index_records")
