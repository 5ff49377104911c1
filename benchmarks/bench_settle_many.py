"""Settle time with many verifiers delivering at once (issue "judges that cannot be stalled").

On a fresh `gym devnet up`, ``--verifiers`` (16) verifiers register; each bench opens one
committee challenge and measures, from the first verdict sent to the challenge ``settled`` on
chain:

- baseline ("serial floor"): one process hands the 16 signed verdicts to the aggregator's
  ``VerdictPool`` one after another (no HTTP, no contention: every pairing check in a row),
  then settles: the least the aggregator's checks cost;
- now ("at once"): 16 ``VerifierService``s, each in its own thread ticking every
  ``--interval`` s as `gym verifier serve` does, post at the same moment to the aggregator's
  HTTP endpoint (two checks at a time, the others answered 429 + Retry-After 1 s) until
  every verdict is counted; the aggregator settles on its next tick.

Prints both and the ratio ("at once" over "serial floor"). Before this round, 429 was final:
with five verifiers three verdicts were lost and the challenge never settled; exits 1 if any
verdict is lost now. The pairing check (~0.8 s of pure-Python CPU each, one at a time under
the GIL) bounds both numbers. ``.venv/bin/python benchmarks/bench_settle_many.py``
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "support"))  # the tests' devnet committee helpers

from committee_world import BLS, VERIFIER_KEYS, committee_world, more_verifiers
from eth_account import Account
from fresh_devnet import fresh_devnet

from committee import UPHELD, SignedVerdict, Verdict, reason_bytes
from committee.aggregator import Aggregator, make_http_server
from committee.client import ChallengeState
from committee.judge import Judgement
from committee.service import VerifierService, post_verdict
from contracts.devnet_accounts import ANVIL_DEV_KEYS


def serial_floor(cw, members) -> float:
    challenge_id, digest = cw.open(101)
    committee = cw.client()
    aggregator = Aggregator(cw.client(ANVIL_DEV_KEYS[0]), finalize=False, report=lambda _: None)
    verdict = Verdict(challenge_id, digest, UPHELD, reason_bytes("sampling"))
    signed = []
    for index, (key, sk) in enumerate(members):
        signed.append(SignedVerdict.create(
            sk, verdict, chain_id=committee.chain_id, committee=committee.address,
            verifier_index=index, verifier=Account.from_key(key).address).to_bytes())
    start = time.perf_counter()
    for body in signed:
        aggregator.submit(body)
    aggregator.tick()
    elapsed = time.perf_counter() - start
    assert committee.challenge(challenge_id).status == ChallengeState.SETTLED
    return elapsed


def at_once(cw, members, interval: float, workdir: Path) -> tuple[float, int]:
    challenge_id, _ = cw.open(102)
    aggregator = Aggregator(cw.client(ANVIL_DEV_KEYS[0]), finalize=False, report=lambda _: None)
    server = make_http_server(aggregator, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    lost: list[str] = []
    services = []
    for i, (key, sk) in enumerate(members):
        verifier = cw.client(key)
        services.append(VerifierService(
            verifier, sk, judge_challenge=lambda opened: Judgement("upheld", "sampling", ""),
            send=partial(post_verdict, url, account=verifier.account),
            state_file=workdir / f"state-{i}.json",
            report=lambda line: lost.append(line) if "refused" in line else None))
    start_line = threading.Barrier(len(services) + 1)
    done = threading.Event()

    def run(service: VerifierService) -> None:
        start_line.wait()
        while not done.is_set():
            service.tick()
            if service.decisions[challenge_id].delivered:
                return
            time.sleep(interval)

    threads = [threading.Thread(target=run, args=(s,)) for s in services]
    for thread in threads:
        thread.start()
    start_line.wait()
    start = time.perf_counter()
    try:
        while cw.client().challenge(challenge_id).status == ChallengeState.OPEN:
            if all(not t.is_alive() for t in threads):
                aggregator.tick()
                if cw.client().challenge(challenge_id).status != ChallengeState.OPEN:
                    break
            if time.perf_counter() - start > 300:
                break
            time.sleep(0.1)
        elapsed = time.perf_counter() - start
    finally:
        done.set()
        for thread in threads:
            thread.join()
        server.shutdown()
    settled = cw.client().challenge(challenge_id)
    counted = len(settled.signers) if settled.status == ChallengeState.SETTLED else 0
    return elapsed, counted if not lost else -len(lost)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verifiers", type=int, default=16)
    parser.add_argument("--interval", type=float, default=0.5,
                        help="seconds between a verifier's ticks (`gym verifier serve --interval`)")
    args = parser.parse_args()
    if not 3 <= args.verifiers <= 33:
        parser.error("--verifiers: 3 to 33")
    with fresh_devnet("bench-settle-") as (workdir, deployment):
        cw = committee_world(deployment)
        members = list(zip(VERIFIER_KEYS, BLS, strict=True)) + more_verifiers(
            cw, args.verifiers - 3)
        floor = serial_floor(cw, members)
        elapsed, counted = at_once(cw, members, args.interval, workdir)
    print(json.dumps({"verifiers": args.verifiers, "serial_floor_s": round(floor, 2),
                      "at_once_s": round(elapsed, 2), "counted": counted,
                      "ratio": round(elapsed / floor, 2)}))
    print(f"settle with {args.verifiers} verifiers: serial floor {floor:.1f} s, delivering at "
          f"once {elapsed:.1f} s ({elapsed / floor:.2f}x the floor); {counted} signers counted")
    if counted != args.verifiers:
        print(f"FAIL: {args.verifiers - max(counted, 0)} verdicts were not counted")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
