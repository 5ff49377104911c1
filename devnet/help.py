"""Plain ``--help`` for every ``gym`` command, readable at 80 columns (and at 60).

Typer's rich help draws boxed panels that cut option names, environment variable names and
defaults with "…" on a narrow terminal. The root app uses ``GymGroup`` instead (with
``rich_markup_mode=None``): click's own layout, ``--option METAVAR`` then its help wrapped
under it, with three changes:

- words are never broken, at hyphens or otherwise, so ``--anchor-interval``,
  ``GYM_NODE_KEYSTORE_PASSWORD`` or ``[default: no-offline]`` stay whole on one line;
- a group lists each sub-command with the first sentence of its help, wrapped, instead of
  cutting it with "...";
- ``<int range>`` / ``<float range>`` metavars read ``<int>`` / ``<float>`` (the range is
  already in the help, e.g. ``x>=1``).

Docstrings are reflowed as click does: the lines of a paragraph are joined and wrapped at the
terminal width, blank lines separate paragraphs, and a paragraph whose first line is ``\\b``
keeps its line breaks (for lists and examples).

``GymGroup`` converts the whole command tree when the root group is built (Typer builds the
sub-commands first), so sub-apps and commands need no ``cls=`` of their own.
"""

from __future__ import annotations

import inspect

# Typer (0.29) runs on its own copy of click, typer._click: the formatter and context must be
# that copy's.
from typer import _click as click
from typer._click._compat import term_len
from typer._click._textwrap import TextWrapper
from typer.core import TyperCommand, TyperGroup

# Abbreviations that end with a full stop but not a sentence.
_ABBREVIATIONS = ("e.g.", "i.e.", "cf.", "vs.")


def wrap_text(text: str, width: int = 78, initial_indent: str = "",
              subsequent_indent: str = "", preserve_paragraphs: bool = False) -> str:
    """click's ``wrap_text``, except that no word is ever broken (at a hyphen or
    because it is long): a word longer than the width gets a line of its own."""
    text = text.expandtabs()
    wrapper = TextWrapper(width, initial_indent=initial_indent,
                          subsequent_indent=subsequent_indent, replace_whitespace=False,
                          break_long_words=False, break_on_hyphens=False)
    if not preserve_paragraphs:
        return wrapper.fill(text)

    paragraphs: list[tuple[int, bool, str]] = []
    buf: list[str] = []
    indent: int | None = None

    def flush() -> None:
        if not buf:
            return
        if buf[0].strip() == "\b":
            paragraphs.append((indent or 0, True, "\n".join(buf[1:])))
        else:
            paragraphs.append((indent or 0, False, " ".join(buf)))
        del buf[:]

    for line in text.splitlines():
        if not line:
            flush()
            indent = None
        else:
            if indent is None:
                stripped = line.lstrip()
                indent = term_len(line) - term_len(stripped)
                line = stripped
            buf.append(line)
    flush()

    out = []
    for par_indent, raw, par in paragraphs:
        with wrapper.extra_indent(" " * par_indent):
            out.append(wrapper.indent_only(par) if raw else wrapper.fill(par))
    return "\n\n".join(out)


class GymHelpFormatter(click.HelpFormatter):
    """click's formatter with ``wrap_text`` above: no word broken."""

    def write_text(self, text: str) -> None:
        indent = " " * self.current_indent
        self.write(wrap_text(text, self.width, initial_indent=indent,
                             subsequent_indent=indent, preserve_paragraphs=True))
        self.write("\n")

    def write_dl(self, rows, col_max: int = 30, col_spacing: int = 2) -> None:
        rows = list(rows)
        if self.width < 70:  # a narrow terminal: leave the help text room
            col_max = min(col_max, max(self.width // 3, 16))
        first_width = max((term_len(first) for first, _ in rows), default=0)
        first_col = min(first_width, col_max) + col_spacing
        for first, second in rows:
            self.write(f"{'':>{self.current_indent}}{first}")
            if not second:
                self.write("\n")
                continue
            if term_len(first) <= first_col - col_spacing:
                self.write(" " * (first_col - term_len(first)))
            else:
                self.write("\n")
                self.write(" " * (first_col + self.current_indent))
            text_width = max(self.width - first_col - 2, 10)
            lines = wrap_text(second, text_width, preserve_paragraphs=True).splitlines()
            if not lines:
                self.write("\n")
                continue
            self.write(f"{lines[0]}\n")
            for line in lines[1:]:
                self.write(f"{'':>{first_col + self.current_indent}}{line}\n" if line else "\n")


class GymContext(click.Context):
    formatter_class = GymHelpFormatter


def _plain_metavar(record: tuple[str, str]) -> tuple[str, str]:
    names, help_text = record
    for kind in ("int", "float"):
        names = names.replace(f"<{kind} range>", f"<{kind}>")
    return names, help_text


def _format_params(command: click.Command, ctx: click.Context,
                   formatter: click.HelpFormatter) -> None:
    arguments, options = [], []
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is None:
            continue
        (arguments if param.param_type_name == "argument" else options).append(
            _plain_metavar(record))
    if arguments:
        with formatter.section("Arguments"):
            formatter.write_dl(arguments)
    if options:
        with formatter.section("Options"):
            formatter.write_dl(options)


class GymCommand(TyperCommand):
    """A Typer command with the plain help above."""

    context_class = GymContext

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        _format_params(self, ctx, formatter)


class GymGroup(TyperGroup):
    """A Typer group with the plain help above; building it converts the commands and groups
    under it (already built by Typer) to ``GymCommand`` and ``GymGroup``."""

    context_class = GymContext

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for command in self.commands.values():
            plain_help(command)

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        _format_params(self, ctx, formatter)
        self.format_commands(ctx, formatter)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, first_sentence(command)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def first_sentence(command: click.Command) -> str:
    """What a group lists beside ``command``: its ``short_help``, else the first sentence of
    its help's first paragraph, whole (the list wraps it)."""
    if command.short_help:
        return command.short_help
    text = inspect.cleandoc(command.help or "").partition("\f")[0]
    words = text.split("\n\n", 1)[0].split()
    for i, word in enumerate(words):
        if word.endswith(".") and not word.lower().endswith(_ABBREVIATIONS):
            return " ".join(words[: i + 1])
    return " ".join(words)


def plain_help(command: click.Command) -> None:
    """Give ``command`` and everything under it the plain help (a class swap: ``GymCommand``
    and ``GymGroup`` add methods only, no state)."""
    command.rich_markup_mode = None  # type: ignore[attr-defined]
    if isinstance(command, TyperGroup):
        if type(command) is TyperGroup:
            command.__class__ = GymGroup
        for sub in command.commands.values():
            plain_help(sub)
    elif type(command) is TyperCommand:
        command.__class__ = GymCommand
