"""What checking every completion token against the sampler costs a verifier.

The verifier already runs one prefill of the model over prompt + completion (the TOPLOC check);
the sampling check (``inference_node.sampling.check_completion``, spec ``docs/sampling.md``)
adds the LM head's logits at the completion positions and one sampler step per token.
Baseline, measured in the same run on the same tokens: that prefill (model body + LM head).

Each completion is generated here token by token with ``choose()`` over the model's KV-cache
decode logits, as an honest node does, and then checked against the logits of one prefill:
every honest completion must pass, and the near-ties (the decode and prefill logits differ by
float noise) are counted. Settings: greedy, temperature 0.7 with top-p 1, temperature 0.7 with
top-p 0.9. Exits 1 when an honest completion fails.

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

from inference_node.sampling import check_completion, choose

PROMPTS = (
    "What is 17 times 23? Think step by step.",
    "Name three prime numbers larger than 50 and explain why each is prime.",
    "A train travels 120 km in 1.5 hours. What is its average speed?",
    "Write one sentence about the moon.",
    "If a rectangle has sides 7 and 9, what are its area and perimeter?",
    "List the first five square numbers.",
)
SETTINGS = (("greedy", 0.0, 1.0), ("T=0.7", 0.7, 1.0), ("T=0.7 top-p 0.9", 0.7, 0.9))


@torch.inference_mode()
def generate(model, prompt_ids: torch.Tensor, tokens: int, eos: set[int], *, temperature: float,
             top_p: float, seed: int, request_key: bytes) -> list[int]:
    """An honest node: KV-cache decoding, every token chosen by ``choose``."""
    out = model(input_ids=prompt_ids, use_cache=True)
    past, logits, chosen = out.past_key_values, out.logits[0, -1], []
    for position in range(tokens):
        token = choose(logits.float(), temperature=temperature, top_p=top_p, seed=seed,
                       request_key=request_key, position=position).token
        chosen.append(token)
        if token in eos:
            break
        out = model(input_ids=torch.tensor([[token]]), past_key_values=past, use_cache=True)
        past, logits = out.past_key_values, out.logits[0, -1]
    return chosen


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
    for name, temperature, top_p in SETTINGS:
        ratios, per_token, near_ties, tolerated, count = [], [], 0, 0, 0
        for index in range(args.prompts):
            text = PROMPTS[index % len(PROMPTS)]
            prompt_ids = tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], add_generation_prompt=True,
                return_tensors="pt", return_dict=True)["input_ids"]
            request_key = hashlib.sha256(f"{name}/{index}".encode()).digest()
            completion = generate(model, prompt_ids, args.tokens, eos, temperature=temperature,
                                  top_p=top_p, seed=index, request_key=request_key)
            start = time.perf_counter()
            logits = prefill_logits(model, prompt_ids, completion)
            prefill_s = time.perf_counter() - start
            start = time.perf_counter()
            check = check_completion(logits, completion, temperature=temperature, top_p=top_p,
                                     seed=index, request_key=request_key)
            check_s = time.perf_counter() - start
            if not check.ok:
                failed = True
                print(f"  FAILED {name} prompt {index}: {check.mismatch}")
            ratios.append(check_s / prefill_s)
            per_token.append(check_s / len(completion) * 1e3)
            near_ties += check.near_ties
            tolerated += check.tolerated
            count += len(completion)
        print(f"{name:>16}: sampling check / prefill (baseline) = "
              f"{statistics.median(ratios):.3f} (median of {len(ratios)}), "
              f"{statistics.median(per_token):.2f} ms/token; {count} tokens, near-ties "
              f"{near_ties}, tolerated {tolerated}")
    if failed:
        print("an honest completion failed the sampling check")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
