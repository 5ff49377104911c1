"""Ops for a ``committee.judge_worker.JudgeWorker`` in tests (module level: the worker is a
spawned process, which imports its factory by name)."""

from __future__ import annotations

import os
import time


def stalling_ops() -> dict:
    """Ops that take time, memory, fail or kill the worker, as a hostile judgement might."""

    def sleep(seconds: float) -> str:
        time.sleep(seconds)
        return "slept"

    def hog(mib: int) -> int:
        held = bytearray(b"\x01") * (mib * 2**20)  # written: resident, not just reserved
        time.sleep(30)
        return len(held)

    def fail() -> None:
        raise ValueError("not a receipt")

    def die() -> None:
        os._exit(3)

    return {"sleep": sleep, "hog": hog, "fail": fail, "die": die, "pid": os.getpid,
            "echo": lambda value: value}


def broken_ops() -> dict:
    raise RuntimeError("no model in this directory")


def challenge_ops(stall_s: float) -> dict:
    """A ``challenge`` op standing in for the verifier's judge (``committee.service.
    verifier_ops``): it spends ``stall_s`` seconds on evidence CIDs starting with "stall" (a
    bundle costly to check) and judges any other one at once (the receipt verifies)."""
    from committee.judge import REJECTED_OUTCOME, Judgement

    def challenge(opened) -> Judgement:
        if opened.evidence_cid.startswith("stall"):
            time.sleep(stall_s)
        return Judgement(REJECTED_OUTCOME, "", "the receipt verifies")

    return {"challenge": challenge}
