"""Time to first token with a ~2,000-token experience library: reused prefix KV vs recomputed.

Two `TransformersEngine`s share one model: one reuses the library prefix's KV cache (computed
once, deep-copied per request), the other runs the whole prompt every time. Each answers the same
chat requests, one at a time, and we take the median time from submitting a request to its first
generated token. Prints both, their ratio (target >= `TARGET_RATIO`), the one-off cost of
computing the prefix, and checks that greedy output is token-for-token identical. Exits 1 if the
outputs differ or the ratio is below target.

Model: by default a random Llama (hidden 256, 4 layers; its output is noise, its compute shape is
what matters here) with the byte-level tokenizer of `trainer.backends.tiny_random_model`, built
in a temporary directory; or `--model DIR` for any local Hugging Face checkpoint (e.g. the
SmolLM2-135M-Instruct that `trainer.backends.default_model_dir()` converts from the packaged GGUF).

    .venv/bin/python benchmarks/bench_prefix_reuse.py [--model DIR] [--library-tokens 2000]
                                                       [--requests 8] [--threads 1]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from inference_node.engine import SamplingParams
from inference_node.injection import LibraryInjector
from inference_node.library import LibrarySnapshot
from inference_node.transformers_engine import TransformersEngine

TARGET_RATIO = 5.0
QUESTIONS = ["A farmer has 12 apples and buys 3 boxes of 7. How many apples?",
             "What is 17 times 3?", "Check: is 91 a prime number?",
             "A train covers 120 km in 1.5 hours. What is its speed?"]


def random_model(directory: Path) -> Path:
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from trainer.backends import tiny_random_model

    tokenizer_dir = tiny_random_model(directory / "tokenizer")
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=256, intermediate_size=768,
                         num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=8192, initializer_range=0.1,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # never stop early, so both runs decode the same number of tokens
        model.lm_head.weight[tokenizer.eos_token_id] = 0.0
    model.save_pretrained(directory / "model")
    tokenizer.save_pretrained(directory / "model")
    return directory / "model"


def library_of(tokenizer, tokens: int) -> LibrarySnapshot:
    """Experiences of trainer-like length (~25 words) until the block reaches `tokens` tokens."""
    experiences = []
    injector = LibraryInjector(tokenizer)
    while True:
        i = len(experiences)
        text = (f"When a problem mentions quantity {i} of some item, write every given number "
                f"down first, convert units, and check the result of step {i} against it.")
        experiences.append((f"exp-{i}", text))
        snapshot = LibrarySnapshot(f"v{i}", "0xbench", i + 1, "00" * 32, tuple(experiences))
        prefix = injector.chat([{"role": "user", "content": "x"}], snapshot).prompt.prefix
        if len(prefix.token_ids) >= tokens:
            return snapshot


async def first_token_times(engine, prompts, params) -> tuple[list[float], list[list[int]]]:
    times, outputs = [], []
    for prompt in prompts:
        started = time.perf_counter()
        first, ids = None, []
        async for delta in engine.stream(prompt, params):
            if first is None:
                first = time.perf_counter() - started
            ids.extend(delta.token_ids)
        times.append(first)
        outputs.append(ids)
    return times, outputs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="local HF model dir (default: random Llama)")
    parser.add_argument("--library-tokens", type=int, default=2000)
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=16, help="greedy tokens per request")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.model or random_model(Path(tmp))
        reuse = TransformersEngine.from_pretrained(model_dir, device="cpu", dtype="float32")
    fresh = TransformersEngine(reuse.model, reuse.tokenizer, reuse.model_name, prefix_reuse=False)
    snapshot = library_of(reuse.tokenizer, args.library_tokens)
    injector = LibraryInjector(reuse.tokenizer)
    prompts = [injector.chat([{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}],
                             snapshot).prompt for i in range(args.requests)]
    params = SamplingParams(max_tokens=args.tokens, temperature=0)

    async def run():
        warm_start = time.perf_counter()  # computes the prefix KV once: the one-off cost
        await reuse.generate(prompts[0], params)
        warm = time.perf_counter() - warm_start
        await fresh.generate(prompts[0], params)
        reused = await first_token_times(reuse, prompts, params)
        recomputed = await first_token_times(fresh, prompts, params)
        return warm, reused, recomputed

    try:
        warm, (reused_t, reused_out), (fresh_t, fresh_out) = asyncio.run(run())
    finally:
        reuse.shutdown()
        fresh.shutdown()
    prefix_len = len(prompts[0].prefix.token_ids)
    own = statistics.median(len(p.token_ids) for p in prompts)
    ttft_reuse, ttft_fresh = statistics.median(reused_t), statistics.median(fresh_t)
    ratio = ttft_fresh / ttft_reuse
    identical = reused_out == fresh_out
    print(f"model: {model_dir if args.model else 'random Llama h256 x4 (byte-level BPE)'}; "
          f"threads {args.threads}")
    print(f"library: {len(snapshot.experiences)} experiences, prefix {prefix_len} tokens; "
          f"request's own tokens (median) {own:g}; {args.requests} requests, greedy "
          f"{args.tokens} tokens")
    print(f"first request with reuse (computes the prefix once): {warm * 1e3:.1f} ms total")
    print(f"TTFT median, prefix recomputed: {ttft_fresh * 1e3:8.2f} ms")
    print(f"TTFT median, prefix reused:     {ttft_reuse * 1e3:8.2f} ms")
    print(f"ratio: {ratio:.1f}x (target >= {TARGET_RATIO:g}x)")
    print(f"greedy output identical: {identical}")
    return 0 if identical and ratio >= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
