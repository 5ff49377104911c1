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


def zeros_file(store, nodes: int = 174, leaves_per_node: int = 174) -> tuple[str, int]:
    """The DAG Kubo builds for ``nodes * leaves_per_node`` chunks of zeros (7.9 GB by default):
    one 256 KiB leaf, linked ``leaves_per_node`` times by one interior node, linked ``nodes``
    times by the root. A legitimate file whose reading takes long; four blocks on disk."""
    from ledger.unixfs import CHUNK_SIZE

    leaf = store.put(bytes(CHUNK_SIZE), RAW)
    middle, tsize = _node(store, leaf, leaves_per_node, CHUNK_SIZE, CHUNK_SIZE)
    root, _ = _node(store, middle, nodes, CHUNK_SIZE * leaves_per_node, tsize)
    return str(root), CHUNK_SIZE * leaves_per_node * nodes
