"""Mean@k and Pass@k of a model with and without an experience library, or an adapter.

An arm is a backend plus a library (possibly empty): "baseline" is the base model alone,
"library" the base model with the library in its prompt (Training-Free GRPO), "adapter" the
base model with a PEFT adapter (gradient training), "adapter+library" both. Every arm sees the
same problems and the same sampling seeds (`derive_seed(seed, problem, sample)`), so the arms
differ only in what they are meant to compare. The evaluation is repeated for several seeds and
each metric is reported as mean, std, min and max across seeds.

- Mean@k: the average reward of k samples per problem, averaged over problems (the paper's
  "Mean@32" with k = 32).
- Pass@k: the share of problems with at least one correct sample among k. With n >= k samples
  drawn, `pass_at_k(n, c, k)` is the unbiased estimator 1 - C(n-c, k) / C(n, k) of Chen et al.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path

from ledger.evaluations import mean_at_k, pass_rate
from trainer._json import read_json_file
from trainer.backends import Backend
from trainer.tfgrpo_prompts import Experience, rollout_messages
from trainer.verifiers import Verifier


def spread(values: list[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(values),
            "std": statistics.pstdev(values) if len(values) > 1 else 0.0,
            "min": min(values), "max": max(values), "values": values}


def load_library(path: str | Path) -> list[Experience]:
    """The experiences of a `library.json` written by the trainer (or a plain list of texts)."""
    data = read_json_file(path)
    items = data["experiences"] if isinstance(data, dict) else data
    return [Experience(e["id"], e["text"]) if isinstance(e, dict) else Experience(f"e{i}", e)
            for i, e in enumerate(items)]


def evaluate_arms(arms: dict[str, tuple[Backend, list[Experience]]], problems: list[dict],
                  verifier: Verifier, k: int = 4, seeds: tuple[int, ...] = (0, 1, 2),
                  temperature: float = 0.7, top_p: float = 0.95, max_new_tokens: int = 256,
                  on_progress: Callable[[int, str], None] | None = None,
                  agent_objective: str | None = None,
                  completions: list[dict] | None = None,
                  receipts: dict[tuple[str, int], list[list[dict | None]]] | None = None
                  ) -> dict:
    """Mean@k and Pass@k per arm (name -> (backend, library)), spread across seeds.

    ``on_progress(n, label)`` is told of every ``n`` generations finished (of
    ``len(arms) * len(seeds) * len(problems) * k`` in all), ``label`` naming the arm and seed:
    per batch where the backend reports its batches (``on_rows``), else per (seed, arm) pass.
    ``agent_objective``: the rollout system prompt (a config's; default the math one).
    ``completions``: every completion is appended there, with its reward and the verifier's
    reasoning. ``receipts``: ``receipts[(arm, seed)][problem][sample]`` is set to the
    backend's ``last_evidence`` (a signing node's receipt CID and bundle token, else None).
    """
    objective = {} if agent_objective is None else {"agent_objective": agent_objective}
    per_seed: dict[str, dict[str, list[float]]] = {
        arm: {"mean_at_k": [], "pass_at_k": []} for arm in arms}
    for seed in seeds:
        for arm, (backend, experiences) in arms.items():
            label, done = f"{arm}, seed {seed}", 0

            def rows(n: int, label: str = label) -> None:
                nonlocal done
                done += n
                if on_progress is not None:
                    on_progress(n, label)

            prompts = [rollout_messages(p["problem"], experiences, **objective) for p in problems]
            reports = on_progress is not None and hasattr(backend, "on_rows")
            if reports:
                backend.on_rows = rows
            try:
                outputs = backend.generate(prompts, k, temperature, top_p, max_new_tokens, seed)
            finally:
                if reports:
                    backend.on_rows = None
            if receipts is not None:
                receipts[(arm, seed)] = getattr(backend, "last_evidence", None) or [
                    [None] * k for _ in problems]
            rewards = []
            for index, (p, outs) in enumerate(zip(problems, outputs, strict=True)):
                verdicts = [verifier({**p, "response": text}) for text in outs]
                rewards.append([float(v["reward"]) for v in verdicts])
                if completions is not None:
                    completions += [{"arm": arm, "seed": seed, "problem_index": index,
                                     "problem": p["problem"], "answer": p["answer"],
                                     "sample": j, "response": text,
                                     "reward": float(v["reward"]),
                                     "reasoning": str(v.get("reasoning") or "")}
                                    for j, (text, v) in enumerate(zip(outs, verdicts))]
            per_seed[arm]["mean_at_k"].append(mean_at_k(rewards))
            per_seed[arm]["pass_at_k"].append(pass_rate(rewards, k))
            if on_progress is not None and done < len(problems) * k:
                on_progress(len(problems) * k - done, label)
    return {"k": k, "seeds": list(seeds), "problems": len(problems),
            "library_size": max((len(lib) for _, lib in arms.values()), default=0),
            "temperature": temperature, "top_p": top_p, "max_new_tokens": max_new_tokens,
            "arms": list(arms),
            **{arm: {metric: spread(values) for metric, values in metrics.items()}
               for arm, metrics in per_seed.items()}}


def evaluate_library(backend: Backend, problems: list[dict], library: list[Experience],
                     verifier: Verifier, k: int = 4, seeds: tuple[int, ...] = (0, 1, 2),
                     temperature: float = 0.7, top_p: float = 0.95, max_new_tokens: int = 256,
                     on_progress: Callable[[int, str], None] | None = None) -> dict:
    """Mean@k and Pass@k per arm ("baseline": no library, "library"), spread across seeds."""
    return evaluate_arms({"baseline": (backend, []), "library": (backend, library)}, problems,
                         verifier, k, seeds, temperature, top_p, max_new_tokens, on_progress)
