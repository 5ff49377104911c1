"""Shared by the test_adapters_* modules (no tests here): a gradient-training run directory
made with PEFT directly on the tiny random model, in the layout `gym train sft` writes
(`adapter/`, `base/`, `run.json`), independent of the trainer's own code."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from trainer.adapters.perplexity import render_text
from trainer.data import generate_problems, write_jsonl
from trainer.provenance import file_digest, model_digest


def make_adapter_run(directory: Path, base_src: Path, *, rank: int = 96, steps: int = 4,
                     seed: int = 0) -> Path:
    """A few AdamW steps of LoRA (all linear layers) so the adapter is far from its init.

    Rank 96 on the 2-layer model makes adapter_model.safetensors ~390 KiB: two UnixFS chunks.
    """
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(base_src)
    base = AutoModelForCausalLM.from_pretrained(base_src)
    base.save_pretrained(directory / "base")
    tokenizer.save_pretrained(directory / "base")
    dataset = write_jsonl(generate_problems(16, seed=seed + 100), directory / "train.jsonl")
    texts = [render_text(json.loads(line)) for line in dataset.read_text().splitlines()]
    config = LoraConfig(r=rank, lora_alpha=16, target_modules="all-linear", lora_dropout=0.0,
                        task_type="CAUSAL_LM")
    model = get_peft_model(base, config)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    enc = tokenizer(texts, return_tensors="pt", padding=True)
    labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
    losses = []
    for _ in range(steps):
        loss = model(**enc, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss.detach()))
    model.save_pretrained(directory / "adapter")
    digest = file_digest(dataset)
    adapter_config = json.loads((directory / "adapter" / "adapter_config.json").read_text())
    (directory / "run.json").write_text(json.dumps({
        "method": "sft",
        "base_model": {"name": "tiny-random-llama", "weights_digest":
                       model_digest(directory / "base")},
        "adapter_dir": "adapter",
        "run": {"config": {"rank": rank, "steps": steps, "seed": seed, "lr": 1e-2},
                "code_version": "test", "packages": {"peft": "test"},
                "hardware": {"machine": "cpu"}, "dataset_digests": [digest],
                "metrics": {"train_loss": losses}},
        "adapter": {"config": adapter_config, "dataset_digest": digest,
                    "metrics": {"final_train_loss": losses[-1]}},
    }))
    return directory
