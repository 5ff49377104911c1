"""The README's role sections run as written, in order, on a devnet of their own.

Every ```sh block under a `## For ...` heading of README.md is run by bash from a view of the
repository root (a temporary directory whose entries link to the checkout's, so the files the
commands write land there), with `set -Eeuo pipefail`: any command that exits non-zero fails
the test, named by its README line. Shell variables a block sets reach the blocks after it.
A block whose first line says `# in a second terminal` keeps running in the background: the
next block starts once the server it starts (`--port N`) answers `/health`, and it is stopped
at the end. Port numbers the README shows (`--port N`, `127.0.0.1:N`) are replaced by free
ones, so the test never collides with a server already running on the machine.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import gym_forkserver
import httpx
import pytest

from devnet.anvil import free_port

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BACKGROUND = "# in a second terminal"
BLOCK_TIMEOUT_S = 900
READY_TIMEOUT_S = 600


@dataclass
class Block:
    section: str
    line: int  # README line of the opening fence
    code: str

    @property
    def background(self) -> bool:
        return self.code.lstrip().startswith(BACKGROUND)

    def where(self) -> str:
        return f"README.md:{self.line} ({self.section})"


def role_blocks(text: str) -> list[Block]:
    """The ```sh blocks of the `## For ...` sections (their ### subsections included), in order;
    blocks in another language (output, JSON) are shown, not run."""
    blocks: list[Block] = []
    section: str | None = None
    fence: tuple[int, str] | None = None  # (line, language) of the open fence
    lines: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        if fence is not None:
            if line.startswith("```"):
                if section is not None and fence[1] == "sh":
                    blocks.append(Block(section, fence[0], "\n".join(lines) + "\n"))
                fence = None
            else:
                lines.append(line)
        elif line.startswith("```"):
            fence, lines = (number, line[3:].strip()), []
        elif line.startswith("## "):
            section = line[3:].strip() if line.startswith("## For ") else None
    return blocks


def _role_blocks() -> list[Block]:
    return role_blocks(README.read_text(encoding="utf-8"))


def test_every_role_section_has_commands_that_can_run_as_written():
    """Fast: the blocks the slow test runs are there, and written so that running them proves
    something (no placeholders, no `&&`, after whose left side `set -e` does not stop)."""
    blocks = _role_blocks()
    sections = {block.section for block in blocks}
    for role in ("researchers", "inference node operators", "token holders", "auditors"):
        assert f"For {role}" in sections, f"README has no runnable block under 'For {role}'"
    for block in blocks:
        assert "…" not in block.code, f"{block.where()}: a placeholder (…) cannot run as written"
        assert "&&" not in block.code, f"{block.where()}: one command per line, not `a && b`"
        if block.background:
            assert re.search(r"--port \d+", block.code), f"{block.where()}: which port serves?"


def _repo_view(where: Path) -> Path:
    """A directory that looks like the repository root: links to every entry of the checkout,
    so what the README's commands write (proof.json, runs/, ...) lands here, not in the repo.
    Its `.venv/bin/gym`, unless GYM_TEST_FORKSERVER=0, runs each command through this worker's
    fork server (tests/support/gym_forkserver.py: the real command, its libraries already
    imported); every other entry of `.venv` links to the real one."""
    where.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in (".git", "runs", ".venv") and not entry.name.startswith(".pytest"):
            (where / entry.name).symlink_to(entry)
    venv = ROOT / ".venv"
    if not gym_forkserver.enabled():
        (where / ".venv").symlink_to(venv)
        return where
    for entry in venv.iterdir():
        if entry.name != "bin":
            (where / ".venv").mkdir(exist_ok=True)
            (where / ".venv" / entry.name).symlink_to(entry)
    (where / ".venv" / "bin").mkdir()
    for entry in (venv / "bin").iterdir():
        if entry.name != "gym":
            (where / ".venv" / "bin" / entry.name).symlink_to(entry)
    gym_forkserver.write_shim(where / ".venv" / "bin" / "gym", venv / "bin" / "gym")
    return where


def _with_free_ports(blocks: list[Block]) -> list[Block]:
    pattern = re.compile(r"(--port\s+|127\.0\.0\.1:|localhost:)(\d{4,5})\b")
    ports: dict[str, str] = {}
    for block in blocks:
        for _, port in pattern.findall(block.code):
            ports.setdefault(port, str(free_port()))
    return [Block(b.section, b.line, pattern.sub(lambda m: m.group(1) + ports[m.group(2)], b.code))
            for b in blocks]


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])


def _wait_ready(block: Block, process: subprocess.Popen, log: Path) -> None:
    port = re.search(r"--port (\d+)", block.code).group(1)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"{block.where()} exited {process.returncode}:\n{_tail(log.read_text())}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    pytest.fail(f"{block.where()}: no /health on port {port} after {READY_TIMEOUT_S} s:\n"
                f"{_tail(log.read_text())}")


@pytest.mark.slow
@pytest.mark.anvil
@pytest.mark.timeout(2400)
def test_the_readme_role_sections_run_as_written(tmp_path):
    blocks = _with_free_ports(_role_blocks())
    view = _repo_view(tmp_path / "repo")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYM_")}
    env.update(GYM_DATA_DIR=str(tmp_path / "data"), GYM_DEPLOYMENT_FILE=str(tmp_path / "dep.json"),
               GYM_ANVIL_PORT="0", GYM_IPFS_PORT="0", NO_COLOR="1", COLUMNS="100")
    if gym_forkserver.enabled():
        env[gym_forkserver.SOCKET_ENV] = gym_forkserver.server(ROOT / ".venv" / "bin" / "gym").socket_path
    state = tmp_path / "shell-state.sh"
    state.write_text("")
    builtin = set(subprocess.run(["bash", "-c", "compgen -v"], capture_output=True, text=True,
                                 env=env, check=True).stdout.split()) | {"PIPESTATUS"}
    # After each block: the variables it set, for the blocks after it.
    save = ("for _v in $(compgen -v); do case \" " + " ".join(sorted(builtin | {"_v"})) +
            " \" in *\" $_v \"*) ;; *) declare -p \"$_v\" ;; esac; done > " +
            shlex.quote(str(state)) + " 2>/dev/null || true\n")
    servers: list[tuple[subprocess.Popen, object]] = []
    try:
        for number, block in enumerate(blocks):
            script = f"source {shlex.quote(str(state))}\nset -Eeuo pipefail\n{block.code}"
            if block.background:
                log = tmp_path / f"server-{number}.log"
                out = log.open("w")
                process = subprocess.Popen(["bash", "-c", script], cwd=view, env=env, stdout=out,
                                           stderr=subprocess.STDOUT, start_new_session=True)
                servers.append((process, out))
                _wait_ready(block, process, log)
                continue
            began = time.monotonic()
            ran = subprocess.run(["bash", "-c", script + save], cwd=view, env=env, text=True,
                                 capture_output=True, timeout=BLOCK_TIMEOUT_S, check=False)
            print(f"{block.where()}: {time.monotonic() - began:.1f} s")  # shown with -s
            if ran.returncode != 0:
                pytest.fail(f"{block.where()} exited {ran.returncode}:\n--- stdout\n"
                            f"{_tail(ran.stdout)}\n--- stderr\n{_tail(ran.stderr)}")
    finally:
        for process, out in servers:
            if process.poll() is None:
                os.killpg(process.pid, 15)
                try:
                    process.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, 9)
            out.close()
        subprocess.run([str(view / ".venv" / "bin" / "gym"), "devnet", "down"], cwd=view, env=env,
                       capture_output=True, check=False, timeout=60)
