"""How much of TOPLOC's acceptance tolerance the vLLM node's captured activations use (issue 49).

A signing node on `--engine vllm` commits to the final hidden states vLLM's own forward passes
computed (`GymSampler` records them where the LM head reads them); a verifier recomputes them
with one transformers prefill over prompt + completion (`gym verify receipt --model`) and
accepts the commitment when TOPLOC's three measures stay within their limits
(`inference_node.activations`). This script measures, per answer, the largest of those measures
divided by its limit (`activations.tolerance_used`: 0 = the same top-k values, 1 = the edge,
above 1 = refused), over:

- batch sizes (`--batches`, default 1 2 4 8 16): that many concurrent answers, each prompt new
  from its first token (no prefix reuse), greedy and sampled alternately;
- prefix reuse: 8 chat answers under one library (its experiences open the system message),
  then 8 more questions under the same library, whose library prefix vLLM's prefix cache serves
  (the cached prompt tokens are counted: a warning if none);
- preemption: 16 concurrent answers on an engine whose KV cache holds about a third of what
  they need (`--preempt-share`), so vLLM preempts running sequences and recomputes them; the
  preemptions are read from vLLM's own counter (`vllm:num_preemptions`: a warning if none);

for each engine dtype (`--dtypes`; default float32, and bfloat16 when the CPU has bf16
instructions or on a GPU), against the verifier's float32 prefill (what `gym verify receipt
--model` runs on a CPU) and its bfloat16 prefill (what it runs on a GPU).

Exits 1 if an answer's states were not all captured (the node would have re-computed them) or
if a commitment is refused by the verifier's prefill of the engine's own dtype.

    .venv/bin/python benchmarks/capture_margins.py [--model DIR] [--dtypes float32 bfloat16]
                                                   [--batches 1 2 4 8 16] [--max-tokens 32]
                                                   [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_node_vs_vllm import resolve_model

TOPICS = ["orchard", "harbor", "glacier", "market", "library", "workshop", "observatory",
          "vineyard", "railway", "monastery", "canyon", "bakery", "lighthouse", "foundry",
          "meadow", "archive", "reef", "quarry", "aviary", "citadel"]
EXPERIENCES = [
    "When a question gives quantities in different units, convert them to one unit first.",
    "State the final answer on its own line after a short justification.",
    "For counting questions, list the items before totalling them.",
    "If a word problem mentions a rate, write the rate as a fraction with its units.",
    "Check that the answer has the unit the question asks for.",
    "Prefer exact fractions to rounded decimals until the last step.",
    "When two readings of a question are possible, say which one the answer uses.",
    "Re-read the question's last sentence: it names what must be computed.",
]


def cpu_has_bf16() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return any(f in flags.split() for f in ("avx512_bf16", "amx_bf16"))


def completion_text(scenario: str, index: int) -> str:
    """A prompt new from its first token (the scenario and index lead it), ~120 tokens."""
    topic = TOPICS[index % len(TOPICS)]
    return (f"[{scenario}/{index}] Notes from the {topic}, day {index + 3}: " +
            " ".join(f"In the {topic} there were {7 * index + k} crates of item {k}, and the "
                     f"keeper moved {k + 2} of them to the {TOPICS[(index + k) % len(TOPICS)]}."
                     for k in range(4)) + " The keeper then wrote down how many crates were")


def params_for(index: int, max_tokens: int):
    from inference_node.engine import SamplingParams

    key = hashlib.sha256(f"capture-margins {index}".encode()).digest()
    temperature, top_p = (0.0, 1.0) if index % 2 == 0 else (0.8, 0.95)
    return SamplingParams(max_tokens=max_tokens, temperature=temperature, top_p=top_p,
                          seed=1000 + index, request_key=key, capture_activations=True)


async def answer_all(engine, prompts, max_tokens):
    return await asyncio.gather(*(engine.generate(p, params_for(i, max_tokens))
                                  for i, p in enumerate(prompts)))


def preemptions() -> float:
    """vLLM's own count of preempted requests in this process (its Prometheus counter)."""
    from prometheus_client import REGISTRY

    return sum(sample.value for metric in REGISTRY.collect()
               for sample in metric.samples
               if sample.name == "vllm:num_preemptions_total")


class Verifiers:
    """The verifier's prefill, float32 and bfloat16 (loaded once each)."""

    def __init__(self, model_dir: Path):
        self.model_dir, self.models = model_dir, {}

    def used(self, dtype: str, prompt_ids, result) -> float:
        import torch
        from transformers import AutoModelForCausalLM

        from inference_node.activations import (
            commit_activations,
            decode_hidden_states,
            tolerance_used,
        )

        if dtype not in self.models:
            self.models[dtype] = AutoModelForCausalLM.from_pretrained(
                self.model_dir, dtype=getattr(torch, dtype)).eval()
        states = decode_hidden_states(self.models[dtype], prompt_ids, result.token_ids)
        return tolerance_used(states, commit_activations(result.activations))


def measure(engine, verifiers: Verifiers, name: str, prompts, max_tokens: int,
            verifier_dtypes: list[str]) -> dict:
    missed_before = engine.activations_recomputed
    cached_before = engine.prompt_tokens_cached
    preempted_before = preemptions()
    started = time.perf_counter()
    results = asyncio.run(answer_all(engine, prompts, max_tokens))
    seconds = time.perf_counter() - started
    missing = sum(r.activations is None for r in results)
    row = {"scenario": name, "answers": len(results),
           "tokens": sum(len(r.token_ids) for r in results),
           "cached_prompt_tokens": engine.prompt_tokens_cached - cached_before,
           "preemptions": preemptions() - preempted_before,
           "not_captured": missing + engine.activations_recomputed - missed_before,
           "seconds": seconds, "used": {}}
    for dtype in verifier_dtypes:
        used = [verifiers.used(dtype, p.all_token_ids, r)
                for p, r in zip(prompts, results) if r.activations is not None]
        row["used"][dtype] = used
    return row


def run_dtype(model: Path, dtype: str, args, verifiers: Verifiers) -> list[dict]:
    from inference_node.injection import LibraryInjector
    from inference_node.library import EMPTY_LIBRARY, LibrarySnapshot
    from inference_node.vllm_engine import VLLMEngine

    verifier_dtypes = ["float32", "bfloat16"]
    rows = []
    engine = VLLMEngine.from_pretrained(model, dtype=dtype, enforce_eager=True,
                                        max_batch=max(16, *args.batches), block_size=32,
                                        disable_log_stats=False)
    injector = LibraryInjector(engine.tokenizer)
    try:
        for batch in args.batches:
            prompts = [injector.completion(completion_text(f"batch{batch}", i),
                                           EMPTY_LIBRARY).prompt for i in range(batch)]
            rows.append(measure(engine, verifiers, f"batch {batch}", prompts, args.max_tokens,
                                verifier_dtypes))
        library = LibrarySnapshot("margins", "0x01", len(EXPERIENCES), "ab" * 32, tuple(
            (f"exp-{i}", text) for i, text in enumerate(EXPERIENCES)))
        # the second eight find the library's blocks cached (and, sent at once, the first
        # eight share them too: vLLM caches a block as soon as a request is scheduled to fill it)
        for name, offset in (("library, 8 at once", 0), ("library, 8 more", 8)):
            prompts = [injector.chat([{"role": "user", "content": completion_text(
                "question", offset + i)}], library).prompt for i in range(8)]
            rows.append(measure(engine, verifiers, name, prompts, args.max_tokens,
                                verifier_dtypes))
    finally:
        engine.shutdown()

    # preemption: a KV cache that holds about `preempt_share` of 16 answers' tokens
    config = json.loads((model / "config.json").read_text())
    heads = config.get("num_key_value_heads") or config["num_attention_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    token_bytes = config["num_hidden_layers"] * 2 * heads * head_dim * (
        4 if dtype == "float32" else 2)
    probe = injector.completion(completion_text("preempt", 0), EMPTY_LIBRARY).prompt
    needed = 16 * (len(probe.all_token_ids) + args.max_tokens)
    max_len = 512
    capacity = max(int(needed * args.preempt_share), max_len + 64)
    engine = VLLMEngine.from_pretrained(model, dtype=dtype, enforce_eager=True, max_batch=16,
                                        block_size=32, max_model_len=max_len,
                                        kv_cache_gib=capacity * token_bytes / (1 << 30),
                                        disable_log_stats=False)
    try:
        prompts = [injector.completion(completion_text("preempt", i), EMPTY_LIBRARY).prompt
                   for i in range(16)]
        rows.append(measure(engine, verifiers, "preempted, 16", prompts, args.max_tokens,
                            verifier_dtypes))
    finally:
        engine.shutdown()
    for row in rows:
        row["dtype"] = dtype
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path,
                        help="local HF model dir (default: the converted SmolLM2-135M-Instruct)")
    parser.add_argument("--dtypes", nargs="+", choices=["float32", "bfloat16"],
                        help="engine dtypes (default: float32, and bfloat16 where the CPU has "
                             "bf16 instructions or on a GPU)")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8, 16],
                        help="concurrent answers per batch scenario (default 1 2 4 8 16)")
    parser.add_argument("--max-tokens", type=int, default=32,
                        help="completion tokens per answer (default 32)")
    parser.add_argument("--preempt-share", type=float, default=0.35,
                        help="the preemption engine's KV cache as a share of what its 16 "
                             "answers need (default 0.35)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the results here")
    args = parser.parse_args()
    if min(args.batches) < 1 or max(args.batches) > 64 or args.max_tokens < 1:
        parser.error("--batches must be 1..64 and --max-tokens positive")
    if not 0 < args.preempt_share < 1:
        parser.error("--preempt-share must be between 0 and 1")
    if importlib.util.find_spec("vllm") is None:
        raise SystemExit("error: vLLM is not installed in this environment "
                         f"({sys.executable}); scripts/setup_vllm.sh installs it")
    model = resolve_model(args.model)
    import torch

    on_gpu = torch.cuda.is_available()
    dtypes = args.dtypes or (["float32", "bfloat16"] if on_gpu or cpu_has_bf16()
                             else ["float32"])
    verifiers = Verifiers(model)
    rows = []
    for dtype in dtypes:
        print(f"engine dtype {dtype}: starting vLLM", file=sys.stderr)
        rows += run_dtype(model, dtype, args, verifiers)

    print(f"model {model}; {args.max_tokens} tokens an answer; greedy and sampled alternately; "
          "tolerance used = the largest TOPLOC measure / its limit (1 = refused beyond)")
    print(f"{'engine':<9}{'scenario':<24}{'answers':>8}{'cached':>8}{'preempt':>8}"
          f"{'missed':>7}   {'float32 verifier max / mean':>28}   {'bf16 verifier max / mean':>25}")
    failed = False
    for row in rows:
        cells = []
        for dtype in ("float32", "bfloat16"):
            used = row["used"].get(dtype) or [float("nan")]
            cells.append(f"{max(used) * 100:6.2f} % / {statistics.mean(used) * 100:6.2f} %")
        print(f"{row['dtype']:<9}{row['scenario']:<24}{row['answers']:>8}"
              f"{row['cached_prompt_tokens']:>8}{row['preemptions']:>8.0f}"
              f"{row['not_captured']:>7}   {cells[0]:>28}   {cells[1]:>25}")
        own = row["used"].get(row["dtype"]) or []
        failed |= row["not_captured"] > 0 or any(u >= 1 for u in own)
    checks = {
        "prefix reused": all(r["cached_prompt_tokens"] > 0 for r in rows
                             if r["scenario"] == "library, 8 more"),
        "preempted": all(r["preemptions"] > 0 for r in rows
                         if r["scenario"].startswith("preempted")),
    }
    for name, held in checks.items():
        if not held:
            print(f"warning: the {name} scenario did not happen as intended "
                  "(see the cached / preempt columns)", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps({"model": str(model), "max_tokens": args.max_tokens,
                                         "rows": rows, "checks": checks}, indent=1))
        print(f"wrote {args.json}")
    if failed:
        print("FAILED: an answer's states were not all captured, or a commitment was refused "
              "by the verifier of its own dtype", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
