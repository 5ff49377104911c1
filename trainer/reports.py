"""What the trainer's commands print about the ledger: one rendering, shared by the CLI modules.

``publish_and_show`` is what `gym train tfgrpo|sft|dpo|grpo|gspo --publish`, `gym train publish`
and `gym adapter publish` do: publish a run directory with ``trainer.publish.publish_run_dir``
under a spinner, then print the result with ``show_published``. ``files_table`` is the table of
an adapter's files (path, bytes, CID) that publishing and `gym adapter fetch` print.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ledger.entries import AdapterFile
from ledger.tables import print_table
from trainer.adapters.publish import PublishedAdapter
from trainer.publish import PublishedRun, publish_run_dir


def step_progress(console: Console) -> Progress:
    """The bar of training and evaluation steps (`gym train tfgrpo`, `gym eval`, `gym demo`)."""
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=console)


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
        console.print(f"run entry     {published.run_cid}\nadapter entry {published.adapter_cid} "
                      f"(leaf {published.adapter_index})\nlog {log} anchored at size "
                      f"{published.size}, root 0x{published.root.hex()}\ntx {published.tx_hash}",
                      highlight=False)
        console.print(f"fetch it with: gym adapter fetch {published.adapter_cid} DIR --log {log} "
                      f"--index {published.adapter_index}", highlight=False)
        return
    console.print(f"published run {published.run_cid}: {len(published.experience_ids)} "
                  f"experiences added; log {log} anchored at size {published.size}",
                  highlight=False)
    console.print(f"  root 0x{published.root.hex()}\n  tx   {published.tx_hash}", highlight=False)


def publish_and_show(console: Console, rt, run_dir: Path, log: str, *,
                     domain: str = "math") -> PublishedRun | PublishedAdapter:
    """Publish ``run_dir`` to ``log`` with the ledger runtime ``rt`` and print the result."""
    with console.status(f"publishing {run_dir} to {log}"):
        published = publish_run_dir(run_dir, rt.store, rt.content, rt.contract, log,
                                    domain=domain)
    show_published(console, published, log)
    return published
