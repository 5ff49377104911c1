"""Provenance of a training run: digests of the model and files it used, the code and package
versions and the hardware it ran on. Recorded in ``run`` entries (``trainer/publish.py``) and in
gradient runs' ``run.json`` (``trainer/gradient/train.py``).
"""

from __future__ import annotations

import hashlib
import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from ledger.entries import weights_digest

PACKAGES = ("zoo-gym", "torch", "transformers", "math-verify", "trl", "peft")


def model_digest(model_dir: str | Path) -> str | None:
    """``sha256:`` over the names and SHA-256 of a local model's weight and config files
    (``ledger.entries.weights_digest``), or None when ``model_dir`` is not a local directory (a
    remote API model)."""
    path = Path(model_dir)
    return weights_digest(path) if path.is_dir() else None


def file_digest(path: str | Path) -> str:
    """``sha256:`` and the hex SHA-256 of one file."""
    with open(path, "rb") as handle:
        return "sha256:" + hashlib.file_digest(handle, "sha256").hexdigest()


def code_version() -> str:
    """The git commit of this checkout (``-dirty`` when it has changes), else the version."""
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True,
                                text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return f"zoo-gym {version('zoo-gym')}"
    return commit + ("-dirty" if dirty else "")


def packages(extra: tuple[str, ...] = ()) -> dict[str, str]:
    """Versions of the packages that shape a run's results (``PACKAGES`` and ``extra``), those
    installed."""
    found = {}
    for name in (*PACKAGES, *extra):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            pass
    return found


def hardware() -> dict:
    """Where a run ran: machine, OS, Python, CPU threads, the CUDA device if any."""
    import torch

    return {"machine": platform.machine(), "system": platform.system(),
            "python": platform.python_version(), "cpu_threads": torch.get_num_threads(),
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
