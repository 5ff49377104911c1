"""Decoding throughput of the node's two engines on one model: `VLLMEngine` vs `TransformersEngine`.

Both engines answer the same chat requests (a two-experience library injected, greedy, up to
`--tokens` tokens each) in two settings: single-stream (one request at a time, `--requests` of
them) and batch (`--batch` concurrent requests, submitted together). Throughput is completion
tokens generated divided by wall time, startup and one warm-up request excluded. The engines run
one after the other in the same process, transformers first (so vLLM's idle worker never shares
the CPU with it). Prints tokens/s for each engine and setting, the ratios vLLM / transformers
(the baseline), which engine is faster (the issue makes that one the node's default), and how
many greedy answers were token-for-token identical across the engines.

vLLM on a CPU runs its model in a worker process bound to all cores but one (one of two here);
`--threads` sets torch's threads for the transformers engine (default: torch's own, all cores,
which is how `gym node serve` runs it). Needs vLLM (`scripts/setup_vllm.sh`).

    .venv/bin/python benchmarks/bench_engines.py [--model DIR] [--tokens 64] [--requests 4]
                                                 [--batch 8] [--threads N] [--eager]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import torch

from inference_node.engine import Engine, Generation, SamplingParams
from inference_node.injection import LibraryInjector, Prompt
from inference_node.library import LibrarySnapshot
from inference_node.transformers_engine import TransformersEngine

QUESTIONS = ["What is 12 + 7?", "Name three primary colors.",
             "A farmer has 3 boxes of 12 apples. How many apples does he have?",
             "Write a haiku about the sea.", "What is the capital of France?",
             "A train covers 120 km in 1.5 hours. What is its speed?",
             "Explain in two sentences why the sky is blue.", "Is 91 a prime number?"]
LIBRARY = LibrarySnapshot("bench", "0xbench", 2, "00" * 32, (
    ("exp-0", "Write every given number down first, then convert units."),
    ("exp-1", "Re-read the question before giving the final answer.")))


async def single_stream(engine: Engine, prompts: list[Prompt], params: SamplingParams
                        ) -> tuple[float, list[Generation]]:
    started = time.perf_counter()
    results = [await engine.generate(prompt, params) for prompt in prompts]
    return time.perf_counter() - started, results


async def concurrent(engine: Engine, prompts: list[Prompt], params: SamplingParams
                     ) -> tuple[float, list[Generation]]:
    started = time.perf_counter()
    results = await asyncio.gather(*(engine.generate(prompt, params) for prompt in prompts))
    return time.perf_counter() - started, list(results)


def measure(engine: Engine, single: list[Prompt], batch: list[Prompt], params: SamplingParams
            ) -> dict:
    async def run():
        await engine.generate(single[0], params)  # warm-up: first-call costs are not decoding
        return await single_stream(engine, single, params), await concurrent(engine, batch,
                                                                             params)

    (t_single, r_single), (t_batch, r_batch) = asyncio.run(run())
    single_tokens = sum(r.completion_tokens for r in r_single)
    batch_tokens = sum(r.completion_tokens for r in r_batch)
    return {"single": single_tokens / t_single, "batch": batch_tokens / t_batch,
            "answers": [r.token_ids for r in r_single + r_batch]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path,
                        help="local HF model dir (default: the converted SmolLM2-135M-Instruct)")
    parser.add_argument("--tokens", type=int, default=64, help="greedy tokens per request (max)")
    parser.add_argument("--requests", type=int, default=4, help="single-stream requests")
    parser.add_argument("--batch", type=int, default=8, help="concurrent requests")
    parser.add_argument("--threads", type=int, help="torch threads for transformers")
    parser.add_argument("--eager", action="store_true",
                        help="run vLLM without compiling the model (faster start)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    from inference_node.vllm_engine import VLLMEngine

    if args.model is None:
        from trainer.backends import default_model_dir

        args.model = default_model_dir()
    params = SamplingParams(max_tokens=args.tokens, temperature=0.0)

    started = time.perf_counter()
    reference = TransformersEngine.from_pretrained(args.model, device="cpu",
                                                   max_batch=args.batch)
    startup = {"transformers": time.perf_counter() - started}
    injector = LibraryInjector(reference.tokenizer)
    prompts = [injector.chat([{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}],
                             LIBRARY).prompt for i in range(max(args.requests, args.batch))]
    single, batch = prompts[:args.requests], prompts[:args.batch]
    try:
        results = {"transformers": measure(reference, single, batch, params)}
    finally:
        reference.shutdown()

    started = time.perf_counter()
    engine = VLLMEngine.from_pretrained(args.model, max_batch=max(args.batch, 8),
                                        enforce_eager=args.eager)
    startup["vllm"] = time.perf_counter() - started
    try:
        results["vllm"] = measure(engine, single, batch, params)
    finally:
        engine.shutdown()

    base, ours = results["transformers"], results["vllm"]
    same = sum(a == b for a, b in zip(base["answers"], ours["answers"], strict=True))
    prompt_len = statistics.median(len(p) for p in prompts)
    print(f"model: {args.model}; transformers threads {torch.get_num_threads()}; "
          f"vLLM {'eager' if args.eager else 'compiled'}")
    print(f"requests: chat with a {len(LIBRARY.experiences)}-experience library, prompt "
          f"{prompt_len:g} tokens (median), greedy up to {args.tokens} tokens; single-stream "
          f"{args.requests} in turn, batch {args.batch} at once")
    print(f"{'engine':<14}{'single tok/s':>14}{f'batch-{args.batch} tok/s':>16}"
          f"{'startup s':>12}")
    for name, row in results.items():
        print(f"{name:<14}{row['single']:>14.1f}{row['batch']:>16.1f}{startup[name]:>12.1f}")
    single_ratio, batch_ratio = ours["single"] / base["single"], ours["batch"] / base["batch"]
    print(f"ratio vllm / transformers (baseline): single-stream {single_ratio:.2f}x, "
          f"batch-{args.batch} {batch_ratio:.2f}x")
    faster = "vllm" if single_ratio > 1 and batch_ratio > 1 else (
        "transformers" if single_ratio < 1 and batch_ratio < 1 else "neither in both settings")
    print(f"faster engine: {faster}")
    print(f"greedy answers identical across engines: {same}/{len(base['answers'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
