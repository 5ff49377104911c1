"""The embedded IPFS-compatible content store: a directory of verified blocks plus pins.

Layout under ``root``::

    blocks/<CIDv1 base32>   one file per block, written to a temp file then os.replace'd
    pins/<CIDv1 base32>     an empty file per recursive pin

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

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from ledger.car import read_car, write_car
from ledger.errors import NotFoundError
from ledger.multiformats import CID, RAW, verify_block
from ledger.unixfs import (
    DEFAULT_CAT_MAX_BYTES,
    Source,
    import_bytes_stream,
    iter_file_bytes,
    walk_dag,
)


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

    # --- pins -----------------------------------------------------------------------------

    def pin_add(self, cid: CID | str) -> str:
        """Pin ``cid`` recursively after checking its whole DAG is present and intact."""
        cid = CID.coerce(cid)
        for _ in walk_dag(cid, self.get_block):
            pass
        (self._pins / str(cid.to_v1())).touch()
        return str(cid)

    def pin_rm(self, cid: CID | str) -> None:
        try:
            (self._pins / str(CID.coerce(cid).to_v1())).unlink()
        except FileNotFoundError:
            raise NotFoundError(f"{cid} is not pinned") from None

    def pin_ls(self) -> list[str]:
        """The pinned root CIDs (CIDv1 strings), sorted."""
        return sorted(path.name for path in self._pins.iterdir() if not path.name.startswith("."))

    # --- CAR ------------------------------------------------------------------------------

    def export_car(self, cid: CID | str, out: BinaryIO) -> None:
        """Write the DAG under ``cid`` to ``out`` as a CARv1, parents before children, each
        distinct block once (the order of ``ipfs dag export``)."""
        cid = CID.coerce(cid)
        write_car([cid], walk_dag(cid, self.get_block), out)

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
