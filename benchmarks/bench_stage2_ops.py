"""How often a stage-2 answer yields valid library operations: constrained vs prompt-only.

Builds `--groups` stage-2 prompts (`trainer.tfgrpo_prompts.advantage_messages`) from groups of
the shipped arithmetic problems, each with one correct and one wrong scripted rollout and their
summaries, and asks the stage model for operations `--samples` times per prompt (seeds 0..):
once with the prompt alone (the baseline, what the trainer did before issue 16: 0 of 8 for
SmolLM2) and once under the operations schema (`response_format`, grammar-constrained by the
local backend). Each answer goes through the trainer's own parser (`parse_operations`); printed
per arm: answers, answers with at least one valid operation, malformed / truncated JSON, and
the valid share constrained against the baseline's.

    .venv/bin/python benchmarks/bench_stage2_ops.py [--model DIR] [--groups 4] [--samples 2]
        [--tokens 160]

Model: SmolLM2-135M-Instruct by default (``trainer.backends.default_model_dir``), CPU.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from pathlib import Path

from trainer.backends import TransformersBackend
from trainer.data import load_problems
from trainer.tfgrpo_config import TFGRPOConfig
from trainer.tfgrpo_operations import operations_response_format, parse_operations
from trainer.tfgrpo_prompts import Group, advantage_messages

DATA = Path(__file__).resolve().parent.parent / "trainer" / "data" / "arith_train.jsonl"


def prompts(groups: int, config: TFGRPOConfig) -> list[list[dict]]:
    out = []
    for i, problem in enumerate(load_problems(DATA, groups)):
        answer = str(problem["answer"])
        group = Group(query=i, problem=problem, outputs=[f"Answer: {answer}", "Answer: 0"],
                      rewards=[1.0, 0.0], reference=answer)
        summaries = {0: f"Computed each step in order and reached {answer}.",
                     1: "Added every number it saw and answered 0 without checking."}
        out.append(advantage_messages(group, summaries, [], config))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="model directory (default: SmolLM2)")
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=160)
    args = parser.parse_args()

    config = TFGRPOConfig(train_path=str(DATA))
    backend = TransformersBackend(args.model, batch_size=8, device="cpu")
    messages = prompts(args.groups, config)
    shares = {}
    for arm, fmt in (("prompt only", None),
                     ("schema", operations_response_format(0, config))):
        started = time.perf_counter()
        answers = backend.generate(messages, n=args.samples, temperature=config.stage_temperature,
                                   max_new_tokens=args.tokens, seed=0, response_format=fmt)
        seconds = time.perf_counter() - started
        counters: Counter = Counter()
        for row in answers:
            for text in row:
                parse_operations(text, [], config, counters)
        total = counters["answer_with_ops"] + counters["answer_without_ops"]
        shares[arm] = counters["answer_with_ops"] / total
        print(f"{arm:12s}: {counters['answer_with_ops']} of {total} answers give operations "
              f"(malformed {counters['malformed_json']}, truncated {counters['truncated_json']}"
              f"), {seconds:.1f} s")
    print(f"valid share: schema {shares['schema']:.2f} vs prompt only {shares['prompt only']:.2f}"
          f" (baseline)")


if __name__ == "__main__":
    main()
