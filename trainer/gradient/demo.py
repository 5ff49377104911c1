"""The `gym demo --sft` step: a short LoRA SFT of SmolLM2 on CPU, published as an adapter.

`demo_sft` trains `trainer/configs/sft_demo.yaml` (3 steps of 2 alpaca rows, rank-8 LoRA on the
attention projections: well under a minute on 2 CPU cores) into a fresh run directory, then
publishes it with `trainer.adapters.publish.publish_adapter_run`: the adapter files go to the
content store, a `run` and an `adapter` entry are appended to `log_name` and anchored.
"""

from __future__ import annotations

import time
from pathlib import Path

from rich.console import Console

REPO = Path(__file__).resolve().parents[2]
DEMO_CONFIG = REPO / "trainer" / "configs" / "sft_demo.yaml"


def demo_sft(ledger_rt, runs_dir: Path, console: Console, *, log_name: str,
             model: str | None = None) -> Path:
    """Train the demo adapter under `runs_dir`, publish it to `log_name`; the run dir.

    `model` replaces the config's base model (the tests use `tiny-random`).
    """
    from trainer.adapters.publish import publish_adapter_run
    from trainer.gradient.config import load_config
    from trainer.gradient.progress import train_with_progress

    run_dir = Path(runs_dir) / f"sft-{time.strftime('%Y%m%d-%H%M%S')}"
    config = load_config(DEMO_CONFIG, method="sft", output_dir=str(run_dir))
    dataset = config.dataset.model_copy(update={"path": str(REPO / config.dataset.path)})
    config = config.model_copy(update={"dataset": dataset,
                                       "model": config.model if model is None else model})
    train_with_progress(config, console)
    published = publish_adapter_run(run_dir, ledger_rt.store, ledger_rt.content,
                                    ledger_rt.contract, log_name)
    console.print(f"published adapter {published.adapter_cid} and run {published.run_cid} to "
                  f"{log_name}: size {published.size}, tx {published.tx_hash}", highlight=False)
    return run_dir
