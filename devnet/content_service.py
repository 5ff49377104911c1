"""Start, find and stop the devnet's content service: `gym ipfs serve` (the Kubo RPC subset
and the trustless gateway, ``content_endpoint.server``) beside Anvil.

`gym devnet up` starts it detached (its own session) over ``<data_dir>/ipfs``, the store the
commands on this machine use when ``GYM_IPFS_API`` is unset, and records its URL in the
deployment manifest (``content_api``): other parties point ``GYM_IPFS_API`` at it. Its pid,
port and command are recorded in ``<data_dir>/ipfs-serve.json``; `gym devnet down` stops only
a process whose command line is still that service's, as for Anvil (``devnet.anvil``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from devnet.anvil import free_port, port_is_free, read_record, terminate, zombie
from devnet.errors import DevnetError, PortInUseError
from ledger.addresses import local_url

STARTUP_TIMEOUT_S = 30.0  # a Python process importing the server stack on a loaded machine


@dataclass(frozen=True)
class ContentService:
    """A running `gym ipfs serve` that `gym devnet up` started."""

    pid: int  # process id
    host: str  # interface it listens on
    port: int  # TCP port of its Kubo RPC API and gateway
    store_dir: str  # the block store it serves
    log_file: str  # where its output goes

    @property
    def url(self) -> str:
        """The URL this machine dials (loopback for a wildcard listener)."""
        return local_url(f"http://{self.host}:{self.port}")


def record_file(data_dir: Path) -> Path:
    return data_dir / "ipfs-serve.json"


def answers(url: str, timeout: float = 1.0) -> bool:
    """Whether a Kubo RPC API answers at ``url`` (``POST /api/v0/version``; a 401 or 403 from
    an endpoint that requires credentials is an answer too)."""
    try:
        return httpx.post(f"{url}/api/v0/version", timeout=timeout).status_code in (200, 401,
                                                                                     403)
    except httpx.HTTPError:
        return False


class Starting:
    """A content service launched and not yet answering: ``wait()`` for it (`gym devnet up`
    deploys the contracts meanwhile, so the interpreter's start costs no extra time)."""

    def __init__(self, data_dir: Path, proc: subprocess.Popen, service: ContentService):
        self.data_dir, self.proc, self.service = data_dir, proc, service

    def wait(self, timeout_s: float = STARTUP_TIMEOUT_S) -> ContentService:
        """The service once it answers (recorded in ``<data_dir>/ipfs-serve.json`` from its
        launch); ``DevnetError`` if it exits or does not answer within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        log_path = Path(self.service.log_file)
        while not answers(self.service.url):
            if self.proc.poll() is not None:
                record_file(self.data_dir).unlink(missing_ok=True)
                tail = log_path.read_text(errors="replace").strip().splitlines()[-1:] or [
                    "no output"]
                raise DevnetError(f"the content service exited with code "
                                  f"{self.proc.returncode} at start: {tail[0]}")
            if time.monotonic() > deadline:
                self.cancel()
                raise DevnetError(f"the content service did not answer on {self.service.url} "
                                  f"within {timeout_s:.0f} s (log: {log_path})")
            time.sleep(0.1)
        return self.service

    def cancel(self) -> None:
        terminate(self.proc.pid)
        record_file(self.data_dir).unlink(missing_ok=True)


def launch_content_service(data_dir: Path, host: str, port: int,
                           authorizations: Path | None = None) -> Starting:
    """Launch `gym ipfs serve` over ``<data_dir>/ipfs`` on ``host:port`` (``port`` 0: a free
    one), detached, with Kubo's ``API.Authorizations`` from ``authorizations`` when given
    (docs/content-endpoint.md); ``wait()`` on the result."""
    if port == 0:
        port = free_port(host)
    elif not port_is_free(host, port):
        raise PortInUseError(
            f"port {port} on {host} is already in use by another process: stop it, or pick "
            "another port with GYM_IPFS_PORT=N (0 picks a free one), or point GYM_IPFS_API at "
            "a content service that runs already")
    data_dir.mkdir(parents=True, exist_ok=True)
    store_dir, log_path = data_dir / "ipfs", data_dir / "ipfs-serve.log"
    cmd = [sys.executable, "-m", "devnet.cli", "ipfs", "serve", "--host", host, "--port",
           str(port), "--data-dir", str(store_dir)]
    if authorizations is not None:
        cmd += ["--authorizations", str(authorizations)]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    service = ContentService(proc.pid, host, port, str(store_dir), str(log_path))
    # recorded at once: a `gym devnet up` killed before it answers leaves a process that
    # `gym devnet down` still finds and stops
    record_file(data_dir).write_text(json.dumps(asdict(service), indent=2) + "\n")
    return Starting(data_dir, proc, service)


def running_content_service(data_dir: Path) -> ContentService | None:
    """The content service started from ``data_dir``, if it is still that process and alive."""
    service = read_record(record_file(data_dir), ContentService)
    return service if service is not None and _is_ours(service) else None


def _is_ours(service: ContentService) -> bool:
    try:
        args = Path(f"/proc/{service.pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    args = args.split("\0")
    return ("devnet.cli" in args and "serve" in args and str(service.port) in args
            and service.store_dir in args and not zombie(service.pid))


def stop_content_service(data_dir: Path) -> ContentService | None:
    """Stop the content service recorded in ``data_dir``; it, or None when none ran."""
    service = running_content_service(data_dir)
    if service is not None:
        terminate(service.pid)
    record_file(data_dir).unlink(missing_ok=True)
    return service


__all__ = ["ContentService", "Starting", "answers", "launch_content_service",
           "running_content_service", "stop_content_service"]
