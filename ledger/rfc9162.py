"""RFC 9162 Merkle tree hashing, inclusion and consistency proofs (RFC 9162 §2.1).

The tree is the Certificate Transparency v2 tree: leaf hash ``SHA-256(0x00 || data)``
(§2.1.1), node hash ``SHA-256(0x01 || left || right)``, the root of ``n`` leaves splits at the
largest power of two smaller than ``n``, and the root of the empty tree is ``SHA-256("")``.
Proofs are lists of 32-byte hashes in the RFC's order: an inclusion proof is the audit path
from the leaf up to the root with leaf and root excluded (§2.1.3); a consistency proof is
``PROOF(m, D[n])`` of §2.1.4.

Where this module differs from the RFC text: the RFC defines roots and proofs recursively;
here they are computed iteratively (a stack of perfect subtree roots, O(log n) memory), which
is fast enough for a million leaves. The RFC verification algorithms (§2.1.3.2, §2.1.4.2)
are rewritten in the equivalent "inner + border" form used by transparency-dev/merkle: the
expected proof length is known from the index and sizes alone, so a truncated or extended
proof is rejected before any hashing. As there, "compute the root a proof leads to"
(``root_from_inclusion_proof``, ``roots_from_consistency_proof``) is kept apart from
"verify" (``verify_inclusion``, ``verify_consistency``), which compares against the claimed
roots and raises ``InclusionProofError`` / ``ConsistencyProofError`` carrying the expected
and computed values.

>>> leaves = [leaf_hash(bytes([i])) for i in range(5)]
>>> proof = inclusion_proof(leaves, 3)
>>> verify_inclusion(leaves[3], 3, 5, proof, root(leaves))
>>> verify_consistency(2, 5, root(leaves[:2]), root(leaves), consistency_proof(leaves, 2))
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

from ledger.errors import ConsistencyProofError, InclusionProofError, VerificationError

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()


def leaf_hash(data: bytes) -> bytes:
    """Hash of a leaf holding ``data``: SHA-256(0x00 || data) (§2.1.1)."""
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """Hash of an interior node: SHA-256(0x01 || left || right) (§2.1.1)."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def root(leaf_hashes: Iterable[bytes]) -> bytes:
    """Root (MTH, §2.1.1) of the tree over ``leaf_hashes``; ``EMPTY_ROOT`` for no leaves.

    Streams the leaves once and keeps only the roots of the perfect subtrees seen so far,
    one per set bit of the count, then folds them right to left.
    """
    stack: list[bytes] = []
    for count, h in enumerate(leaf_hashes, start=1):
        stack.append(h)
        # Each trailing zero bit of the new count closes one more perfect subtree.
        merges = (count & -count).bit_length() - 1
        for _ in range(merges):
            right = stack.pop()
            stack.append(node_hash(stack.pop(), right))
    if not stack:
        return EMPTY_ROOT
    acc = stack.pop()
    while stack:
        acc = node_hash(stack.pop(), acc)
    return acc


def _split(n: int) -> int:
    """Largest power of two strictly smaller than ``n`` (n >= 2): the RFC's ``k``."""
    return 1 << ((n - 1).bit_length() - 1)


def _subtree_root(leaf_hashes: Sequence[bytes], lo: int, hi: int) -> bytes:
    return root(leaf_hashes[i] for i in range(lo, hi))


def inclusion_proof(leaf_hashes: Sequence[bytes], index: int) -> list[bytes]:
    """Audit path ``PATH(index, D[n])`` (§2.1.3.1), leaf to root, leaf and root excluded.

    Precondition: ``0 <= index < len(leaf_hashes)``; otherwise ``InclusionProofError``.
    """
    size = len(leaf_hashes)
    if not 0 <= index < size:
        raise InclusionProofError(f"index {index} is outside a tree of size {size}")
    siblings = []  # ranges of the sibling subtrees, root to leaf
    lo, hi = 0, size
    while hi - lo > 1:
        k = _split(hi - lo)
        if index < lo + k:
            siblings.append((lo + k, hi))
            hi = lo + k
        else:
            siblings.append((lo, lo + k))
            lo += k
    return [_subtree_root(leaf_hashes, a, b) for a, b in reversed(siblings)]


def consistency_proof(leaf_hashes: Sequence[bytes], old_size: int) -> list[bytes]:
    """Consistency proof ``PROOF(old_size, D[n])`` (§2.1.4.1) in the RFC's order.

    Empty when ``old_size`` is 0 or equals the tree size. Precondition:
    ``0 <= old_size <= len(leaf_hashes)``; otherwise ``ConsistencyProofError``.
    """
    size = len(leaf_hashes)
    if not 0 <= old_size <= size:
        raise ConsistencyProofError(f"old size {old_size} is outside 0..{size}")
    if old_size in (0, size):
        return []
    nodes = []  # ranges, root to leaf, as SUBPROOF(m, D[lo:hi], complete) recurses
    lo, hi, complete = 0, size, True
    while old_size - lo != hi - lo:
        k = _split(hi - lo)
        if old_size - lo <= k:
            nodes.append((lo + k, hi))
            hi = lo + k
        else:
            nodes.append((lo, lo + k))
            lo += k
            complete = False
    if not complete:  # the old tree's rightmost subtree is not the old root itself
        nodes.append((lo, hi))
    return [_subtree_root(leaf_hashes, a, b) for a, b in reversed(nodes)]


def _check_hash(value: object, what: str, error: type[VerificationError]) -> bytes:
    if not isinstance(value, bytes) or len(value) != HASH_SIZE:
        got = f"{len(value)} bytes" if isinstance(value, bytes) else type(value).__name__
        raise error(f"{what} must be {HASH_SIZE} bytes, got {got}")
    return value


def _check_int(value: object, what: str, error: type[VerificationError]) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise error(f"{what} must be a non-negative int, got {value!r}")
    return value


def _check_proof(proof: Sequence[bytes], expected: int, error: type[VerificationError]) -> None:
    if len(proof) != expected:
        raise error(
            f"proof has {len(proof)} hashes, expected {expected}",
            expected=expected,
            computed=len(proof),
        )
    for i, h in enumerate(proof):
        _check_hash(h, f"proof[{i}]", error)


def _decompose(index: int, last: int) -> tuple[int, int]:
    """Split the path of leaf ``index`` in a tree whose last leaf is ``last`` in two parts.

    ``inner`` levels lie below the point where the paths to ``index`` and ``last`` part; there
    the sibling may be on either side. Above it, the path runs along the right border and the
    tree has a (left) sibling only where ``index`` has a 1 bit: ``border`` of them.
    """
    inner = (index ^ last).bit_length()
    return inner, (index >> inner).bit_count()


def root_from_inclusion_proof(
    leaf_hash: bytes, index: int, size: int, proof: Sequence[bytes]
) -> bytes:
    """Root that ``proof`` leads to from ``leaf_hash`` at ``index`` in a tree of ``size``.

    Raises ``InclusionProofError`` if ``index >= size`` (so always for ``size == 0``), if an
    input hash is not 32 bytes, or if the proof does not have exactly the length that
    ``index`` and ``size`` dictate. It does not know the true root: see ``verify_inclusion``.
    """
    _check_hash(leaf_hash, "leaf hash", InclusionProofError)
    _check_int(index, "index", InclusionProofError)
    _check_int(size, "size", InclusionProofError)
    if index >= size:
        raise InclusionProofError(f"index {index} is outside a tree of size {size}")
    inner, border = _decompose(index, size - 1)
    _check_proof(proof, inner + border, InclusionProofError)
    acc = leaf_hash
    for level, sibling in enumerate(proof[:inner]):
        acc = node_hash(sibling, acc) if (index >> level) & 1 else node_hash(acc, sibling)
    for sibling in proof[inner:]:
        acc = node_hash(sibling, acc)
    return acc


def verify_inclusion(
    leaf_hash: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes
) -> None:
    """Check that ``proof`` shows ``leaf_hash`` at ``index`` in the tree of ``size`` and ``root``.

    Returns ``None`` on success; raises ``InclusionProofError`` otherwise (see
    ``root_from_inclusion_proof`` for the malformed cases), with the expected and computed
    roots as hex when the proof is well formed but leads elsewhere.
    """
    _check_hash(root, "root", InclusionProofError)
    computed = root_from_inclusion_proof(leaf_hash, index, size, proof)
    if computed != root:
        raise InclusionProofError(
            "inclusion proof leads to a different root",
            expected=root.hex(),
            computed=computed.hex(),
        )


def roots_from_consistency_proof(
    old_size: int, new_size: int, old_root: bytes, proof: Sequence[bytes]
) -> tuple[bytes, bytes]:
    """Old and new roots that ``proof`` leads to; precondition ``0 < old_size <= new_size``.

    ``old_root`` is needed only when ``old_size`` is a power of two, where the proof leaves
    it out (the old tree is then a subtree of the new one); it is returned as given in that
    case. For ``old_size == new_size`` the proof is empty and both roots are ``old_root``.
    Raises ``ConsistencyProofError`` on a broken precondition, an input hash that is not 32
    bytes, or a proof whose length is not the one the sizes dictate.
    """
    _check_int(old_size, "old size", ConsistencyProofError)
    _check_int(new_size, "new size", ConsistencyProofError)
    _check_hash(old_root, "old root", ConsistencyProofError)
    if old_size > new_size:
        raise ConsistencyProofError(f"old size {old_size} is greater than new size {new_size}")
    if old_size == 0:
        raise ConsistencyProofError("an empty old tree has no consistency proof to compute from")
    if old_size == new_size:
        _check_proof(proof, 0, ConsistencyProofError)
        return old_root, old_root
    # Work at the level of the old tree's rightmost perfect subtree, the proof's seed node.
    shift = (old_size & -old_size).bit_length() - 1
    index = (old_size - 1) >> shift
    inner, border = _decompose(index, (new_size - 1) >> shift)
    seeded = index == 0  # old_size is a power of two: the seed is old_root itself
    _check_proof(proof, inner + border + (0 if seeded else 1), ConsistencyProofError)
    path = list(proof) if seeded else list(proof[1:])
    old = new = old_root if seeded else proof[0]
    for level, sibling in enumerate(path[:inner]):
        if (index >> level) & 1:  # left sibling: part of both trees
            old = node_hash(sibling, old)
            new = node_hash(sibling, new)
        else:  # right sibling: leaves added after old_size
            new = node_hash(new, sibling)
    for sibling in path[inner:]:
        old = node_hash(sibling, old)
        new = node_hash(sibling, new)
    return old, new


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> None:
    """Check that the tree (``new_size``, ``new_root``) extends (``old_size``, ``old_root``).

    Per §2.1.4: for ``old_size == new_size`` the proof must be empty and the roots equal; for
    ``old_size == 0`` the proof must be empty and ``old_root`` must be ``EMPTY_ROOT``; else
    ``0 < old_size < new_size`` and the proof must lead to both roots. Raises
    ``ConsistencyProofError`` (with expected and computed values) on any failure.
    """
    _check_int(old_size, "old size", ConsistencyProofError)
    _check_int(new_size, "new size", ConsistencyProofError)
    _check_hash(old_root, "old root", ConsistencyProofError)
    _check_hash(new_root, "new root", ConsistencyProofError)
    if old_size > new_size:
        raise ConsistencyProofError(
            f"old size {old_size} is greater than new size {new_size}",
            expected=f"<= {new_size}",
            computed=old_size,
        )
    if old_size == 0:
        _check_proof(proof, 0, ConsistencyProofError)
        computed_old, computed_new = EMPTY_ROOT, new_root
    else:
        computed_old, computed_new = roots_from_consistency_proof(
            old_size, new_size, old_root, proof
        )
    if computed_old != old_root:
        raise ConsistencyProofError(
            "consistency proof leads to a different old root",
            expected=old_root.hex(),
            computed=computed_old.hex(),
        )
    if computed_new != new_root:
        raise ConsistencyProofError(
            "consistency proof leads to a different new root",
            expected=new_root.hex(),
            computed=computed_new.hex(),
        )
