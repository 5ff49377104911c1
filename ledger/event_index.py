"""A durable index of one chain event stream: what an indexer has decoded, kept in the
installation's database (SQLite or PostgreSQL; tables ``index_records`` and ``index_blocks``,
``ledger.schema``) so that a restart resumes after the last indexed block instead of reading
the chain from the deployment block again.

An indexer (``governance.dashboard.indexer.GovernorIndexer``) calls ``commit(records,
block)`` once per page of blocks it has read: the decoded records of that page's events (JSON
objects, keyed by block number and log index) and the page's last block with its hash, in one
transaction. At start ``load()`` gives the records in chain order and the recorded blocks.
A block hash that no longer matches the chain means a reorganisation (or a devnet restarted
from scratch): the indexer finds the newest recorded block the chain still holds
(``fork_point``), ``rewind``s to it (records and blocks after it are deleted) and reads again
from the block after it; with no recorded block left on the chain it starts over.

Only the newest ``KEEP_BLOCKS`` recorded blocks are kept: a reorganisation deeper than that
many pages re-indexes from the start. ``source`` names the stream (chain, contracts, from
block); several indexes share the tables.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from sqlalchemy import Engine, delete, insert, select

from ledger.schema import index_blocks, index_records

KEEP_BLOCKS = 256  # recorded page ends kept per source: the deepest reorganisation resumed


class EventIndexStore:
    """The records and recorded blocks of the event stream ``source`` in ``engine``'s
    database (migrated: open it through ``ledger.logstore.LogStore``)."""

    def __init__(self, engine: Engine, source: str):
        if not 0 < len(source) <= 200:
            raise ValueError("an event index source is 1 to 200 characters")
        self.engine, self.source = engine, source

    def load(self) -> tuple[list[dict[str, Any]], list[tuple[int, str]]]:
        """(records in chain order, recorded blocks (number, 0x hash) oldest first)."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(index_records.c.record).where(index_records.c.source == self.source)
                .order_by(index_records.c.block_number, index_records.c.log_index)).all()
            blocks = conn.execute(
                select(index_blocks.c.block_number, index_blocks.c.block_hash)
                .where(index_blocks.c.source == self.source)
                .order_by(index_blocks.c.block_number)).all()
        return [json.loads(row.record) for row in rows], [(b.block_number, b.block_hash)
                                                          for b in blocks]

    def commit(self, records: Iterable[tuple[int, int, dict[str, Any]]], block: int,
               block_hash: str) -> None:
        """Add a page's ``records`` ((block number, log index, record)) and its last
        ``block`` with ``block_hash``, in one transaction."""
        rows = [{"source": self.source, "block_number": number, "log_index": index,
                 "record": json.dumps(record, separators=(",", ":"))}
                for number, index, record in records]
        with self.engine.begin() as conn:
            if rows:
                conn.execute(insert(index_records), rows)
            conn.execute(insert(index_blocks).values(source=self.source, block_number=block,
                                                     block_hash=block_hash))
            kept = conn.execute(
                select(index_blocks.c.block_number).where(index_blocks.c.source == self.source)
                .order_by(index_blocks.c.block_number.desc()).offset(KEEP_BLOCKS).limit(1)
            ).scalar()
            if kept is not None:
                conn.execute(delete(index_blocks).where(
                    index_blocks.c.source == self.source,
                    index_blocks.c.block_number <= kept))

    def rewind(self, block: int) -> None:
        """Forget the records and recorded blocks after ``block`` (-1: everything)."""
        with self.engine.begin() as conn:
            conn.execute(delete(index_records).where(index_records.c.source == self.source,
                                                     index_records.c.block_number > block))
            conn.execute(delete(index_blocks).where(index_blocks.c.source == self.source,
                                                    index_blocks.c.block_number > block))


def fork_point(blocks: list[tuple[int, str]], chain_hash: Callable[[int], str | None]
               ) -> tuple[int, str] | None:
    """The newest of the recorded ``blocks`` whose hash the chain still has at its number
    (``chain_hash(number)``: 0x hash, or None past the head); None when none."""
    for number, recorded in reversed(blocks):
        if chain_hash(number) == recorded:
            return number, recorded
    return None


__all__ = ["KEEP_BLOCKS", "EventIndexStore", "fork_point"]
