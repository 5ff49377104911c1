"""The embedded IPFS-compatible content store: a directory of verified blocks plus pins.

Layout under ``root``::

    blocks/<CIDv1 base32>   one file per block, written to a temp file then os.replace'd
    pins/<CIDv1 base32>     one file per recursive pin: its owners, one name a line
    pins/.lock              taken (flock) while a pin file is read and rewritten

A pin is held by owners: the names of the parties that pinned it (``gym ipfs serve`` records
the caller's authorization name, or ``anonymous``); this host's own commands pin as ``local``,
and an empty pin file (a store from before owners) is owned by ``local``. ``pin_rm(cid,
owner=X)`` removes X's claim only, and the content stays pinned while another owner remains;
``pin_rm(cid)`` without an owner is the operator's removal of the whole pin.

Pinning walks the DAG (each distinct block once, every block read verified) and refuses one
of more than ``MAX_PIN_BLOCKS`` blocks or ``MAX_PIN_DEPTH`` levels (``DagBoundError``), so
what is pinned can always be walked again within those bounds.

Blocks are keyed by CIDv1 (a CIDv0 is stored under its v1 spelling, which names the same
bytes). Every read re-hashes the block against the CID it was asked for: a flipped bit on
disk raises ``ContentIntegrityError`` and never returns data. A missing block raises
``NotFoundError`` naming the store's directory (and, from ``open_content_store``, that
GYM_IPFS_API can name a node to fetch it from). Files go in with ``add_file`` and get the CIDs ``ipfs add --cid-version=1``
gives; CAR v1 moves whole DAGs in and out, compatible with ``ipfs dag export/import``.
Writes are atomic but not fsync'd: a crash may lose recent blocks, never leave a torn one.

>>> import tempfile
>>> scratch = tempfile.TemporaryDirectory()
>>> store = LocalBlockStore(scratch.name)
>>> cid = store.add_file(b"hello world")
>>> cid, store.cat(cid)
('bafkreifzjut3te2nhyekklss27nh3k72ysco7y32koao5eei66wof36n5e', b'hello world')
>>> scratch.cleanup()
"""

from __future__ import annotations

import fcntl
import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from ledger.car import read_car, write_car
from ledger.errors import LedgerError, NotFoundError
from ledger.multiformats import CID, RAW, verify_block
from ledger.unixfs import (
    DEFAULT_CAT_MAX_BYTES,
    DagBoundError,
    Source,
    import_bytes_stream,
    iter_file_bytes,
    links_of,
)

LOCAL_OWNER = "local"  # this host's own commands, and every pin of a store from before owners
OWNER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")  # what a pin owner may be called
MAX_PIN_BLOCKS = 1 << 20  # distinct blocks of one pinned DAG (256 GiB in 256 KiB leaves)
MAX_PIN_DEPTH = 64  # levels of one pinned DAG (Kubo's balanced layout needs 4 for 8 TB)


class PinOwnerError(LedgerError, PermissionError):
    """A pin is asked to be removed by a party that does not hold it."""


class LocalBlockStore:
    """Blocks and pins in a local directory; every block read is verified against its CID."""

    def __init__(self, root: str | os.PathLike, *, missing_hint: str | None = None):
        self.root = Path(root)
        # What a user reads after "block X is not in the local content store (ROOT)": where
        # else the block could come from (``open_content_store`` names GYM_IPFS_API).
        self.missing_hint = missing_hint
        self._blocks = self.root / "blocks"
        self._pins = self.root / "pins"
        self._blocks.mkdir(parents=True, exist_ok=True)
        self._blocks_dir = str(self._blocks) + os.sep
        self._pins.mkdir(parents=True, exist_ok=True)

    def _block_path(self, cid: CID) -> Path:
        return Path(self._block_file(cid))

    def _block_file(self, cid: CID) -> str:
        """``_block_path`` as a str: reads are a few microseconds of I/O, pathlib doubled it."""
        return self._blocks_dir + str(cid.to_v1())

    # --- blocks ---------------------------------------------------------------------------

    def put_block(self, cid: CID | str, block: bytes) -> CID:
        """Store ``block`` under ``cid`` after checking that it hashes to it."""
        cid = CID.coerce(cid)
        verify_block(cid, block)
        self._write_atomic(self._block_path(cid), block)
        return cid

    def put(self, data: bytes, codec: int = RAW) -> CID:
        """Store one block of ``codec`` and return its CIDv1."""
        cid = CID.for_block(codec, data)
        self._write_atomic(self._block_path(cid), data)
        return cid

    def get_block(self, cid: CID | str) -> bytes:
        """The block for ``cid``, re-hashed on every read.

        Raises ``NotFoundError`` if it is absent and ``ContentIntegrityError`` if the stored
        bytes do not hash to ``cid``.
        """
        cid = CID.coerce(cid)
        try:
            fd = os.open(self._block_file(cid), os.O_RDONLY)
        except FileNotFoundError:
            hint = f"; {self.missing_hint}" if self.missing_hint else ""
            raise NotFoundError(f"block {cid} is not in the local content store "
                                f"({self.root}){hint}") from None
        try:  # one read of the size the file has (without a buffered file object: 6 against
            # 10 µs a block, what serving a million-entry audit spends)
            block = os.read(fd, os.fstat(fd).st_size + 1)
            while piece := os.read(fd, 1 << 20):  # a short read: the rest
                block += piece
        finally:
            os.close(fd)
        verify_block(cid, block)
        return block

    def has(self, cid: CID | str) -> bool:
        return os.path.isfile(self._block_file(CID.coerce(cid)))

    def delete_block(self, cid: CID | str) -> None:
        try:
            self._block_path(CID.coerce(cid)).unlink()
        except FileNotFoundError:
            raise NotFoundError(f"block {cid} is not in the local content store "
                                f"({self.root})") from None

    # --- files ----------------------------------------------------------------------------

    def add_file(self, source: Source, *, pin: bool = False) -> str:
        """Import ``source`` (bytes, path, binary stream or iterable of bytes) as a UnixFS
        file, store all its blocks, and return the root CID string; streams, so a large
        file is never held in memory."""
        root = import_bytes_stream(source, lambda cid, block: self._write_atomic(
            self._block_path(cid), block))
        if pin:
            self.pin_add(root)
        return str(root)

    def cat_iter(self, cid: CID | str, *, max_bytes: int | None = None) -> Iterator[bytes]:
        """Yield the bytes of the UnixFS file ``cid`` in order, each block verified, the work
        bounded by its declared size (``iter_file_bytes``); a file declaring more than
        ``max_bytes`` is refused (``DagBoundError``) before any byte."""
        return iter_file_bytes(cid, self.get_block, max_bytes=max_bytes)

    def cat(self, cid: CID | str, *, max_bytes: int = DEFAULT_CAT_MAX_BYTES) -> bytes:
        """The whole UnixFS file ``cid`` (at most ``max_bytes``); ``cat_iter`` streams."""
        return b"".join(self.cat_iter(cid, max_bytes=max_bytes))

    # --- DAGs -----------------------------------------------------------------------------

    def walk_bounded(self, root: CID | str, *, known: set[str] | frozenset[str] = frozenset(),
                     read_leaves: bool = True) -> Iterator[tuple[CID, bytes | None]]:
        """``walk_dag`` within the pin bounds: each distinct block under ``root`` once with its
        bytes (verified), parents first. A block whose CIDv1 string is in ``known`` is skipped
        with all under it (``known`` must hold whole DAGs); raw leaves are not read (``None``)
        when ``read_leaves`` is false. More than ``MAX_PIN_BLOCKS`` blocks or ``MAX_PIN_DEPTH``
        levels raise ``DagBoundError``."""
        seen: set[str] = set()
        stack = [(CID.coerce(root), 0)]
        while stack:
            cid, depth = stack.pop()
            key = str(cid.to_v1())
            if key in seen or key in known:
                continue
            if depth > MAX_PIN_DEPTH:
                raise DagBoundError(f"the DAG under {root} is more than {MAX_PIN_DEPTH} levels "
                                    "deep, more than a pin may hold", expected=MAX_PIN_DEPTH)
            seen.add(key)
            if len(seen) > MAX_PIN_BLOCKS:
                raise DagBoundError(f"the DAG under {root} holds more than {MAX_PIN_BLOCKS} "
                                    "blocks, more than a pin may hold", expected=MAX_PIN_BLOCKS)
            if cid.codec == RAW and not read_leaves:
                yield cid, None
                continue
            block = self.get_block(cid)
            yield cid, block
            stack.extend((link.cid, depth + 1) for link in reversed(links_of(cid, block)))

    # --- pins -----------------------------------------------------------------------------

    def pin_add(self, cid: CID | str, *, owner: str = LOCAL_OWNER) -> str:
        """Pin ``cid`` recursively for ``owner`` after checking its whole DAG is present,
        intact and within the pin bounds; returns the CID string."""
        for _ in self.pinning(cid, owner=owner):
            pass
        return str(CID.coerce(cid))

    def pinning(self, cid: CID | str, *, owner: str = LOCAL_OWNER) -> Iterator[str]:
        """``pin_add`` a block at a time: yields each block it checks (``walk_bounded``) and
        records the pin after the last, so a caller that stops early pins nothing."""
        cid = CID.coerce(cid)
        _check_owner(owner)
        for block_cid, _ in self.walk_bounded(cid):
            yield str(block_cid)
        with self._pins_locked():
            owners = self._owners(cid) or set()
            self._write_atomic(self._pin_path(cid), _owner_lines(owners | {owner}))

    def pin_rm(self, cid: CID | str, *, owner: str | None = None) -> bool:
        """Remove ``owner``'s pin of ``cid``; the content stays pinned while another owner
        remains (returns whether it does). ``owner=None`` removes the pin whatever its owners
        (the operator). Raises ``NotFoundError`` if ``cid`` is not pinned and
        ``PinOwnerError`` if ``owner`` does not hold it."""
        cid = CID.coerce(cid)
        with self._pins_locked():
            owners = self._owners(cid)
            if owners is None:
                raise NotFoundError(f"{cid} is not pinned")
            if owner is not None and owner not in owners:
                raise PinOwnerError(f"{cid} is pinned by other parties, not by {owner!r}: "
                                    "only they can unpin it")
            remaining = set() if owner is None else owners - {owner}
            if remaining:
                self._write_atomic(self._pin_path(cid), _owner_lines(remaining))
            else:
                self._pin_path(cid).unlink()
        return bool(remaining)

    def pin_owners(self, cid: CID | str) -> frozenset[str]:
        """Who holds the pin of ``cid`` (empty if it is not pinned)."""
        return frozenset(self._owners(CID.coerce(cid)) or ())

    def pin_ls(self) -> list[str]:
        """The pinned root CIDs (CIDv1 strings), sorted."""
        return sorted(path.name for path in self._pins.iterdir() if not path.name.startswith("."))

    def _pin_path(self, cid: CID) -> Path:
        return self._pins / str(cid.to_v1())

    def _owners(self, cid: CID) -> set[str] | None:
        try:
            text = self._pin_path(cid).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        return set(text.split()) or {LOCAL_OWNER}  # an empty file: a pin from before owners

    @contextmanager
    def _pins_locked(self) -> Iterator[None]:
        # flock, not a threading.Lock: the host's own commands write the same store while
        # `gym ipfs serve` runs (each open of the lock file is its own lock holder)
        with open(self._pins / ".lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield

    # --- CAR ------------------------------------------------------------------------------

    def export_car(self, cid: CID | str, out: BinaryIO) -> None:
        """Write the DAG under ``cid`` to ``out`` as a CARv1, parents before children, each
        distinct block once (the order of ``ipfs dag export``), within the pin bounds."""
        cid = CID.coerce(cid)
        write_car([cid], self.walk_bounded(cid), out)

    def import_car(self, stream: BinaryIO, *, pin_roots: bool = False) -> list[str]:
        """Store every block of a CARv1 (each verified against its CID); return its roots."""
        roots, blocks = read_car(stream)
        for cid, block in blocks:
            self._write_atomic(self._block_path(cid), block)
        if pin_roots:
            for root in roots:
                self.pin_add(root)
        return [str(root) for root in roots]

    # --- internals ------------------------------------------------------------------------

    def _write_atomic(self, path: Path, data: bytes) -> None:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise


def _check_owner(owner: str) -> None:
    if not OWNER_NAME.fullmatch(owner):
        raise PinOwnerError(f"{owner!r} cannot own a pin: a name is 1-64 letters, digits and "
                            "._@- (starting with a letter or digit)")


def _owner_lines(owners: set[str]) -> bytes:
    return "".join(f"{name}\n" for name in sorted(owners)).encode()
