"""Work checks: credit only for local steps another peer re-computed (docs/swarm.md "Work
checks").

    sampler = AssignedRows(rows=16, seed=5, peer_id="Qm...")      # the trainer's sampler
    claim = make_claim(step=7, samples=4, parameters=params, run="arith", peer_id="Qm...")
    failure = check_claim(claim, recompute(trainer, rows_of_step(...)), run, peer_id)

- **Assignment.** A peer's data is not its choice: local step ``k`` of peer P trains on the
  rows at positions ``k*B .. (k+1)*B - 1`` of P's stream (B: the local batch, batch size
  times gradient accumulation), the stream being, epoch after epoch, a permutation of the
  dataset's rows seeded by (run seed, P, epoch) (`rows_of_step`). `AssignedRows` is the
  trainer's sampler of exactly that stream, so a peer that trains honestly trains its
  assignment.
- **Claim.** With each local step a peer commits to what it computed (`make_claim`): the step
  number, the samples, the digest of the parameters it computed at, and a sketch of its
  gradient: ``SKETCH`` projections of the step's (clipped, accumulated) gradient on Rademacher
  vectors seeded by (run, P, step), as TOPLOC commits to activations rather than sending them.
  The claims since the peer's last round travel in its signed commitment of the gradient round
  (trainer.swarm.commitments), so every member of the round holds them, signed, at the moment
  it holds the same parameters (gradient averaging keeps the parameters fixed for a whole
  collaborative step).
- **Check.** A member re-computes a random sample of another member's claims of the round at
  its own parameters (when their digest is the claim's), on the rows assigned to that step,
  through the trainer's own collator and training step (`recompute`), and compares the sketches:
  a claim passes when the relative L2 difference is at most ``TOLERANCE``. A failed claim is
  signed evidence that the peer claimed work it did not do, or other work than assigned: it is
  banned. What a round credits a peer is what it claimed, only if every check of it passed.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import asdict, dataclass

from trainer.swarm.commitments import MAX_CLAIMS
from trainer.swarm.records import SwarmRecordError

SKETCH = 8  # projections in a claim's gradient sketch
TOLERANCE = 1e-3  # relative L2 difference of two sketches of the same step that still passes
STREAM_EPOCHS = 10**6  # the sampler's length, in passes over the dataset
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


@dataclass(frozen=True)
class Claim:
    step: int  # the peer's local step number (0, 1, ...: every optimizer step it took)
    samples: int  # samples of the forward passes of that step
    parameters: str  # parameters_digest of the parameters the step was computed at
    sketch: tuple[float, ...]  # SKETCH projections of the step's gradient

    def to_json(self) -> dict:
        return {**asdict(self), "sketch": list(self.sketch)}


def decode_claims(value, max_samples: int) -> list[Claim]:
    """The claims a commitment carries; `SwarmRecordError` naming the first bad one."""
    if not isinstance(value, list) or len(value) > MAX_CLAIMS:
        raise SwarmRecordError(f"commitment.claims: a list of at most {MAX_CLAIMS} claims")
    out, seen = [], set()
    for i, item in enumerate(value):
        where = f"commitment.claims[{i}]"
        if not isinstance(item, dict) or set(item) != {"step", "samples", "parameters",
                                                       "sketch"}:
            raise SwarmRecordError(f"{where}: step, samples, parameters and sketch")
        step, samples, sketch = item["step"], item["samples"], item["sketch"]
        if type(step) is not int or not 0 <= step < 2**53 or step in seen:
            raise SwarmRecordError(f"{where}.step: a new integer from 0")
        if type(samples) is not int or not 0 <= samples <= max_samples:
            raise SwarmRecordError(f"{where}.samples: an integer from 0 to {max_samples}")
        if not isinstance(item["parameters"], str) or not _DIGEST.fullmatch(item["parameters"]):
            raise SwarmRecordError(f"{where}.parameters: sha256: and 64 hex digits")
        if not isinstance(sketch, list) or len(sketch) != SKETCH or not all(
                isinstance(x, float) and math.isfinite(x) for x in sketch):
            raise SwarmRecordError(f"{where}.sketch: {SKETCH} finite numbers")
        seen.add(step)
        out.append(Claim(step, samples, item["parameters"], tuple(sketch)))
    return out


# ----------------------------------------------------------------------------- assignment


def _seed(*parts) -> int:
    text = "\0".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "big") % 2**63


def _permutation(rows: int, seed: int, peer_id: str, epoch: int) -> list[int]:
    import torch

    generator = torch.Generator().manual_seed(_seed("gym-swarm/1 rows", seed, peer_id, epoch))
    return torch.randperm(rows, generator=generator).tolist()


def rows_of_step(rows: int, seed: int, peer_id: str, step: int, batch: int) -> list[int]:
    """The dataset rows of local step ``step`` of ``peer_id`` (``batch`` rows a step)."""
    out, position = [], step * batch
    cache: dict[int, list[int]] = {}
    for p in range(position, position + batch):
        epoch = p // rows
        if epoch not in cache:
            cache[epoch] = _permutation(rows, seed, peer_id, epoch)
        out.append(cache[epoch][p % rows])
    return out


class AssignedRows:
    """The trainer's sampler: this peer's stream of rows (`rows_of_step`), long enough for any
    run (``STREAM_EPOCHS`` passes)."""

    def __init__(self, rows: int, seed: int, peer_id: str) -> None:
        self.rows, self.seed, self.peer_id = rows, seed, peer_id

    def __len__(self) -> int:
        return self.rows * STREAM_EPOCHS

    def __iter__(self):
        for epoch in range(STREAM_EPOCHS):
            yield from _permutation(self.rows, self.seed, self.peer_id, epoch)


# ----------------------------------------------------------------------------- sketches


def sketch(gradients, run: str, peer_id: str, step: int) -> tuple[float, ...]:
    """``SKETCH`` projections of the gradient (``gradients``: one tensor or None per trainable
    parameter, in order) on Rademacher vectors seeded by (run, peer, step)."""
    import torch

    generator = torch.Generator().manual_seed(_seed("gym-swarm/1 sketch", run, peer_id, step))
    total = torch.zeros(SKETCH, dtype=torch.float64)
    for gradient in gradients:
        if gradient is None:
            continue
        flat = gradient.detach().reshape(-1).double().cpu()
        signs = torch.randint(0, 2, (SKETCH, flat.numel()), generator=generator).double() * 2 - 1
        total += signs @ flat
    return tuple(float(x) for x in total)


def make_claim(step: int, samples: int, gradients, parameters_digest: str, run: str,
               peer_id: str) -> Claim:
    return Claim(step, samples, parameters_digest, sketch(gradients, run, peer_id, step))


def difference(claimed: tuple[float, ...], recomputed: tuple[float, ...]) -> float:
    """The relative L2 difference of two sketches (0 for two zero sketches)."""
    num = math.sqrt(sum((a - b) ** 2 for a, b in zip(claimed, recomputed, strict=True)))
    den = math.sqrt(sum(b * b for b in recomputed))
    return num / den if den > 0 else (0.0 if num == 0 else math.inf)


# ----------------------------------------------------------------------------- re-computing


def recompute(trainer, rows: list[int], micro_batch: int):
    """The clipped, accumulated gradient of one local step on ``rows`` at the model's current
    parameters, through the trainer's own collator, loss and clipping (its own gradients are
    saved and put back)."""
    import torch

    model = trainer.model
    params = [p for p in model.parameters() if p.requires_grad]
    saved = [p.grad for p in params]
    source = getattr(trainer, "_gym_rows_source", None)
    if source is None:  # once: each get_train_dataloader call is another accelerate.prepare
        loader = trainer.get_train_dataloader()
        source = trainer._gym_rows_source = (loader.dataset, loader.collate_fn)
    dataset, collate = source
    batches = [collate([dataset[i] for i in rows[j:j + micro_batch]])
               for j in range(0, len(rows), micro_batch)]
    was_training = model.training
    try:
        for p in params:
            p.grad = None
        count = trainer._get_num_items_in_batch(batches, trainer.args.device)
        previous = getattr(trainer, "current_gradient_accumulation_steps", None)
        trainer.current_gradient_accumulation_steps = len(batches)
        for inputs in batches:
            trainer.training_step(model, inputs, count)
        trainer.current_gradient_accumulation_steps = previous
        if trainer.args.max_grad_norm and trainer.args.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(params, trainer.args.max_grad_norm)
        return [None if p.grad is None else p.grad.detach().clone() for p in params]
    finally:
        for p, grad in zip(params, saved, strict=True):
            p.grad = grad
        model.train(was_training)
