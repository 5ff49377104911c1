"""The verifier committee: BLS keys and signatures over BN254 (``committee.bls``), the messages
its members sign (``committee.messages``) and their test vectors (``committee.vectors``).
Spec: docs/committee.md.

>>> from committee import SecretKey, Verdict, UPHELD, reason_bytes, sign, verify
>>> from committee import aggregate_pk1, aggregate_pk2, aggregate_signatures
>>> keys = [SecretKey.from_seed(f"gym-verifier-{i}") for i in range(3)]
>>> verdict = Verdict(challenge_id=1, receipt_hash=bytes(32), verdict=UPHELD,
...                   reason=reason_bytes("sampling"))
>>> digest = verdict.digest(31337, "0x5615dEB798BB3E4dFa0139dFa1b3D433Cc23b72f")
>>> sigma = aggregate_signatures(sign(sk, digest) for sk in keys)
>>> verify(sigma, aggregate_pk1(sk.pk1() for sk in keys),
...        aggregate_pk2(sk.pk2() for sk in keys), digest)
True
"""

from ledger.lazy_exports import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "committee.bls": ["BLSError", "G1Point", "G2Point", "SecretKey", "aggregate_pk1",
        "aggregate_pk2", "aggregate_signatures", "g1_from_ints", "g1_from_json", "g1_to_ints",
        "g1_to_json", "g2_from_ints", "g2_from_json", "g2_to_ints", "g2_to_json", "gamma",
        "hash_to_g1", "sign", "verify"],
    "committee.messages": ["REJECTED", "UPHELD", "SignedVerdict", "Verdict",
        "decode_signed_verdict", "pop_digest", "proof_of_possession", "reason_bytes",
        "reason_text", "verdict_digest", "verify_pop"],
})
