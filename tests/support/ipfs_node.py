"""A `python -m content_endpoint.cli serve` subprocess on a free loopback port, for the tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from devnet.anvil import free_port
from ledger.multiformats import CID

REPO = Path(__file__).resolve().parents[2]


class Node:
    """A `python -m content_endpoint.cli serve` subprocess on a free loopback port."""

    def __init__(self, data_dir: Path, *serve_args: str):
        """``serve_args``: more options of `gym ipfs serve` (``--authorizations FILE``, ...)."""
        self.data_dir = data_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.multiaddr = f"/ip4/127.0.0.1/tcp/{self.port}/http"
        env = {k: v for k, v in os.environ.items() if not k.startswith("GYM_")}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "content_endpoint.cli", "serve", "--port", str(self.port),
             "--data-dir", str(data_dir), *serve_args],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.proc.stdout.read().decode()}")
            try:
                if httpx.post(f"{self.url}/api/v0/version", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("server did not become ready")

    def block_path(self, cid: str) -> Path:
        return self.data_dir / "blocks" / str(CID.parse(cid).to_v1())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc.stdout.close()
