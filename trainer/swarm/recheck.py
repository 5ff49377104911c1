"""A failed work check re-computed by someone other than the peer that banned for it
(docs/swarm.md "Work checks"): the auditor's `gym audit LOG --recompute DATASET`, and the
re-computation a committee's judge of a staked volunteer runs (committee/work_judge.py).

    built = work_trainer(run.config, run.dataset_digests, dataset=Path("arith.jsonl"),
                         model=Path("base"), scratch=Path("/tmp/x"))
    check_ban(line, read)                  # first: what the evidence proves without a model
    result = recheck_work(line, read, built, signed_record(run.swarm, peer_id))
    result.upheld, result.difference

The trainer is the run's own (its published config: method, LoRA, batch, clipping, loss) on a
local copy of its dataset and base model, each refused unless its sha256 is the one the run
published. The step is re-computed at the parameters the ban kept (their sha256 is the claim's)
on the rows assigned to it, as the banning peer did; the claim's sketch against it decides.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trainer.swarm.ban_evidence import Read
from trainer.swarm.records import SwarmRecordError


class CannotRecompute(SwarmRecordError):
    """What re-computing needs is missing here (the run's dataset, its base weights): not a
    fault of the evidence."""


def find_dataset(path: Path, digests: list[str]) -> Path:
    """``path`` itself, or the file in directory ``path`` whose sha256 is one of ``digests``."""
    from trainer.provenance import file_digest

    path = Path(path)
    if not path.is_dir():
        return path
    for candidate in sorted(p for p in path.iterdir() if p.is_file()):
        if file_digest(candidate) in digests:
            return candidate
    raise CannotRecompute(f"no file in {path} is the run's dataset ({', '.join(digests)})")


@dataclass(frozen=True)
class WorkRecheck:
    peer_id: str
    step: int
    difference: float  # of the claimed sketch from this re-computation
    tolerance: float

    @property
    def upheld(self) -> bool:
        return self.difference > self.tolerance


@dataclass(frozen=True)
class RunTrainer:
    trainer: object  # the run's TRL trainer
    config_digest: str  # trainer.swarm.peer.config_digest of what it was built from


def signed_record(swarm: dict, peer_id: str):
    """The banned ``peer_id``'s own signed contribution record a run keeps beside its bans
    (``refused``), its signature checked; None when the run kept none."""
    from ledger.contributions import recover_contributor
    from ledger.errors import EntryError
    from trainer.swarm.records import decode_contribution

    for row in swarm.get("refused") or []:
        if isinstance(row, dict) and row.get("peer_id") == peer_id and isinstance(
                row.get("record"), dict):
            try:
                record = decode_contribution(row["record"])
                recover_contributor(record)
            except (SwarmRecordError, EntryError) as exc:
                raise SwarmRecordError(f"the run's record of peer {peer_id}: {exc}") from None
            if record.peer_id != peer_id:
                raise SwarmRecordError(f"the run's record of peer {peer_id} names "
                                       f"{record.peer_id}")
            return record
    return None


def work_trainer(run_config: dict, dataset_digests: list[str], *, dataset: Path, model: Path,
                 scratch: Path) -> RunTrainer:
    """The run's trainer (``run_config`` and ``dataset_digests``: the run entry's) on
    ``dataset`` and the base weights in ``model``; `CannotRecompute` if either is not the
    run's."""
    from trainer.gradient.config import GradientConfig
    from trainer.gradient.train import build_trainer, resolve_base_model
    from trainer.provenance import file_digest

    try:
        digest = file_digest(dataset)
    except OSError as exc:
        raise CannotRecompute(f"{dataset}: {exc.strerror}") from None
    if digest not in dataset_digests:
        raise CannotRecompute(f"{dataset}: {digest}, not the run's dataset "
                               f"({', '.join(dataset_digests) or 'none published'})")
    fields = {k: v for k, v in run_config.items() if k != "base_model"}
    published = (run_config.get("base_model") or {}).get("weights_digest")
    try:
        config = GradientConfig.model_validate({
            **fields, "model": str(model), "output_dir": str(scratch),
            "dataset": {**(fields.get("dataset") or {}), "path": str(dataset)}})
    except ValueError as exc:
        raise CannotRecompute(f"the run's config is not one this trainer reads: {exc}") from None
    scratch.mkdir(parents=True, exist_ok=True)
    base = resolve_base_model(config, scratch)
    if base.weights_digest != published:
        raise CannotRecompute(f"{model}: weights {base.weights_digest}, not the run's "
                               f"{published}")
    from trainer.swarm.peer import settings_digest

    return RunTrainer(build_trainer(config, base, scratch),
                      settings_digest(run_config, published, digest))


def recheck_work(line: dict, read: Read, built: RunTrainer, record=None) -> WorkRecheck:
    """Re-compute the step a ``work_check`` ban names at its kept parameters (the model's
    trainable parameters are restored afterwards); ``line`` is one `check_ban` passed (its
    callers check it first: its evidence is not read twice). ``record``: the peer's own signed
    record
    (`signed_record`): the trainer must be built from the settings, base weights and dataset
    its ``config_digest`` names, and the evidence's seed and batches must be the config's;
    without it the run's config is the publisher's word."""
    import torch

    from trainer.swarm.commitments import decode_commitment, decode_payload
    from trainer.swarm.work import TOLERANCE, decode_claims, difference, recompute, sketch

    if line.get("reason") != "work_check":
        raise SwarmRecordError(f"a {line.get('reason')} ban: nothing to re-compute")
    if record is not None and record.config_digest != built.config_digest:
        raise SwarmRecordError(f"the peer's signed record names run settings "
                               f"{record.config_digest}, not the published run's "
                               f"{built.config_digest} (its config, base weights and dataset)")
    trainer, evidence = built.trainer, line["evidence"]
    args = trainer.args
    expected = {"seed": args.seed, "micro_batch": args.per_device_train_batch_size,
                "local_batch": args.per_device_train_batch_size
                * args.gradient_accumulation_steps}
    for name, value in expected.items():
        if evidence[name] != value:
            raise SwarmRecordError(f"ban.evidence.{name}: {evidence[name]}, the run's is {value}")
    if len(trainer.train_dataset) != evidence["dataset_rows"]:
        raise SwarmRecordError(f"the dataset holds {len(trainer.train_dataset)} rows, the "
                               f"run's {evidence['dataset_rows']}")
    commitment = decode_commitment(evidence["commitment"])
    claim = next(c for c in decode_claims(list(commitment.claims), evidence["local_batch"])
                 if c.step == evidence["step"])
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    shapes = [list(p.shape) for p in params]
    if shapes != evidence["shapes"]:
        raise SwarmRecordError("the run's trainable parameters are not the shapes the ban kept")
    kept = decode_payload(read(evidence["parameters_payload"], 4 * sum(p.numel() for p in params)),
                          shapes)
    saved = [p.detach().clone() for p in params]
    try:
        with torch.no_grad():
            for p, value in zip(params, kept, strict=True):
                p.copy_(value.to(p.dtype))
        gradients = recompute(trainer, evidence["rows"], evidence["micro_batch"])
    finally:
        with torch.no_grad():
            for p, value in zip(params, saved, strict=True):
                p.copy_(value)
    again = sketch(gradients, commitment.run, line["peer_id"], claim.step)
    return WorkRecheck(line["peer_id"], claim.step, difference(claim.sketch, again), TOLERANCE)
