"""Entry validation beside a large audit's replay, in worker processes.

Decoding and validating an entry (``decode_entry``: JSON, field rules, canonical bytes) is
most of what a million-entry audit costs, and it is pure Python, so threads do not help. When
a batch of entries is large enough to pay for starting them, the replay (``ledger.audit``)
hands each chunk of entries its CAR delivered (a thousand, already re-hashed against their
CIDs) to ``EntryCheckers``, a pool of worker processes, and keeps hashing leaves and
rebuilding the tree itself while they judge the next chunks. Each entry's verdict is what
``decode_entry`` says of it there: ``VALID``, or the ``EntryError`` message the replay flags,
exactly as it would have flagged it inline.

The pool starts its workers with ``spawn`` (the replay has threads: a fork could copy a held
lock) and only when first used. A pool that breaks (a worker killed) is not restarted: the
chunks after it are validated inline, and nothing is lost.
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from ledger.entries import decode_entry
from ledger.errors import EntryError

VALID = ""  # the verdict of an entry that decodes
# Below this many entries in one replay, the workers' start-up (about a second each: they
# import the entry models) costs more than they save.
MIN_ENTRIES = 50_000


def verdicts(blobs: list[bytes | None]) -> list[str | None]:
    """For each blob: ``VALID``, the ``EntryError`` message, or None for no blob (an entry the
    CAR lacked: the replay reads it by CID and judges it itself)."""
    out: list[str | None] = []
    for data in blobs:
        if data is None:
            out.append(None)
            continue
        try:
            decode_entry(data)
        except EntryError as exc:
            out.append(str(exc))
        else:
            out.append(VALID)
    return out


def default_workers() -> int:
    """One worker per core but one (the replay and the content endpoint need the rest), at
    most four; one on a single core."""
    return max(1, min(4, (os.cpu_count() or 1) - 1))


class EntryCheckers:
    """A lazily started pool of ``workers`` processes running ``verdicts``; ``close`` stops it."""

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers or default_workers()
        self._pool: ProcessPoolExecutor | None = None
        self._broken = False

    def submit(self, blobs: list[bytes | None]) -> Future | None:
        """The verdicts of ``blobs``, coming; None once the pool is broken (judge inline)."""
        if self._broken:
            return None
        try:
            if self._pool is None:
                import multiprocessing

                self._pool = ProcessPoolExecutor(self.workers,
                                                 mp_context=multiprocessing.get_context("spawn"))
            return self._pool.submit(verdicts, blobs)
        except (BrokenProcessPool, RuntimeError, OSError):
            self._broken = True
            return None

    def result(self, future: Future | None, count: int) -> list[str | None]:
        """The verdicts of a submitted chunk; all None (judge inline) if there are none."""
        if future is not None:
            try:
                return future.result()
            except (BrokenProcessPool, OSError):
                self._broken = True
        return [None] * count

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
