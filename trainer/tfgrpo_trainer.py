"""Training-Free GRPO (arXiv 2510.08191): learn a library of short experiences, not weights.

The policy model stays frozen. Its prompt carries a library of natural-language experiences,
shown as `[G0]. text` lines. Each step takes a batch of queries and:

1. rollouts: samples G completions per query with the current library in the prompt, and scores
   them with the verifier (against the ground truth, or against the group's majority answer);
   groups whose rewards all agree (std <= `skip_std_threshold`) carry no relative signal and
   are skipped, as in GRPO;
2. stage 1, summaries: the stage model summarises each rollout of a kept group: the experiences
   it used, where it went wrong, and its outcome (given the ground truth when one is used, and
   the verifier's reasoning for that rollout);
3. stage 2, semantic group advantage: per group, the stage model compares the summaries of the
   successes and failures and answers with JSON operations on the library,
   `ADD(text)`, `UPDATE(id, text)`, `DELETE(id)` or `NONE`, each text at most 32 words; the
   call passes the operations' JSON Schema as `response_format`, so a backend that constrains
   decoding cannot answer anything else. With `stage2: two_step` a free-text critique call
   proposes experiences first and a "group update" call turns them and the library into
   operations;
4. stage 3, consolidation: the batch's operations are merged, deterministically: near-duplicate
   texts (normalised token Jaccard >= `merge_jaccard_threshold`) are added once, a DELETE beats an
   UPDATE of the same experience, the first UPDATE of an experience beats later ones; then they
   are applied and the library is renumbered G0..Gn.

The prompts are in `trainer.tfgrpo_prompts`, the parsing of stage-2 answers and stage 3 in
`trainer.tfgrpo_operations`; this module runs the loop, the snapshots and the report.

After every step a snapshot (library, the step's applied operations, every operation so far,
counters, progress) is written atomically to `output_dir/snapshots/`. Every sampling seed is a
pure function of (seed, stage, epoch, step, query, rollout) and the epoch's order of queries of
(seed, epoch), so `train(resume=True)` continues from the last snapshot and ends with exactly the
library an uninterrupted run would have produced.

Each experience has a stable id (`x<global step>.<k>`, given when it is added) that survives
renumbering; the G-number is only a position in the prompt. Every applied operation is kept as
`{op, id, target, text, step, epoch}`, which is what the ledger needs to publish it as an
`experience` entry (where the CID of the adding entry then becomes the id). When the policy's
backend leaves receipt CIDs in `last_receipts`, each step's report row keeps them per rollout
(`rollout_receipts`) and each operation gets its group's (`receipts`), which publishing puts
into the entry's provenance.

Every rollout is kept in `output_dir/completions.jsonl`, one line per completion with its
problem, reference answer, reward and the verifier's reasoning (what it extracted), written
after its step's snapshot; a resumed run drops the lines of the steps it runs again (a kill
between a snapshot and its lines loses that step's lines, never duplicates them).

Robustness: the run never crashes on model output. Malformed JSON, truncated JSON (complete
elements are salvaged), operations that are not objects or name an unknown op, unknown ids,
overlong or empty texts, empty answers, verifier exceptions and backend errors are each counted,
logged and skipped; every operations answer counts once as `answer_with_ops` or
`answer_without_ops`. `run_report.json` lists the counters and the LLM calls and tokens per
stage and step.

Deviations from the paper and its reference implementation (youtu-agent `utu/practice`):

- Stage 2 answers with operations directly by default (`stage2: one_step`, one call per
  group). The reference first asks for free-text experiences and then, in a separate "group
  update" call per query, turns them into operations; `stage2: two_step` does that.
- Stage 3 is deterministic code (Jaccard merging, conflict rules) instead of one more LLM call
  that rewrites the batch's operations. Cheaper and reproducible, but it cannot merge two
  paraphrases with few words in common.
- Queries per step (`batch_size`) and the per-query operation cap are ours to set; the paper
  uses 100 DAPO problems, G = 5, 3 epochs and DeepSeek-V3.1 for every role. The default demo
  uses SmolLM2-135M for both roles, which mostly exercises the robustness paths.
- Rollouts are plain completions (no tool calls / code interpreter as in the paper's ReAct
  agent), scored by math-verify against integer answers.
- Without ground truth, rewards come from agreement with the group's majority final answer
  (the paper lets the stage model judge without the answer; the majority vote is our stand-in).
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import MISSING, fields
from pathlib import Path
from random import Random

from trainer._json import read_json_file
from trainer.backends import Backend, BackendError, derive_seed, make_backend
from trainer.data import load_problems
from trainer.errors import TrainerError
from trainer.tfgrpo_config import TFGRPOConfig
from trainer.tfgrpo_operations import (
    apply_operations,
    consolidate,
    operations_response_format,
    parse_operations,
)
from trainer.tfgrpo_prompts import (
    Experience,
    Group,
    advantage_messages,
    critique_experiences,
    critique_messages,
    group_update_messages,
    rollout_messages,
    summary_messages,
)
from trainer.verifiers import Verifier, final_answer, load_verifier

log = logging.getLogger(__name__)

SNAPSHOT_VERSION = 1
COMPLETIONS = "completions.jsonl"  # every rollout with its reward, beside the report
MAX_RECEIPTS_PER_OPERATION = 64  # = ledger.entries.MAX_PROVENANCE_RECEIPTS
COUNTERS = (
    "backend_error",  # a completion request failed after retries; its item is skipped
    "malformed_json",  # a stage-2 answer held no parsable JSON
    "truncated_json",  # a stage-2 JSON array was cut off; its complete elements were kept
    "invalid_op",  # an operation that is not an object, has an unknown op, or lacks its text
    "unknown_id",  # an UPDATE/DELETE naming an id that is not in the library
    "overlong_experience",  # an ADD/UPDATE text over max_experience_words
    "ops_over_limit",  # operations beyond max_ops_per_query in one answer
    "empty_answer",  # a rollout with no text (reward 0, not summarised)
    "empty_summary",  # a stage-1 summary with no text
    "verifier_error",  # the verifier raised; reward 0
    "skipped_uniform_group",  # a group whose rewards all agree
    "merged_duplicate",  # an ADD that near-duplicated an experience or an earlier ADD
    "conflict_resolved",  # an UPDATE dropped for a DELETE or an earlier UPDATE of its target
    "answer_with_ops",  # a stage-2 operations answer that yielded at least one valid operation
    "answer_without_ops",  # one that yielded none (NONE only, empty, malformed or all invalid)
)


def majority_answer(outputs: list[str]) -> str | None:
    """The most common final answer among non-empty outputs (first seen wins a tie)."""
    answers = [final_answer(o) for o in outputs if o.strip()]
    return Counter(answers).most_common(1)[0][0] if answers else None


# --------------------------------------------------------------------------- the trainer


class ResumeError(TrainerError, RuntimeError):
    """A snapshot cannot be resumed with this configuration."""


class TFGRPOTrainer:
    """Runs Training-Free GRPO; backends and verifier may be injected (tests, shared models)."""

    def __init__(self, config: TFGRPOConfig, policy: Backend | None = None,
                 stage: Backend | None = None, verifier: Verifier | None = None) -> None:
        self.config = config
        # The inputs first: a missing or malformed dataset fails before any model is loaded.
        self.problems = load_problems(config.train_path, config.max_train_problems)
        self.policy = policy or make_backend(config.policy)
        if stage is not None:
            self.stage = stage
        elif config.stage is None or config.stage == config.policy:
            self.stage = self.policy
        else:
            self.stage = make_backend(config.stage)
        self.verifier = verifier or load_verifier(config.verifier, judge_backend=self.stage)
        self.output_dir = Path(config.output_dir)
        self.library: list[Experience] = []
        self.history: list[dict] = []  # every applied operation, in order
        self.counters: Counter = Counter({name: 0 for name in COUNTERS})
        self.steps: list[dict] = []  # one report row per step
        self.steps_per_epoch = -(-len(self.problems) // config.batch_size)

    # -- the loop, top to bottom

    def train(self, resume: bool = False,
              on_step_end: Callable[[dict], None] | None = None) -> Path:
        """Run every remaining step; return the path of the run report.

        `on_step_end` gets each step's report row after its snapshot is written (progress bars,
        tests that interrupt a run).
        """
        started = time.monotonic()
        next_global = self._resume() if resume else 0
        self.output_dir.mkdir(parents=True, exist_ok=True)
        self._drop_completions_from(next_global)
        total = self.config.epochs * self.steps_per_epoch
        for global_step in range(next_global, total):
            epoch, step = divmod(global_step, self.steps_per_epoch)
            order = list(range(len(self.problems)))
            Random(derive_seed(self.config.seed, "shuffle", epoch)).shuffle(order)
            batch_indices = order[step * self.config.batch_size:(step + 1) * self.config.batch_size]
            row = self._step(epoch, step, global_step, [self.problems[i] for i in batch_indices])
            completions = row.pop("completions")  # not in the snapshot or the report
            self._write_snapshot(global_step, row, done=global_step + 1 == total)
            self._append_completions(completions)
            if on_step_end is not None:
                on_step_end(row)
        return self._write_report(time.monotonic() - started)

    def _step(self, epoch: int, step: int, global_step: int, batch: list[dict]) -> dict:
        cfg, t0 = self.config, time.monotonic()
        before = Counter(self.counters)
        row: dict = {"epoch": epoch, "step": step, "global_step": global_step,
                     "queries": len(batch), "calls": {}, "tokens": {}}

        # 1. Rollouts with the current library, scored by the verifier.
        prompts = [rollout_messages(p["problem"], self.library, cfg.agent_objective)
                   for p in batch]
        outputs, receipts = self._generate(self.policy, "rollout", row, prompts, cfg.group_size,
                                           cfg.temperature, cfg.top_p, cfg.max_new_tokens,
                                           derive_seed(cfg.seed, "rollout", epoch, step))
        if any(cid for per_query in receipts for cid in per_query):
            row["rollout_receipts"] = receipts  # [query][rollout] -> receipt CID or None
        groups: list[Group] = []
        rewards_seen: list[float] = []
        completions: list[dict] = []  # every rollout with its reward: completions.jsonl
        for q, (problem, outs) in enumerate(zip(batch, outputs, strict=True)):
            if outs is None:  # counted by _generate
                continue
            reference = problem["answer"] if cfg.use_ground_truth else majority_answer(outs)
            verdicts = [self._reward(problem, text, reference) for text in outs]
            completions += [{"global_step": global_step, "epoch": epoch, "step": step,
                             "query": q, "rollout": j, "problem": problem["problem"],
                             "reference": reference, "response": text, "reward": reward,
                             "reasoning": reasoning, "receipt": receipts[q][j]}
                            for j, (text, (reward, reasoning)) in enumerate(zip(outs, verdicts))]
            rewards = [reward for reward, _ in verdicts]
            rewards_seen += rewards
            if reference is None or statistics.pstdev(rewards) <= cfg.skip_std_threshold:
                self.counters["skipped_uniform_group"] += 1
                continue
            groups.append(Group(q, problem, outs, rewards, reference,
                                critiques=[reasoning for _, reasoning in verdicts],
                                receipts=receipts[q]))
        row["mean_reward"] = statistics.fmean(rewards_seen) if rewards_seen else None
        row["completions"] = completions  # taken out before the row is reported
        row["groups_kept"] = len(groups)

        # 2. Stage 1: one summary per non-empty rollout of every kept group.
        items = [(g, j) for g in groups for j, text in enumerate(g.outputs) if text.strip()]
        summary_prompts = [summary_messages(g.problem["problem"], g.outputs[j], g.rewards[j],
                                            g.reference if cfg.use_ground_truth else None,
                                            self.library, cfg, g.critiques[j])
                           for g, j in items]
        summaries = self._stage(row, "summary", summary_prompts, epoch, step)
        per_group: dict[int, dict[int, str]] = {g.query: {} for g in groups}
        for (g, j), summary in zip(items, summaries, strict=True):
            if summary is None:
                continue
            if not summary.strip():
                self.counters["empty_summary"] += 1
                summary = "(no summary)"
            per_group[g.query][j] = summary

        # 3. Stage 2: per group, compare successes and failures into operations.
        groups = [g for g in groups if per_group[g.query]]
        proposals = self._stage2(row, groups, per_group, epoch, step)

        # 4. Stage 3: consolidate the batch's operations, apply, renumber.
        operations = consolidate(self.library, proposals, cfg.merge_jaccard_threshold,
                                 self.counters)
        self.library, applied = apply_operations(self.library, operations, epoch, global_step)
        self.history += applied
        row.update(ops_proposed=len(proposals), ops_applied=len(applied), applied=applied,
                   library_size=len(self.library), seconds=round(time.monotonic() - t0, 3),
                   counters={k: self.counters[k] - before[k] for k in COUNTERS
                             if self.counters[k] != before[k]})
        self.steps.append(row)
        log.info("epoch %d step %d: %d groups kept, %d ops applied, library %d", epoch, step,
                 len(groups), len(applied), len(self.library))
        return row

    # -- helpers of a step

    def _stage2(self, row: dict, groups: list[Group], per_group: dict[int, dict[int, str]],
                epoch: int, step: int) -> list[dict]:
        """Proposals from every group's operations answer, each tied to the group's receipts.

        one_step: one schema-constrained call per group. two_step: a free-text critique per
        group ("advantage"), then a schema-constrained call per critique ("group_update").
        """
        cfg = self.config
        response_format = operations_response_format(len(self.library), cfg)
        if cfg.stage2 == "one_step":
            answers = self._stage(row, "advantage", [
                advantage_messages(g, per_group[g.query], self.library, cfg) for g in groups],
                epoch, step, response_format)
        else:
            critiques = self._stage(row, "advantage", [
                critique_messages(g, per_group[g.query], cfg) for g in groups], epoch, step)
            groups = [g for g, c in zip(groups, critiques, strict=True) if c and c.strip()]
            answers = self._stage(row, "group_update", [
                group_update_messages(critique_experiences(c), self.library, cfg)
                for c in critiques if c and c.strip()], epoch, step, response_format)
        proposals: list[dict] = []
        for group, answer in zip(groups, answers, strict=True):
            if answer is None:  # counted by _generate
                continue
            cids = list(dict.fromkeys(cid for cid in group.receipts if cid))
            for proposal in parse_operations(answer, self.library, cfg, self.counters):
                if cids:
                    proposal["receipts"] = cids[:MAX_RECEIPTS_PER_OPERATION]
                proposals.append(proposal)
        return proposals

    def _reward(self, problem: dict, text: str, reference: str | None) -> tuple[float, str]:
        """The verifier's (reward, reasoning); (0, "") for an empty text or no reference."""
        if not text.strip():
            self.counters["empty_answer"] += 1
            return 0.0, ""
        if reference is None:
            return 0.0, ""
        try:
            verdict = self.verifier({**problem, "answer": reference, "response": text})
            return float(verdict["reward"]), str(verdict.get("reasoning") or "")
        except Exception as exc:  # noqa: BLE001 - user code on model output must not end the run
            self.counters["verifier_error"] += 1
            log.warning("verifier failed: %r", exc)
            return 0.0, ""

    def _stage(self, row: dict, name: str, prompts: list[list[dict]], epoch: int, step: int,
               response_format: dict | None = None) -> list[str | None]:
        cfg = self.config
        out, _ = self._generate(self.stage, name, row, prompts, 1, cfg.stage_temperature, 1.0,
                                cfg.stage_max_new_tokens,
                                derive_seed(cfg.seed, name, epoch, step), response_format)
        return [o[0] if o is not None else None for o in out]

    def _generate(self, backend: Backend, name: str, row: dict, prompts: list[list[dict]],
                  n: int, temperature: float, top_p: float, max_new_tokens: int, seed: int,
                  response_format: dict | None = None,
                  ) -> tuple[list[list[str] | None], list[list[str | None]]]:
        """Completions per prompt, None where the backend failed (counted, logged), and the
        receipt CID of each completion (None where the backend gave none).

        One batched call first; if it fails, each prompt alone (seeded by its position), so one
        bad request costs one item, not the batch.
        """
        if not prompts:
            return [], []
        usage = backend.usage.snapshot()
        # Only JSON-answering calls pass a response_format, so any backend serves the others.
        extra = {"response_format": response_format} if response_format is not None else {}
        try:
            results: list[list[str] | None] = list(
                backend.generate(prompts, n, temperature, top_p, max_new_tokens, seed, **extra))
            receipts = _receipts(backend, results)
        except BackendError as exc:
            log.warning("%s: batched call failed (%s); retrying prompt by prompt", name, exc)
            results, receipts = [], []
            for i, prompt in enumerate(prompts):
                try:
                    one = backend.generate([prompt], n, temperature, top_p, max_new_tokens,
                                           derive_seed(seed, i), **extra)
                    results.append(one[0])
                    receipts += _receipts(backend, one)
                except BackendError as exc_one:
                    self.counters["backend_error"] += 1
                    log.warning("%s: prompt %d failed: %s", name, i, exc_one)
                    results.append(None)
                    receipts.append([None] * n)
        after = backend.usage.snapshot()
        row["calls"][name] = after["calls"] - usage["calls"]
        row["tokens"][name] = {k: after[k] - usage[k] for k in ("prompt_tokens",
                                                                "completion_tokens")}
        return results, receipts

    # -- snapshots, resumption, report

    def _state(self) -> dict:
        return {"library": [vars(e) for e in self.library], "history": self.history,
                "counters": dict(self.counters), "steps": self.steps}

    def _append_completions(self, records: list[dict]) -> None:
        with open(self.output_dir / COMPLETIONS, "a", encoding="utf-8") as out:
            out.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records)

    def _drop_completions_from(self, global_step: int) -> None:
        """Keep only the completions of the steps before ``global_step`` (a resumed run runs
        the others again)."""
        path = self.output_dir / COMPLETIONS
        if not path.is_file():
            return
        kept = [line for line in path.read_text(encoding="utf-8").splitlines(keepends=True)
                if line.strip() and json.loads(line).get("global_step", 0) < global_step]
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(kept), encoding="utf-8")
        tmp.replace(path)

    def _write_snapshot(self, global_step: int, row: dict, done: bool) -> None:
        epoch, step = divmod(global_step, self.steps_per_epoch)
        snapshot = {
            "version": SNAPSHOT_VERSION,
            "config": self.config.to_dict(),
            "progress": {"epoch": epoch, "step": step, "global_step": global_step,
                         "steps_per_epoch": self.steps_per_epoch, "done": done},
            # Sampling needs no RNG state: every seed derives from these and the progress above.
            "rng": {"seed": self.config.seed,
                    "scheme": "derive_seed(seed, stage, epoch, step)[, query, rollout]"},
            "applied": row["applied"],
            **self._state(),
        }
        _write_json(self.output_dir / "snapshots" / f"step-{global_step:05d}.json", snapshot)
        _write_json(self.output_dir / "library.json", {
            "experiences": [{"prompt_id": f"G{i}", **vars(e)} for i, e in enumerate(self.library)],
            "operations": self.history})

    def _resume(self) -> int:
        """Load the newest snapshot; return the global step to run next (0 if none)."""
        snapshots = sorted((self.output_dir / "snapshots").glob("step-*.json"))
        if not snapshots:
            return 0
        snapshot = read_json_file(snapshots[-1])
        mine, theirs = self.config.to_dict(), dict(snapshot["config"])
        for name in ("output_dir", "domain"):  # neither changes what the run computes
            mine.pop(name, None), theirs.pop(name, None)
        for f in fields(TFGRPOConfig):  # a snapshot older than a field ran with its default
            if f.name in mine and f.name not in theirs and f.default is not MISSING:
                theirs[f.name] = f.default
        if mine != theirs:
            changed = sorted(k for k in mine if mine[k] != theirs.get(k))
            raise ResumeError(f"{snapshots[-1]} was written with a different config: {changed}")
        self.library = [Experience(**e) for e in snapshot["library"]]
        self.history = snapshot["history"]
        self.counters = Counter(snapshot["counters"])
        self.steps = snapshot["steps"]
        log.info("resuming after %s", snapshots[-1].name)
        return snapshot["progress"]["global_step"] + 1

    def _write_report(self, seconds: float) -> Path:
        cfg = self.config
        totals: dict[str, dict[str, int]] = {}
        for row in self.steps:
            for name, calls in row["calls"].items():
                total = totals.setdefault(name, {"calls": 0, "prompt_tokens": 0,
                                                 "completion_tokens": 0})
                total["calls"] += calls
                for key, value in row["tokens"][name].items():
                    total[key] += value
        report = {
            "config": cfg.to_dict(),
            "library_size": len(self.library),
            "library": str(self.output_dir / "library.json"),
            "counters": dict(self.counters),
            "llm_totals": totals,
            # The paper's cost per step: G rollouts + G summaries + 1 group advantage per query,
            # plus one batch-consolidation call (which is code here).
            "paper_calls_per_full_step": cfg.batch_size * (2 * cfg.group_size + 1) + 1,
            "steps": [{k: v for k, v in row.items() if k != "applied"} for row in self.steps],
            "operations_applied": len(self.history),
            "seconds_this_invocation": round(seconds, 3),
        }
        return _write_json(self.output_dir / "run_report.json", report)


def _receipts(backend: Backend, results: list[list[str]]) -> list[list[str | None]]:
    """The receipt CIDs of the backend's last `generate`, shaped like `results`; all None when
    the backend keeps none or their shape does not match."""
    given = getattr(backend, "last_receipts", None)
    if (isinstance(given, list) and len(given) == len(results)
            and all(isinstance(g, list) and len(g) == len(r) for g, r in zip(given, results))):
        return [[cid if isinstance(cid, str) and cid else None for cid in g] for g in given]
    return [[None] * len(r) for r in results]


def _write_json(path: Path, data: object) -> Path:
    """Write atomically (temp file + rename): a kill never leaves half a snapshot."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, ensure_ascii=False))
    os.replace(tmp, path)
    return path
