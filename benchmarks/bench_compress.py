"""Weight-delta compression: size and perplexity change at 1, 2, 4 and 8 bits, in one run.

Trains a LoRA adapter briefly with PEFT directly (all linear layers, AdamW) on the bundled
arithmetic training split rendered as text, on SmolLM2-135M-Instruct (``--tiny``: the tiny
random test model), then for each bit width compresses the delta ``merged − base``
(``trainer.adapters.compress``), writes the artefact, applies the decompressed delta to a fresh
base and measures perplexity on the held-out split. The baseline is the uncompressed merged
model, measured in the same run; sizes are compared with the dense delta (fp32, bf16) and with
the LoRA adapter's own weights file.

    .venv/bin/python benchmarks/bench_compress.py [--tiny] [--steps 40] [--rank 16]
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

from trainer.adapters.compress import (
    DELTA_FILE,
    apply_delta,
    compress_delta,
    decompress_delta,
    relative_error,
    save_delta,
    weight_delta,
)
from trainer.adapters.perplexity import DEFAULT_EVAL_DATASET, perplexity, render_text
from trainer.backends import default_model_dir, tiny_random_model

TRAIN = DEFAULT_EVAL_DATASET.with_name("arith_train.jsonl")


def texts_of(path: Path) -> list[str]:
    return [render_text(json.loads(line)) for line in path.read_text().splitlines() if line]


def train_lora(model, tokenizer, texts: list[str], steps: int, rank: int, lr: float,
               batch: int, seed: int):
    """A plain PEFT LoRA loop: the adapter the compression starts from."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    peft_model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0,
                                                  target_modules="all-linear",
                                                  task_type="CAUSAL_LM"))
    optimizer = torch.optim.AdamW([p for p in peft_model.parameters() if p.requires_grad], lr=lr)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    peft_model.train()
    losses = []
    for step in range(steps):
        rows = [texts[(step * batch + i) % len(texts)] for i in range(batch)]
        enc = tokenizer(rows, return_tensors="pt", padding=True)
        labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
        loss = peft_model(**enc, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss.detach()))
        if (step + 1) % 10 == 0:
            print(f"  step {step + 1}/{steps}: loss {losses[-1]:.3f}", file=sys.stderr, flush=True)
    return peft_model.eval(), losses


def run(args: argparse.Namespace, work: Path) -> int:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir = tiny_random_model(work / "tiny") if args.tiny else default_model_dir()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    heldout = texts_of(DEFAULT_EVAL_DATASET)

    start = time.perf_counter()
    tuned, losses = train_lora(copy.deepcopy(base), tokenizer, texts_of(TRAIN), args.steps,
                               args.rank, args.lr, args.batch, seed=0)
    train_s = time.perf_counter() - start
    tuned.save_pretrained(work / "adapter")
    adapter_bytes = (work / "adapter" / "adapter_model.safetensors").stat().st_size
    merged = tuned.merge_and_unload()
    delta = weight_delta(base, merged)
    numel = sum(d.numel() for d in delta.values())
    ppl_base = perplexity(base, tokenizer, heldout)
    ppl_merged = perplexity(merged, tokenizer, heldout)
    del merged, tuned
    print(f"model {model_dir.name}: LoRA r={args.rank} all-linear, {args.steps} steps in "
          f"{train_s:.0f} s, loss {losses[0]:.3f} -> {losses[-1]:.3f}; delta of {len(delta)} "
          f"tensors, {numel:,} elements; adapter weights {adapter_bytes:,} bytes")
    print(f"held-out perplexity ({len(heldout)} texts): base {ppl_base:.4f}, merged adapter "
          f"(baseline) {ppl_merged:.4f}")
    print(f"{'bits':>4} {'bytes':>11} {'vs fp32':>8} {'vs bf16':>8} {'vs LoRA':>8} "
          f"{'rel.err':>8} {'ppl':>9} {'ppl vs merged':>14} {'s':>5}")
    for bits in map(int, args.bits.split(",")):
        start = time.perf_counter()
        compressed = compress_delta(delta, bits, args.group_size)
        out = work / f"delta-{bits}"
        out.mkdir()
        save_delta(compressed, {"bits": bits}, out)
        size = (out / DELTA_FILE).stat().st_size
        approx = decompress_delta(compressed)
        seconds = time.perf_counter() - start
        ppl = perplexity(apply_delta(copy.deepcopy(base), approx), tokenizer, heldout)
        change = (ppl - ppl_merged) / ppl_merged
        print(f"{bits:>4} {size:>11,} {4 * numel / size:>7.2f}x {2 * numel / size:>7.2f}x "
              f"{adapter_bytes / size:>7.2f}x {relative_error(delta, approx):>8.4f} "
              f"{ppl:>9.4f} {change:>+13.2%} {seconds:>5.1f}")
    return 0



def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="tiny random model instead of SmolLM2")
    parser.add_argument("--steps", type=int, default=40, help="LoRA training steps")
    parser.add_argument("--rank", type=int, default=16, help="LoRA rank")
    parser.add_argument("--lr", type=float, default=5e-4, help="AdamW learning rate")
    parser.add_argument("--batch", type=int, default=8, help="texts per step")
    parser.add_argument("--group-size", type=int, default=0, help="0: one scale per output row")
    parser.add_argument("--bits", default="1,2,4,8", help="comma-separated bit widths")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    from transformers.utils import logging

    logging.disable_progress_bar()
    with tempfile.TemporaryDirectory(prefix="bench-compress-") as work:
        return run(args, Path(work))


if __name__ == "__main__":
    raise SystemExit(main())
