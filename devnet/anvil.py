"""Start, find and stop the devnet's Anvil process.

Anvil runs detached from the CLI that started it (its own session), so ``gym devnet up``
returns while the chain keeps running. Its pid, port and binary are recorded in
``<data_dir>/anvil.json``; ``gym devnet down`` stops only a process that matches that record,
never another process that happens to reuse the pid or the port.

Past a few hundred blocks Anvil writes its older states to disk, a full state dump per block
(about 500 MB at 2,600 blocks), and leaves them there when it is stopped: by default under
``~/.foundry/anvil/tmp``, where every devnet's piled up (72 GB on this machine in a day of
tests). They go to ``<data_dir>/anvil-states`` instead (``--cache-path``), removed when the
devnet is stopped and when a new Anvil starts from that data directory.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TypeVar

import httpx

from contracts import foundry_binary
from devnet.errors import DevnetError, PortInUseError, RpcUnreachableError
from ledger.addresses import local_url
from ledger.json_input import parse_json

T = TypeVar("T")
STARTUP_TIMEOUT_S = 15.0
RPC_REPLY_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class AnvilProcess:
    """A running Anvil that this tool started."""

    pid: int  # process id
    host: str  # interface it listens on
    port: int  # TCP port of its JSON-RPC endpoint
    binary: str  # path of the anvil executable (checked before we signal the pid)
    log_file: str  # where its output goes

    @property
    def rpc_url(self) -> str:
        """The URL this machine dials (loopback for a wildcard listener; other hosts get
        ``devnet.network``'s announced URL)."""
        return local_url(f"http://{self.host}:{self.port}")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def rpc_call(rpc_url: str, method: str, params: list | None = None, timeout: float = 5.0):
    """One JSON-RPC call; raises ``RpcUnreachableError`` when nothing answers."""
    payload = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or []}
    try:
        response = httpx.post(rpc_url, json=payload, timeout=timeout)
        response.raise_for_status()
        body = parse_json(response.content, max_bytes=RPC_REPLY_BYTES, what="RPC reply")
    except (httpx.HTTPError, ValueError) as exc:
        raise RpcUnreachableError(f"cannot reach the EVM RPC at {rpc_url} ({_reason(exc)})") from exc
    if not isinstance(body, dict) or "result" not in body and "error" not in body:
        raise DevnetError(f"{method} at {rpc_url}: the reply is not a JSON-RPC response")
    if "error" in body:
        raise DevnetError(f"{method} failed at {rpc_url}: {body['error'].get('message', body['error'])}")
    return body["result"]


def _reason(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0]


def pid_file(data_dir: Path) -> Path:
    return data_dir / "anvil.json"


def states_dir(data_dir: Path) -> Path:
    """Where the Anvil of ``data_dir`` writes the states it keeps on disk (module docstring)."""
    return data_dir / "anvil-states"


def start_anvil(data_dir: Path, host: str, port: int, chain_id: int,
                fork_url: str | None = None) -> AnvilProcess:
    """Start Anvil on ``host:port`` (``port`` 0: a free one) and wait until it answers; with
    ``fork_url``, a fork of that chain (its chain id, state read from it on demand)."""
    if port == 0:
        port = free_port(host)
    elif not port_is_free(host, port):
        raise PortInUseError(
            f"port {port} on {host} is already in use by another process: stop it, or pick "
            "another port with `gym devnet up --port N` (0 picks a free one)"
        )
    binary = foundry_binary("anvil")
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path = data_dir / "anvil.log"
    if running_anvil(data_dir) is None:  # a killed Anvil's states: no process reads them
        shutil.rmtree(states_dir(data_dir), ignore_errors=True)
    cmd = [str(binary), "--host", host, "--port", str(port),
           "--cache-path", str(states_dir(data_dir))]
    cmd += ["--fork-url", fork_url] if fork_url else ["--chain-id", str(chain_id)]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    anvil = AnvilProcess(proc.pid, host, port, str(binary), str(log_path))
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
            raise DevnetError(f"anvil exited with code {proc.returncode} at start: {tail[0]}")
        try:
            rpc_call(anvil.rpc_url, "eth_chainId", timeout=1.0)
            break
        except RpcUnreachableError:
            time.sleep(0.1)
    else:
        terminate(proc.pid)
        raise DevnetError(f"anvil did not answer on {anvil.rpc_url} within {STARTUP_TIMEOUT_S:.0f} s")
    pid_file(data_dir).write_text(json.dumps(asdict(anvil), indent=2) + "\n")
    return anvil


def read_record(path: Path, kind: type[T]) -> T | None:
    """The process record at ``path`` (a JSON object of ``kind``'s fields), or None when there
    is none; an unreadable one is deleted (it cannot name a process we own)."""
    try:
        return kind(**parse_json(path.read_bytes(), max_bytes=64 * 1024, max_depth=2,
                                 what=str(path)))
    except FileNotFoundError:
        return None
    except (ValueError, TypeError):  # JSONInputError is a ValueError
        path.unlink(missing_ok=True)
        return None


def running_anvil(data_dir: Path) -> AnvilProcess | None:
    """The Anvil this tool started from ``data_dir``, if it is still that process and alive."""
    anvil = read_record(pid_file(data_dir), AnvilProcess)
    return anvil if anvil is not None and _is_our_anvil(anvil) else None


def _is_our_anvil(anvil: AnvilProcess) -> bool:
    try:
        cmdline = Path(f"/proc/{anvil.pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return cmdline[0].decode(errors="replace") == anvil.binary and not zombie(anvil.pid)


def stop_anvil(data_dir: Path) -> AnvilProcess | None:
    """Stop the Anvil recorded in ``data_dir``; returns it, or None when none was running."""
    anvil = running_anvil(data_dir)
    if anvil is not None:
        terminate(anvil.pid)
    pid_file(data_dir).unlink(missing_ok=True)
    shutil.rmtree(states_dir(data_dir), ignore_errors=True)  # Anvil leaves them behind
    return anvil


def terminate(pid: int, grace_s: float = 5.0) -> None:
    """SIGTERM ``pid``, SIGKILL it after ``grace_s`` (reaped when it is our child)."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            finished, _ = os.waitpid(pid, os.WNOHANG)  # reaps it when it is our child
            if finished:
                return
        except ChildProcessError:
            pass  # started by an earlier CLI process: not ours to reap
        if not Path(f"/proc/{pid}").exists() or zombie(pid):
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] == "Z"
    except OSError:
        return True
