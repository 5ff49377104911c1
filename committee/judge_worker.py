"""Judgements in a worker process, under a deadline and a memory bound (docs/committee.md
"Judging under bounds").

The evidence of a challenge, and the bundle an audit fetches, come from a party that may want
the verifier stalled: a bundle that costs minutes or gigabytes to check (a response format
whose grammar explodes, an adapter to merge, a prefill at the edge of the context) must not
keep it from the next challenge. ``JudgeWorker`` runs the judgements in one spawned process
that loads the model once and is reused; the service waits for each answer with

- a deadline (``JudgeBounds.deadline_s``, wall clock), and
- a memory bound (``JudgeBounds.memory_mib``: resident memory the judgement may add to what
  the worker held when it became ready; read from ``/proc`` every 50 ms, so Linux only);

and kills the worker when a judgement passes either, or when the worker dies during one. That
judgement is a rejection: the evidence costs more to judge than verifiers allow, so the
challenger's bond pays for the stall it tried. The next judgement starts a fresh worker.

A spawned process, not a fork: a fork of a process that ran torch's OpenMP pool hangs in the
child, and a fork would share the parent's pooled HTTP connections. The worker ignores SIGINT
(Ctrl-C reaches the whole process group: the parent decides) and ends when the parent closes
the pipe. ``ops``: the worker's factory (picklable, run in the worker) returns a dict of named
callables; ``call(name, *args)`` runs one, and what it raises comes back as ``WorkerFailed``.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ledger.errors import LedgerError

POLL_S = 0.05  # how often the service checks the worker's answer, clock and memory


@dataclass(frozen=True)
class JudgeBounds:
    deadline_s: float = 300.0  # wall-clock seconds one judgement may take
    memory_mib: int = 4096  # resident memory one judgement may add to the ready worker's, MiB
    start_s: float = 900.0  # seconds the worker may take to start (imports, model load)

    def __post_init__(self) -> None:
        if not (self.deadline_s > 0 and self.memory_mib > 0 and self.start_s > 0):
            raise ValueError("judge bounds are positive: deadline_s, memory_mib, start_s")


class JudgeWorkerError(LedgerError, RuntimeError):
    """The judge worker could not start (its factory failed, or it took too long)."""


class BoundExceeded(Exception):
    """A judgement passed the deadline or the memory bound, or the worker died during it; the
    message says which (``JudgeWorker.call`` raises it; the judges turn it into a rejection)."""


class WorkerFailed(Exception):
    """The op raised in the worker; the message names the type and the text."""


def resident_bytes(pid: int) -> int | None:
    """Resident memory of process ``pid`` in bytes (Linux ``/proc``); None where unknown."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class JudgeWorker:
    """Runs the ops that ``factory()`` returns in a spawned worker under ``bounds``."""

    def __init__(self, factory: Callable[[], dict[str, Callable[..., Any]]],
                 bounds: JudgeBounds = JudgeBounds()):
        self.factory, self.bounds = factory, bounds
        self._proc: Any = None
        self._conn: Any = None
        self._baseline: int | None = None
        self.started = 0  # workers started so far (a killed one is replaced)
        self.ready = False  # a worker is up and has built its ops
        self.starting = False  # start() is waiting for a worker to build its ops

    def start(self) -> None:
        """Start the worker and wait until its factory has run (JudgeWorkerError if it fails
        or passes ``bounds.start_s``); a no-op while one is alive."""
        if self._proc is not None and self._proc.is_alive():
            return
        import multiprocessing

        self.close()
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_serve, args=(self.factory, child), name="gym-judge",
                           daemon=True)
        proc.start()
        child.close()
        self._proc, self._conn = proc, parent
        self.started += 1
        self.starting = True
        try:
            kind, detail = self._answer(self.bounds.start_s, memory=False)
        except BoundExceeded as exc:
            raise JudgeWorkerError(f"the judge worker did not start: {exc}") from None
        finally:
            self.starting = False
        if kind != "ready":
            self.close()
            raise JudgeWorkerError(f"the judge worker could not start: {detail}")
        self._baseline = resident_bytes(proc.pid)
        self.ready = True

    def call(self, op: str, *args: Any) -> Any:
        """``op(*args)`` in the worker: its result; ``BoundExceeded`` (the worker is killed
        and replaced at the next call) or ``WorkerFailed`` (what the op raised)."""
        self.start()
        self._conn.send((op, args))
        kind, detail = self._answer(self.bounds.deadline_s, memory=True)
        if kind == "error":
            raise WorkerFailed(detail)
        return detail

    def _answer(self, limit_s: float, *, memory: bool) -> tuple[str, Any]:
        """The worker's next message, waited for at most ``limit_s`` with the memory bound
        (when ``memory``); the worker is killed when a bound passes, when it dies, or when
        this wait is interrupted (a signal handler raising: the service is stopping)."""
        deadline = time.monotonic() + limit_s
        cap = self.bounds.memory_mib * 2**20
        try:
            while True:
                if self._conn.poll(POLL_S):
                    try:
                        return self._conn.recv()
                    except EOFError:
                        pass  # it died while answering: the check below says how
                if not self._proc.is_alive():
                    code = self._proc.exitcode
                    why = (f"killed by signal {-code}" if code is not None and code < 0
                           else f"exit code {code}")
                    raise BoundExceeded(f"ended the judge process ({why})")
                if time.monotonic() > deadline:
                    raise BoundExceeded(f"took more than {limit_s:g} s")
                if memory and self._baseline is not None:
                    rss = resident_bytes(self._proc.pid)
                    if rss is not None and rss - self._baseline > cap:
                        raise BoundExceeded(f"needed more than {self.bounds.memory_mib} MiB")
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Kill the worker (if any); the next call starts another."""
        proc, conn = self._proc, self._conn
        self._proc = self._conn = self._baseline = None
        self.ready = False
        if conn is not None:
            conn.close()
        if proc is not None:
            if proc.is_alive():
                proc.kill()
            proc.join(timeout=10)


def _serve(factory: Callable[[], dict[str, Callable[..., Any]]], conn: Any) -> None:
    """The worker: build the ops, then answer ``(op, args)`` messages until the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        ops = factory()
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", None))
    while True:
        try:
            op, args = conn.recv()
        except (EOFError, OSError):
            return  # the parent closed the pipe, or died
        try:
            answer = ("ok", ops[op](*args))
        except Exception as exc:  # noqa: BLE001 - the op's own failure, reported to the parent
            answer = ("error", f"{type(exc).__name__}: {exc}")
        conn.send(answer)


__all__ = ["BoundExceeded", "JudgeBounds", "JudgeWorker", "JudgeWorkerError", "WorkerFailed",
           "resident_bytes"]
