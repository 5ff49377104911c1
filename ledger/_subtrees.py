"""Arithmetic of RFC 9162 trees over stored perfect subtrees.

A *perfect subtree* of a log is a complete binary tree over leaves ``[i*2^L, (i+1)*2^L)``: it
never changes once its last leaf exists, so its hash can be stored once. Every subtree that
RFC 9162 hashes (a root, an element of an audit path, an element of a consistency proof) is
either a perfect subtree or a right-edge subtree ``[start, n)`` made of at most log2(n)
perfect ones. So a root or proof at any historical size needs O(log n) perfect-subtree
hashes, and this module says which: it turns a request into ranges and ranges into
(level, index) pairs. It does no I/O; ``range_hash`` folds the hashes it is given.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

Range = tuple[int, int]  # [start, end) in leaf indices


def _split(n: int) -> int:
    """Largest power of two strictly below ``n`` (n >= 2), RFC 9162 §2.1.1's k."""
    return 1 << ((n - 1).bit_length() - 1)


def perfect_decomposition(start: int, end: int) -> list[tuple[int, int]]:
    """The perfect subtrees, left to right, whose concatenation is RFC 9162's ``[start, end)``.

    Precondition: ``[start, end)`` is a subtree RFC 9162 hashes, so ``start`` is aligned to
    the size of the first perfect piece. Returns (level, index) pairs.
    """
    nodes = []
    while start < end:
        level = (end - start).bit_length() - 1
        nodes.append((level, start >> level))
        start += 1 << level
    return nodes


def inclusion_ranges(index: int, size: int) -> list[Range]:
    """Ranges whose hashes form the audit path of leaf ``index`` in a tree of ``size`` leaves
    (RFC 9162 §2.1.3.1 PATH), leaf-to-root order."""
    path: list[Range] = []
    start, end = 0, size
    while end - start > 1:
        k = _split(end - start)
        if index - start < k:
            path.append((start + k, end))
            end = start + k
        else:
            path.append((start, start + k))
            start += k
    path.reverse()
    return path


def consistency_ranges(old_size: int, new_size: int) -> list[Range]:
    """Ranges whose hashes form the consistency proof between ``old_size`` and ``new_size``
    (RFC 9162 §2.1.4.1 SUBPROOF with b = true), in the RFC's order. Empty when
    ``old_size`` is 0 or equals ``new_size``."""
    if old_size == 0 or old_size == new_size:
        return []
    proof: list[Range] = []
    start, end, m, complete = 0, new_size, old_size, True
    while m != end:
        k = _split(end - start)
        if m - start <= k:
            proof.append((start + k, end))
            end = start + k
        else:
            proof.append((start, start + k))
            start += k
            complete = False
    if not complete:
        proof.append((start, end))
    proof.reverse()
    return proof


def range_hash(rng: Range, node: Callable[[int, int], bytes],
               node_hash: Callable[[bytes, bytes], bytes]) -> bytes:
    """RFC 9162 MTH of leaves ``rng`` from stored perfect subtrees ``node(level, index)``."""
    hashes = [node(level, index) for level, index in perfect_decomposition(*rng)]
    acc = hashes[-1]
    for left in reversed(hashes[:-1]):
        acc = node_hash(left, acc)
    return acc


def nodes_for(ranges: Sequence[Range]) -> set[tuple[int, int]]:
    """Every perfect subtree (level, index) that ``range_hash`` will read for ``ranges``."""
    return {node for rng in ranges for node in perfect_decomposition(*rng)}
