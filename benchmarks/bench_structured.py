"""What structured outputs cost: constrained vs unconstrained decoding, tokens per second.

The same `--prompts` chat prompts (bench_sampling's) are answered one at a time, `--tokens`
tokens at most, greedy and at T=1.0 (seed i): once without a response format (the baseline,
measured in this run) and once under a JSON schema (`SCHEMA`: a list of short steps and an
answer, long enough to fill the answer), as the node runs them (`SamplingParams.constraint`,
the grammar compiled beforehand by `check_constraint`, as `serving` does before queueing).
Printed per engine: tokens, seconds, tokens/s of each, and the ratio constrained / baseline
(the target is at least 0.90). Then the mask's own cost per token, measured on the constrained
answers' tokens outside the engine: `TokenMask.allowed()` (xgrammar's bitmask fill, the bool
unpack and the UTF-8 table lookup) and `accept`, and `sampling.choose` with and without
`allowed=`.

    .venv/bin/python benchmarks/bench_structured.py [--model DIR] [--prompts 4] [--tokens 64]
        [--engine transformers|vllm|both]

Model: SmolLM2-135M-Instruct by default (``trainer.backends.default_model_dir``). float32 on
CPU. ``--engine vllm`` (and ``both``) needs vLLM (``scripts/setup_vllm.sh``).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import statistics
import sys
import time
from pathlib import Path

import torch
from bench_node_concurrency import MODEL_NAME
from bench_sampling import PROMPTS

from inference_node.engine import SamplingParams
from inference_node.injection import LibraryInjector
from inference_node.library import EMPTY_LIBRARY as NO_LIBRARY
from inference_node.response_format import Constraint
from inference_node.sampling import choose
from trainer.grammar import Grammars

SCHEMA = {"type": "object", "properties": {
    "steps": {"type": "array", "items": {"type": "string", "maxLength": 80}, "maxItems": 6},
    "answer": {"type": "string", "maxLength": 40}},
    "required": ["steps", "answer"], "additionalProperties": False}
TEMPERATURES = (0.0, 1.0)


def load(kind: str, model: Path):
    if kind == "vllm":
        from inference_node.vllm_engine import VLLMEngine

        return VLLMEngine.from_pretrained(model, model_name=MODEL_NAME, dtype="float32")
    from inference_node.transformers_engine import TransformersEngine

    return TransformersEngine.from_pretrained(model, model_name=MODEL_NAME, device="cpu",
                                              dtype="float32")


async def decode(engine, prompts, tokens: int, constraint: Constraint | None
                 ) -> tuple[int, float, list[list[int]]]:
    """Tokens generated, seconds, and each answer's ids; requests one at a time."""
    total, answers, start = 0, [], time.perf_counter()
    for i, prompt in enumerate(prompts):
        for temperature in TEMPERATURES:
            params = SamplingParams(max_tokens=tokens, temperature=temperature, seed=i,
                                    request_key=hashlib.sha256(b"%d" % i).digest(),
                                    constraint=constraint)
            generation = await engine.generate(prompt, params)
            total += len(generation.token_ids)
            answers.append(list(generation.token_ids))
    return total, time.perf_counter() - start, answers


def mask_costs(grammars: Grammars, constraint: Constraint, answers: list[list[int]],
               width: int) -> dict[str, float]:
    """Microseconds per token of each part of constrained sampling, on the answers' tokens."""
    allowed_t, accept_t, choose_t, choose_masked_t = [], [], [], []
    logits = torch.randn(width)
    for answer in answers:
        mask = grammars.mask(constraint)
        for position, token in enumerate(answer):
            t0 = time.perf_counter()
            allowed = mask.allowed()
            t1 = time.perf_counter()
            choose(logits, temperature=1.0, top_p=1.0, seed=1, request_key=b"k" * 32,
                   position=position)
            t2 = time.perf_counter()
            choose(logits, temperature=1.0, top_p=1.0, seed=1, request_key=b"k" * 32,
                   position=position, allowed=allowed)
            t3 = time.perf_counter()
            if not mask.accept(token):
                break
            t4 = time.perf_counter()
            allowed_t.append(t1 - t0)
            choose_t.append(t2 - t1)
            choose_masked_t.append(t3 - t2)
            accept_t.append(t4 - t3)
    return {name: 1e6 * statistics.median(values) for name, values in
            [("allowed()", allowed_t), ("accept()", accept_t), ("choose", choose_t),
             ("choose allowed=", choose_masked_t)] if values}


def bench(kind: str, model: Path, prompts_n: int, tokens: int) -> float:
    engine = load(kind, model)
    try:
        injector = LibraryInjector(engine.tokenizer)
        prompts = [injector.chat([{"role": "user", "content": text}], NO_LIBRARY).prompt
                   for text in (PROMPTS * prompts_n)[:prompts_n]]
        constraint = Constraint.of_schema(SCHEMA)
        t0 = time.perf_counter()
        engine.check_constraint(constraint)  # the node compiles before queueing
        compile_s = time.perf_counter() - t0
        asyncio.run(decode(engine, prompts[:1], 8, None))  # warm-up, both paths
        asyncio.run(decode(engine, prompts[:1], 8, constraint))
        base_n, base_s, _ = asyncio.run(decode(engine, prompts, tokens, None))
        json_n, json_s, answers = asyncio.run(decode(engine, prompts, tokens, constraint))
        grammars = engine.grammars()
        costs = mask_costs(grammars, constraint, answers, grammars.vocab_size)
    finally:
        engine.shutdown()
    ratio = (json_n / json_s) / (base_n / base_s)
    print(f"\n{kind}: {len(prompts)} prompts x {len(TEMPERATURES)} temperatures, "
          f"max_tokens {tokens}, schema compiled in {compile_s * 1e3:.0f} ms")
    print(f"{'':<14} {'tokens':>7} {'seconds':>8} {'tokens/s':>9}")
    print(f"{'unconstrained':<14} {base_n:>7} {base_s:>8.2f} {base_n / base_s:>9.1f}")
    print(f"{'json_schema':<14} {json_n:>7} {json_s:>8.2f} {json_n / json_s:>9.1f}")
    print(f"ratio constrained / unconstrained: {ratio:.3f} "
          f"({'within' if ratio >= 0.9 else 'OVER'} the 10% target)")
    print("per token, median us: " + ", ".join(f"{k} {v:.0f}" for k, v in costs.items()))
    return ratio


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="local HF model dir (default: SmolLM2-135M)")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=64, help="max_tokens of each answer")
    parser.add_argument("--engine", choices=("transformers", "vllm", "both"),
                        default="transformers")
    args = parser.parse_args()
    if args.model is None:
        from trainer.backends import default_model_dir

        args.model = default_model_dir()
    kinds = ("transformers", "vllm") if args.engine == "both" else (args.engine,)
    for kind in kinds:
        bench(kind, args.model, args.prompts, args.tokens)
    return 0


if __name__ == "__main__":
    sys.exit(main())
