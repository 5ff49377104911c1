"""Publish a Training-Free GRPO run to a researcher's ledger log.

A finished run directory (``run_report.json``, ``library.json``, ``snapshots/``) becomes:

1. its snapshots, library and report stored in the content store (their CIDs are the run's
   ``artifacts``);
2. one ``run`` entry: config, code version, package versions, hardware, dataset digests,
   metrics (counters, library size, per-step reward curve) and those artifacts;
3. one ``experience`` entry per applied operation, in the order the trainer applied them:
   ``add`` entries carry the text, ``update``/``delete`` entries name as ``target`` the CID of
   the entry that added the experience (the trainer's stable ids ``x<step>.<k>`` map to those
   CIDs), and every provenance names the run CID, step, epoch, base model and its digest, and
   (``receipts``) the receipt CIDs of the rollouts the operation was learnt from, when the
   policy's backend gave any (at most ``MAX_PROVENANCE_RECEIPTS``, in the trainer's order).

All entries are appended in one transaction and anchored with one checkpoint. Before
returning, the library is recomputed by folding the log's experience entries
(``ledger.fold_library``) and must equal the trainer's final library, text for text in the
same order; a mismatch is an error, never a warning.

``publish_run_dir`` publishes a finished run directory of either kind: a Training-Free GRPO run
(``run_report.json``) as above, or a gradient-training run (``run.json``) through
``trainer.adapters.publish.publish_adapter_run``. Every publishing command calls it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ledger.entries import (
    MAX_PROVENANCE_RECEIPTS,
    ExperienceEntry,
    Provenance,
    RunEntry,
    decode_entry,
    encode_entry,
    entry_cid,
    fold_library,
)
from ledger.errors import NotFoundError
from trainer._json import read_json_file
from trainer.errors import TrainerError
from trainer.provenance import code_version, file_digest, hardware, model_digest, packages

if TYPE_CHECKING:
    from trainer.adapters.publish import PublishedAdapter

RUN_REPORT = "run_report.json"  # what `gym train tfgrpo` writes last


class PublishRunError(TrainerError, ValueError):
    """The run directory cannot be published, or its log does not fold back to its library."""


@dataclass(frozen=True)
class RunEntries:
    run: bytes  # canonical bytes of the run entry
    experiences: list[bytes]  # one experience entry per applied operation, in order
    experience_ids: dict[str, str]  # trainer's stable id -> CID of the entry that added it
    final_library: list[str]  # texts of the trainer's final library, in order


@dataclass(frozen=True)
class PublishedRun:
    run_cid: str
    experience_ids: dict[str, str]
    size: int  # log size after the anchor
    root: bytes
    tx_hash: str
    leaves: tuple[tuple[str, int, str], ...] = ()  # (kind, leaf index, CID) of each entry


def _read_json(path: Path) -> dict:
    try:
        return read_json_file(path)
    except FileNotFoundError:
        raise PublishRunError(f"{path} is missing: is {path.parent} a finished "
                              "`gym train tfgrpo` run directory?") from None
    except ValueError as exc:
        raise PublishRunError(f"{path} is not valid JSON ({exc})") from None


def build_run_entries(run_dir: str | Path, content, *, domain: str | None = None) -> RunEntries:
    """Store the run's artifacts in ``content`` and build its entries (nothing appended);
    ``domain`` defaults to the run's config's (``math`` for a run older than that field)."""
    run_dir = Path(run_dir)
    report = _read_json(run_dir / RUN_REPORT)
    library = _read_json(run_dir / "library.json")
    config = report["config"]
    domain = domain or config.get("domain") or "math"
    artifacts = {"run_report": content.add_file(run_dir / RUN_REPORT, pin=True),
                 "library": content.add_file(run_dir / "library.json", pin=True)}
    for snapshot in sorted((run_dir / "snapshots").glob("step-*.json")):
        artifacts[f"snapshot/{snapshot.stem}"] = content.add_file(snapshot, pin=True)
    datasets = [p for p in (config.get("train_path"), config.get("eval_path")) if p]
    missing = [p for p in datasets if not Path(p).is_file()]
    if missing:
        raise PublishRunError(f"dataset file {missing[0]} of the run's config is not here: "
                              "publish from the directory the run was started in")
    rewards = [row["mean_reward"] for row in report["steps"] if row.get("mean_reward") is not None]
    metrics = {name: count for name, count in report["counters"].items()}
    metrics.update(library_size=report["library_size"],
                   operations_applied=report["operations_applied"], mean_reward=rewards)
    run = encode_entry(RunEntry(
        config=config, code_version=code_version(), packages=packages(),
        hardware=hardware(), dataset_digests=[file_digest(p) for p in datasets],
        metrics=metrics, artifacts=artifacts))
    run_cid = entry_cid(run)

    policy_model = config["policy"]["model"] or "SmolLM2-135M-Instruct"
    digest = model_digest(config["policy"]["model"]) if config["policy"]["model"] else None
    if digest is None and not config["policy"]["model"]:
        from trainer.backends import default_model_dir

        digest = model_digest(default_model_dir())
    ids: dict[str, str] = {}
    experiences = []
    for record in library["operations"]:
        target = None
        if record["op"] != "add":
            if record["target"] not in ids:
                raise PublishRunError(f"operation {record} names {record['target']}, which no "
                                      "earlier operation of this run added")
            target = ids[record["target"]]
        data = encode_entry(ExperienceEntry(
            text=record["text"], domain=domain, op=record["op"], target=target,
            provenance=Provenance(run_cid=run_cid, method="tfgrpo", base_model=policy_model,
                                  step=record["step"], epoch=record["epoch"],
                                  base_model_digest=digest,
                                  receipts=record.get("receipts", [])[:MAX_PROVENANCE_RECEIPTS]
                                  or None)))
        if record["op"] == "add":
            ids[record["id"]] = entry_cid(data)
        experiences.append(data)
    final = [e["text"] for e in library["experiences"]]
    return RunEntries(run, experiences, ids, final)


def check_fold(entries: RunEntries) -> None:
    """The fold of the run's experience entries must be the trainer's final library."""
    folded = fold_library((entry_cid(data), decode_entry(data)) for data in entries.experiences)
    if list(folded.values()) != entries.final_library:
        raise PublishRunError(
            f"folding the run's {len(entries.experiences)} experience entries gives "
            f"{len(folded)} experiences that differ from the trainer's final library of "
            f"{len(entries.final_library)}; nothing was published")


def publish_run(run_dir: str | Path, store, content, contract, log_name: str, *,
                domain: str | None = None) -> PublishedRun:
    """Append the run's entries to ``log_name`` (created if new) and anchor them."""
    from ledger.publish import append_entries, publish

    entries = build_run_entries(run_dir, content, domain=domain)
    check_fold(entries)
    try:
        store.get_log(log_name)
    except NotFoundError:
        store.create_log(log_name)
    appended = append_entries(store, content, log_name, [entries.run, *entries.experiences])
    result = publish(store, content, contract, log_name)
    kinds = ["run"] + ["experience"] * len(entries.experiences)
    leaves = tuple((kind, appended.old_size + i, cid)
                   for i, (kind, cid) in enumerate(zip(kinds, appended.cids, strict=True)))
    return PublishedRun(entry_cid(entries.run), entries.experience_ids, result.size,
                        result.root, result.tx_hash, leaves)


def publish_run_dir(run_dir: str | Path, store, content, contract, log_name: str, *,
                    domain: str | None = None) -> PublishedRun | PublishedAdapter:
    """Publish the finished run in ``run_dir`` to ``log_name`` (created if new), anchored.

    A gradient-training run (``run.json``, from ``gym train sft|dpo|grpo|gspo``) becomes a
    ``run`` and an ``adapter`` entry (``PublishedAdapter``); a Training-Free GRPO run
    (``run_report.json``) a ``run`` entry and its ``experience`` entries, each recorded under
    ``domain`` (``PublishedRun``).
    """
    from trainer.adapters.publish import RUN_MANIFEST, publish_adapter_run

    run_dir = Path(run_dir)
    if (run_dir / RUN_MANIFEST).is_file():
        return publish_adapter_run(run_dir, store, content, contract, log_name)
    if (run_dir / RUN_REPORT).is_file():
        return publish_run(run_dir, store, content, contract, log_name, domain=domain)
    raise PublishRunError(f"{run_dir} holds neither {RUN_MANIFEST} (a `gym train sft|dpo|grpo|"
                          f"gspo` run) nor {RUN_REPORT} (a `gym train tfgrpo` run): is it the "
                          "output directory of a finished run?")
