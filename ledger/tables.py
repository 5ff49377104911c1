"""How every ``gym`` command prints a table, and the console it prints lines on.

``print_table`` is the one way a command prints a ``rich`` table:

- stdout is not a terminal (a pipe, a file, a test): every value in full, each row on one
  line, nothing wrapped or cut, so a root, a transaction hash or a CID can be copied or cut
  out of the output (``gym ledger list | grep``);
- a terminal: today's look, every value in full when the table fits the width; when it does
  not, a value with no space in it (a hash, a CID, an address) is shown as its first and
  last characters around "…" (never folded over two lines) while text columns wrap as
  before. Only on screen: ``--json`` and a pipe give it in full.

``CliConsole`` is a ``rich`` console whose lines do not wrap when stdout is not a terminal
(``soft_wrap``), for the same reason.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

# How one-word cells are shortened, in turn, on a terminal too narrow for the table: the
# first and last characters kept around "…".
ABBREVIATIONS = ((14, 8), (10, 6), (6, 4))
# Wider than any row a table of this project has; a pipe gets each row on one line.
PIPE_WIDTH = 100_000


class CliConsole(Console):
    """A console whose ``print`` does not wrap lines when it writes to no terminal."""

    def print(self, *objects: Any, soft_wrap: bool | None = None, **kwargs: Any) -> None:
        if soft_wrap is None and not self.is_terminal:
            soft_wrap = True
        super().print(*objects, soft_wrap=soft_wrap, **kwargs)


_stdout = CliConsole()


def _unbreakable(table: Table, index: int) -> bool:
    """Whether every cell of column ``index`` is one word (a hash, a CID, an address, a number)."""
    cells = list(table.columns[index].cells)
    for cell in cells:
        text = cell.plain if isinstance(cell, Text) else str(cell)
        if any(ch.isspace() for ch in text):
            return False
    return bool(cells)


def _abbreviate(cell: Any, head: int, tail: int) -> Any:
    """``0x21cc92699c47…6613cf30`` for a long one-word value; other cells as they are."""
    text = cell.plain if isinstance(cell, Text) else str(cell)
    if len(text) <= head + tail + 1:
        return cell
    return Text(text[:head] + "…" + text[-tail:], style=cell.style if isinstance(cell, Text) else "")


def _natural_width(console: Console, table: Table) -> int:
    return Measurement.get(console, console.options.update_width(PIPE_WIDTH), table).maximum


def print_table(table: Table, console: Console | None = None) -> None:
    """Print ``table`` on ``console`` (default: stdout) as described in the module doc."""
    console = _stdout if console is None else console
    words = [i for i in range(len(table.columns)) if _unbreakable(table, i)]
    if console.is_terminal:
        for index in words:
            table.columns[index].no_wrap = True
            table.columns[index].overflow = "ellipsis"
        full = {index: list(table.columns[index]._cells) for index in words}
        for head, tail in ABBREVIATIONS:  # shorten hashes rather than fold them
            if _natural_width(console, table) <= console.width:
                break
            for index in words:
                table.columns[index]._cells = [_abbreviate(c, head, tail) for c in full[index]]
        console.print(table)
        return
    for column in table.columns:
        column.no_wrap, column.overflow = True, "ignore"
    wide = Console(file=console.file, width=PIPE_WIDTH, color_system=None,
                   force_terminal=False, highlight=False, soft_wrap=True)
    wide.print(table)
