"""How often an honest v2 receipt meets a near-tie, and what verifying it in full costs.

`--receipts` honest answers (default 200) are generated in this process by a
`TransformersEngine` and signed by a `ReceiptSigner` as a signing node does (activations
captured while decoding, v2 receipt over the normalized request, `finish_reason`; no library,
log 0), with no HTTP in between. The requests vary: chat and completion prompts, greedy and
sampled at several temperatures and top-p values (seed i), `max_tokens` of a third, two thirds
and all of `--tokens`, and every third request with a stop string ("."), so both endings occur.
Each engine call keys the verifiable sampler (gym-sampler/1) with the seed and the normalized
request's digest, as the node does.

Every receipt is then verified in full with `verify_receipt_bundle(bundle, model=…,
tokenizer=…)`: signature, digests, the prompt rebuilt, one prefill checked against the TOPLOC
commitment, the termination check and the sampling check. Printed: the tokens the sampling
check re-derived, its near-ties (positions where another token than the sampler's choice on the
verifier's logits was within the float tolerance, so would also have been accepted), the
near-tie rate per token and per receipt, the tolerated tokens (the answer's token was not the
verifier's choice, accepted as a near-tie), and the smallest margin between the chosen and the
next best score (read from the `SamplingCheck` the verifier computed: this script wraps
`inference_node.verify.check_sampling` to keep it), per setting and overall.

Ratio (baseline: generating the same answers in this run, `TransformersEngine.generate` with
activation capture, as a signing node generates): verification time / generation time, the
median of the per-receipt ratios and the ratio of the totals. Exits 1 when any honest receipt
fails verification.

    .venv/bin/python benchmarks/bench_near_ties.py [--model DIR] [--receipts 200] [--tokens 24]
        [--engine transformers|vllm]

With ``--engine vllm`` the answers come from the node's vLLM engine (its logits processor forces
gym-sampler/1's choice), the receipt's commitment from one transformers prefill (as a signing
vLLM node computes it), and the baseline is vLLM's generation time.

Model: SmolLM2-135M-Instruct by default (``trainer.backends.default_model_dir``), or any local
causal LM directory with a chat template. float32 on CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from bench_node_concurrency import MODEL_NAME, NODE_KEY
from bench_sampling import PROMPTS as SHARED_PROMPTS

from inference_node import verify
from inference_node.engine import SamplingParams
from inference_node.errors import ReceiptError
from inference_node.injection import LibraryInjector
from inference_node.library import EMPTY_LIBRARY as NO_LIBRARY
from inference_node.normalized_request import from_client_request, request_key
from inference_node.receipts import (
    ReceiptDomain,
    ReceiptSigner,
    bundle_json,
    library_ref,
    model_digest,
)
from inference_node.transformers_engine import TransformersEngine

PROMPTS = (
    *SHARED_PROMPTS,  # bench_sampling's six, then more
    "Explain in two sentences why the sky is blue.",
    "Translate 'good morning, friends' into French and Spanish.",
    "Give a short recipe for pancakes.",
    "What is the capital of Australia, and why is it not Sydney?",
    "Write a haiku about a gym.",
    "Summarize the rules of chess in three sentences.",
    "Once upon a time, in a small village by the sea,",
)
# (name, temperature, top_p)
SETTINGS = (("greedy", 0.0, 1.0), ("T=0.5", 0.5, 1.0), ("T=0.7 top-p 0.9", 0.7, 0.9),
            ("T=1.0", 1.0, 1.0), ("T=1.0 top-p 0.95", 1.0, 0.95), ("T=1.3 top-p 0.8", 1.3, 0.8))


@dataclass
class Tally:
    receipts: int = 0
    tokens: int = 0
    near_ties: int = 0
    with_near_tie: int = 0
    tolerated: int = 0
    min_margin: float = math.inf
    tolerances: set[float] = field(default_factory=set)
    endings: dict[str, int] = field(default_factory=dict)

    def add(self, check, finish_reason: str) -> None:
        self.receipts += 1
        self.tokens += check.positions
        self.near_ties += check.near_ties
        self.with_near_tie += check.near_ties > 0
        self.tolerated += check.tolerated
        self.min_margin = min(self.min_margin, check.min_margin)
        self.tolerances.add(check.tolerance)
        self.endings[finish_reason] = self.endings.get(finish_reason, 0) + 1

    def row(self, name: str) -> str:
        per_token = self.near_ties / self.tokens if self.tokens else 0.0
        per_receipt = self.with_near_tie / self.receipts if self.receipts else 0.0
        tolerance = f"{next(iter(self.tolerances)):.2g}" if len(self.tolerances) == 1 else "-"
        return (f"{name:<18} {self.receipts:>4} {self.tokens:>6} {self.near_ties:>6} "
                f"{per_token:>8.2%} {per_receipt:>8.1%} {self.tolerated:>5} "
                f"{self.min_margin:>10.3g} {tolerance:>9}  {self.endings}")


def requests_of(n: int, tokens: int) -> list[tuple[str, str, dict]]:
    """(setting name, route, client body) for request i: prompt, setting, length and stop
    cycle with different periods, so the combinations vary."""
    lengths = sorted({max(1, tokens // 3), max(1, 2 * tokens // 3), tokens})
    out = []
    for i in range(n):
        name, temperature, top_p = SETTINGS[i % len(SETTINGS)]
        text = PROMPTS[i % len(PROMPTS)]
        body: dict = {"model": MODEL_NAME, "temperature": temperature, "top_p": top_p,
                      "seed": i, "max_tokens": lengths[i % len(lengths)]}
        if i % 3 == 2:
            body["stop"] = ["."]
        route = "completion" if i % 5 == 4 else "chat"
        if route == "chat":
            body["messages"] = [{"role": "user", "content": text}]
        else:
            body["prompt"] = text
        out.append((name, route, body))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="local HF model dir (default: SmolLM2-135M)")
    parser.add_argument("--receipts", type=int, default=200)
    parser.add_argument("--tokens", type=int, default=24, help="the longest max_tokens")
    parser.add_argument("--engine", choices=("transformers", "vllm"), default="transformers",
                        help="the engine that generates (vllm: the node's vLLM engine with its "
                        "gym-sampler/1 logits processor; the receipt's commitment is then one "
                        "transformers prefill, as a signing vLLM node computes it)")
    args = parser.parse_args()
    if args.model is None:
        from trainer.backends import default_model_dir

        args.model = default_model_dir()

    recorded = []  # the SamplingCheck of each verification (for its min_margin)
    check_sampling = verify.check_sampling

    def recording(*a, **k):
        result = check_sampling(*a, **k)
        recorded.append(result)
        return result

    verify.check_sampling = recording

    if args.engine == "vllm":
        from inference_node.vllm_engine import VLLMEngine

        engine = VLLMEngine.from_pretrained(args.model, model_name=MODEL_NAME, dtype="float32")
    else:
        engine = TransformersEngine.from_pretrained(args.model, model_name=MODEL_NAME,
                                                    device="cpu", dtype="float32")
    capture = args.engine == "transformers"  # vLLM returns no hidden states
    injector = LibraryInjector(engine.tokenizer)
    domain = ReceiptDomain()
    signer = ReceiptSigner(NODE_KEY, domain, engine.model, model_digest(args.model))
    library = library_ref(NO_LIBRARY.log_id, 0, NO_LIBRARY.root)
    tallies = {name: Tally() for name, _, _ in SETTINGS}
    total = Tally()
    generate_t, issue_t, verify_t, failures = [], [], [], []

    async def run_all() -> None:
        engine.start()
        try:
            for i, (name, route, body) in enumerate(requests_of(args.receipts, args.tokens)):
                normalized = from_client_request(route, body, max_tokens=body["max_tokens"],
                                                 seed=body["seed"])
                prompt = (injector.chat(body["messages"], NO_LIBRARY) if route == "chat"
                          else injector.completion(body["prompt"], NO_LIBRARY)).prompt
                params = SamplingParams(max_tokens=body["max_tokens"],
                                        temperature=body["temperature"], top_p=body["top_p"],
                                        seed=body["seed"], request_key=request_key(normalized),
                                        stop=tuple(body.get("stop", ())),
                                        capture_activations=capture)
                started = time.perf_counter()
                result = await engine.generate(prompt, params)
                generate_t.append(time.perf_counter() - started)
                started = time.perf_counter()
                receipt = signer.issue(
                    library=library, experience_ids=[], request_json=normalized,
                    prompt_ids=prompt.all_token_ids, text=result.text,
                    completion_ids=result.token_ids, temperature=body["temperature"],
                    top_p=body["top_p"], max_tokens=body["max_tokens"], seed=body["seed"],
                    activations=result.activations, finish_reason=result.finish_reason)
                issue_t.append(time.perf_counter() - started)
                bundle = bundle_json(receipt, domain, route=route, request=normalized,
                                     text=result.text, completion_token_ids=result.token_ids)
                started = time.perf_counter()
                try:
                    verify.verify_receipt_bundle(bundle, model=engine.model,
                                                 tokenizer=engine.tokenizer)
                except ReceiptError as exc:
                    failures.append(f"receipt {i} ({name}, {route}, {body['max_tokens']} "
                                    f"tokens): {exc.reason}: {exc}")
                    continue
                finally:
                    verify_t.append(time.perf_counter() - started)
                check = recorded[-1]
                tallies[name].add(check, result.finish_reason)
                total.add(check, result.finish_reason)
        finally:
            engine.shutdown()

    started = time.perf_counter()
    asyncio.run(run_all())
    wall = time.perf_counter() - started

    median = statistics.median
    print(f"engine: {args.engine}; model: {args.model} on CPU, float32, "
          f"{torch.get_num_threads()} torch threads; "
          f"{args.receipts} honest v2 receipts (chat and completion, max_tokens up to "
          f"{args.tokens}, every third with stop '.'), no library; {wall:.0f} s in all")
    print(f"{'setting':<18} {'rcpt':>4} {'tokens':>6} {'ties':>6} {'per tok':>8} "
          f"{'per rcpt':>8} {'tol.':>5} {'min margin':>10} {'tolerance':>9}  endings")
    for name, tally in tallies.items():
        print(tally.row(name))
    print(total.row("all"))
    print("(ties: near-ties; per rcpt: receipts with at least one; tol.: tokens accepted that "
          "were not the verifier's choice; margins and tolerances are in logits (greedy) or "
          "scores, log-probability + noise (sampled))")
    ratio = median(v / g for v, g in zip(verify_t, generate_t, strict=True))
    print(f"generation median, in process{' with activation capture' if capture else ''} "
          f"(baseline): "
          f"{median(generate_t) * 1e3:8.1f} ms")
    print(f"receipt issue median (TOPLOC commitment, v2 entry, signature): "
          f"{median(issue_t) * 1e3:8.1f} ms")
    print(f"full verification median (incl. termination and sampling checks): "
          f"{median(verify_t) * 1e3:8.1f} ms")
    print(f"verification / generation: {ratio:.1%} (median of the per-receipt ratios), "
          f"{sum(verify_t) / sum(generate_t):.1%} (ratio of the totals)")
    print(f"honest receipts verified: {total.receipts} of {args.receipts}")
    for failure in failures[:10]:
        print(f"FAIL {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
