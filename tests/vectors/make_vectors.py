"""Regenerate the RFC 9162 test vectors: inclusion.json, consistency.json, roots.json.

    python tests/vectors/make_vectors.py          # rewrite the three files beside this script
    python tests/vectors/make_vectors.py --check  # exit 1 if the committed files differ

The output is deterministic: leaf ``i`` holds the bytes ``b"leaf-<i>"`` and every mutation
is chosen by a fixed rule. Python (tests/ledger/test_rfc9162.py) and Solidity (forge tests
in contracts/test/) both read these files, so the format is fixed: hashes are "0x"-prefixed
lowercase 64-hex strings, sizes and indices are non-negative JSON integers.

Vector names are ``<case>/size-<n>/index-<i>`` (inclusion) and ``<case>/old-<m>/new-<n>``
(consistency), unique within a file; the numbers are those of the valid proof a mutation
started from, the vector's own fields say what was changed. ``<case>`` is ``happy-path``
for valid vectors, else one mutation of a valid proof: ``modified-proof[i]-bit-j`` flips
bit j (bit j % 8 of byte j // 8, bit 0 the least significant) of proof element i; ``wrong-leaf``, ``wrong-index``, ``wrong-root``,
``wrong-old-root``; ``tree-size-off-by-one[+1]`` and ``[-1]`` (consistency: ``[old+1]``,
``[old-1]``, ``[new+1]``, ``[new-1]``); ``truncated-proof`` (last element dropped),
``extended-proof`` (one hash appended); ``index-out-of-range`` (index = size);
``old-size-greater-than-new[new+1]`` and ``[swapped]`` (sizes and roots exchanged).
A mutation that still verifies (e.g. a size off by one whose proof has the same shape and
root) is left out, so every mutated vector has ``"valid": false``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ledger.errors import VerificationError
from ledger.rfc9162 import (
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    root,
    verify_consistency,
    verify_inclusion,
)

HERE = Path(__file__).resolve().parent
MAX_LEAVES = 1000
EXTRA_HASH = leaf_hash(b"extra")  # appended by extended-proof, replaces the leaf in wrong-leaf

INCLUSION_SIZES = [*range(1, 21), 32, 64, 128, 256, 1000]
INCLUSION_MUTATED = [(0, 1), (3, 7), (5, 8), (12, 13), (0, 20), (777, 1000)]  # (index, size)
CONSISTENCY_SIZES = [*range(1, 17), 20, 32, 64, 128, 256, 1000]
CONSISTENCY_MUTATED = [(0, 5), (1, 2), (4, 7), (3, 7), (6, 13), (7, 7), (500, 1000)]  # (old, new)


def leaf_data(i: int) -> bytes:
    return f"leaf-{i}".encode()


LEAF_HASHES = [leaf_hash(leaf_data(i)) for i in range(MAX_LEAVES)]


def hx(b: bytes) -> str:
    return "0x" + b.hex()


def flip_bit(h: bytes, j: int) -> bytes:
    b = bytearray(h)
    b[j // 8] ^= 1 << (j % 8)
    return bytes(b)


def bit_flips(proof: list[bytes]):
    """(name, proof with one bit flipped in element i) for every element i."""
    for i, p in enumerate(proof):
        j = (37 * i + 3) % 256  # spread the flipped bits over the whole hash
        yield f"modified-proof[{i}]-bit-{j}", [*proof[:i], flip_bit(p, j), *proof[i + 1 :]]


def _valid(check, *args) -> bool:
    try:
        check(*args)
    except VerificationError:
        return False
    return True


def _sample(n: int) -> list[int]:
    """Indices (or old sizes) worth testing in a tree of size n: all for small n, edges else."""
    if n <= 20:
        return list(range(n))
    return sorted({0, 1, n // 2 - 1, n // 2, n // 2 + 1, (3 * n) // 4 + 1, n - 2, n - 1})


def inclusion_vector(name: str, leaf: bytes, index: int, size: int, proof: list, rt: bytes):
    valid = _valid(verify_inclusion, leaf, index, size, proof, rt)
    return {
        "name": name,
        "leaf_hash": hx(leaf),
        "index": index,
        "size": size,
        "proof": [hx(p) for p in proof],
        "root": hx(rt),
        "valid": valid,
    }


def inclusion_mutations(index: int, size: int) -> list[dict]:
    leaf, rt = LEAF_HASHES[index], root(LEAF_HASHES[:size])
    proof = inclusion_proof(LEAF_HASHES[:size], index)
    cases = [(name, leaf, index, size, flipped, rt) for name, flipped in bit_flips(proof)]
    cases += [
        ("wrong-leaf", EXTRA_HASH, index, size, proof, rt),
        ("wrong-index", leaf, index + 1 if index + 1 < size else index - 1, size, proof, rt),
        ("tree-size-off-by-one[+1]", leaf, index, size + 1, proof, rt),
        ("tree-size-off-by-one[-1]", leaf, index, size - 1, proof, rt),
        ("truncated-proof", leaf, index, size, proof[:-1], rt),
        ("extended-proof", leaf, index, size, proof + [EXTRA_HASH], rt),
        ("wrong-root", leaf, index, size, proof, flip_bit(rt, 0)),
        ("index-out-of-range", leaf, size, size, proof, rt),
    ]
    if not proof:  # nothing to truncate
        cases = [c for c in cases if c[0] != "truncated-proof"]
    if size == 1:  # no other index inside the tree
        cases = [c for c in cases if c[0] != "wrong-index"]
    vectors = [
        inclusion_vector(f"{name}/size-{size}/index-{index}", *rest) for name, *rest in cases
    ]
    return [v for v in vectors if not v["valid"]]


def build_inclusion() -> dict:
    vectors = []
    for size in INCLUSION_SIZES:
        rt = root(LEAF_HASHES[:size])
        for index in _sample(size):
            proof = inclusion_proof(LEAF_HASHES[:size], index)
            name = f"happy-path/size-{size}/index-{index}"
            vectors.append(inclusion_vector(name, LEAF_HASHES[index], index, size, proof, rt))
    for index, size in INCLUSION_MUTATED:
        vectors += inclusion_mutations(index, size)
    name = "index-out-of-range/size-0/index-0"
    vectors.append(inclusion_vector(name, LEAF_HASHES[0], 0, 0, [], root([])))
    assert all(v["valid"] == v["name"].startswith("happy-path/") for v in vectors)
    assert len({v["name"] for v in vectors}) == len(vectors)
    return {
        "description": "RFC 9162 §2.1.3 inclusion proofs (audit path leaf to root). Leaf i holds "
        "b'leaf-<i>'; see tests/vectors/make_vectors.py for the mutation names.",
        "count": len(vectors),
        "vectors": vectors,
    }


def consistency_vector(name, old_size, new_size, old_root, new_root, proof):
    valid = _valid(verify_consistency, old_size, new_size, old_root, new_root, proof)
    return {
        "name": name,
        "old_size": old_size,
        "new_size": new_size,
        "old_root": hx(old_root),
        "new_root": hx(new_root),
        "proof": [hx(p) for p in proof],
        "valid": valid,
    }


def consistency_mutations(old: int, new: int) -> list[dict]:
    old_root, new_root = root(LEAF_HASHES[:old]), root(LEAF_HASHES[:new])
    proof = consistency_proof(LEAF_HASHES[:new], old)
    cases = [(name, old, new, old_root, new_root, flipped) for name, flipped in bit_flips(proof)]
    cases += [
        ("wrong-old-root", old, new, flip_bit(old_root, 0), new_root, proof),
        ("wrong-root", old, new, old_root, flip_bit(new_root, 0), proof),
        ("tree-size-off-by-one[old+1]", old + 1, new, old_root, new_root, proof),
        ("tree-size-off-by-one[old-1]", old - 1, new, old_root, new_root, proof),
        ("tree-size-off-by-one[new+1]", old, new + 1, old_root, new_root, proof),
        ("tree-size-off-by-one[new-1]", old, new - 1, old_root, new_root, proof),
        ("truncated-proof", old, new, old_root, new_root, proof[:-1]),
        ("extended-proof", old, new, old_root, new_root, proof + [EXTRA_HASH]),
        ("old-size-greater-than-new[new+1]", new + 1, new, old_root, new_root, proof),
    ]
    if old < new:
        cases.append(("old-size-greater-than-new[swapped]", new, old, new_root, old_root, proof))
    cases = [c for c in cases if c[1] >= 0 and c[2] >= 0]
    if not proof:
        cases = [c for c in cases if c[0] != "truncated-proof"]
    vectors = [consistency_vector(f"{name}/old-{old}/new-{new}", *rest) for name, *rest in cases]
    return [v for v in vectors if not v["valid"]]


def build_consistency() -> dict:
    vectors = []
    for new in CONSISTENCY_SIZES:
        new_root = root(LEAF_HASHES[:new])
        for old in sorted({*_sample(new), new}):
            proof = consistency_proof(LEAF_HASHES[:new], old)
            name = f"happy-path/old-{old}/new-{new}"
            vectors.append(
                consistency_vector(name, old, new, root(LEAF_HASHES[:old]), new_root, proof)
            )
    for old, new in CONSISTENCY_MUTATED:
        vectors += consistency_mutations(old, new)
    assert all(v["valid"] == v["name"].startswith("happy-path/") for v in vectors)
    assert len({v["name"] for v in vectors}) == len(vectors)
    return {
        "description": "RFC 9162 §2.1.4 consistency proofs (PROOF(m, D[n]) order). Leaf i holds "
        "b'leaf-<i>'; the old root of size 0 is SHA-256(''); see "
        "tests/vectors/make_vectors.py for the mutation names.",
        "count": len(vectors),
        "vectors": vectors,
    }


def build_roots(n: int = 32) -> dict:
    return {
        "description": "RFC 9162 §2.1.1 roots: roots[k] is the root of the first k+1 leaves; "
        "leaves are the raw leaf data, leaf_hashes SHA-256(0x00 || data).",
        "count": n,
        "leaves": [hx(leaf_data(i)) for i in range(n)],
        "leaf_hashes": [hx(h) for h in LEAF_HASHES[:n]],
        "roots": [hx(root(LEAF_HASHES[: k + 1])) for k in range(n)],
    }


def render(doc: dict) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def build_all() -> dict[str, str]:
    """File name -> file text of every vector file."""
    return {
        "inclusion.json": render(build_inclusion()),
        "consistency.json": render(build_consistency()),
        "roots.json": render(build_roots()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args()
    stale = []
    for name, text in build_all().items():
        path = HERE / name
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print(f"stale vector files: {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
