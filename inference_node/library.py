"""Where the node's experience library comes from: the `LibrarySource` interface.

A source hands out immutable `LibrarySnapshot`s. The server asks for `current()` once per request
and keeps that snapshot for the request's whole life, so swapping the library never changes what
an in-flight request was prompted with. `status()` says when the source last synced and, when
something failed, why, and `/health` reports `degraded`. What a source serves after a failure is
its own policy: `StaticLibrarySource` keeps the last good file; `ChainLibrarySource`
(`inference_node.sync`) serves nothing from a log that failed verification, and keeps its last
verified snapshot only when the chain or the content store is merely unreachable.

This module holds the interface and `StaticLibrarySource` (a JSON file, for tests and for running
a node without a chain).

JSON file format::

    {"log_id": "0x…", "size": 3, "root": "ab…",          # curated log and its RFC 9162 root
     "version": "optional; default: digest of the rest",
     "experiences": [{"id": "bafy…", "text": "Check units."}, …]}
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, ValidationError

from ledger.json_input import JSONInputError, parse_json


@dataclass(frozen=True)
class LibrarySnapshot:
    """One library state: the active experiences, in prompt order, of `log_id` at `size`."""

    version: str
    log_id: str
    size: int
    root: str
    experiences: tuple[tuple[str, str], ...]  # (stable id, text)

    @property
    def experience_ids(self) -> list[str]:
        return [eid for eid, _ in self.experiences]


EMPTY_LIBRARY = LibrarySnapshot(version="empty", log_id="", size=0, root="", experiences=())


@dataclass(frozen=True)
class LibraryStatus:
    last_sync: float | None  # unix time of the last successful load or sync
    error: str | None = None  # why the newest library was rejected; None when healthy


class LibrarySource(Protocol):
    def current(self) -> LibrarySnapshot: ...

    def status(self) -> LibraryStatus: ...


class _LibraryFile(BaseModel):
    class _Experience(BaseModel):
        id: str
        text: str

    log_id: str = ""
    size: int = 0
    root: str = ""
    version: str | None = None
    experiences: list[_Experience] = []


def snapshot_version(log_id: str, size: int, root: str,
                     experiences: tuple[tuple[str, str], ...]) -> str:
    """A short digest of everything a prompt depends on: two equal versions render equally."""
    blob = json.dumps([log_id, size, root, experiences], ensure_ascii=False).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def load_library_file(path: str | Path) -> LibrarySnapshot:
    """Parse a library JSON file; raises `ValueError` with the reason when it is malformed."""
    try:
        data = _LibraryFile.model_validate(parse_json(Path(path).read_bytes(),
                                                      what=f"library file {path}"))
    except JSONInputError as exc:
        raise ValueError(str(exc)) from exc
    except (OSError, ValidationError) as exc:
        raise ValueError(f"library file {path}: {exc}") from exc
    experiences = tuple((e.id, e.text) for e in data.experiences)
    version = data.version or snapshot_version(data.log_id, data.size, data.root, experiences)
    return LibrarySnapshot(version, data.log_id, data.size, data.root, experiences)


@dataclass
class StaticLibrarySource:
    """A library from a JSON file (or given directly), replaced only when told to.

    `reload()` re-reads the file; a bad file keeps the previous snapshot and sets the error that
    `/health` reports, which is how the verified source behaves when a sync fails verification.
    """

    snapshot: LibrarySnapshot = EMPTY_LIBRARY
    path: Path | None = None
    _status: LibraryStatus = field(default_factory=lambda: LibraryStatus(last_sync=time.time()))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def from_file(cls, path: str | Path) -> StaticLibrarySource:
        return cls(snapshot=load_library_file(path), path=Path(path))

    def current(self) -> LibrarySnapshot:
        return self.snapshot

    def status(self) -> LibraryStatus:
        return self._status

    def replace(self, snapshot: LibrarySnapshot) -> None:
        with self._lock:
            self.snapshot = snapshot
            self._status = LibraryStatus(last_sync=time.time())

    def reload(self) -> None:
        if self.path is None:
            return
        try:
            snapshot = load_library_file(self.path)
        except ValueError as exc:
            with self._lock:
                self._status = LibraryStatus(last_sync=self._status.last_sync, error=str(exc))
            return
        self.replace(snapshot)
