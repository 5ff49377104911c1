"""Alembic environment: runs on the connection that ``ledger.logstore`` hands over."""

from alembic import context

from ledger.schema import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata,
                  render_as_batch=connection.dialect.name == "sqlite")
with context.begin_transaction():
    context.run_migrations()
