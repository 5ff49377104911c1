"""A rich progress bar over optimizer steps, as a transformers `TrainerCallback`.

The bar shows the step count, elapsed time and the latest logged loss (and mean reward for
GRPO/GSPO). `quiet_library_output()` turns off the tqdm bars and info logs of transformers and
datasets, so that the console shows this one bar. `train_with_progress(config, console)` is
`trainer.gradient.train.train` as the console shows it (`gym train sft|dpo|grpo|gspo`,
`gym demo --sft`): a spinner while the model loads, this bar, then the run's metrics and paths.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from transformers import TrainerCallback

from ledger.tables import print_table


def quiet_library_output() -> None:
    """Silence transformers' and datasets' own progress bars and info logs."""
    import datasets
    import transformers

    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    datasets.utils.logging.disable_progress_bar()
    datasets.utils.logging.set_verbosity_error()


class RichProgressCallback(TrainerCallback):
    """One rich bar from `on_train_begin` to `on_train_end`, advanced on every step."""

    def __init__(self, console: Console | None = None, description: str = "training",
                 on_begin: Callable[[], None] | None = None) -> None:
        self.console = console or Console()
        self.description = description
        self.on_begin = on_begin  # e.g. stop a "loading" spinner
        self.progress: Progress | None = None
        self.task = None

    def on_train_begin(self, args, state, control, **kwargs):
        if self.on_begin is not None:
            self.on_begin()
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(), console=self.console)
        self.progress.start()
        self.task = self.progress.add_task(self.description, total=state.max_steps)

    def on_step_end(self, args, state, control, **kwargs):
        if self.progress is not None:
            self.progress.update(self.task, completed=state.global_step)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.progress is None or not logs or "loss" not in logs:
            return
        text = f"{self.description}: loss {logs['loss']:.4f}"
        if "reward" in logs:
            text += f", reward {logs['reward']:.3f}"
        self.progress.update(self.task, description=text)

    def on_train_end(self, args, state, control, **kwargs):
        if self.progress is not None:
            self.progress.update(self.task, completed=state.global_step)
            self.progress.stop()
            self.progress = None


def train_with_progress(config, console: Console, swarm=None):
    """Train `config` with a progress bar on `console` and print the run's summary (metrics,
    adapter and manifest paths); returns the `TrainResult`. With ``swarm`` (a
    `trainer.swarm.peer.SwarmSession`) the session shows the run's collaborative steps."""
    from trainer.gradient.train import train

    quiet_library_output()
    loading = console.status(f"{config.method}: loading the base model and the dataset")
    loading.start()  # until the first step: the bar takes over
    try:
        if swarm is not None:
            loading.stop()  # the session prints its address and waits for peers
            result = train(config, swarm=swarm)
        else:
            result = train(config, callbacks=[RichProgressCallback(
                console, f"{config.method} steps", on_begin=loading.stop)])
    finally:
        loading.stop()
    manifest = result.manifest
    table = Table(title=f"{config.method}: {manifest['base_model']['name']}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for name, value in manifest["adapter"]["metrics"].items():
        table.add_row(name, f"{value:.4g}")
    print_table(table, console)
    console.print(f"adapter: {result.run_dir / manifest['adapter_dir']}", highlight=False)
    console.print(f"run manifest: {result.run_dir / 'run.json'}", highlight=False)
    return result
