"""A `gym train sft --swarm arith` peer in its own process group, for the swarm tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

GYM = Path(sys.executable).parent / "gym"


def popen(command: list[str], **options) -> subprocess.Popen:
    """Start ``command`` with SIGINT as a terminal leaves it: pytest-xdist's workers ignore
    SIGINT, and an ignored signal is inherited through exec (a handled one is not)."""
    old = signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        return subprocess.Popen(command, **options)
    finally:
        signal.signal(signal.SIGINT, old)


# the `gym` console script's entry point (as installed), run once a line arrives on stdin, in
# an interpreter that has already imported what `gym train --swarm` imports: a peer started
# ahead joins at the moment asked (importing these takes a loaded CI machine most of a minute)
# ``{prelude}``: code run before `gym` (a test's hostile peer patches the project's classes)
WARM = """
import sys
from importlib.metadata import entry_points
import hivemind, peft, torch, transformers, trl  # noqa: E401
import trainer.gradient.train, trainer.swarm.peer  # noqa: E401
{prelude}
(gym,) = entry_points(group="console_scripts", name="gym")
sys.stdin.readline()
sys.argv = ["gym", *sys.argv[1:]]
sys.exit(gym.load()())
"""


class Peer:
    """One `gym train sft --swarm` process; its stdout lines and its stderr collected as they
    come (an undrained pipe fills, and a peer writing its progress bar to it then blocks).
    ``warm``: the process starts now with its imports done, and runs `gym` at `go`;
    ``prelude``: Python run in a warm peer before `gym` (a hostile peer's patches)."""

    def __init__(self, name: str, tmp_path: Path, env: dict, config: Path, *extra: str,
                 warm: bool = False, prelude: str = "") -> None:
        self.name, self.run_dir = name, tmp_path / name
        self.lines: list[str] = []
        self._stderr: list[str] = []
        command = ["train", "sft", str(config), "--swarm", "arith", "--output",
                   str(self.run_dir), "--host-maddrs", "/ip4/127.0.0.1/tcp/0",
                   "--matchmaking-time", "2", *extra]
        self.process = popen(
            [sys.executable, "-c", WARM.format(prelude=prelude), *command] if warm
            else [str(GYM), *command],
            env={**env, "PYTHONFAULTHANDLER": "1"}, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, stdin=subprocess.PIPE if warm else subprocess.DEVNULL,
            text=True,
            start_new_session=True)  # its own process group: hivemind's children die with it
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._err_reader = threading.Thread(
            target=lambda: self._stderr.extend(iter(lambda: self.process.stderr.read(4096), "")),
            daemon=True)
        self._err_reader.start()

    def go(self) -> None:
        """Run `gym` in a ``warm`` peer."""
        try:
            self.process.stdin.write("go\n")
            self.process.stdin.close()
        except BrokenPipeError:  # it died importing
            raise AssertionError(f"peer {self.name} exited {self.process.wait()} before its "
                                 f"start: {self.stderr()[-3000:]}") from None

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def stderr(self) -> str:
        """What it wrote to stderr (all of it once it exited)."""
        if self.process.poll() is not None:
            self._err_reader.join(timeout=10)
        return "".join(self._stderr)

    def wait_for(self, prefix: str, timeout: float = 240, at_least: int | None = None) -> str:
        """The first line starting with ``prefix`` (with ``at_least``: followed by a number that
        is at least that, as "step 3/8")."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if line.startswith(prefix) and (at_least is None or int(
                        line.removeprefix(prefix).partition("/")[0]) >= at_least):
                    return line
            if self.process.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.2)
        raise AssertionError(f"peer {self.name} never printed {prefix!r}: {self.lines} "
                             f"{self.stderr()[-6000:]}")

    def kill(self) -> None:
        """SIGKILL the peer and every process it started (hivemind's DHT and averagers, p2pd),
        as a machine that dies takes them all."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # gone already, with its group
        self.process.wait(timeout=30)

    def peer_id(self) -> str:
        return self.wait_for("swarm peer: ").split()[2].rpartition("/p2p/")[2]

    def finish(self, timeout: float = 300) -> str:
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:  # where it was stuck, rather than a bare timeout:
            self.process.send_signal(signal.SIGABRT)  # faulthandler prints every thread's stack
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            self.kill()
            self._reader.join(timeout=10)
            stacks = self.stderr().partition("\nExtension modules:")[0]  # not the module list
            raise AssertionError(f"peer {self.name} still running after {timeout:.0f} s: "
                                 f"{self.lines[-15:]}\n{stacks[-8000:]}") from None
        self._reader.join(timeout=10)
        assert self.process.returncode == 0, (self.name, self.stderr()[-6000:], self.lines[-10:])
        return "\n".join(self.lines)

    def manifest(self) -> dict:
        return json.loads((self.run_dir / "run.json").read_text())
