"""Execution gas of ``VerifierCommittee.settle`` with a two-thirds quorum of 16 and of 64
verifiers, against EigenLayer's BLSSignatureChecker anchor.

Runs ``forge test --match-contract VerifierCommitteeGasTest -vv`` (contracts/test/
VerifierCommittee.t.sol) and reads the figures it logs: gas consumed by a bare CALL on the
calldata measured with gas() around it, the committee's account warm and its storage cold, as at
the start of a transaction (docs/design.md "4.4 Gas": execution gas, without the 21,000
intrinsic and the calldata). Each is printed with its ratio to the anchor, 113,000 gas: the base cost EigenLayer
quotes for ``BLSSignatureChecker.checkSignatures``, which is the cost of its two-pair pairing
(45,000 + 2 x 34,000, EIP-1108) that this check shares. The issue's target is below 150,000 at 64
verifiers; docs/committee.md "Contract" says where the gas goes.

Usage: ``.venv/bin/python benchmarks/bench_committee_gas.py``; exits 1 when the target is missed
(it is met: 148,514 at 64 when this was written; docs/committee.md "Gas" itemises it), 2 when
forge fails.
"""

from __future__ import annotations

import re
import subprocess
import sys

from contracts.toolchain import FOUNDRY_DIR, foundry_binary

ANCHOR = 113_000  # EigenLayer BLSSignatureChecker base (the two-pair pairing)
TARGET_64 = 150_000
LINE = re.compile(r"settle execution gas, signers/verifiers (\d+)/(\d+)\s+(\d+)")
CALLDATA = re.compile(r"settle calldata bytes, verifiers (\d+)\s+(\d+)")


def main() -> int:
    forge = foundry_binary("forge")
    run = subprocess.run([str(forge), "test", "--match-contract", "VerifierCommitteeGasTest", "-vv"],
                         cwd=FOUNDRY_DIR, capture_output=True, text=True, check=False)
    figures = {int(n): (int(k), int(gas)) for k, n, gas in LINE.findall(run.stdout)}
    calldata = {int(n): int(size) for n, size in CALLDATA.findall(run.stdout)}
    if not figures:
        sys.stderr.write(run.stdout[-3000:] + run.stderr[-3000:])
        return 2
    print(f"{'verifiers':>9} {'signers':>7} {'execution gas':>14} {'x anchor':>9} {'calldata B':>11}")
    for n in sorted(figures):
        signers, gas = figures[n]
        print(f"{n:>9} {signers:>7} {gas:>14,} {gas / ANCHOR:>9.2f} {calldata.get(n, 0):>11,}")
    print(f"anchor: EigenLayer BLSSignatureChecker base {ANCHOR:,} gas; target at 64: < {TARGET_64:,}")
    if run.returncode != 0:
        sys.stderr.write("forge reported a failure (a gas ceiling of the test was exceeded)\n")
        return 2
    at_64 = figures.get(64, (0, TARGET_64))[1]
    if at_64 >= TARGET_64:
        print(f"target missed at 64 verifiers: {at_64:,} >= {TARGET_64:,}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
