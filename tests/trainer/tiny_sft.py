"""The tiny LoRA SFT config the multi-process and swarm tests train (a random tiny model, 16
rows of the bundled arithmetic set)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def write_sft_config(tmp_path: Path, steps: int, output_dir: Path | None = None) -> Path:
    config = tmp_path / "sft.yaml"
    config.write_text(
        "method: sft\nmodel: tiny-random\n"
        f"dataset: {{path: {REPO / 'trainer/data/sft_arith_alpaca.jsonl'}, format: alpaca, "
        "limit: 16}\n"
        "lora: {r: 4, alpha: 8}\n"
        f"training: {{max_steps: {steps}, batch_size: 2, max_length: 512, seed: 5, "
        "logging_steps: 1}\n"
        + (f"output_dir: {output_dir}\n" if output_dir is not None else ""))
    return config
