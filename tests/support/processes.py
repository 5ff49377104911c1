"""Process helpers shared by the tests that stop processes (a judge worker, a swarm peer)."""

from __future__ import annotations

import os


def alive(pid: int) -> bool:
    """Whether ``pid`` still runs: a zombie (exited, not reaped yet) counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return not stat.read().split(") ")[-1].startswith("Z")
    except FileNotFoundError:  # reaped in between
        return False
