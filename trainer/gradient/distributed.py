"""Data-parallel ``gym train``: N processes on this machine through torch distributed and
accelerate, launched by the command itself.

    gym train sft trainer/configs/sft_demo.yaml --num-processes 2

``launch`` runs ``torch.distributed.run`` (torchrun: a rendezvous on loopback, a free port) with
N workers, each ``python -m trainer.gradient.distributed CONFIG METHOD OUTPUT MAX_STEPS``. In a
worker, accelerate's ``PartialState`` reads the environment torchrun sets and starts the process
group: gloo when training on the CPU (accelerate's MULTI_CPU), NCCL with one GPU per process.
TRL's trainer then does what it does under ``accelerate launch``: each rank reads its own shard
of every global batch and DDP averages the gradients, so every rank holds the same adapter.

- Rank 0 alone writes ``base/`` (tiny-random; the others wait for it), ``adapter/`` and
  ``run.json``, and shows the progress bar; the others print nothing.
- ``run.json``'s ``run.hardware.distributed`` (``train.distributed_section``): world size,
  backend, per-device, accumulation and global batch size, and for each rank the batches it
  trained on with a digest of their input ids (different shards) and a digest of its trained
  adapter weights (the same on every rank: the gradients were averaged).
- A rank that raises writes its message to ``OUTPUT/.ranks/rank-K.error`` and exits 1;
  torchrun then stops the others, and ``launch`` raises ``DistributedTrainingError`` naming the
  first rank that failed (or that died, with its exit status, from torchrun's log
  ``OUTPUT/.ranks/torchrun.log``). The caller publishes only after ``launch`` returns.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

from trainer.errors import TrainerError

RANKS_DIR = ".ranks"


class DistributedTrainingError(TrainerError, RuntimeError):
    """A rank of a multi-process run failed; the message names it."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch(config_path: Path, method: str, output_dir: Path, max_steps: int | None,
           num_processes: int, accelerate_config: Path | None = None) -> None:
    """Train ``config_path`` with ``num_processes`` ranks on this machine; returns when every
    rank finished (rank 0 wrote the run directory), else ``DistributedTrainingError``. With
    ``accelerate_config`` (a GPU kind: MULTI_GPU, FSDP, DEEPSPEED) accelerate's launcher starts
    the ranks with that file (``trainer.gradient.accelerate_config``); else torchrun does."""
    ranks = output_dir / RANKS_DIR
    ranks.mkdir(parents=True, exist_ok=True)
    for stale in ranks.glob("rank-*.error"):
        stale.unlink()
    if accelerate_config is not None:
        launcher = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
                    str(accelerate_config), "--num_processes", str(num_processes),
                    "--main_process_ip", "127.0.0.1", "--main_process_port", str(_free_port())]
    else:
        launcher = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
                    "--nproc-per-node", str(num_processes), "--master-addr", "127.0.0.1",
                    "--master-port", str(_free_port())]
    command = [*launcher, "-m", "trainer.gradient.distributed", str(config_path), method,
               str(output_dir), str(max_steps or 0)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // num_processes)))
    log = ranks / "torchrun.log"
    with log.open("wb") as stderr:
        done = subprocess.run(command, stderr=stderr, check=False)  # rank 0 prints to stdout
    if done.returncode == 0:
        return
    raise DistributedTrainingError(_failure(ranks, log, done.returncode))


def _failure(ranks: Path, log: Path, returncode: int) -> str:
    """One line: the rank that failed first and why. A rank killed by a signal (not torchrun's
    own SIGTERM to the others) is the cause even when the others wrote errors first: their
    "connection closed by peer" is the consequence."""
    errors = {p.stem.removeprefix("rank-"): p for p in ranks.glob("rank-*.error")}
    text = log.read_text(encoding="utf-8", errors="replace") if log.is_file() else ""
    report = text.rpartition("FAILED")[2]  # torchrun's ChildFailedError: failures, root cause
    exits = re.findall(r"rank\s*:\s*(\d+).*?\n\s*exitcode\s*:\s*(-?\d+)", report, re.DOTALL)
    for rank, status in exits:
        if int(status) < 0 and int(status) != -15 and rank not in errors:
            return (f"rank {rank} died (exit status {status}) before training finished; "
                    f"torchrun's log: {log}")
    if errors:
        first = min(errors.values(), key=lambda p: p.stat().st_mtime)
        rank = first.stem.removeprefix("rank-")
        message = first.read_text(encoding="utf-8").strip().splitlines()[-1]
        return f"rank {rank} failed: {message}"
    root = report.rpartition("Root Cause")[2]
    died = re.search(r"rank\s*:\s*(\d+).*?\n\s*exitcode\s*:\s*(-?\d+)", root, re.DOTALL)
    if died:
        return (f"rank {died.group(1)} died (exit status {died.group(2)}) before training "
                f"finished; torchrun's log: {log}")
    return f"the training processes exited with status {returncode}; torchrun's log: {log}"


# --------------------------------------------------------------------------- in a rank


def _worker(argv: list[str]) -> int:
    """One rank: ``CONFIG METHOD OUTPUT MAX_STEPS`` (0: the config's)."""
    config_path, method, output, max_steps = argv
    rank = int(os.environ.get("RANK", "0"))
    errors = Path(output) / RANKS_DIR
    try:
        from accelerate import PartialState

        from trainer.gradient.config import load_config
        from trainer.gradient.train import resolve_device

        config = load_config(Path(config_path), method=method, output_dir=output,
                             max_steps=int(max_steps) or None)
        PartialState(cpu=resolve_device(config) == "cpu")  # the process group, as TRL's
        if rank == 0:
            from rich.console import Console

            from trainer.gradient.progress import train_with_progress

            train_with_progress(config, Console())
        else:
            from trainer.gradient.progress import quiet_library_output
            from trainer.gradient.train import train

            quiet_library_output()
            train(config)
        _leave_process_group()
    except BaseException as exc:  # noqa: BLE001 (any failure ends this rank with its message)
        errors.mkdir(parents=True, exist_ok=True)
        text = str(exc).replace("\n", " ") or type(exc).__name__
        (errors / f"rank-{rank}.error").write_text(f"{type(exc).__name__}: {text}\n",
                                                   encoding="utf-8")
        return 1
    return 0


def _leave_process_group() -> None:
    """Wait for every rank, then take the process group down before the interpreter exits: a
    gloo group left to the exit handlers can abort a rank that already finished ("terminate
    called without an active exception", SIGABRT), failing a run whose adapter was written."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(_worker(sys.argv[1:]))
