"""What `gym audit` re-checks of a published swarm run from the chain and the content endpoint
alone (docs/swarm.md "What is recorded, checked and trusted"):

    swarm = SwarmCollector()                     # audit_log(..., on_entry=swarm)
    result = check_swarm(swarm, content)         # after the replay
    result.ok, result.bans, result.problems

- every ban the run entry lists (``hardware.swarm.banned``) is re-checked from its evidence
  (trainer.swarm.ban_evidence), the evidence files read from the run's ``swarm_evidence/NAME``
  artifacts;
- no ``contribution`` entry credits a peer the run banned, or a run this log does not hold;
- in a run with work checks (no ``--local-steps``), a peer other than the publisher is credited
  samples only when the publisher re-computed its claims and every one passed.

Each problem is one line naming the leaf. Runs, bans and files come from whoever published
them: the counts are bounded, each file is read to its expected length at most.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from ledger.entries import ContributionEntry, EntryError, RunEntry, decode_entry
from ledger.errors import ContentStoreUnreachableError, LedgerError
from ledger.multiformats import MultiformatError
from trainer.swarm.ban_evidence import BanCheck, Read, check_ban
from trainer.swarm.peer import EVIDENCE_DIR
from trainer.swarm.recheck import (
    CannotRecompute,
    WorkRecheck,
    find_dataset,
    recheck_work,
    signed_record,
    work_trainer,
)
from trainer.swarm.records import SwarmRecordError

MAX_BANS = 256  # ban lines of one run that are re-checked
MAX_RUNS = 4096  # swarm runs of one log that are re-checked
MAX_CONTRIBUTIONS = 1 << 20  # contribution entries of one log that are re-checked
MAX_BASE_BYTES = 1 << 30  # bytes of a run's published base weights a re-computation reads
MAX_BASE_FILES = 64  # files of them (a tiny model's: config, weights, tokenizer)
EVIDENCE_PREFIX = f"{EVIDENCE_DIR}/"  # the run entry's artifacts of its bans' evidence files


@dataclass
class SwarmRun:
    """What the audit and a re-computation need of a published swarm run's entry."""

    index: int  # its leaf
    swarm: dict  # hardware.swarm
    artifacts: dict[str, str]
    config: dict  # what a re-computation rebuilds the run's trainer from
    dataset_digests: list[str]

    @classmethod
    def of(cls, entry: RunEntry, index: int = 0) -> SwarmRun:
        return cls(index, entry.hardware["swarm"], dict(entry.artifacts or {}), entry.config,
                   list(entry.dataset_digests))


@dataclass(frozen=True)
class _Credit:
    """What the audit needs of a contribution entry."""

    index: int
    run_cid: str
    peer_id: str
    credited_samples: int
    checks: tuple[int, int] | None  # (checked, passed)


@dataclass
class SwarmCollector:
    """``on_entry`` hook of `ledger.audit.audit_log`: the log's run entries with a swarm
    section and its contribution entries, by leaf (at most ``MAX_RUNS`` and
    ``MAX_CONTRIBUTIONS``; ``skipped`` counts the rest)."""

    runs: dict[str, SwarmRun] = field(default_factory=dict)  # run entry CID -> run
    contributions: list[_Credit] = field(default_factory=list)
    skipped: int = 0

    def __call__(self, index: int, cid: str, data: bytes) -> None:
        if b'"type":"run"' not in data and b'"type":"contribution"' not in data:
            return  # most leaves (receipts, experiences) are neither: not decoded twice
        try:
            entry = decode_entry(data)
        except EntryError:
            return  # the replay flags it
        if isinstance(entry, RunEntry) and isinstance(entry.hardware.get("swarm"), dict):
            if len(self.runs) >= MAX_RUNS:
                self.skipped += 1
                return
            self.runs[cid] = SwarmRun.of(entry, index)
        elif isinstance(entry, ContributionEntry):
            if len(self.contributions) >= MAX_CONTRIBUTIONS:
                self.skipped += 1
                return
            checks = entry.checks and (entry.checks.checked, entry.checks.passed)
            self.contributions.append(_Credit(index, entry.run_cid, entry.peer_id,
                                              entry.credited_samples, checks))


@dataclass
class SwarmAudit:
    runs: int = 0
    contributions: int = 0
    bans: list[BanCheck] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


Recompute = Callable[[SwarmRun, dict, Read], WorkRecheck]


def check_swarm(collector: SwarmCollector, content, whole: bool = True,
                recompute: Recompute | None = None) -> SwarmAudit:
    """Re-check the runs and contributions ``collector`` gathered (module docstring);
    ``content``: the endpoint the artifacts are read from; ``whole`` False (a resumed replay,
    which saw only the later entries): a contribution to a run it did not see is not flagged;
    ``recompute`` (`recomputer`): each failed work check that `check_ban` passed is
    re-computed here, and a ban it does not reproduce is a problem."""
    result = SwarmAudit(len(collector.runs), len(collector.contributions))
    banned: dict[str, set[str]] = {}
    for cid, run in collector.runs.items():
        lines = run.swarm.get("banned") or []
        if not isinstance(lines, list):
            result.problems.append(f"leaf {run.index}: run {cid}: 'banned' is not a list")
            continue
        banned[cid] = set()
        for line in lines[:MAX_BANS]:
            peer = line.get("peer_id") if isinstance(line, dict) else None
            read = reader_of(run.artifacts, content)
            try:
                check = check_ban(line, read)
                if recompute is not None and check.reason == "work_check":
                    again = recompute(run, line, read)
                    if not again.upheld:
                        raise SwarmRecordError(
                            f"re-computed here, its claim of step {again.step} is off by "
                            f"{again.difference:.3g}, within the tolerance {again.tolerance}")
                    check = replace(check, proven=True, detail=(
                        f"its signed claim of step {again.step} is off by "
                        f"{again.difference:.3g} (tolerance {again.tolerance}) from the step "
                        "re-computed here"))
                result.bans.append(check)
            except CannotRecompute as exc:
                result.problems.append(f"leaf {run.index}: the ban of {peer or '?'} could not "
                                       f"be re-computed here: {exc}")
            except SwarmRecordError as exc:
                result.problems.append(f"leaf {run.index}: the ban of {peer or '?'} is not "
                                       f"proven by its evidence: {exc}")
            if isinstance(peer, str):
                banned[cid].add(peer)  # proven or not, the publisher banned it
        if len(lines) > MAX_BANS:
            result.problems.append(f"leaf {run.index}: {len(lines)} bans, over the "
                                   f"{MAX_BANS} an audit re-checks")
    for credit in collector.contributions:
        run, index = collector.runs.get(credit.run_cid), credit.index
        if run is None and whole and not collector.skipped:
            result.problems.append(f"leaf {index}: a contribution to run {credit.run_cid}, "
                                   "which this log does not hold")
        elif run is None:
            continue
        elif credit.peer_id in banned.get(credit.run_cid, ()):
            result.problems.append(f"leaf {index}: a contribution of {credit.peer_id}, whom "
                                   "the run banned")
        elif (credit.credited_samples and credit.peer_id != run.swarm.get("peer_id")
              and not run.swarm.get("local_steps")
              and (credit.checks is None or not credit.checks[1]
                   or credit.checks[1] < credit.checks[0])):
            result.problems.append(f"leaf {index}: {credit.credited_samples} samples credited "
                                   f"to {credit.peer_id} without a passed work check")
    if collector.skipped:
        result.problems.append(f"{collector.skipped} run or contribution entries past the "
                               f"{MAX_RUNS} runs and {MAX_CONTRIBUTIONS} contributions an "
                               "audit re-checks")
    return result


def print_swarm_audit(result: SwarmAudit, console) -> None:
    """``result`` as `gym audit` shows it, after the log's report."""
    proven = sum(b.proven for b in result.bans)
    console.print(f"swarm: {_count(result.runs, 'run')}, "
                  f"{_count(result.contributions, 'contribution')}; "
                  f"{_count(len(result.bans), 'ban')} re-checked from the published evidence "
                  f"({proven} proven by it, {len(result.bans) - proven} resting on the banning "
                  "peer's re-computation)", highlight=False)
    for ban in result.bans:
        console.print(f"  banned {ban.peer_id} ({ban.reason}): {ban.detail}", highlight=False)
    for problem in result.problems:
        console.print(f"  [red]problem[/red]: {problem}", highlight=False)
    if result.ok:
        console.print("[green]swarm audit clean[/green]")
    else:
        console.print(f"[red]swarm audit failed[/red]: {_count(len(result.problems), 'problem')}")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def reader_of(artifacts: dict[str, str], content) -> Read:
    """``read`` of a published run's evidence files (its ``swarm_evidence/NAME`` artifacts)."""

    def read(name: str, limit: int) -> bytes:
        cid = artifacts.get(EVIDENCE_PREFIX + name)
        if cid is None:
            raise SwarmRecordError(f"its evidence file {name} was not published with the run")
        try:
            return content.cat(cid, max_bytes=limit + 1)
        except ContentStoreUnreachableError:
            raise  # the endpoint is down: not a fault of the run
        except (LedgerError, MultiformatError) as exc:  # missing, corrupt or over the limit
            raise SwarmRecordError(f"its evidence file {name} ({cid}): {exc}") from None

    return read


def recomputer(dataset: Path, model: Path | None, scratch: Path, content) -> Recompute:
    """``recompute`` for `check_swarm` (and a verifier's judge of a volunteer): the run's own
    trainer (its published config) on ``dataset`` (the file, or the file of a directory whose
    sha256 is the run's) and the base weights in ``model``, or else in the run's published
    ``base/`` artifacts (a tiny model's), each checked against the run's digests. The last two
    runs' trainers are kept."""
    import json

    trainers: dict[str, object] = {}

    def recompute(run: SwarmRun, line: dict, read: Read) -> WorkRecheck:
        key = json.dumps([run.config, run.dataset_digests], sort_keys=True)
        if key not in trainers:
            where = scratch / f"run-{len(trainers)}-{run.index}"
            base = model if model is not None else _published_base(run, content, where / "base")
            trainer = work_trainer(run.config, run.dataset_digests,
                                   dataset=find_dataset(dataset, run.dataset_digests),
                                   model=base, scratch=where / "trainer")
            while len(trainers) >= 2:
                trainers.pop(next(iter(trainers)))
            trainers[key] = trainer
        return recheck_work(line, read, trainers[key],
                            signed_record(run.swarm, line.get("peer_id")))

    return recompute


def _published_base(run: SwarmRun, content, directory: Path) -> Path:
    """The run's ``base/`` artifacts written under ``directory`` (paths checked)."""
    files = {name.removeprefix("base/"): cid for name, cid in run.artifacts.items()
             if name.startswith("base/")}
    if not files:
        raise CannotRecompute("re-computing needs the base weights: the run published none "
                              "(give them with --model)")
    if len(files) > MAX_BASE_FILES:
        raise CannotRecompute(f"the run published {len(files)} base files, over the "
                              f"{MAX_BASE_FILES} read: give the weights with --model")
    left = MAX_BASE_BYTES
    for name, cid in files.items():
        parts = name.split("/")
        if not name or name.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise SwarmRecordError(f"the run's artifact base/{name}: not a relative path")
        target = directory.joinpath(*parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            data = content.cat(cid, max_bytes=left)
            left -= len(data)
            target.write_bytes(data)
        except ContentStoreUnreachableError:
            raise
        except (LedgerError, MultiformatError) as exc:  # missing here, or over the bound
            raise CannotRecompute(f"the run's artifact base/{name} ({cid}): {exc} (give the "
                                  "weights with --model)") from None
    return directory


def evidence_files(lines) -> list[str]:
    """The evidence file names the ban ``lines`` refer to (what publishing stores)."""
    names = []
    for line in lines if isinstance(lines, list) else ():
        evidence = line.get("evidence") if isinstance(line, dict) else None
        if not isinstance(evidence, dict):
            continue
        found = [evidence.get("payload"), evidence.get("parameters_payload")]
        round_ = evidence.get("round")
        if isinstance(round_, dict):
            found += [m.get("payload") for m in round_.values() if isinstance(m, dict)]
        names += [n for n in found if isinstance(n, str) and n not in names]
    return names
