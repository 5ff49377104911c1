"""Tests of ledger.rfc9162 against the committed vectors, a naive RFC 9162 reference and pymerkle.

The reference below is written straight from the RFC 9162 §2.1 definitions (MTH, PATH,
PROOF/SUBPROOF, and the verification algorithms of §2.1.3.2 and §2.1.4.2), recursive and
slow on purpose, so that it shares no code and no tricks with the module under test.
pymerkle (GPL) is imported here only, as a second, independent oracle.
"""

from __future__ import annotations

import doctest
import hashlib
import importlib.util
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pymerkle import InmemoryTree, InvalidProof
from pymerkle.core import _inclusion_path_layout
from pymerkle.proof import InclusionProof

from ledger import rfc9162
from ledger.errors import ConsistencyProofError, InclusionProofError, VerificationError
from ledger.rfc9162 import (
    EMPTY_ROOT,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    node_hash,
    root,
    root_from_inclusion_proof,
    roots_from_consistency_proof,
    verify_consistency,
    verify_inclusion,
)

VECTORS = Path(__file__).resolve().parents[1] / "vectors"


# --- naive reference, straight from RFC 9162 §2.1 ---------------------------------------------


def _sha(b: bytes) -> bytes:
    return hashlib.sha256(b).digest()


def _k(n: int) -> int:
    """The largest power of two smaller than n (n > 1)."""
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def ref_mth(d: list[bytes]) -> bytes:
    """MTH(D[n]) over leaf data."""
    if not d:
        return _sha(b"")
    if len(d) == 1:
        return _sha(b"\x00" + d[0])
    k = _k(len(d))
    return _sha(b"\x01" + ref_mth(d[:k]) + ref_mth(d[k:]))


def ref_path(m: int, d: list[bytes]) -> list[bytes]:
    """PATH(m, D[n])."""
    if len(d) == 1:
        return []
    k = _k(len(d))
    if m < k:
        return ref_path(m, d[:k]) + [ref_mth(d[k:])]
    return ref_path(m - k, d[k:]) + [ref_mth(d[:k])]


def ref_subproof(m: int, d: list[bytes], b: bool) -> list[bytes]:
    """SUBPROOF(m, D[n], b)."""
    if m == len(d):
        return [] if b else [ref_mth(d)]
    k = _k(len(d))
    if m <= k:
        return ref_subproof(m, d[:k], b) + [ref_mth(d[k:])]
    return ref_subproof(m - k, d[k:], False) + [ref_mth(d[:k])]


def ref_proof(m: int, d: list[bytes]) -> list[bytes]:
    """PROOF(m, D[n]); empty for m == 0 and m == n."""
    return ref_subproof(m, d, True) if 0 < m < len(d) else []


def ref_verify_inclusion(h: bytes, index: int, size: int, path: list[bytes], rt: bytes) -> bool:
    """§2.1.3.2, step by step."""
    if index >= size:
        return False
    fn, sn, r = index, size - 1, h
    for p in path:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = _sha(b"\x01" + p + r)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            r = _sha(b"\x01" + r + p)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and r == rt


def ref_verify_consistency(first, second, first_hash, second_hash, path) -> bool:
    """§2.1.4.2, step by step, after the cases the RFC settles before it."""
    if first > second:
        return False
    if first == second:
        return not path and first_hash == second_hash
    if first == 0:
        return not path and first_hash == _sha(b"")
    if not path:
        return False
    if first & (first - 1) == 0:
        path = [first_hash, *path]
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = _sha(b"\x01" + c + fr)
            sr = _sha(b"\x01" + c + sr)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            sr = _sha(b"\x01" + sr + c)
        fn, sn = fn >> 1, sn >> 1
    return fr == first_hash and sr == second_hash and sn == 0


def data(n: int) -> list[bytes]:
    return [f"entry {i}".encode() for i in range(n)]


def hashes(n: int) -> list[bytes]:
    return [leaf_hash(x) for x in data(n)]


# --- hashing ----------------------------------------------------------------------------------


def test_leaf_and_node_hash_are_domain_separated():
    assert leaf_hash(b"abc") == _sha(b"\x00abc")
    assert node_hash(b"\x11" * 32, b"\x22" * 32) == _sha(b"\x01" + b"\x11" * 32 + b"\x22" * 32)
    assert leaf_hash(b"") != EMPTY_ROOT == _sha(b"")


def test_empty_tree_root_is_hash_of_empty_string():
    assert root([]) == bytes.fromhex(
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    )


def test_root_accepts_a_stream():
    assert root(iter(hashes(13))) == ref_mth(data(13))


@pytest.mark.parametrize("n", [*range(70), 127, 128, 129, 1000, (1 << 16) + 5])
def test_root_matches_reference(n):
    assert root(hashes(n)) == ref_mth(data(n))


@pytest.mark.slow
def test_million_leaves_root_and_proofs():
    leaves = [leaf_hash(i.to_bytes(4, "big")) for i in range(1_000_000)]
    rt = root(leaves)
    verify_inclusion(leaves[999_999], 999_999, len(leaves), inclusion_proof(leaves, 999_999), rt)
    old = 654_321
    proof = consistency_proof(leaves, old)
    verify_consistency(old, len(leaves), root(leaves[:old]), rt, proof)


# --- proofs against the reference -------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 300).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n - 1))))
def test_inclusion_proof_matches_reference(case):
    size, index = case
    leaves, d = hashes(size), data(size)
    proof = inclusion_proof(leaves, index)
    assert proof == ref_path(index, d)
    rt = ref_mth(d)
    assert root_from_inclusion_proof(leaves[index], index, size, proof) == rt
    verify_inclusion(leaves[index], index, size, proof, rt)
    assert ref_verify_inclusion(leaves[index], index, size, proof, rt)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 300).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_consistency_proof_matches_reference(case):
    old, new = case
    leaves, d = hashes(new), data(new)
    proof = consistency_proof(leaves, old)
    assert proof == ref_proof(old, d)
    old_root, new_root = ref_mth(d[:old]), ref_mth(d)
    verify_consistency(old, new, old_root, new_root, proof)
    assert ref_verify_consistency(old, new, old_root, new_root, proof)
    if old:
        assert roots_from_consistency_proof(old, new, old_root, proof) == (old_root, new_root)


ANY_HASH, ANY_BIT = st.integers(0, 10_000), st.integers(0, 255)  # which hash; which of its bits


def flip_a_bit(proof: list[bytes], which: int, bit: int) -> None:
    """Flip bit `bit` of hash `which` (modulo the proof's length) of `proof`, in place."""
    i = which % len(proof)
    bad = bytearray(proof[i])
    bad[bit // 8] ^= 1 << (bit % 8)
    proof[i] = bytes(bad)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 200).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n - 1))),
       ANY_HASH, ANY_BIT)
def test_any_flipped_bit_breaks_an_inclusion_proof(case, which, bit):
    size, index = case
    leaves = hashes(size)
    proof = inclusion_proof(leaves, index)
    if not proof:
        return
    flip_a_bit(proof, which, bit)
    with pytest.raises(InclusionProofError):
        verify_inclusion(leaves[index], index, size, proof, root(leaves))


@settings(max_examples=300, deadline=None)
@given(st.integers(2, 200).flatmap(lambda n: st.tuples(st.integers(1, n - 1), st.just(n))),
       ANY_HASH, ANY_BIT)
def test_any_flipped_bit_breaks_a_consistency_proof(case, which, bit):
    old, new = case
    leaves = hashes(new)
    proof = consistency_proof(leaves, old)
    flip_a_bit(proof, which, bit)
    with pytest.raises(ConsistencyProofError):
        verify_consistency(old, new, root(leaves[:old]), root(leaves), proof)


# --- pymerkle as a second oracle --------------------------------------------------------------


def _pymerkle_tree(n: int) -> InmemoryTree:
    tree = InmemoryTree(algorithm="sha256")
    for x in data(n):
        tree.append_entry(x)
    return tree


def test_pymerkle_roots_and_inclusion_paths_agree():
    tree = _pymerkle_tree(70)
    leaves = hashes(70)
    for size in range(1, 71):
        assert tree.get_root(size) == root(leaves[:size])
        for index in range(size):
            proof = tree.prove_inclusion(index + 1, size)  # pymerkle counts from one
            # pymerkle's path starts with the leaf itself; RFC 9162 leaves it out.
            assert proof.path == [leaves[index], *inclusion_proof(leaves[:size], index)]


def test_pymerkle_consistency_proofs_lead_to_our_roots():
    # pymerkle 7 shapes its consistency path differently from RFC 9162 §2.1.4 (it keeps the
    # base leaf and splits m == k to the right), so the paths cannot be compared element-wise;
    # the roots it proves must still be ours.
    tree = _pymerkle_tree(40)
    leaves = hashes(40)
    for new in range(1, 41):
        for old in range(1, new + 1):
            proof = tree.prove_consistency(old, new)
            assert proof.retrieve_prior_state() == root(leaves[:old])
            assert proof.compute_root() == root(leaves[:new])


def _pymerkle_accepts_inclusion(v: dict) -> bool:
    index, size = v["index"], v["size"]
    if not 0 <= index < size:
        return False
    rule, _ = _inclusion_path_layout(index + 1, size)
    leaf = _unhex(v["leaf_hash"])
    proof = InclusionProof("sha256", True, size, index + 1, rule, [leaf, *map(_unhex, v["proof"])])
    try:
        proof.verify(leaf, _unhex(v["root"]))
    except InvalidProof:
        return False
    return True


# --- committed vectors ------------------------------------------------------------------------


def _unhex(s: str) -> bytes:
    assert s.startswith("0x") and len(s) == 66 and s == s.lower(), s
    return bytes.fromhex(s[2:])


def _load(name: str) -> dict:
    doc = json.loads((VECTORS / name).read_text())
    assert doc["count"] == len(doc.get("vectors", doc.get("roots", [])))
    return doc


INCLUSION = _load("inclusion.json")["vectors"]
CONSISTENCY = _load("consistency.json")["vectors"]


@pytest.mark.parametrize("v", INCLUSION, ids=[v["name"] for v in INCLUSION])
def test_inclusion_vector(v):
    args = (_unhex(v["leaf_hash"]), v["index"], v["size"], [_unhex(p) for p in v["proof"]])
    rt = _unhex(v["root"])
    assert ref_verify_inclusion(*args, rt) is v["valid"]
    assert _pymerkle_accepts_inclusion(v) is v["valid"]
    if v["valid"]:
        verify_inclusion(*args, rt)
        assert root_from_inclusion_proof(*args) == rt
    else:
        with pytest.raises(InclusionProofError) as excinfo:
            verify_inclusion(*args, rt)
        assert isinstance(excinfo.value, VerificationError)


@pytest.mark.parametrize("v", CONSISTENCY, ids=[v["name"] for v in CONSISTENCY])
def test_consistency_vector(v):
    args = (
        v["old_size"],
        v["new_size"],
        _unhex(v["old_root"]),
        _unhex(v["new_root"]),
        [_unhex(p) for p in v["proof"]],
    )
    assert ref_verify_consistency(*args) is v["valid"]
    if v["valid"]:
        verify_consistency(*args)
    else:
        with pytest.raises(ConsistencyProofError):
            verify_consistency(*args)


def test_vector_sets_cover_every_named_mutation():
    names = {v["name"].split("/")[0] for v in INCLUSION + CONSISTENCY}
    for mutation in [
        "happy-path",
        "modified-proof[0]-bit-3",
        "wrong-leaf",
        "wrong-index",
        "tree-size-off-by-one[+1]",
        "tree-size-off-by-one[-1]",
        "tree-size-off-by-one[old+1]",
        "tree-size-off-by-one[new-1]",
        "truncated-proof",
        "extended-proof",
        "wrong-root",
        "wrong-old-root",
        "old-size-greater-than-new[swapped]",
        "index-out-of-range",
    ]:
        assert mutation in names
    sizes = {v["size"] for v in INCLUSION if v["valid"]}
    assert set(range(1, 21)) | {32, 64, 1000} <= sizes
    assert {(v["old_size"], v["new_size"]) for v in CONSISTENCY if v["valid"]} >= {
        (0, 5), (3, 7), (4, 8), (7, 7), (500, 1000)
    }  # fmt: skip


def test_roots_vectors():
    doc = _load("roots.json")
    leaves = [bytes.fromhex(x[2:]) for x in doc["leaves"]]
    assert [_unhex(h) for h in doc["leaf_hashes"]] == [leaf_hash(x) for x in leaves]
    assert [_unhex(r) for r in doc["roots"]] == [
        ref_mth(leaves[: k + 1]) for k in range(len(leaves))
    ]


def test_committed_vectors_are_what_make_vectors_writes():
    spec = importlib.util.spec_from_file_location("make_vectors", VECTORS / "make_vectors.py")
    make_vectors = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_vectors)
    for name, text in make_vectors.build_all().items():
        assert (VECTORS / name).read_text() == text, f"{name} is stale: run make_vectors.py"


# --- preconditions and malformed input --------------------------------------------------------

H = b"\x42" * 32


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((H, 0, 0, [], EMPTY_ROOT), "outside a tree of size 0"),
        ((H, 5, 5, [H] * 3, H), "outside a tree of size 5"),
        ((H, -1, 5, [H] * 3, H), "non-negative int"),
        ((H, True, 5, [H] * 3, H), "non-negative int"),
        ((H, 1, 5.0, [H] * 3, H), "non-negative int"),
        ((H[:31], 1, 5, [H] * 3, H), "leaf hash must be 32 bytes, got 31 bytes"),
        ((H.hex(), 1, 5, [H] * 3, H), "leaf hash must be 32 bytes, got str"),
        ((H, 1, 5, [H, H[:31], H], H), r"proof\[1\] must be 32 bytes"),
        ((H, 1, 5, [H] * 3, H + b"\x00"), "root must be 32 bytes"),
        ((H, 1, 5, [H] * 2, H), "proof has 2 hashes, expected 3"),
        ((H, 1, 5, [H] * 4, H), "proof has 4 hashes, expected 3"),
        ((H, 0, 1, [H], H), "proof has 1 hashes, expected 0"),
    ],
)
def test_verify_inclusion_rejects_malformed_input(args, message):
    with pytest.raises(InclusionProofError, match=message):
        verify_inclusion(*args)


def test_inclusion_error_carries_expected_and_computed():
    leaves = hashes(5)
    proof = inclusion_proof(leaves, 2)
    with pytest.raises(InclusionProofError) as excinfo:
        verify_inclusion(leaves[3], 2, 5, proof, root(leaves))
    assert excinfo.value.expected == root(leaves).hex()
    assert excinfo.value.computed == root_from_inclusion_proof(leaves[3], 2, 5, proof).hex()
    with pytest.raises(InclusionProofError) as excinfo:
        verify_inclusion(leaves[2], 2, 5, proof[:-1], root(leaves))
    assert (excinfo.value.expected, excinfo.value.computed) == (3, 2)


def test_single_leaf_tree():
    h = leaf_hash(b"only")
    assert root([h]) == h
    assert inclusion_proof([h], 0) == []
    verify_inclusion(h, 0, 1, [], h)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((5, 4, H, H, []), "old size 5 is greater than new size 4"),
        ((3, 3, H, H, [H]), "proof has 1 hashes, expected 0"),
        ((3, 3, H, b"\x00" * 32, []), "different new root"),
        ((0, 3, EMPTY_ROOT, H, [H]), "proof has 1 hashes, expected 0"),
        ((0, 3, H, H, []), "different old root"),
        ((3, 7, H, H, []), "proof has 0 hashes, expected 4"),
        ((-1, 7, H, H, []), "non-negative int"),
        ((3, 7, H[:5], H, [H] * 4), "old root must be 32 bytes"),
        ((3, 7, H, None, [H] * 4), "new root must be 32 bytes, got NoneType"),
        ((3, 7, H, H, [H, H, H, b""]), r"proof\[3\] must be 32 bytes"),
    ],
)
def test_verify_consistency_rejects_malformed_input(args, message):
    with pytest.raises(ConsistencyProofError, match=message):
        verify_consistency(*args)


def test_consistency_trivial_cases_per_rfc():
    leaves = hashes(9)
    assert consistency_proof(leaves, 0) == consistency_proof(leaves, 9) == []
    verify_consistency(9, 9, root(leaves), root(leaves), [])
    verify_consistency(0, 9, EMPTY_ROOT, root(leaves), [])
    verify_consistency(0, 0, EMPTY_ROOT, EMPTY_ROOT, [])
    with pytest.raises(ConsistencyProofError, match="empty old tree"):
        roots_from_consistency_proof(0, 9, EMPTY_ROOT, [])


def test_consistency_error_carries_expected_and_computed():
    leaves = hashes(11)
    proof = consistency_proof(leaves, 6)
    wrong = root(leaves[:5])
    with pytest.raises(ConsistencyProofError) as excinfo:
        verify_consistency(6, 11, wrong, root(leaves), proof)
    assert excinfo.value.expected == wrong.hex()
    assert excinfo.value.computed == root(leaves[:6]).hex()


def test_proof_generation_rejects_out_of_range():
    leaves = hashes(4)
    with pytest.raises(InclusionProofError):
        inclusion_proof(leaves, 4)
    with pytest.raises(InclusionProofError):
        inclusion_proof([], 0)
    with pytest.raises(ConsistencyProofError):
        consistency_proof(leaves, 5)


def test_module_docstring_example_runs():
    result = doctest.testmod(rfc9162, raise_on_error=False)
    assert result.attempted > 0 and result.failed == 0
