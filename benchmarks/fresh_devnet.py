"""A fresh `gym devnet up` (Anvil, content service, every contract) in a temporary directory
for one benchmark run, taken down and removed after it: ``with fresh_devnet("bench-x-") as
(workdir, deployment): ...``."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from devnet.deploy import Deployment

GYM = Path(__file__).resolve().parent.parent / ".venv" / "bin" / "gym"


@contextmanager
def fresh_devnet(prefix: str) -> Iterator[tuple[Path, Deployment]]:
    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYM_")}
    env.update(GYM_DATA_DIR=str(workdir / "data"), GYM_DEPLOYMENT_FILE=str(workdir / "d.json"),
               GYM_ANVIL_PORT="0", GYM_IPFS_PORT="0")
    try:
        subprocess.run([str(GYM), "devnet", "up"], env=env, check=True, capture_output=True)
        yield workdir, Deployment.load(workdir / "d.json")
    finally:
        subprocess.run([str(GYM), "devnet", "down"], env=env, check=False, capture_output=True)
        shutil.rmtree(workdir, ignore_errors=True)
