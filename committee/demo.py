"""The verifier-committee step of `gym demo`: three verifiers settle the forged receipt's
challenge with one aggregate signature, and an honest receipt's challenge costs its bond.

A challenge is judged by the verifiers registered when it opened, so step 1,
``register_demo_verifiers``, runs before the node step (``inference_node.demo.demo_node``), which
leaves the honest receipt's bundle and the forged one, already challenged through the committee
(the challenger, Anvil account 5, bonded ``challengeBond``); ``demo_committee`` goes on from
there:

1. Anvil account 0 sends GYM to three verifiers (accounts 6, 7, 8), which register with fresh
   BLS keys (``<data dir>/verifiers/<n>/bls-key.json``) and a proof of possession;
2. starts ``gym verifier aggregate`` (sender: account 9) and three ``gym verifier serve``
   processes, each with the model, judging every challenge with the full receipt verification;
3. the challenger also challenges the honest receipt ("the answer is wrong");
4. waits until both challenges are settled (the forged one upheld with reason ``sampling``, the
   honest one rejected), each by one aggregate of two thirds of the stake or more;
5. moves the devnet's clock past the appeal window; the aggregator finalizes both and claims
   the signers' rewards;
6. waits until each verifier has audited ``AUDIT_RATE_BPS`` of the node's anchored receipts
   (the node still serves their bundles) and published its reports (docs/rewards.md
   "Audits");
7. prints what moved: the node's stake, the challenger's and each verifier's GYM.

Every process is stopped (SIGTERM) whatever happens. ``NodeError`` on any failure.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from eth_account import Account

from committee.client import ChallengeState, VerifierCommittee
from contracts.devnet_accounts import devnet_account_key
from contracts.gym_token import GYM, format_gym
from inference_node.errors import NodeError

VERIFIER_ACCOUNTS = (6, 7, 8)
AGGREGATOR_ACCOUNT = 9
CHALLENGER_ACCOUNT = 5  # as inference_node.demo's CHALLENGER_KEY
FUNDER_KEY = devnet_account_key(0)
VERIFIER_FUNDS = 200 * GYM
CHALLENGER_FUNDS = 50 * GYM
SETTLE_TIMEOUT_S = 600  # three verifiers load the model and re-run a prefill each
AUDIT_RATE_BPS = 2_000  # the verifiers audit a fifth of the node's receipts and report them
AUDIT_TIMEOUT_S = 300


def committee_challenger(committee_address: str) -> Callable[[Any, str], Any]:
    """The ``challenger`` ``demo_node`` opens the forged receipt's challenge through: the
    committee, from account 5, funded here first."""
    from committee.challenges import CommitteeChallenger
    from inference_node.registry import NodeRegistry

    def build(ledger_rt: Any, registry_address: str) -> Any:
        w3 = ledger_rt.contract.w3
        committee = VerifierCommittee(w3, committee_address,
                                      devnet_account_key(CHALLENGER_ACCOUNT),
                                      from_block=ledger_rt.chain.deployment_block)
        _fund(committee, Account.from_key(devnet_account_key(CHALLENGER_ACCOUNT)).address,
              CHALLENGER_FUNDS)
        registry = NodeRegistry(w3, registry_address, from_block=ledger_rt.chain.deployment_block)
        return CommitteeChallenger(committee, registry)

    return build


def _fund(committee: VerifierCommittee, address: str, amount: int) -> None:
    """Top ``address`` up to ``amount`` GYM from account 0 (a kept devnet may have it)."""
    token = committee.token()
    have = token.functions.balanceOf(address).call()
    if have < amount:
        committee.evm.send(token.functions.transfer(address, amount - have),
                           Account.from_key(FUNDER_KEY))


def _balance(committee: VerifierCommittee, address: str) -> int:
    return committee.token().functions.balanceOf(address).call()


@contextlib.contextmanager
def _processes() -> Iterator[list[tuple[subprocess.Popen, Path]]]:
    procs: list[tuple[subprocess.Popen, Path]] = []
    try:
        yield procs
    finally:
        for proc, _ in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc, _ in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _start(procs: list, command: list[str], env: dict[str, str], log_file: Path) -> None:
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "devnet.cli", *command], env=env,
                                stdout=log, stderr=subprocess.STDOUT)
    procs.append((proc, log_file))


def _wait(procs: list, what: str, done: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for proc, log_file in procs:
            if proc.poll() is not None:
                raise NodeError(f"{log_file.stem} exited ({proc.returncode}) while {what}:\n"
                                + log_file.read_text(errors="replace")[-2000:])
        if done():
            return
        time.sleep(1)
    tails = "\n".join(f"--- {log.name}\n" + log.read_text(errors="replace")[-800:]
                      for _, log in procs)
    raise NodeError(f"timed out after {timeout_s:.0f} s {what}\n{tails}")


def register_demo_verifiers(settings: Any, ledger_rt: Any, console: Any,
                            committee_address: str) -> list[str]:
    """Step 1 of the module docstring, before any challenge opens (a challenge is judged by
    the verifiers of its opening): fund and register accounts 6, 7 and 8 with fresh BLS keys
    (once: a registered one is left as it is). Their addresses."""
    from committee import keyfile

    w3 = ledger_rt.contract.w3
    start = ledger_rt.chain.deployment_block
    reader = VerifierCommittee(w3, committee_address, from_block=start)
    data = Path(settings.data_dir)
    addresses = [Account.from_key(devnet_account_key(n)).address for n in VERIFIER_ACCOUNTS]
    with console.status("funding and registering three verifiers"):
        for n, address in zip(VERIFIER_ACCOUNTS, addresses, strict=True):
            member = VerifierCommittee(w3, committee_address, devnet_account_key(n),
                                       from_block=start)
            if member.index_of(address) is None:
                _fund(member, address, VERIFIER_FUNDS)
                sk, _ = keyfile.load_or_create(data / "verifiers" / str(n) / "bls-key.json")
                member.register(sk, member.min_stake())
    console.print(f"verifiers {', '.join(addresses)} registered, each staking "
                  f"{format_gym(reader.min_stake())} (active stake "
                  f"{format_gym(reader.active_stake())})", highlight=False)
    return addresses


def demo_committee(settings: Any, ledger_rt: Any, console: Any, *, outcome: Any,
                   model_dir: str | Path, committee_address: str, node_operator: str,
                   advance_time: Callable[[Any, int], Any]) -> None:
    """Steps 2-6 of the module docstring (``register_demo_verifiers`` ran step 1). ``outcome``: ``demo_node``'s (its forged receipt
    challenged through ``committee_challenger``); ``settings``: the devnet's (``data_dir``,
    ``deployment_file``, ...); ``advance_time(w3, seconds)``: moves the devnet's clock
    (``governance.devnet_time.advance_time``)."""
    from committee.challenges import open_committee_challenge
    from inference_node.challenges import challenged_receipt
    from inference_node.demo import free_port, gym_env
    from inference_node.receipts import ReceiptDomain
    from inference_node.registry import NodeRegistry

    w3 = ledger_rt.contract.w3
    start = ledger_rt.chain.deployment_block
    reader = VerifierCommittee(w3, committee_address, from_block=start)
    registry = NodeRegistry(w3, reader.value("registry"), from_block=start)
    data = Path(settings.data_dir)
    addresses = [Account.from_key(devnet_account_key(n)).address for n in VERIFIER_ACCOUNTS]
    if any(reader.index_of(a) is None for a in addresses):
        raise NodeError("the demo's verifiers are not registered: register_demo_verifiers runs "
                        "before the challenges open")

    challenger_address = Account.from_key(devnet_account_key(CHALLENGER_ACCOUNT)).address
    forged_id = outcome.caught.challenge.id
    env = gym_env(settings)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with _processes() as procs:
        _start(procs, ["verifier", "aggregate", "--port", str(port), "--interval", "1",
                       "--account", str(AGGREGATOR_ACCOUNT)], env, data / "aggregator.log")
        for n in VERIFIER_ACCOUNTS:
            _start(procs, ["verifier", "serve", "--model", str(model_dir), "--aggregator", url,
                           "--bls-key", str(data / "verifiers" / str(n) / "bls-key.json"),
                           "--account", str(n), "--interval", "1",
                           "--audit-rate", str(AUDIT_RATE_BPS)],
                   env, data / f"verifier-{n}.log")
        console.print(f"started `gym verifier aggregate` on {url} and three `gym verifier "
                      f"serve` (logs in {data})", highlight=False)

        here = ReceiptDomain(w3.eth.chain_id, ledger_rt.contract.address.lower())
        challenger = VerifierCommittee(w3, committee_address,
                                       devnet_account_key(CHALLENGER_ACCOUNT), from_block=start)
        honest = open_committee_challenge(
            challenged_receipt(outcome.bundle, "the honest bundle"),
            "the answer is wrong (it is not: the committee should reject this)",
            committee=challenger, registry=registry, content=ledger_rt.content, domain=here)
        console.print(f"challenge {honest.id} opened against the honest receipt too (bond "
                      f"{format_gym(reader.challenge_bond())})", highlight=False)

        ids = (forged_id, honest.id)
        stake_before = registry.node_of(node_operator).stake
        with console.status("the verifiers judge both challenges (each re-runs the receipt's "
                            "prefill), the aggregator settles"):
            _wait(procs, "waiting for the settlements",
                  lambda: all(reader.challenge(i).status == ChallengeState.SETTLED for i in ids),
                  SETTLE_TIMEOUT_S)
        for challenge_id in ids:
            c = reader.challenge(challenge_id)
            what = ("upheld: " + _reason(reader, challenge_id)) if c.verdict == 1 else "rejected"
            console.print(f"challenge {challenge_id} settled {what}, signed by verifiers "
                          f"{c.signers} in one aggregate signature", highlight=False)
        if reader.challenge(forged_id).verdict != 1 or reader.challenge(honest.id).verdict != 2:
            raise NodeError("the committee did not uphold the forged receipt's challenge and "
                            "reject the honest one")

        before = {a: _balance(reader, a) for a in [challenger_address, *addresses]}
        window = reader.appeal_window()
        advance_time(w3, window + 1)
        console.print(f"moved the devnet's clock past the {window} s appeal window")
        with console.status("the aggregator finalizes and claims"):
            _wait(procs, "waiting for finalization and claims",
                  lambda: all(_claimed(reader.challenge(i)) for i in ids), 120)
        node_log = registry.node_of(node_operator).receipt_log_id
        anchored = ledger_rt.contract.anchored(node_log, start)
        size = anchored[-1].size if anchored else 0
        cursors = [data / "verifiers" / str(n) / f"audit-{reader.address.lower()}.json"
                   for n in VERIFIER_ACCOUNTS]
        with console.status(f"the verifiers audit {AUDIT_RATE_BPS / 100:g}% of the node's "
                            f"{size} anchored receipts and publish their reports"):
            _wait(procs, "waiting for the audits",
                  lambda: all(_audited(c, node_log, size) for c in cursors), AUDIT_TIMEOUT_S)
        console.print(f"each verifier audited {AUDIT_RATE_BPS / 100:g}% of the node's {size} "
                      "anchored receipts (a sample a later block's hash drew) and published "
                      "its report to its gym-audits log", highlight=False)
    stake_after = registry.node_of(node_operator).stake
    console.print(f"node {node_operator}: stake {format_gym(stake_before)} -> "
                  f"{format_gym(stake_after)} (slashed)", highlight=False)
    for address, had in before.items():
        who = "challenger" if address == challenger_address else "verifier"
        delta = _balance(reader, address) - had
        console.print(f"{who} {address}: {'+' if delta >= 0 else ''}{format_gym(delta)}",
                      highlight=False)
    if stake_after >= stake_before:
        raise NodeError("the node's stake did not move")
    console.print("[green]settled on chain: the forger paid, the false accuser lost its "
                  "bond[/green]")


def _reason(reader: VerifierCommittee, challenge_id: int) -> str:
    from committee.messages import reason_text

    events = reader.events("ChallengeSettled", challengeId=challenge_id)
    return reason_text(bytes(events[-1][1]["reason"])) if events else "?"


def _audited(cursor_file: Path, log_id: int, size: int) -> bool:
    """Whether the audit cursor a `gym verifier serve` keeps in ``cursor_file`` is past
    checkpoint ``size`` of log ``log_id`` (its reports are published before it is written)."""
    from committee.audits import AuditCursor

    try:
        at = AuditCursor.from_json(cursor_file.read_bytes()).logs.get(log_id)
    except (OSError, ValueError):
        return False
    return at is not None and at.size is not None and at.size >= size


def _claimed(c: Any) -> bool:
    return c.status == ChallengeState.FINALIZED and c.claimed_bitmap == c.signer_bitmap


__all__ = ["committee_challenger", "demo_committee", "register_demo_verifiers"]
