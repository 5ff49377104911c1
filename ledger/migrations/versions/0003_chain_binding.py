"""Bind each log's on-chain id to the chain it was created on.

Revision ID: 0003
Revises: 0002

``logs`` gains ``chain_id``, ``chain_genesis`` and ``chain_ledger``: the chain id, the hash of
block 0 and the ExperienceLedger address that ``chain_log_id`` belongs to. A devnet restarted
from scratch keeps its chain id and, deployed by the same key, its contract address, and
hands out the same log ids again: only the genesis hash tells the chains apart.

Rows written before this revision keep ``chain_log_id`` and get NULL bindings; the ledger binds
such a log on its first contact with a chain where the log of that id has the log's name, is a
publisher log, and holds the root of the log's last recorded checkpoint
(``ledger.publish.ensure_chain_log``), and refuses it otherwise.
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("logs") as batch:
        batch.add_column(sa.Column("chain_id", sa.BigInteger, nullable=True))
        batch.add_column(sa.Column("chain_genesis", sa.String(66), nullable=True))
        batch.add_column(sa.Column("chain_ledger", sa.String(42), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("logs") as batch:
        for column in ("chain_ledger", "chain_genesis", "chain_id"):
            batch.drop_column(column)
