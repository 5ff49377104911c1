"""Where the test suite's time goes, by cause: `GYM_TEST_COSTS=1 make test` (or pytest).

Counts and times, in every test process (each xdist worker), what the suite pays for again and
again: child processes by what they run (`gym devnet up`, any other `gym` command, `python -m
devnet.cli`, anvil, node, ...), in-process model loads (`from_pretrained`), vLLM engine
start-ups and `time.sleep`. Wall seconds, summed over both workers (a child's time includes the
interpreter's start-up and its imports); a cause nested in another (a model loaded inside a
sleep-free test call) is counted once under each. Printed at the end of the run; nothing is
measured unless the variable is set.
"""

from __future__ import annotations

import functools
import json
import subprocess
import threading
import time
from collections import defaultdict
from pathlib import Path

_lock = threading.Lock()
_costs: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])  # cause -> [count, seconds]


def _add(cause: str, seconds: float) -> None:
    with _lock:
        _costs[cause][0] += 1
        _costs[cause][1] += seconds


def _cause_of(argv) -> str:
    args = [str(a) for a in (argv if isinstance(argv, (list, tuple)) else [argv])]
    name = Path(args[0]).name if args else "?"
    if name == "gym" or args[1:3] == ["-m", "devnet.cli"]:
        rest = args[1:] if name == "gym" else args[3:]
        command = [a for a in rest if not a.startswith("-")][:2]
        if command[:2] == ["devnet", "up"]:
            return "gym devnet up (Anvil + deployment)"
        if command[:1] in (["demo"], ["node"], ["verifier"], ["dashboard"], ["train"]):
            return f"gym {command[0]} (process)"
        return "gym: other commands"
    if name.startswith("python"):
        return "python subprocesses"
    return f"other processes ({name})"


def _timed(cause, function):
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            _add(cause(*args, **kwargs) if callable(cause) else cause,
                 time.perf_counter() - start)
    return wrapper


def install() -> None:
    """Wrap what is measured (in this process)."""
    original_init, original_wait = subprocess.Popen.__init__, subprocess.Popen.wait
    started: dict[int, float] = {}

    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        started[id(self)] = time.perf_counter()

    def wait(self, *args, **kwargs):  # subprocess.run waits too: each child once, start to end
        code = original_wait(self, *args, **kwargs)
        begun = started.pop(id(self), None)
        if begun is not None:
            _add(_cause_of(self.args), time.perf_counter() - begun)
        return code

    subprocess.Popen.__init__ = init
    subprocess.Popen.wait = wait
    import gym_forkserver  # `gym` commands forked from the fork server, not started by Popen

    gym_forkserver.OBSERVERS.append(
        lambda argv, seconds: _add(_cause_of(["gym", *argv]) + " [forked]", seconds))
    time.sleep = _timed("time.sleep (in the test process)", time.sleep)
    try:
        from transformers import PreTrainedModel, PreTrainedTokenizerBase
    except ImportError:
        pass
    else:
        for cls, cause in ((PreTrainedModel, "model loads (from_pretrained)"),
                           (PreTrainedTokenizerBase, "tokenizer loads (from_pretrained)")):
            cls.from_pretrained = classmethod(_timed(cause, cls.from_pretrained.__func__))
    try:
        from inference_node.vllm_engine import VLLMEngine
    except ImportError:
        pass
    else:
        VLLMEngine.__init__ = _timed("vLLM engine start-ups", VLLMEngine.__init__)


def snapshot() -> dict[str, list[float]]:
    with _lock:
        return {cause: list(value) for cause, value in _costs.items()}


def report(per_process: list[dict[str, list[float]]]) -> list[str]:
    total: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for costs in per_process:
        for cause, (count, seconds) in costs.items():
            total[cause][0] += count
            total[cause][1] += seconds
    lines = [f"{'cause':<52} {'count':>6} {'seconds':>9}"]
    for cause, (count, seconds) in sorted(total.items(), key=lambda kv: -kv[1][1]):
        lines.append(f"{cause:<52} {int(count):>6} {seconds:>9.1f}")
    return lines


def dumps() -> str:
    return json.dumps(snapshot())
