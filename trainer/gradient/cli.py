"""``gym train sft|dpo|grpo|gspo``: thin commands over `trainer.gradient.train`.

    gym train sft  trainer/configs/sft_smollm2.yaml  [--output DIR] [--max-steps N] [--publish LOG]
    gym train dpo  trainer/configs/dpo_smollm2.yaml
    gym train grpo trainer/configs/grpo_smollm2.yaml
    gym train gspo trainer/configs/gspo_smollm2.yaml

`register(train_app)` adds the four commands to `gym train` (devnet/cli.py calls it). Importing
this module does not import torch; the commands load TRL when they run.
"""

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

console = Console()

SUMMARIES = {
    "sft": "LoRA supervised fine-tuning (TRL SFTTrainer) on alpaca or sharegpt rows.",
    "dpo": "LoRA direct preference optimisation (TRL DPOTrainer) on prompt/chosen/rejected pairs.",
    "grpo": "LoRA GRPO (TRL GRPOTrainer) on problem/answer rows, rewarded by the verifiers.",
    "gspo": "LoRA GSPO: GRPO with sequence-level importance ratios (TRL GRPOTrainer).",
}


def _train_command(method: str):
    def command(
        ctx: typer.Context,
        config_path: Annotated[Path, typer.Argument(
            metavar="CONFIG.yaml", help=f"Run config (see docs/gradient.md); its `method:` must "
                                        f"be {method} or absent.", exists=True, dir_okay=False)],
        output: Annotated[Path | None, typer.Option(
            help="Run directory (overrides the config's output_dir).")] = None,
        max_steps: Annotated[int | None, typer.Option(
            min=1, help="Stop after N optimizer steps (overrides training.max_steps/epochs).")
        ] = None,
        publish: Annotated[str | None, typer.Option(
            help="Then publish the adapter to this ledger log (created if new) and anchor it.")
        ] = None,
    ) -> None:
        from trainer.gradient.config import load_config

        config = load_config(config_path, method=method,
                             output_dir=str(output) if output else None, max_steps=max_steps)
        from trainer.errors import TrainerError
        from trainer.tfgrpo_config import ConfigError

        try:  # a bad dataset fails now, before the base model loads
            check_dataset(config)
        except TrainerError as exc:
            raise ConfigError(f"{config_path}: dataset: {exc}") from None
        if publish:  # fail on a missing devnet before training, not after
            from ledger.runtime import runtime_of

            runtime_of(ctx).contract.log_count()
        result = run_training(config)
        if publish:
            from trainer.reports import publish_and_show

            publish_and_show(console, runtime_of(ctx), result.run_dir, publish)

    command.__doc__ = (f"{SUMMARIES[method]}\n\nWrites DIR/adapter (PEFT: adapter_config.json + "
                       "adapter_model.safetensors) and DIR/run.json (config, code and package "
                       "versions, hardware, dataset digest, metric curves). With --publish LOG "
                       "the adapter files go to the content store and a `run` and an `adapter` "
                       "entry are appended to LOG and anchored.")
    return command


def check_dataset(config) -> None:
    """Read and convert every row of the config's dataset (chat form); raises
    `DatasetFormatError` naming the file and row on the first bad one."""
    from trainer.gradient.formats import load_dataset_rows

    section = config.dataset
    load_dataset_rows(section.path, section.format, chat=True,
                      system_prompt=section.system_prompt, limit=section.limit)


def run_training(config, console: Console = console):
    """Train with a progress bar and print the run's summary; returns the `TrainResult`
    (`trainer.gradient.progress.train_with_progress` on this module's console)."""
    from trainer.gradient.progress import train_with_progress

    return train_with_progress(config, console)


def register(train_app: typer.Typer) -> None:
    """Add the gradient-training commands to ``gym train``."""
    for method, summary in SUMMARIES.items():
        train_app.command(method, help=None, short_help=summary)(_train_command(method))
