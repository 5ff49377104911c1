"""Run the real `gym` command in a fresh process without paying its imports each time.

A `gym` command spends about two of its 2.3 seconds importing web3, SQLAlchemy, eth-* and the
rest before it does anything, and one that loads a model ten more importing torch and
transformers; the suite runs hundreds of them. Once per test process, a fork server (this file
run as a script) imports those third-party libraries, and nothing of the project, and waits on
a Unix socket. Each `run()` sends it the command line, the environment,
the working directory and three file descriptors (stdin from /dev/null, stdout and stderr into
files); the server forks, and the child, in its own session, takes those descriptors,
environment and directory, imports the project as a fresh `gym` would, runs `devnet.cli:main`
and exits with its status after `atexit` and non-daemon threads, as an interpreter does.

What a child shares with its siblings is only what the third-party libraries did at import
time; every project module, setting, database and connection is the child's own. `popen()`
forks a command that runs until stopped (the node tests' `gym node serve`) the same way, with
its output on a pipe and signals sent to the process itself. Commands whose import behaviour
is under test (tests/test_cli_imports.py) and the README shim's serving commands keep real
processes. `GYM_TEST_FORKSERVER=0` turns it off.
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import select
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

# Third-party libraries the commands load, the chain and content ones' and the ML stack's
# (torch and transformers alone are 10 s of a model command's start here); importing one that
# is missing is skipped. Nothing of the project. torch sizes its thread pool from the server's
# environment: each child sets it again from its own (``_match_threads``).
PRELOAD = ("typer", "rich", "click", "web3", "eth_account", "eth_abi", "eth_utils", "eth_keys",
           "eth_keyfile", "py_ecc", "sqlalchemy", "alembic", "requests", "httpx", "pydantic",
           "aiohttp", "websockets", "multiformats", "yaml", "fastapi", "uvicorn",
           "torch", "transformers", "transformers.modeling_utils",
           "transformers.models.auto.modeling_auto", "transformers.models.llama.modeling_llama",
           "peft", "safetensors.torch", "trl")
MAX_REQUEST = 1 << 20
SOCKET_ENV = "GYM_TEST_FORKSERVER_SOCKET"  # where a `gym` shim (``write_shim``) finds the server
# Commands that run until signalled: a shim hands them to the real `gym` (exec), so that the
# signal reaches the process that serves.
LONG_RUNNING = (("node", "serve"), ("ipfs", "serve"), ("dashboard",), ("verifier", "serve"),
                ("verifier", "aggregate"))


@dataclass
class Completed:
    returncode: int
    stdout: str
    stderr: str


# --- the server (a child of the test process) ----------------------------------------------

def _child(request: dict, fds: list[int], gym_path: str) -> None:
    """In the forked child: become the `gym` process the request describes, run it, exit."""
    code = 1
    try:
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        os.environ.clear()
        os.environ.update(request["env"])
        time.tzset()
        os.chdir(request["cwd"])
        sys.argv = [gym_path, *request["argv"]]
        # where a console script's path starts, then $PYTHONPATH, as an interpreter sets it up
        sys.path[:0] = [str(Path(gym_path).parent),
                        *filter(None, request["env"].get("PYTHONPATH", "").split(os.pathsep))]
        if "numpy" in sys.modules:  # `random` reseeds itself after a fork; numpy does not
            sys.modules["numpy"].random.seed()
        _match_threads(request["env"])
        from devnet.cli import main

        main()
        code = 0
    except SystemExit as done:
        if done.code is None:
            code = 0
        elif isinstance(done.code, int):
            code = done.code
        else:
            print(done.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: BLE001 - what an interpreter does with an uncaught exception
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            threading._shutdown()
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code & 0xFF)


def _match_threads(env: dict[str, str]) -> None:
    """torch's thread count as a fresh process with ``env`` would start with it:
    OMP_NUM_THREADS, else one per core."""
    torch = sys.modules.get("torch")
    if torch is None:
        return
    wanted = env.get("OMP_NUM_THREADS", "")
    threads = int(wanted) if wanted.isdigit() and int(wanted) > 0 else os.cpu_count() or 1
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def serve(path: str, gym_path: str) -> None:
    for name in PRELOAD:
        try:
            __import__(name)
        except ImportError:  # an optional library that is not installed here
            continue
    gc.freeze()  # a child's collections skip what it shares: its pages stay shared
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    parent = os.getppid()
    print("ready", flush=True)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    while True:
        if os.getppid() != parent:  # the test process is gone: so is the reason to run
            return
        for key, _ in selector.select(timeout=1.0):
            if key.data == "accept":
                conn, _ = listener.accept()
                fds: list[int] = []
                try:
                    message, fds, _, _ = socket.recv_fds(conn, MAX_REQUEST, 3)
                    request = json.loads(message)
                except (OSError, ValueError):  # a malformed request: nothing runs, nothing leaks
                    for fd in fds:
                        os.close(fd)
                    conn.close()
                    continue
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    listener.close()
                    conn.close()
                    _child(request, fds, gym_path)
                for fd in fds:
                    os.close(fd)
                try:
                    conn.send(json.dumps({"pid": pid}).encode())
                except OSError:
                    pass
                pidfd = os.pidfd_open(pid)
                selector.register(pidfd, selectors.EVENT_READ, (conn, pid))
            else:
                conn, pid = key.data
                selector.unregister(key.fd)
                os.close(key.fd)
                _, status = os.waitpid(pid, 0)
                try:
                    conn.send(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}).encode())
                except OSError:
                    pass
                conn.close()


# --- the client (in the test process) -------------------------------------------------------

class ForkServer:
    def __init__(self, gym_path: Path, env: dict[str, str]) -> None:
        self.gym_path = gym_path
        self._dir = tempfile.mkdtemp(prefix="gym-forkserver-")
        self.socket_path = os.path.join(self._dir, "socket")
        self.proc = subprocess.Popen(
            [sys.executable, __file__, self.socket_path, str(gym_path)], env=env,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=None, text=True)
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the gym fork server did not start (exit {self.proc.wait()})")

    def run(self, argv: list[str], env: dict[str, str], timeout: float,
            cwd: str | os.PathLike | None = None) -> Completed:
        request = json.dumps({"argv": argv, "env": env,
                              "cwd": os.fspath(cwd) if cwd is not None else os.getcwd()}).encode()
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
                open(os.devnull, "rb") as stdin, \
                socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as conn:
            conn.connect(self.socket_path)
            socket.send_fds(conn, [request], [stdin.fileno(), out.fileno(), err.fileno()])
            conn.settimeout(timeout)
            pid = json.loads(conn.recv(4096))["pid"]
            try:
                answer = conn.recv(4096)
            except TimeoutError:
                try:
                    os.killpg(pid, 9)
                except ProcessLookupError:
                    pass
                raise subprocess.TimeoutExpired([str(self.gym_path), *argv], timeout) from None
            if not answer:
                raise RuntimeError("the gym fork server went away mid-command")
            returncode = json.loads(answer)["returncode"]
            out.seek(0)
            err.seek(0)
            return Completed(returncode, out.read().decode(errors="replace"),
                             err.read().decode(errors="replace"))

    def popen(self, argv: list[str], env: dict[str, str]) -> ForkedProcess:
        read, write = os.pipe()
        request = json.dumps({"argv": argv, "env": env, "cwd": os.getcwd()}).encode()
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            with open(os.devnull, "rb") as stdin:
                conn.connect(self.socket_path)
                socket.send_fds(conn, [request], [stdin.fileno(), write, write])
            pid = json.loads(conn.recv(4096))["pid"]
        except BaseException:
            conn.close()
            os.close(read)
            raise
        finally:
            os.close(write)
        try:  # the server reaps it: a pidfd keeps a later signal off a reused pid
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:  # already exited and reaped
            pidfd = None
        return ForkedProcess([str(self.gym_path), *argv], pid, conn, os.fdopen(read, "rb"),
                             pidfd)

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        try:
            os.unlink(self.socket_path)
            os.rmdir(self._dir)
        except OSError:
            pass


class ForkedProcess:
    """What ``popen`` gives: the parts of ``subprocess.Popen`` the tests use (``pid``,
    ``stdout``, ``poll``, ``wait``, ``send_signal``, ``terminate``, ``kill``, ``returncode``)
    for a command forked from the server; its exit status comes from the server, which reaps
    it. Signals go to the process alone, as ``Popen``'s do."""

    def __init__(self, args: list[str], pid: int, conn: socket.socket, stdout,
                 pidfd: int | None) -> None:
        self.args, self.pid, self.stdout = args, pid, stdout
        self.returncode: int | None = None
        self._conn, self._pidfd = conn, pidfd
        self._began = time.perf_counter()

    def _status(self, timeout: float | None) -> int | None:
        if self.returncode is None:
            self._conn.settimeout(timeout)
            try:
                answer = self._conn.recv(4096)
            except (TimeoutError, BlockingIOError):
                return None
            if not answer:
                raise RuntimeError("the gym fork server went away mid-command")
            self.returncode = json.loads(answer)["returncode"]
            self._conn.close()
            if self._pidfd is not None:
                os.close(self._pidfd)
            for observe in OBSERVERS:
                observe(self.args[1:], time.perf_counter() - self._began)
        return self.returncode

    def poll(self) -> int | None:
        return self._status(0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._status(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return code

    def communicate(self, timeout: float | None = None) -> tuple[bytes, None]:
        """Everything it writes until it exits, as ``Popen.communicate`` with stdout=PIPE."""
        deadline = None if timeout is None else time.monotonic() + timeout
        chunks = []
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout)
            ready, _, _ = select.select([self.stdout], [], [], left)
            if ready:
                chunk = os.read(self.stdout.fileno(), 1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        self.wait(left)
        self.stdout.close()
        return b"".join(chunks), None

    def send_signal(self, signum: int) -> None:
        if self.returncode is None and self._pidfd is not None:
            try:
                signal.pidfd_send_signal(self._pidfd, signum)
            except ProcessLookupError:  # exited: its status is on its way
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _words(argv: list[str]) -> tuple[str, ...]:
    return tuple(a for a in argv if not a.startswith("-"))[:2]


def write_shim(path: Path, gym_path: Path) -> None:
    """Write a `gym` executable at ``path`` that runs its command through the fork server named
    by $GYM_TEST_FORKSERVER_SOCKET, with its own stdin, stdout and stderr, passing SIGINT,
    SIGTERM and SIGHUP on and exiting with the command's status; without the variable, or for
    a command that runs until signalled (``LONG_RUNNING``), it execs the real ``gym_path``."""
    path.write_text(f"#!{sys.executable} -S\nimport sys\nsys.path.insert(0, {str(Path(__file__).parent)!r})\n"
                    f"import gym_forkserver\ngym_forkserver.shim_main({str(gym_path)!r})\n")
    path.chmod(0o755)


def shim_main(gym_path: str) -> None:
    argv = sys.argv[1:]
    where = os.environ.get(SOCKET_ENV)
    words = _words(argv)
    if not where or any(words[:len(long)] == long for long in LONG_RUNNING):
        os.execv(gym_path, [gym_path, *argv])
    request = json.dumps({"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}).encode()
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as conn:
        conn.connect(where)
        socket.send_fds(conn, [request], [0, 1, 2])
        pid = json.loads(conn.recv(4096))["pid"]

        def forward(signum, _frame) -> None:
            try:
                os.killpg(pid, signum)
            except ProcessLookupError:
                pass

        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, forward)
        answer = conn.recv(4096)
    if not answer:
        sys.exit("gym: the test fork server went away mid-command")
    code = json.loads(answer)["returncode"]
    sys.exit(128 - code if code < 0 else code)  # killed by signal N: 128 + N, as a shell says


def server(gym_path: Path) -> ForkServer:
    """This test process's fork server (started on first use)."""
    global _server
    with _server_lock:
        if _server is None or _server.proc.poll() is not None:
            server_env = {k: v for k, v in os.environ.items() if not k.startswith("GYM_")}
            server_env.update(COLUMNS="200", NO_COLOR="1")
            _server = ForkServer(gym_path, server_env)
            atexit.register(_server.close)
        return _server


_server: ForkServer | None = None
_server_lock = threading.Lock()
OBSERVERS: list = []  # callables (argv, seconds): tests/support/test_costs.py counts runs


def enabled() -> bool:
    return os.environ.get("GYM_TEST_FORKSERVER", "1") != "0"


def run(gym_path: Path, argv: list[str], env: dict[str, str], timeout: float = 120,
        cwd: str | os.PathLike | None = None) -> Completed:
    """`subprocess.run([gym, *argv], env=env, cwd=cwd, capture_output=True, text=True,
    timeout=timeout)`, forked from the server (started on first use, once per test process)."""
    start = time.perf_counter()
    if not enabled():
        proc = subprocess.run([str(gym_path), *argv], env=env, cwd=cwd, capture_output=True,
                              text=True, check=False, timeout=timeout)
        return Completed(proc.returncode, proc.stdout, proc.stderr)
    try:
        return server(gym_path).run(argv, env, timeout, cwd)
    finally:
        for observe in OBSERVERS:
            observe(argv, time.perf_counter() - start)


def popen(gym_path: Path, argv: list[str], env: dict[str, str]) -> ForkedProcess | subprocess.Popen:
    """`subprocess.Popen([gym, *argv], env=env, stdout=PIPE, stderr=STDOUT)` for a command
    that runs until stopped (`gym node serve`), forked from the server."""
    if not enabled():
        return subprocess.Popen([str(gym_path), *argv], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT)
    return server(gym_path).popen(argv, env)


if __name__ == "__main__":
    sys.path.pop(0)  # this folder is not on a `gym` command's path
    serve(sys.argv[1], sys.argv[2])
