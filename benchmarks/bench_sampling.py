"""What checking every completion token against the sampler costs a verifier, and what the
sampler's transforms cost a node.

The verifier already runs one prefill of the model over prompt + completion (the TOPLOC check);
the sampling check (``inference_node.sampling.check_completion``, spec ``docs/sampling.md``)
adds the LM head's logits at the completion positions and one sampler step per token.
Baseline, measured in the same run on the same tokens: that prefill (model body + LM head).

Each completion is generated here token by token with ``choose()`` over the model's KV-cache
decode logits, as an honest node does, and then checked against the logits of one prefill:
every honest completion must pass, and the near-ties (the decode and prefill logits differ by
float noise) are counted. Settings: greedy, temperature 0.7 with top-p 1, temperature 0.7 with
top-p 0.9, then each of gym-sampler/2's transforms at temperature 0.7, top-p 0.9 (penalties,
logit bias, min_p, top_k, min_tokens, all of them), built and passed as the engines do (a
``History`` of the prompt and the completion so far per token). Each row prints:

- ``check / prefill``: the verifier's sampling check against its prefill, and the check's
  ms per token (compare each knob's row with the plain ``T=0.7 top-p 0.9``);
- ``sampler / decode``: the node's sampler step per token (``choose``, the knobs' transforms
  included) against the model's KV-cache decode step, and the step's ms per token;
- ``verify / generate``: prefill + check against decode + sampler, same tokens (target for
  every row: at most 0.25, as ``bench_receipts.py``'s whole verification against generation).

Exits 1 when an honest completion fails.

    .venv/bin/python benchmarks/bench_sampling.py [--model DIR] [--prompts 4] [--tokens 64]

Model: SmolLM2-135M-Instruct by default (``trainer.backends.default_model_dir``), or any local
causal LM directory with a chat template.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import time

import torch

from inference_node.sampler_knobs import Knobs, history
from inference_node.sampling import check_completion, choose

PROMPTS = (
    "What is 17 times 23? Think step by step.",
    "Name three prime numbers larger than 50 and explain why each is prime.",
    "A train travels 120 km in 1.5 hours. What is its average speed?",
    "Write one sentence about the moon.",
    "If a rectangle has sides 7 and 9, what are its area and perimeter?",
    "List the first five square numbers.",
)
BIASED = tuple((token, 2.0 if token % 2 else -2.0) for token in range(1000, 1010))
# (name, temperature, top_p, knobs); min_tokens masks SmolLM2's <|im_end|> (2) and <|endoftext|>
SETTINGS = (
    ("greedy", 0.0, 1.0, None), ("T=0.7", 0.7, 1.0, None),
    ("T=0.7 top-p 0.9", 0.7, 0.9, None),
    ("+ penalties", 0.7, 0.9, Knobs(repetition_penalty=1.2, frequency_penalty=0.5,
                                    presence_penalty=0.3)),
    ("+ logit_bias", 0.7, 0.9, Knobs(logit_bias=BIASED)),
    ("+ min_p 0.05", 0.7, 0.9, Knobs(min_p=0.05)),
    ("+ top_k 40", 0.7, 0.9, Knobs(top_k=40)),
    ("+ min_tokens 16", 0.7, 0.9, Knobs(min_tokens=16, min_tokens_ids=frozenset({0, 2}))),
    ("+ all", 0.7, 0.9, Knobs(min_tokens=16, min_tokens_ids=frozenset({0, 2}),
                               logit_bias=BIASED, repetition_penalty=1.2, frequency_penalty=0.5,
                               presence_penalty=0.3, min_p=0.05, top_k=40)),
)


@torch.inference_mode()
def generate(model, prompt_ids: torch.Tensor, tokens: int, eos: set[int], *, temperature: float,
             top_p: float, seed: int, request_key: bytes, knobs: Knobs | None
             ) -> tuple[list[int], float, float]:
    """An honest node: KV-cache decoding, every token chosen by ``choose``. The tokens, and the
    seconds spent in the model and in the sampler."""
    start = time.perf_counter()
    out = model(input_ids=prompt_ids, use_cache=True)
    model_s, sampler_s = time.perf_counter() - start, 0.0
    past, logits, chosen = out.past_key_values, out.logits[0, -1], []
    prompt = prompt_ids[0].tolist()
    for position in range(tokens):
        start = time.perf_counter()
        row = logits.float()
        seen = history(row.numel(), prompt, chosen) if knobs and knobs.reads_history else None
        token = choose(row, temperature=temperature, top_p=top_p, seed=seed,
                       request_key=request_key, position=position, knobs=knobs,
                       past=seen).token
        sampler_s += time.perf_counter() - start
        chosen.append(token)
        if token in eos:
            break
        start = time.perf_counter()
        out = model(input_ids=torch.tensor([[token]]), past_key_values=past, use_cache=True)
        model_s += time.perf_counter() - start
        past, logits = out.past_key_values, out.logits[0, -1]
    return chosen, model_s, sampler_s


@torch.inference_mode()
def prefill_logits(model, prompt_ids: torch.Tensor, completion: list[int]) -> torch.Tensor:
    """One forward over prompt + completion[:-1]; the logits that chose each completion token."""
    ids = torch.cat([prompt_ids, torch.tensor([completion[:-1]], dtype=prompt_ids.dtype)], 1)
    hidden = model.base_model(input_ids=ids, use_cache=False)[0][0]
    return model.get_output_embeddings()(hidden[prompt_ids.shape[1] - 1:]).float()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="local model directory (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()

    from transformers import AutoModelForCausalLM, AutoTokenizer

    if args.model is None:
        from trainer.backends import default_model_dir

        args.model = str(default_model_dir())
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    eos = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    print(f"model {args.model}, vocabulary {model.config.vocab_size}, {args.prompts} prompts, up "
          f"to {args.tokens} tokens, torch threads {torch.get_num_threads()}")
    failed = False
    for name, temperature, top_p, knobs in SETTINGS:
        ratios, per_token, near_ties, tolerated, count = [], [], 0, 0, 0
        decode_s = sampler_s = verify_s = 0.0
        for index in range(args.prompts):
            text = PROMPTS[index % len(PROMPTS)]
            prompt_ids = tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], add_generation_prompt=True,
                return_tensors="pt", return_dict=True)["input_ids"]
            request_key = hashlib.sha256(f"{name}/{index}".encode()).digest()
            completion, model_s, choose_s = generate(
                model, prompt_ids, args.tokens, eos, temperature=temperature, top_p=top_p,
                seed=index, request_key=request_key, knobs=knobs)
            decode_s, sampler_s = decode_s + model_s, sampler_s + choose_s
            start = time.perf_counter()
            logits = prefill_logits(model, prompt_ids, completion)
            prefill_s = time.perf_counter() - start
            start = time.perf_counter()
            check = check_completion(logits, completion, temperature=temperature, top_p=top_p,
                                     seed=index, request_key=request_key, knobs=knobs,
                                     prompt_ids=prompt_ids[0].tolist())
            check_s = time.perf_counter() - start
            verify_s += prefill_s + check_s
            if not check.ok:
                failed = True
                print(f"  FAILED {name} prompt {index}: {check.mismatch}")
            ratios.append(check_s / prefill_s)
            per_token.append(check_s / len(completion) * 1e3)
            near_ties += check.near_ties
            tolerated += check.tolerated
            count += len(completion)
        print(f"{name:>16}: check / prefill = {statistics.median(ratios):.3f} (median of "
              f"{len(ratios)}), {statistics.median(per_token):.2f} ms/token; sampler / decode = "
              f"{sampler_s / decode_s:.3f}, {sampler_s / count * 1e3:.2f} ms/token; verify / "
              f"generate = {verify_s / (decode_s + sampler_s):.3f}; {count} tokens, near-ties "
              f"{near_ties}, tolerated {tolerated}")
    if failed:
        print("an honest completion failed the sampling check")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
