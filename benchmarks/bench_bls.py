"""What the committee's BLS costs in Python (``committee.bls``, py_ecc's optimized BN254).

Times, each the median of ``--repeat`` runs: a key (``SecretKey.generate`` with ``pk1`` and
``pk2``), signing one verdict (its digest and ``sign``), aggregating ``--signers`` signatures
and both public keys, and verifying the aggregate (``verify``: the gamma-bound two-pair check).

Baseline, measured in the same run: verifying the same ``--signers`` signatures one by one
(``verify`` with each signer's own keys), which is what a committee without aggregation would
pay. Prints the ratio baseline / aggregate. Exits 1 if a signature that should verify does not
(no timing target: py_ecc is pure Python, and the chain verifies with the precompiles).

    .venv/bin/python benchmarks/bench_bls.py [--signers 64] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from committee import (
    UPHELD,
    SecretKey,
    Verdict,
    aggregate_pk1,
    aggregate_pk2,
    aggregate_signatures,
    reason_bytes,
    sign,
    verify,
)

CHAIN_ID = 31337
COMMITTEE = "0x5615dEB798BB3E4dFa0139dFa1b3D433Cc23b72f"


def median_seconds(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--signers", type=int, default=64, help="committee members who sign")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per step (median)")
    args = parser.parse_args()

    def keygen():
        sk = SecretKey.generate()
        return sk, sk.pk1(), sk.pk2()

    keygen_s, _ = median_seconds(keygen, args.repeat)
    keys = [keygen() for _ in range(args.signers)]
    verdict = Verdict(1, bytes(range(32)), UPHELD, reason_bytes("sampling"))

    def sign_verdict():
        return sign(keys[0][0], verdict.digest(CHAIN_ID, COMMITTEE))

    sign_s, _ = median_seconds(sign_verdict, args.repeat)
    digest = verdict.digest(CHAIN_ID, COMMITTEE)
    sigmas = [sign(sk, digest) for sk, _, _ in keys]

    def aggregate():
        return (aggregate_signatures(sigmas), aggregate_pk1(pk1 for _, pk1, _ in keys),
                aggregate_pk2(pk2 for _, _, pk2 in keys))

    aggregate_s, (sigma, apk1, apk2) = median_seconds(aggregate, args.repeat)
    verify_s, ok = median_seconds(lambda: verify(sigma, apk1, apk2, digest), args.repeat)

    start = time.perf_counter()  # the baseline: one pass over every signer (minutes at 64)
    each_ok = all(verify(s, pk1, pk2, digest) for s, (_, pk1, pk2) in zip(sigmas, keys,
                                                                         strict=True))
    individual_s = time.perf_counter() - start

    n = args.signers
    print(f"bls-bn254 (py_ecc optimized), {n} signers, median of {args.repeat}:")
    rows = [("keygen (sk, pk1, pk2)", keygen_s), ("sign one verdict", sign_s),
            (f"aggregate {n} sigs, apk1, apk2", aggregate_s), ("verify the aggregate", verify_s),
            (f"baseline: verify {n} one by one", individual_s)]
    for label, seconds in rows:
        print(f"  {label:<34}{seconds * 1e3:10.1f} ms")
    print(f"  ratio baseline / (aggregate + verify): "
          f"{individual_s / (aggregate_s + verify_s):.1f}x")
    if not (ok and each_ok):
        print("a signature that should verify did not", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
