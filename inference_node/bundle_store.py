"""Bundle retention: what a verifier needs beside each receipt the node issued, kept for a while.

A client that kept only a receipt (or only its CID) cannot check the activations, termination
or sampling without the normalized request, the completion's text and token ids. The node keeps
them, per receipt CID, in one SQLite file (``BundleStore``) for ``retention_s`` seconds
(``gym node serve --bundle-retention``, ``parse_duration``: ``7d`` by default, ``0`` keeps
nothing and no store is opened) and at most ``max_bytes`` in all (the oldest are dropped first);
``GET /v1/receipts/{cid}`` serves the whole bundle (``inference_node.receipts.bundle_json``,
with the receipt log's inclusion proof when there is one).

Privacy: a record holds the request's messages or prompt as the client sent them (normalized),
and the answer. An operator who keeps bundles keeps users' texts for the retention period and
serves them to anyone who knows the receipt's CID (a SHA-256 over the receipt: not guessable,
but whoever holds the receipt can fetch it). ``docs/node.md`` says what to tell users.

``put`` runs on the signing thread (``serving.OpenAIServing.sign``), never on the event loop;
a store that fails is logged and the answer still leaves (retention is a service, not a
condition of the receipt). Expired records are purged on every ``put`` and never returned by
``get``. One record is the JSON ``{"receipt": <canonical bytes as text>, "domain", "request",
"text", "token_ids"}``; one larger than ``max_bytes`` is not kept.
"""

from __future__ import annotations

import json
import logging
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inference_node.errors import NodeError

log = logging.getLogger(__name__)

DEFAULT_RETENTION = "7d"
DEFAULT_MAX_BYTES = 1024 * 1024 * 1024  # 1 GiB of records in all
MAX_CID_CHARS = 128  # a receipt CID is 59 characters; longer ids are refused before any query
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd]?)")


def parse_duration(text: str) -> float:
    """Seconds in ``text``: a number with an optional unit ``s``, ``m``, ``h`` or ``d``
    (``3600``, ``90m``, ``12h``, ``7d``); ``NodeError`` otherwise."""
    match = _DURATION.fullmatch(text.strip().lower())
    if match is None:
        raise NodeError(f"not a duration: {text!r} (a number of seconds, or with a unit: "
                        "90s, 30m, 12h, 7d; 0 keeps nothing)")
    return float(match.group(1)) * _UNITS[match.group(2) or "s"]


@dataclass(frozen=True)
class StoredBundle:
    receipt: bytes  # the receipt's canonical bytes
    domain: dict
    request: dict  # the normalized request
    text: str
    token_ids: list[int]
    at: float  # when it was kept (unix time)


class BundleStore:
    """Records per receipt CID in the SQLite file ``path``; see the module docstring."""

    def __init__(self, path: str | Path, *, retention_s: float,
                 max_bytes: int = DEFAULT_MAX_BYTES, clock: Callable[[], float] = time.time
                 ) -> None:
        if retention_s <= 0 or max_bytes <= 0:
            raise NodeError("a bundle store needs a positive retention and byte bound")
        self.path = Path(path)
        self.retention_s, self.max_bytes, self.clock = retention_s, max_bytes, clock
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS bundles (cid TEXT PRIMARY KEY, "
                         "at REAL NOT NULL, size INTEGER NOT NULL, record BLOB NOT NULL)")
        self._db.execute("CREATE INDEX IF NOT EXISTS bundles_at ON bundles (at)")
        with self._lock:
            self._total = self._db.execute("SELECT COALESCE(SUM(size), 0) FROM bundles"
                                           ).fetchone()[0]
            self._purge()

    def put(self, cid: str, *, receipt: bytes, domain: dict, request: dict, text: str,
            token_ids: Sequence[int]) -> bool:
        """Keep the record of receipt ``cid``; False when it was not kept (too large, or the
        store failed: logged)."""
        record = json.dumps({"receipt": receipt.decode(), "domain": domain, "request": request,
                             "text": text, "token_ids": list(token_ids)},
                            separators=(",", ":")).encode()
        if len(record) > self.max_bytes:
            log.warning("receipt %s: its bundle (%d bytes) exceeds the store's bound (%d), "
                        "not kept", cid, len(record), self.max_bytes)
            return False
        try:
            with self._lock:
                old = self._db.execute("SELECT size FROM bundles WHERE cid = ?", (cid,)
                                       ).fetchone()
                self._db.execute("INSERT OR REPLACE INTO bundles VALUES (?, ?, ?, ?)",
                                 (cid, self.clock(), len(record), record))
                self._total += len(record) - (old[0] if old else 0)
                self._purge()
            return True
        except sqlite3.Error as exc:
            log.error("cannot keep the bundle of receipt %s in %s: %s", cid, self.path, exc)
            return False

    def get(self, cid: str) -> StoredBundle | None:
        """The record of receipt ``cid``; None when unknown, expired or dropped."""
        if not isinstance(cid, str) or len(cid) > MAX_CID_CHARS:
            return None
        with self._lock:
            row = self._db.execute("SELECT at, record FROM bundles WHERE cid = ? AND at >= ?",
                                   (cid, self.clock() - self.retention_s)).fetchone()
        if row is None:
            return None
        obj: dict[str, Any] = json.loads(row[1])
        return StoredBundle(obj["receipt"].encode(), obj["domain"], obj["request"], obj["text"],
                            obj["token_ids"], row[0])

    def purge(self) -> int:
        """Drop expired records, then the oldest while over ``max_bytes``; how many."""
        with self._lock:
            return self._purge()

    def _purge(self) -> int:
        cutoff = self.clock() - self.retention_s
        dropped = 0
        expired = self._db.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM bundles "
                                   "WHERE at < ?", (cutoff,)).fetchone()
        if expired[0]:
            self._db.execute("DELETE FROM bundles WHERE at < ?", (cutoff,))
            self._total -= expired[1]
            dropped += expired[0]
        while self._total > self.max_bytes:
            oldest = self._db.execute("SELECT cid, size FROM bundles ORDER BY at, rowid "
                                      "LIMIT 64").fetchall()
            if not oldest:
                self._total = 0
                break
            for cid, size in oldest:
                if self._total <= self.max_bytes:
                    break
                self._db.execute("DELETE FROM bundles WHERE cid = ?", (cid,))
                self._total -= size
                dropped += 1
        return dropped

    def stats(self) -> dict:
        with self._lock:
            count = self._db.execute("SELECT COUNT(*) FROM bundles").fetchone()[0]
        return {"bundles": count, "bytes": self._total, "retention_s": self.retention_s,
                "max_bytes": self.max_bytes}

    def close(self) -> None:
        with self._lock:
            self._db.close()
