"""The tar stream of the Kubo RPC's ``get`` for one UnixFS file, written as it is read.

As Kubo (boxo ``files/tarwriter.go``): one regular-file entry named ``name`` (the last
component of the requested path: the CID as the client typed it), mode 0644, uid/gid 0, the
current time as its mtime, then two zero blocks; USTAR headers (Kubo writes PAX extended
headers for the sub-second mtime of a plain ``get``; readers take either). With ``compress``
the stream is gzipped at ``level``; ``archive=false`` with ``compress`` is the gzipped file
alone, as in Kubo.
"""

from __future__ import annotations

import tarfile
import time
import zlib
from collections.abc import Iterator

BLOCK = 512


def tar_file(name: str, size: int, chunks: Iterator[bytes], *,
             mtime: float | None = None) -> Iterator[bytes]:
    """A tar archive holding the file ``name`` of ``size`` bytes given by ``chunks``; raises
    ``ValueError`` (the archive is then truncated) if the chunks do not add up to ``size``."""
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.type = size, 0o644, tarfile.REGTYPE
    info.mtime = int(time.time() if mtime is None else mtime)
    yield info.tobuf(format=tarfile.USTAR_FORMAT, encoding="utf-8", errors="strict")
    sent = 0
    for chunk in chunks:
        sent += len(chunk)
        if sent > size:
            raise ValueError(f"{name}: more bytes than its declared {size}")
        yield chunk
    if sent != size:
        raise ValueError(f"{name}: {sent} bytes, not its declared {size}")
    yield bytes(-size % BLOCK) + bytes(2 * BLOCK)


def gzipped(chunks: Iterator[bytes], level: int) -> Iterator[bytes]:
    """``chunks`` as one gzip member, compressed at ``level`` (1-9)."""
    compressor = zlib.compressobj(level, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    for chunk in chunks:
        if out := compressor.compress(chunk):
            yield out
    yield compressor.flush()
