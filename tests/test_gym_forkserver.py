"""The fork server that runs `gym` for the tests (tests/support/gym_forkserver.py) gives what a
fresh `gym` process gives: the same exit code, stdout and stderr, the caller's environment and
working directory each time, and a timeout that stops the command."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import gym_forkserver
import pytest

from devnet.anvil import free_port

GYM = Path(sys.executable).parent / "gym"


def _fresh(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(GYM), *argv], env=env, cwd=cwd, capture_output=True, text=True,
                          check=False, timeout=120)


@pytest.mark.parametrize("argv", [["--help"], ["ledger", "--help"], ["ledger", "nonsense"],
                                  ["devnet", "status"], ["ipfs", "add", "file.txt"],
                                  ["ipfs", "cat", "not-a-cid"]])
def test_a_forked_gym_answers_as_a_fresh_one(gym_env, tmp_path, monkeypatch, argv):
    work = tmp_path / "work"
    work.mkdir()
    (work / "file.txt").write_text("hello from the current directory\n")
    monkeypatch.chdir(work)
    forked = gym_forkserver.run(GYM, argv, gym_env.env)
    fresh = _fresh(argv, gym_env.env, work)
    assert (forked.returncode, forked.stdout, forked.stderr) == \
        (fresh.returncode, fresh.stdout, fresh.stderr)


def test_each_run_has_its_own_environment_and_directory(gym_env, tmp_path, monkeypatch):
    for name in ("one", "two"):
        env = {**gym_env.env, "GYM_DEPLOYMENT_FILE": str(tmp_path / name / "deployment.json")}
        done = gym_forkserver.run(GYM, ["devnet", "status"], env)
        assert done.returncode == 1
        assert f"no deployment at {tmp_path / name / 'deployment.json'}" in done.stderr
    for name in ("a", "b"):  # a relative path is read from the caller's directory
        (tmp_path / name).mkdir()
        (tmp_path / name / "f.txt").write_text(name)
        monkeypatch.chdir(tmp_path / name)
        added = gym_forkserver.run(GYM, ["ipfs", "add", "f.txt"], gym_env.env)
        assert added.returncode == 0, added.stderr
        assert gym_forkserver.run(GYM, ["ipfs", "cat", added.stdout.split()[-1]],
                                  gym_env.env).stdout == name


def _answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def test_a_command_past_its_timeout_is_stopped(gym_env):
    port = free_port()
    outcome: list[BaseException] = []

    def serve() -> None:
        try:
            gym_forkserver.run(GYM, ["ipfs", "serve", "--port", str(port)], gym_env.env, timeout=8)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome.append(exc)

    runner = threading.Thread(target=serve)
    runner.start()
    deadline = time.monotonic() + 8
    while not _answers(port) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _answers(port), "the command never started serving"
    runner.join(30)
    assert len(outcome) == 1 and isinstance(outcome[0], subprocess.TimeoutExpired), outcome
    deadline = time.monotonic() + 10
    while _answers(port) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _answers(port), "the timed-out command is still serving"
    assert gym_forkserver.run(GYM, ["devnet", "status"], gym_env.env).returncode == 1


def test_the_server_preloads_no_project_module():
    """What a child shares with its siblings is third-party imports only: project modules (and
    the settings they read) are imported afresh in every command."""
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); import gym_forkserver as g\n"
             "for n in g.PRELOAD:\n    try: __import__(n)\n    except Exception: pass\n"
             "tops = {m.split('.')[0] for m in sys.modules}\n"
             "print(sorted(tops & {'devnet', 'ledger', 'committee', 'governance', 'trainer',"
             " 'inference_node', 'contracts'}))")
    out = subprocess.run([sys.executable, "-c", probe, str(Path(gym_forkserver.__file__).parent)],
                         capture_output=True, text=True, check=True, env=dict(os.environ))
    assert out.stdout.strip() == "[]"


def test_a_child_s_torch_threads_follow_its_own_environment():
    """torch, imported by the server, sized its pool from the server's OMP_NUM_THREADS: a child
    sets it from its own, as a fresh process would start."""
    probe = ("import os, sys; sys.path.insert(0, sys.argv[1]); import gym_forkserver as g\n"
             "import torch\n"
             "g._match_threads({'OMP_NUM_THREADS': '2'}); a = torch.get_num_threads()\n"
             "g._match_threads({'OMP_NUM_THREADS': '1'}); b = torch.get_num_threads()\n"
             "g._match_threads({}); c = torch.get_num_threads()\n"
             "print(a, b, c == (os.cpu_count() or 1))")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", probe, str(Path(gym_forkserver.__file__).parent)],
                         capture_output=True, text=True, check=True, env=env)
    assert out.stdout.split() == ["2", "1", "True"]


def test_the_shim_answers_as_the_real_command_in_a_shell(gym_env, tmp_path):
    """What the README test puts at `.venv/bin/gym`: the command runs through the fork server
    with the shell's own stdout, stderr and exit status."""
    shim = tmp_path / "bin" / "gym"
    shim.parent.mkdir()
    gym_forkserver.write_shim(shim, GYM)
    env = {**gym_env.env, gym_forkserver.SOCKET_ENV: gym_forkserver.server(GYM).socket_path}
    for argv in (["ledger", "--help"], ["ledger", "nonsense"], ["devnet", "status"]):
        line = " ".join(argv)
        through = subprocess.run(["bash", "-c", f"{shim} {line}; echo status=$?"], env=env,
                                 capture_output=True, text=True, check=True, timeout=120)
        fresh = _fresh(argv, gym_env.env, tmp_path)
        assert through.stdout == fresh.stdout + f"status={fresh.returncode}\n"
        assert through.stderr == fresh.stderr


def test_the_shim_hands_a_serving_command_to_the_real_gym(gym_env, tmp_path):
    """A command that serves until signalled is exec'd, not forked: a SIGTERM to the process
    the shell started stops the server."""
    shim = tmp_path / "gym"
    gym_forkserver.write_shim(shim, GYM)
    env = {**gym_env.env, gym_forkserver.SOCKET_ENV: gym_forkserver.server(GYM).socket_path}
    port = free_port()
    proc = subprocess.Popen([str(shim), "ipfs", "serve", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not _answers(port) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _answers(port)
        assert Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")[1] == str(GYM).encode()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert not _answers(port)


def _serve_and_stop(env: dict[str, str], stop: int) -> tuple[int, bool]:
    """`gym ipfs serve` through `popen`, stopped with ``stop`` once it answers: its exit
    status, and whether its output named its address. Checks it runs until signalled."""
    port = free_port()
    proc = gym_forkserver.popen(GYM, ["ipfs", "serve", "--port", str(port)], env)
    try:
        deadline = time.monotonic() + 30
        while not _answers(port) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _answers(port) and proc.poll() is None
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=0.1)
        proc.send_signal(stop)
        output = proc.communicate(timeout=30)[0].decode()
    finally:
        proc.kill()
    assert not _answers(port)
    return proc.returncode, f"127.0.0.1:{port}" in output


@pytest.mark.parametrize("fresh", [True, False], ids=["fresh", "forked"])
def test_popen_stops_and_reports_as_a_fresh_process_does(gym_env, fresh, monkeypatch):
    """`popen` (what the node tests start `gym node serve` with): running while it serves, a
    SIGTERM stops it, and the exit status and output are those of a fresh process; a SIGKILL
    is -9, as `Popen.returncode` says."""
    if fresh:
        monkeypatch.setenv("GYM_TEST_FORKSERVER", "0")
    outcomes = [_serve_and_stop(gym_env.env, stop) for stop in (signal.SIGTERM, signal.SIGKILL)]
    assert outcomes[1] == (-9, True)
    assert outcomes[0][1]
    if not fresh:  # the same status a fresh process gave
        monkeypatch.setenv("GYM_TEST_FORKSERVER", "0")
        assert outcomes[0][0] == _serve_and_stop(gym_env.env, signal.SIGTERM)[0]
