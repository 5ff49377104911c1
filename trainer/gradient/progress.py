"""A rich progress bar over optimizer steps, as a transformers `TrainerCallback`.

The bar shows the step count, elapsed time and the latest logged loss (and mean reward for
GRPO/GSPO). `quiet_library_output()` turns off the tqdm bars and info logs of transformers and
datasets, so that the console shows this one bar.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from transformers import TrainerCallback


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
