"""What the publishing peer saw of a swarm run, and the check of each peer's `Contribution`
against it (docs/swarm.md "What is checked").

The witness is the peer that publishes (any peer can be). For every collaborative step it
completed by averaging gradients (with local steps: parameters) it keeps a `RoundSeen`: the
peers of its averaging group (from hivemind's all-gather), and the samples each peer had
announced for that step in the run's progress records (hivemind's ProgressTracker, signed in
the DHT by each peer's RSA key) just before the round. From the peers' `PeerSpec` records it
keeps which address each peer id joined with, and from its averagers which peers it banned
(trainer.swarm.gather: signed evidence of a poisoned or equivocated update). `check_contribution`
then accepts a record only when:

0. its peer is not banned;
1. its EIP-712 signature recovers to its contributor;
2. run id and config digest are the witness's;
3. the contributor is the address the peer id joined with;
4. the step it reached is not past the witness's last step, and its samples fit in its local
   steps (at most ``batch_size_per_step`` each) and include the samples of its rounds;
5. each round it claims in the witness's own group of that step holds at most twice the target
   batch, or twice what the peer announced for that step in the run's progress records if
   more, plus two local steps (a round starts once the group's announced samples reach the
   target, and overshoots it while the announcements travel).

A round credits another peer only when the witness re-computed at least one of the local steps
that peer claimed for it in its signed commitment (trainer.swarm.work) and every check passed,
and then at most the samples of those claims; the witness's own rounds need no check. In a
local-steps run nothing can be re-computed (``unchecked``) and rounds are credited unchecked.

Only rounds of the witness's own groups are credited: a round the witness did not average in
(it was alone, or its round failed), or averaged in another group (hivemind may split a step's
peers into several groups), is neither credited nor held against the record.
A record counts only beside a spec of the same peer id (`judge_records`); a peer with several
accepted records is credited with the smallest. A peer's share is its credited samples over all
contributors' credited samples. What a
lying peer can still claim: samples it announced but did not compute (the announcements are its
own), and up to twice the target batch per round it averaged in (the all-reduce weights that
would tell its real part stay inside hivemind).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainer.swarm.records import (
    Contribution,
    SwarmRecordError,
    decode_contribution,
    decode_spec,
    verify_contribution,
)

ANNOUNCEMENT_SLACK_STEPS = 2  # local steps a round may hold beyond the announced samples
# A round overshoots its target while the peers' announcements travel: one peer's part reached
# 1.25 times the whole target on this loaded 2-core machine (a 32-sample target, 40 claimed).
OVERSHOOT = 2


@dataclass(frozen=True)
class RoundSeen:
    epoch: int  # the collaborative step the round ended
    members: frozenset[str]  # peer ids of the witness's averaging group
    announced: dict[str, int]  # peer id -> samples announced for this step
    checks: dict[str, dict] = field(default_factory=dict)  # peer -> its work checks (work.py)


@dataclass
class Witness:
    run: str
    config_digest: str
    batch_size_per_step: int  # samples of one local optimizer step
    target_batch_size: int  # samples of one collaborative step, all peers together
    epoch: int = 0  # the last collaborative step the witness reached
    rounds: dict[int, RoundSeen] = field(default_factory=dict)
    addresses: dict[str, str] = field(default_factory=dict)  # peer id -> address it joined with
    banned: dict[str, str] = field(default_factory=dict)  # peer id -> why (trainer.swarm.gather)
    me: str = ""  # the witness's own peer id: its own claims need no re-computing
    unchecked: bool = False  # local-steps runs: no claim can be re-computed (docs/swarm.md)

    def bind(self, peer_id: str, address: str) -> None:
        """Remember the address ``peer_id`` joined with (the first one seen stays)."""
        self.addresses.setdefault(peer_id, address)


@dataclass(frozen=True)
class Verdict:
    record: Contribution
    accepted: bool
    reason: str  # why it was refused; "" when accepted
    credited_samples: int = 0
    credited_rounds: int = 0
    checked: int = 0  # of its claimed local steps, how many the witness re-computed
    passed: int = 0


def check_contribution(record: Contribution, witness: Witness) -> Verdict:
    """Whether ``witness`` accepts ``record``, and what it credits (see the module docstring)."""
    try:
        verify_contribution(record)
    except SwarmRecordError as exc:
        return Verdict(record, False, str(exc))
    if record.peer_id in witness.banned:
        return Verdict(record, False, f"banned from the run: {witness.banned[record.peer_id]}")
    if record.run != witness.run or record.config_digest != witness.config_digest:
        return Verdict(record, False, f"run {record.run} / {record.config_digest} is not this "
                                      f"run ({witness.run} / {witness.config_digest})")
    joined = witness.addresses.get(record.peer_id)
    if joined is None:
        return Verdict(record, False, f"peer {record.peer_id} never joined this run")
    if joined != record.contributor:
        return Verdict(record, False, f"peer {record.peer_id} joined as {joined}, but the record "
                                      f"is signed by {record.contributor}")
    if record.epoch > witness.epoch:
        return Verdict(record, False, f"claims step {record.epoch}; the run reached "
                                      f"{witness.epoch}")
    if record.samples > record.steps * witness.batch_size_per_step:
        return Verdict(record, False, f"claims {record.samples} samples in {record.steps} local "
                                      f"steps of at most {witness.batch_size_per_step}")
    if record.samples < sum(r.samples for r in record.rounds):
        return Verdict(record, False, "its rounds hold more samples than its total")
    slack = ANNOUNCEMENT_SLACK_STEPS * witness.batch_size_per_step
    credited = rounds = checked = passed = 0
    for claim in record.rounds:
        seen = witness.rounds.get(claim.epoch)
        if seen is None:
            continue  # the witness did not average at that step: not credited
        if record.peer_id not in seen.members:
            continue  # another group of the same step (hivemind may split): not credited
        bound = OVERSHOOT * max(seen.announced.get(record.peer_id, 0),
                                witness.target_batch_size) + slack
        if claim.samples > bound:
            return Verdict(record, False, f"claims {claim.samples} samples at step {claim.epoch}; "
                                          f"a round holds at most {bound - slack} (twice the "
                                          "target batch, or what it announced)")
        samples = claim.samples
        if not witness.unchecked and record.peer_id != witness.me:
            check = seen.checks.get(record.peer_id, {})
            checked += check.get("checked", 0)
            passed += check.get("passed", 0)
            if not check.get("checked") or check.get("passed", 0) < check["checked"]:
                continue  # no claimed step of that round re-computed and passed: no credit
            samples = min(samples, check.get("claimed", 0))  # what its signed claims hold
        credited += samples
        rounds += 1
    return Verdict(record, True, "", credited, rounds, checked, passed)


def judge_records(values: list, witness: Witness
                  ) -> tuple[list[dict], list[dict], list[Verdict]]:
    """(contributors, refused, accepted) of the run's DHT values (each ``{"spec",
    "contribution"}`` as a peer published it, with ``_owner``: the hex owner key it was stored
    under): bind each valid spec's address to its peer id, check each record that sits beside
    a valid spec of the same peer stored under the owner key that spec binds, and keep one accepted
    record per peer (the smallest credit). Contributors: `shares` of the accepted verdicts
    (``accepted``, in the same order); refused: ``{"peer_id", "reason"}`` for each record kept
    out, with ``record`` (as signed) for a banned peer's own."""
    pairs, refused = [], []
    for value in values:
        if not isinstance(value, dict) or "contribution" not in value:
            continue
        try:
            spec = decode_spec(value.get("spec"))
        except SwarmRecordError as exc:
            refused.append({"peer_id": None, "reason": f"no valid spec beside the record: {exc}"})
            continue
        if value.get("_owner") != spec.dht_owner:
            refused.append({"peer_id": spec.peer_id, "reason": "stored under another DHT owner "
                                                              "key than its spec binds (a copy "
                                                              "of the spec)"})
            continue
        witness.bind(spec.peer_id, spec.address)
        pairs.append((spec, value["contribution"]))
    verdicts = []
    for spec, item in pairs:
        try:
            record = decode_contribution(item)
        except SwarmRecordError as exc:
            refused.append({"peer_id": spec.peer_id, "reason": str(exc)})
            continue
        if record.peer_id != spec.peer_id:
            refused.append({"peer_id": record.peer_id, "reason": f"published beside the spec "
                                                                 f"of peer {spec.peer_id}"})
            continue
        verdict = check_contribution(record, witness)
        if verdict.accepted:
            verdicts.append(verdict)
        elif record.peer_id in witness.banned and record.contributor == spec.address:
            # the banned peer's own signed record: what a challenge of its stake names
            # (docs/swarm.md "Slashing a staked volunteer")
            refused.append({"peer_id": record.peer_id, "reason": verdict.reason,
                            "record": record.to_json()})
        else:
            refused.append({"peer_id": record.peer_id, "reason": verdict.reason})
    least: dict[str, Verdict] = {}
    for verdict in verdicts:
        peer = verdict.record.peer_id
        if peer not in least or verdict.credited_samples < least[peer].credited_samples:
            least[peer] = verdict
    rows = shares(list(least.values()))
    return rows, refused, [least[row["peer_id"]] for row in rows]


def shares(verdicts: list[Verdict]) -> list[dict]:
    """The contributors of the accepted records with their credited samples and share (of all
    credited samples), largest first."""
    accepted = [v for v in verdicts if v.accepted]
    total = sum(v.credited_samples for v in accepted)
    rows = [{"peer_id": v.record.peer_id, "address": v.record.contributor,
             "samples": v.credited_samples, "rounds": v.credited_rounds,
             "steps": v.record.steps, "epoch": v.record.epoch,
             "checked": v.checked, "passed": v.passed,
             "share": round(v.credited_samples / total, 6) if total else 0.0}
            for v in accepted]
    return sorted(rows, key=lambda r: (-r["samples"], r["peer_id"]))
