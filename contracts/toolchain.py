"""Locate the Foundry binaries that npm installed and run ``forge build``.

The binaries ship inside the npm packages ``@foundry-rs/{anvil,forge,cast}-linux-amd64``
(pinned in ``package.json``). ``GYM_FOUNDRY_BIN`` may name a directory that holds them
instead (for a system-wide Foundry); the ``PATH`` is the last resort.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from contracts.errors import ContractsError

FOUNDRY_DIR = Path(__file__).resolve().parent
"""The Foundry project: ``foundry.toml``, ``src/``, ``test/``, ``out/``."""

REPO_ROOT = FOUNDRY_DIR.parent
NPM_BIN_DIR = REPO_ROOT / "node_modules" / "@foundry-rs"


class ToolchainError(ContractsError):
    """A Foundry binary is missing or a build failed."""


def foundry_binary(name: str) -> Path:
    """Path of the Foundry binary ``name`` (``anvil``, ``forge`` or ``cast``).

    Raises ``ToolchainError`` naming the setup command when it cannot be found.
    """
    candidates = []
    if override := os.environ.get("GYM_FOUNDRY_BIN"):
        candidates.append(Path(override) / name)
    candidates.append(NPM_BIN_DIR / f"{name}-linux-amd64" / "bin" / name)
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    if found := shutil.which(name):
        return Path(found)
    raise ToolchainError(
        f"{name} not found (looked in {candidates[-1]} and on PATH): run `make setup` "
        "in the repository root to install the pinned Foundry binaries from npm"
    )


def build_contracts(quiet: bool = True) -> None:
    """Run ``forge build`` in the Foundry project (incremental: about a second when clean)."""
    forge = foundry_binary("forge")
    cmd = [str(forge), "build"] + (["--quiet"] if quiet else [])
    proc = subprocess.run(cmd, cwd=FOUNDRY_DIR, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        tail = detail[-1] if detail else f"exit code {proc.returncode}"
        raise ToolchainError(f"forge build failed in {FOUNDRY_DIR}: {tail}")
