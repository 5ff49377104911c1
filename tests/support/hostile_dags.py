"""UnixFS DAGs built to make a reader work without end (issue "judges that cannot be stalled").

``repeating_dag`` is the Purpose's evidence: each level links one child ``fanout`` times, every
link declaring 0 bytes, so a reader that trusts the sizes visits ``fanout ** levels`` empty
leaves. ``honest_repeating_dag`` declares its sizes truthfully (one byte per leaf), so only a
budget on visited blocks stops it.
"""

from __future__ import annotations

from ledger.multiformats import CID, DAG_PB, RAW
from ledger.unixfs import UNIXFS_FILE, PBLink, PBNode, UnixFSData, encode_pbnode, encode_unixfs


def _node(store, child: CID, fanout: int, size: int, tsize: int) -> tuple[CID, int]:
    data = encode_unixfs(UnixFSData(UNIXFS_FILE, filesize=size * fanout,
                                    blocksizes=(size,) * fanout))
    block = encode_pbnode(PBNode(links=(PBLink(child, "", tsize),) * fanout, data=data))
    return store.put(block, DAG_PB), len(block) + tsize * fanout


def repeating_dag(store, levels: int = 4, fanout: int = 2000) -> str:
    """Root CID of the zero-size repeating DAG (about 80 KB per level)."""
    cid = store.put(b"", RAW)
    for _ in range(levels):
        cid, _ = _node(store, cid, fanout, 0, 0)
    return str(cid)


def honest_repeating_dag(store, levels: int = 4, fanout: int = 1000) -> tuple[str, int]:
    """Root CID and declared size (``fanout ** levels`` bytes) of a DAG whose sizes add up."""
    cid, size, tsize = store.put(b"x", RAW), 1, 1
    for _ in range(levels):
        cid, tsize = _node(store, cid, fanout, size, tsize)
        size *= fanout
    return str(cid), size


def deep_dag(store, levels: int) -> str:
    """A chain of ``levels`` one-link nodes over a one-byte leaf: sizes agree, depth does not."""
    cid, tsize = store.put(b"x", RAW), 1
    for _ in range(levels):
        cid, tsize = _node(store, cid, 1, 1, tsize)
    return str(cid)
