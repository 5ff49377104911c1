"""What one junk verdict costs the aggregator, before and after posts are authenticated.

The attack (issue "judges that cannot be stalled"): an outsider copies a registered
verifier's address and slot from the chain and posts well-formed signed verdicts with a junk
BLS signature. Before, each one reached the pairing check (after chain reads); now the
endpoint first recovers who signed the post (``committee.verdict_auth.check_poster``) and
refuses it with 401 unless it is the verdict's verifier.

Measured in the same run, per junk request, median of ``--repeat``:

- baseline ("before"): decoding the signed verdict and checking its BLS signature against
  the registered key (``decode_signed_verdict`` + ``SignedVerdict.verify``): the CPU the
  aggregator spent on each junk post, chain reads not counted;
- now: ``check_poster`` on the same body posted with an outsider's header, which is where
  such a post stops.

Prints both and the ratio; exits 1 if the refusal costs more than 5 ms or the junk verdict
verifies. ``.venv/bin/python benchmarks/bench_aggregator_junk.py [--repeat 20]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from eth_account import Account

from committee import UPHELD, SecretKey, SignedVerdict, Verdict, reason_bytes
from committee.messages import decode_signed_verdict
from committee.verdict_auth import AuthError, check_poster, sign_post

CHAIN_ID, COMMITTEE = 31337, "0x" + "c0" * 20
TARGET_S = 0.005


def _median(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()

    verifier = Account.from_key("0x" + "17" * 32)
    registered = SecretKey.from_seed("the registered verifier")
    verdict = Verdict(3, bytes(range(32)), UPHELD, reason_bytes("sampling"))
    junk = SignedVerdict.create(SecretKey.from_seed("an outsider"), verdict, chain_id=CHAIN_ID,
                                committee=COMMITTEE, verifier_index=1,
                                verifier=verifier.address).to_bytes()
    outsider_header = sign_post(Account.from_key("0x" + "5a" * 32), junk)

    def before() -> None:
        signed = decode_signed_verdict(junk)
        if signed.verify(registered.pk1(), chain_id=CHAIN_ID, committee=COMMITTEE):
            raise SystemExit("the junk verdict verified")

    def now() -> None:
        try:
            check_poster(junk, outsider_header)
        except AuthError:
            return
        raise SystemExit("the outsider's post was not refused")

    before_s = _median(before, max(3, args.repeat // 4))
    now_s = _median(now, args.repeat)
    print(f"{'per junk request':<44} {'median':>10}")
    print(f"{'before: decode + BLS pairing check':<44} {before_s * 1000:>8.1f} ms")
    print(f"{'now: check_poster refuses (401)':<44} {now_s * 1000:>8.2f} ms")
    print(f"ratio before / now: {before_s / now_s:,.0f}x; target: refusal under "
          f"{TARGET_S * 1000:g} ms")
    return 0 if now_s < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
