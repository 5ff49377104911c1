"""One peer's side of the work checks (trainer.swarm.work, docs/swarm.md "Work checks"): the
claims it makes with each local step and sends with its gradient round, and its checks of the
other members' claims once the round ran.

    work = WorkChecks(run="arith", peer_id="Qm...", trainer=trainer, params=params,
                      evidence_dir=Path("run/swarm_evidence"), seed=5, micro_batch=2,
                      local_batch=4, check_steps=1)
    work.claim(samples)              # in the optimizer's step, before hivemind's
    work.send()                      # before the collaborative step: for the commitment
    work.check_round(epoch, members) # after the gradient round, before the optimizer step
    work.take(epoch)                 # peer -> {claimed, checked, passed, tolerance}

The gradient averager (trainer.swarm.gather) reads the claims from ``CLAIMS_PENDING`` into
this peer's signed commitment and writes the other members' commitments to ``CLAIMS_ROUND``.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from trainer.swarm.commitments import decode_commitment, payload_digest, update_payload
from trainer.swarm.gather import (
    CLAIMS_PENDING,
    CLAIMS_ROUND,
    parameters_digest,
    read_bans,
    write_atomic,
    write_ban,
)
from trainer.swarm.records import SwarmRecordError
from trainer.swarm.work import (
    TOLERANCE,
    decode_claims,
    difference,
    make_claim,
    recompute,
    rows_of_step,
    sketch,
)

MAX_CLAIMS_KEPT = 1024  # work claims carried to the next round at most (the oldest go)


class WorkChecks:
    """See the module docstring. ``enabled`` False (a local-steps run: its parameters change
    every local step, so no other peer holds them to re-compute one) makes no claim and checks
    nothing, but still numbers the steps."""

    def __init__(self, *, run: str, peer_id: str, trainer, params: list, evidence_dir: Path,
                 seed: int, micro_batch: int, local_batch: int, check_steps: int,
                 enabled: bool = True) -> None:
        self.run, self.peer_id, self.trainer, self.params = run, peer_id, trainer, params
        self.evidence_dir = Path(evidence_dir)
        self.seed, self.micro_batch, self.local_batch = seed, micro_batch, local_batch
        self.check_steps, self.enabled = check_steps, enabled
        self.claims: list[dict] = []  # since the last gradient round
        self.steps = 0  # local optimizer steps taken: the claims' step numbers
        self.checking = False  # re-computing another peer's step: its forwards are not ours
        self._done: dict[int, dict[str, dict]] = {}  # epoch -> peer -> its checks

    def claim(self, samples: int) -> None:
        """Commit to the local step about to be taken: its number, samples, parameters and
        gradient sketch."""
        step = self.steps
        self.steps += 1
        if not self.enabled:
            return
        claim = make_claim(step, samples, [p.grad for p in self.params],
                           parameters_digest(self.params), self.run, self.peer_id)
        self.claims.append(claim.to_json())
        del self.claims[:-MAX_CLAIMS_KEPT]

    def send(self) -> None:
        """Leave the claims for the gradient averager's next commitment."""
        write_atomic(self.evidence_dir / CLAIMS_PENDING, json.dumps(self.claims))

    def sent(self) -> None:
        """The collaborative step is over: its claims went with it (or its round failed, and
        the parameters they were made at are gone)."""
        self.claims = []

    def take(self, epoch: int) -> dict[str, dict]:
        """The checks of the round that ended ``epoch`` (once)."""
        return self._done.pop(epoch, {})

    def check_round(self, epoch: int, members: frozenset[str] | None) -> None:
        """Re-compute ``check_steps`` random claims of each other member of the gradient round
        that ends ``epoch`` (its signed commitment holds them) at this peer's parameters, and
        keep what passed; a claim that fails bans its peer with the commitment as evidence."""
        if not self.enabled or not members:
            return
        try:
            sent = json.loads((self.evidence_dir / CLAIMS_ROUND).read_text())
        except (FileNotFoundError, ValueError):
            return
        if not isinstance(sent, dict) or set(sent.get("members", ())) != set(members):
            return  # not this round's (it failed after the members were read)
        mine = parameters_digest(self.params)
        chooser = random.SystemRandom()  # which claims are checked: nobody can predict it
        checks = self._done.setdefault(epoch, {})
        for peer, text in sorted(sent.get("commitments", {}).items()):
            try:
                commitment = decode_commitment(text)
                claims = decode_claims(list(commitment.claims), self.local_batch)
            except SwarmRecordError as exc:
                checks[peer] = {"claimed": 0, "checked": 0, "passed": 0, "why": str(exc)}
                continue
            here = [c for c in claims if c.parameters == mine]  # computed at these parameters
            chosen = chooser.sample(here, min(self.check_steps, len(here)))
            passed, failed = 0, None
            for claim in chosen:
                off, again = self._check(peer, claim)
                if off > TOLERANCE:
                    failed = {"step": claim.step, "claimed": list(claim.sketch),
                              "recomputed": list(again), "difference": off}
                    break
                passed += 1
            checks[peer] = {"claimed": sum(c.samples for c in here), "checked": len(chosen),
                            "passed": passed, "tolerance": TOLERANCE}
            if failed is not None and peer not in read_bans(self.evidence_dir):
                write_ban(self.evidence_dir, {
                    "peer_id": peer, "reason": "work_check", "averager": "grad",
                    "group": commitment.group, "by": self.peer_id,
                    "evidence": {"commitment": text, "parameters": mine, **failed,
                                 **self._inputs(peer, failed["step"])}})

    def _inputs(self, peer: str, step: int) -> dict:
        """What re-computing ``peer``'s ``step`` takes besides the run's published base model,
        dataset and config: the parameters it was claimed at (kept beside the ban, float32 in
        order: their sha256 is the claim's ``parameters``), their shapes and the assignment."""
        payload = update_payload([p.detach() for p in self.params])
        name = payload_digest(payload).split(":")[1] + ".params"
        (self.evidence_dir / name).write_bytes(payload)
        rows = len(self.trainer.train_dataset)
        return {"parameters_payload": name, "shapes": [list(p.shape) for p in self.params],
                "dataset_rows": rows, "seed": self.seed, "local_batch": self.local_batch,
                "micro_batch": self.micro_batch,
                "rows": rows_of_step(rows, self.seed, peer, step, self.local_batch)}

    def _check(self, peer: str, claim) -> tuple[float, tuple[float, ...]]:
        """(difference, re-computed sketch) of one claimed step of ``peer``."""
        rows = rows_of_step(len(self.trainer.train_dataset), self.seed, peer, claim.step,
                            self.local_batch)
        self.checking = True
        try:
            gradients = recompute(self.trainer, rows, self.micro_batch)
        finally:
            self.checking = False
        again = sketch(gradients, self.run, peer, claim.step)
        return difference(claim.sketch, again), again
