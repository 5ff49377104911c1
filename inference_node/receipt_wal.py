"""The receipt log's write-ahead file: a receipt is on disk before the answer that carries it
leaves the node, so a node killed at any moment (kill -9, OOM, a crash) loses no receipt a
client holds. (Once a receipt is appended the file forgets it: from then on it is as durable
as the log store's commit, see docs/node.md.)

Format: one record per line, each the receipt's canonical entry bytes (``encode_entry``; RFC
8785 JSON never contains a raw newline) followed by ``\\n``. Records are appended with
``O_APPEND`` and made durable with ``fsync``; a writer returns only once an ``fsync`` that
started after its record was written has finished. Concurrent writers share one ``fsync``
(group commit: whoever syncs covers every record written before it started), so a batch of
answers finishing together pays for one sync, not one each (~0.2 ms here, ext4).

Reading at start-up (``records``) keeps every complete line that decodes as a receipt entry: a
line cut short by a crash mid-write (its writer never returned, so its answer never left) ends
without ``\\n`` and is dropped, as is anything that is not a receipt. ``ReceiptLog`` appends the
records its log does not yet hold, then ``clear``s the file; while serving it clears the file
whenever its append queue is empty, i.e. every record in the file is in the log. The file is
locked (``flock``) while open: a second node on the same file is refused (the OS drops the lock
of a killed process).
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

from inference_node.errors import NodeError
from ledger.entries import ReceiptEntry, decode_entry
from ledger.errors import EntryError
from ledger.json_input import JSONInputError

log = logging.getLogger(__name__)


class ReceiptWAL:
    """The write-ahead file at ``path`` (created, with its directory, if missing)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "ab")  # noqa: SIM115 (open for the log's lifetime)
        try:  # one node per file: a second one would empty the file under the first
            fcntl.flock(self._file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._file.close()
            raise NodeError(f"{self.path} is in use by another running node: give this one "
                            "its own --receipt-log (or --receipt-wal)") from None
        self._lock = threading.Lock()  # one writer at a time, and clear() against writers
        self._sync_lock = threading.Lock()  # one fsync at a time
        self._written = 0  # records handed to the OS (a sequence number, never reset)
        self._synced = 0  # records known to be on disk

    def records(self) -> list[bytes]:
        """The complete receipt records in the file, in order (see the module docstring)."""
        lines = self.path.read_bytes().split(b"\n")[:-1]  # after the last \n: torn or empty
        records = []
        for number, line in enumerate(lines, 1):
            try:
                if not isinstance(decode_entry(line), ReceiptEntry):
                    raise EntryError("not a receipt entry")
            except (EntryError, JSONInputError, ValueError, RecursionError) as exc:
                log.warning("%s line %d is not a receipt, skipped: %s", self.path, number, exc)
                continue
            records.append(line)
        return records

    def write(self, data: bytes, then: Callable[[], None] | None = None) -> None:
        """Append ``data`` and return once it is on disk; ``then`` runs right after the write,
        under the lock that ``clear`` takes (so a record and its queue entry appear together)."""
        with self._lock:
            self._file.write(data + b"\n")
            self._file.flush()
            self._written += 1
            sequence = self._written
            if then is not None:
                then()
        with self._sync_lock:
            if self._synced >= sequence:  # another writer's fsync covered this record
                return
            with self._lock:
                covered = self._written
            os.fsync(self._file.fileno())
            self._synced = covered

    def clear(self, when: Callable[[], bool] = lambda: True) -> bool:
        """Empty the file if ``when()`` holds (checked with writers held off); whether it did."""
        with self._lock:
            if not when():
                return False
            self._file.truncate(0)  # O_APPEND: the next record goes to offset 0
            return True

    def close(self) -> None:
        with self._lock:
            self._file.close()
