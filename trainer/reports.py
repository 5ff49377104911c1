"""What the trainer's commands print about the ledger: one rendering, shared by the CLI modules.

``publish_and_show`` is what `gym train tfgrpo|sft|dpo|grpo|gspo --publish`, `gym train publish`
and `gym adapter publish` do: publish a run directory with ``trainer.publish.publish_run_dir``
under a spinner, then print the result with ``show_published``. ``files_table`` is the table of
an adapter's files (path, bytes, CID) that publishing and `gym adapter fetch` print.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Self

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from ledger.entries import AdapterFile
from ledger.tables import print_table
from trainer.adapters.publish import PublishedAdapter
from trainer.publish import PublishedRun, publish_run_dir


class LineProgress:
    """What `step_progress` gives when the console is not a terminal (a pipe, a log file, CI):
    the same calls as rich's `Progress`, printed as one line per tenth of the work (and the
    last), each with the elapsed time and an estimate of the time left; nothing is redrawn."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.tasks: dict[int, dict] = {}
        self.lock = threading.Lock()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info) -> None:
        return None

    def add_task(self, description: str, total: float) -> int:
        task = len(self.tasks)
        self.tasks[task] = {"description": description, "total": total, "completed": 0.0,
                            "started": time.monotonic(), "printed": 0}
        return task

    def advance(self, task: int, advance: float = 1) -> None:
        self.update(task, advance=advance)

    def update(self, task: int, *, completed: float | None = None, advance: float | None = None,
               description: str | None = None) -> None:
        with self.lock:
            t = self.tasks[task]
            if description is not None:
                t["description"] = description
            if completed is not None:
                t["completed"] = completed
            if advance is not None:
                t["completed"] += advance
            total, done = t["total"], t["completed"]
            tenth = int(10 * done // total) if total else 10
            if done and tenth > t["printed"] or (done >= total and t["printed"] < 11):
                t["printed"] = 11 if done >= total else tenth
                elapsed = time.monotonic() - t["started"]
                left = elapsed * (total - done) / done
                self.console.print(f"{t['description']}: {done:g}/{total:g}, "
                                   f"{_duration(elapsed)} elapsed, about {_duration(left)} left",
                                   highlight=False, soft_wrap=True)


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    return f"{seconds // 60}:{seconds % 60:02d}"


def step_progress(console: Console) -> Progress | LineProgress:
    """The bar of training and evaluation steps (`gym train tfgrpo`, `gym eval`, `gym demo`):
    on a terminal a rich bar with the elapsed time and the estimated time left; otherwise a
    `LineProgress` (about ten lines, no redrawing)."""
    if not console.is_terminal:
        return LineProgress(console)
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                    console=console)


def files_table(cid: str, files: list[AdapterFile]) -> Table:
    """The files of the adapter entry ``cid``: path, size in bytes, CID."""
    table = Table("file", "bytes", "CID", title=f"adapter {cid}")
    for file in files:
        table.add_row(file.path, str(file.size), file.cid)
    return table


def show_published(console: Console, published: PublishedRun | PublishedAdapter,
                   log: str) -> None:
    """Print a published run: its entries, the log's anchored size and root, the transaction."""
    if isinstance(published, PublishedAdapter):
        print_table(files_table(published.adapter_cid, published.files), console)
        console.print(leaf_lines(
            [("run", published.adapter_index - 1, published.run_cid),
             ("adapter", published.adapter_index, published.adapter_cid)]
            + [("contribution", published.adapter_index + 1 + i, cid)
               for i, cid in enumerate(published.contribution_cids)]),
            highlight=False, soft_wrap=True)
        console.print(f"log {log} anchored at size {published.size}, root "
                      f"0x{published.root.hex()}\ntx {published.tx_hash}", highlight=False)
        console.print(f"next: gym adapter fetch {published.adapter_cid} fetched/ --log {log} "
                      f"--index {published.adapter_index}", highlight=False, soft_wrap=True)
        return
    if published.leaves:
        console.print(leaf_lines(list(published.leaves)), highlight=False, soft_wrap=True)
    console.print(f"published run {published.run_cid}: {len(published.experience_ids)} "
                  f"experiences added; log {log} anchored at size {published.size}",
                  highlight=False)
    console.print(f"  root 0x{published.root.hex()}\n  tx   {published.tx_hash}", highlight=False)
    if published.leaves:
        index = published.leaves[0][1]
        console.print(f"next: gym ledger show {log} {index}   (the run entry; "
                      f"gym ledger proof {log} {index} proves its inclusion)", highlight=False,
                      soft_wrap=True)


def leaf_lines(leaves: list[tuple[str, int, str]]) -> str:
    """One line per appended entry: `<kind> entry <CID> (leaf <index>)`."""
    width = max(len(kind) for kind, _, _ in leaves)
    return "\n".join(f"{kind + ' entry':<{width + 6}} {cid} (leaf {index})"
                     for kind, index, cid in leaves)


def publish_and_show(console: Console, rt, run_dir: Path, log: str, *,
                     domain: str | None = None) -> PublishedRun | PublishedAdapter:
    """Publish ``run_dir`` to ``log`` with the ledger runtime ``rt`` and print the result."""
    with console.status(f"publishing {run_dir} to {log}"):
        published = publish_run_dir(run_dir, rt.store, rt.content, rt.contract, log,
                                    domain=domain)
    show_published(console, published, log)
    return published
