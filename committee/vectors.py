"""Test vectors for the committee's BLS (docs/committee.md), shared by the Python and forge
tests: ``python -m committee.vectors [PATH]`` writes ``tests/vectors/bls_committee.json``.

Deterministic: keys come from the seeds ``gym-verifier-0`` .. ``gym-verifier-63``
(``SecretKey.from_seed``), messages from fixed strings, so a rerun writes the same bytes and
``tests/committee/test_bls.py`` checks that the committed file is what this writes now.
Deployment: chain 31337, committee ``0x5615dEB798BB3E4dFa0139dFa1b3D433Cc23b72f`` (the first
contract a forge test deploys). Every integer that is a point coordinate, key, digest or
``gamma`` is ``0x`` + 64 hex digits; points are in EIP-197 order (``committee.bls``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from eth_utils import keccak, to_checksum_address

from committee.bls import (
    G2,
    SecretKey,
    aggregate_pk1,
    aggregate_pk2,
    aggregate_signatures,
    g1_to_json,
    g2_to_json,
    gamma,
    hash_to_g1,
    hash_to_g1_hint,
    int_to_hex,
    sign,
)
from committee.messages import (
    REJECTED,
    UPHELD,
    Verdict,
    pop_digest,
    proof_of_possession,
    reason_bytes,
)

CHAIN_ID = 31337
COMMITTEE = "0x5615dEB798BB3E4dFa0139dFa1b3D433Cc23b72f"
KEYS = 64
DEFAULT_PATH = Path(__file__).resolve().parent.parent / "tests" / "vectors" / "bls_committee.json"

# Digests for hash_to_g1: the edges of uint256 (zero, all ones >= p, p itself) and keccak
# outputs chosen so that some need more than one increment (the test counts them).
HASH_DIGESTS = [
    bytes(32),
    b"\xff" * 32,
    (0x30644E72E131A029B85045B68181585D97816A916871CA8D3C208C16D87CFD47).to_bytes(32, "big"),
    keccak(text="gym-hash-to-g1-0"),
    keccak(text="gym-hash-to-g1-1"),
    keccak(text="gym-hash-to-g1-9"),
    keccak(text="gym-hash-to-g1-5"),
]

# (challenge id, receipt, verdict, reason, signers)
VERDICTS = [
    (1, "gym-receipt-1", UPHELD, "sampling", [0, 1, 2]),
    (2, "gym-receipt-2", REJECTED, None, list(range(KEYS))),
    (3, "gym-receipt-3", UPHELD, "library_root", [3, 7, 8, 20, 33, 41, 62]),
]


def seed(index: int) -> str:
    return f"gym-verifier-{index}"


def verifier_address(index: int) -> str:
    """A fixed address for verifier ``index`` (no key behind it; forge pranks it)."""
    return to_checksum_address(keccak(text=f"gym-verifier-address-{index}")[12:])


def build_vectors() -> dict[str, Any]:
    sks = [SecretKey.from_seed(seed(i)) for i in range(KEYS)]
    pk1s = [sk.pk1() for sk in sks]
    pk2s = [sk.pk2() for sk in sks]
    keys = [{"seed": seed(i), "sk": int_to_hex(sk.value), "pk1": g1_to_json(pk1s[i]),
             "pk2": g2_to_json(pk2s[i])} for i, sk in enumerate(sks)]
    hashes = [{"digest": "0x" + d.hex(), "point": g1_to_json(hash_to_g1(d)),
               "hint": [int_to_hex(w) for w in hash_to_g1_hint(d)]} for d in HASH_DIGESTS]
    pops = []
    for i in range(3):
        verifier = verifier_address(i)
        pops.append({"chain_id": CHAIN_ID, "committee": COMMITTEE, "verifier": verifier,
                     "key_index": i,
                     "digest": "0x" + pop_digest(CHAIN_ID, COMMITTEE, verifier, pk1s[i]).hex(),
                     "sigma": g1_to_json(proof_of_possession(sks[i], CHAIN_ID, COMMITTEE,
                                                             verifier))})
    verdicts = []
    for challenge_id, receipt, outcome, reason, signers in VERDICTS:
        verdict = Verdict(challenge_id, keccak(text=receipt), outcome,
                          reason_bytes(reason) if reason else bytes(32))
        digest = verdict.digest(CHAIN_ID, COMMITTEE)
        sigma = aggregate_signatures(sign(sks[i], digest) for i in signers)
        apk1 = aggregate_pk1(pk1s[i] for i in signers)
        apk2 = aggregate_pk2(pk2s[i] for i in signers)
        verdicts.append({"chain_id": CHAIN_ID, "committee": COMMITTEE,
                         "challenge_id": challenge_id,
                         "receipt_hash": "0x" + verdict.receipt_hash.hex(),
                         "verdict": outcome, "reason": "0x" + verdict.reason.hex(),
                         "digest": "0x" + digest.hex(), "signers": signers,
                         "sigma": g1_to_json(sigma), "apk1": g1_to_json(apk1),
                         "apk2": g2_to_json(apk2),
                         "gamma": int_to_hex(gamma(digest, sigma, apk1, apk2)),
                         "hash_hint": [int_to_hex(w) for w in hash_to_g1_hint(digest)]})
    return {"curve": "bn254", "keys": keys, "hash_to_g1": hashes, "pop": pops,
            "verdict": verdicts, "g2_generator": g2_to_json(G2)}


def vectors_json() -> str:
    """The file's text: one key, vector or point per line, so diffs stay readable."""
    doc = build_vectors()
    lines = ["{", f' "curve": {json.dumps(doc["curve"])},']
    for name in ("keys", "hash_to_g1", "pop", "verdict"):
        items = [" " * 2 + json.dumps(item, separators=(",", ":")) for item in doc[name]]
        lines.append(f' "{name}": [\n' + ",\n".join(items) + "\n ],")
    lines.append(f' "g2_generator": {json.dumps(doc["g2_generator"], separators=(",", ":"))}')
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> None:
    path = Path(argv[0]) if argv else DEFAULT_PATH
    path.write_text(vectors_json())
    print(f"wrote {path}")


if __name__ == "__main__":
    main(sys.argv[1:])
