"""Every `gym` command's --help reads whole at 80 columns: no line longer than the terminal,
every option name and environment variable in full, no default cut with "…", no `<bool>`
metavar on a flag. The whole command tree, walked from the root app, in-process."""

from __future__ import annotations

import itertools
import re

import pytest
import typer
from typer.testing import CliRunner

from devnet.cli import app

ROOT = typer.main.get_command(app)


def _walk(command, path=()):
    yield path, command
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        if not sub.hidden:
            yield from _walk(sub, (*path, name))


COMMANDS = list(_walk(ROOT))


def _help(path: tuple[str, ...], columns: int) -> str:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": str(columns)},
                                terminal_width=columns)
    label = " ".join(("gym", *path))
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        f"{label} --help raised {result.exception!r}"
    assert result.exit_code == 0, f"{label} --help exited {result.exit_code}:\n{result.output}"
    return result.output


def _envvars(param) -> list[str]:
    envvar = getattr(param, "envvar", None)
    if not envvar:
        return []
    return [envvar] if isinstance(envvar, str) else list(envvar)


def _problems(path: tuple[str, ...], command, text: str, columns: int) -> list[str]:
    problems = []
    lines = text.splitlines()
    for line in lines:
        if len(line) > columns:
            problems.append(f"line of {len(line)} > {columns} columns: {line!r}")
    for cut in re.findall(r"\S+…", text):  # rich cuts a word with "…" ("cuda:1 …" is prose)
        problems.append(f"text cut with '…': {cut}")
    if "<bool>" in text.lower():
        problems.append("a <bool> metavar")
    # The names and values a reader types, each whole on one line.
    words = {word for line in lines for word in re.split(r"[\s,;()\[\]=`'\"]+", line)}
    for param in command.params:
        if getattr(param, "hidden", False):
            continue
        for name in [*param.opts, *param.secondary_opts]:
            if name.startswith("--") and name not in words:
                problems.append(f"option {name} not shown whole")
        for envvar in _envvars(param):
            if not re.search(rf"(^|[^A-Z0-9_]){re.escape(envvar)}([^A-Z0-9_]|$)", text):
                problems.append(f"environment variable {envvar} not shown whole")
        default = param.default
        if param.param_type_name == "option" and param.show_default is not False \
                and type(default) in (str, int, float) and not isinstance(default, bool) \
                and str(default) and str(default) not in words:
            problems.append(f"default {default!r} of {param.opts[0]} not shown whole")
    if getattr(command, "commands", None):
        for name, sub in command.commands.items():
            if not sub.hidden and not any(line.split()[:1] == [name] for line in lines):
                problems.append(f"sub-command {name} not listed")
    return problems


@pytest.mark.parametrize("columns", [80, 60])
def test_every_help_reads_whole(columns):
    assert len(COMMANDS) > 40  # the walk reached the sub-apps' commands
    failures = []
    for path, command in COMMANDS:
        text = _help(path, columns)
        label = " ".join(("gym", *path))
        failures += [f"{label} --help at {columns} columns: {problem}"
                     for problem in _problems(path, command, text, columns)]
    assert not failures, "\n".join(failures)


def test_docstrings_are_reflowed_and_paragraphs_kept():
    text = _help(("node", "serve"), 80)
    # The docstring's hard line break after "With" is gone: the sentence flows.
    assert "With --adapter, an adapter entry" in " ".join(text.split())
    body = text.split("Options:")[0]
    # Reflowed: no line of the description stops short while the next word would have fit.
    lines = body.splitlines()
    for line, after in itertools.pairwise(lines):
        if line.strip() and after.strip():
            assert len(line) + 1 + len(after.split()[0]) > 78, (line, after)
    # Two paragraphs of the docstring stay two paragraphs.
    assert len([p for p in body.split("\n\n") if p.strip()]) >= 3  # usage + 2 paragraphs


def test_flags_show_as_flags():
    text = _help(("node", "serve"), 80)
    assert re.search(r"^  --eager\s{2,}\S", text, re.MULTILINE)
    assert re.search(r"^  --register / --no-register\s{2,}\S", text, re.MULTILINE)
    assert re.search(r"^  --password-env <str>\s", text, re.MULTILINE)


def test_group_lists_commands_with_their_first_sentence_uncut():
    text = _help((), 80)
    assert "..." not in text.split("Commands:")[1]
    assert re.search(r"^  devnet\s+Run the local network: Anvil plus every contract, deployed\.$",
                     text, re.MULTILINE)


def test_help_and_usage_errors_in_a_real_terminal(gym_env):
    result = gym_env.run("node", "serve", "--help", extra_env={"COLUMNS": "80"})
    assert result.returncode == 0 and "Traceback" not in result.stderr
    assert all(len(line) <= 80 for line in result.stdout.splitlines())
    assert "--served-model-name <str>" in result.stdout
    assert "GYM_NODE_KEYSTORE_PASSWORD" in result.stdout
    # A missing option: one error line after the usage, no traceback, no box.
    result = gym_env.run("node", "serve", extra_env={"COLUMNS": "80"})
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "Error: Missing option '--model'." in result.stderr
    assert "─" not in result.stderr



def test_a_backslash_b_paragraph_keeps_its_lines_and_an_abbreviation_ends_no_sentence():
    from devnet.help import GymGroup

    demo = typer.Typer(cls=GymGroup, rich_markup_mode=None)

    @demo.command()
    def first() -> None:
        """Do one thing, e.g. this, then stop. Not this sentence.

        \b
        gym first     # one
        gym second    # two
        """

    @demo.command()
    def second() -> None:
        """Another."""

    listing = CliRunner().invoke(demo, ["--help"], terminal_width=80).output
    assert re.search(r"^  first\s+Do one thing, e\.g\. this, then stop\.$", listing,
                     re.MULTILINE)
    text = CliRunner().invoke(demo, ["first", "--help"], terminal_width=80).output
    assert "  gym first     # one\n  gym second    # two\n" in text
