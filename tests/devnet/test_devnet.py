"""`gym devnet up|status|down` against a real Anvil started from the npm Foundry binary."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import pytest
from eth_utils import keccak
from web3 import Web3

from contracts import load_artifact
from devnet.anvil import AnvilProcess, running_anvil

pytestmark = pytest.mark.anvil


def _anvil(gym_env) -> AnvilProcess:
    anvil = running_anvil(gym_env.data_dir)
    assert anvil is not None
    return anvil


def test_up_writes_manifest_that_matches_the_chain(gym_env):
    result = gym_env.run("devnet", "up")
    assert result.returncode == 0, result.stderr
    manifest = json.loads(gym_env.deployment_file.read_text())
    anvil = _anvil(gym_env)
    assert manifest["chain_id"] == 31337
    assert manifest["rpc_url"] == anvil.rpc_url
    w3 = Web3(Web3.HTTPProvider(anvil.rpc_url))
    assert manifest["genesis_hash"] == w3.eth.get_block(0)["hash"].to_0x_hex()
    block = w3.eth.get_block(manifest["deployment_block"])
    assert manifest["deployment_block_hash"] == block["hash"].to_0x_hex()
    assert set(manifest["contracts"]) == {"ExperienceLedger"}
    for name, contract in manifest["contracts"].items():
        code = w3.eth.get_code(contract["address"])
        assert code == bytes.fromhex(load_artifact(name).deployed_bytecode[2:])
        assert contract["code_hash"] == "0x" + keccak(code).hex()
        assert w3.eth.get_transaction_receipt(contract["tx_hash"])["contractAddress"] == contract["address"]

    status = gym_env.run("devnet", "status")
    assert status.returncode == 0, status.stderr
    assert "deployment matches the chain" in status.stdout

    again = gym_env.run("devnet", "up")  # idempotent: same Anvil, no redeploy
    assert again.returncode == 0
    assert "already running" in again.stdout and "already deployed" in again.stdout
    assert json.loads(gym_env.deployment_file.read_text()) == manifest


def test_down_stops_only_its_own_anvil(gym_env):
    assert gym_env.run("devnet", "up").returncode == 0
    pid = _anvil(gym_env).pid
    down = gym_env.run("devnet", "down")
    assert down.returncode == 0 and f"pid {pid}" in down.stdout
    assert running_anvil(gym_env.data_dir) is None
    assert _exited(pid)
    assert "no devnet started by gym is running" in gym_env.run("devnet", "down").stdout


def test_down_refuses_a_pid_that_is_not_its_anvil(gym_env):
    """A stale pid file naming some other process must not get that process killed."""
    gym_env.data_dir.mkdir(parents=True)
    victim = os.getpid()  # this very test process
    (gym_env.data_dir / "anvil.json").write_text(json.dumps({
        "pid": victim, "host": "127.0.0.1", "port": 1, "binary": "/nonexistent/anvil",
        "log_file": "/dev/null"}))
    result = gym_env.run("devnet", "down")
    assert result.returncode == 0
    assert "no devnet started by gym is running" in result.stdout
    assert Path(f"/proc/{victim}").exists()


def test_restart_from_scratch_is_detected_and_up_redeploys(gym_env):
    assert gym_env.run("devnet", "up").returncode == 0
    first = json.loads(gym_env.deployment_file.read_text())
    assert gym_env.run("devnet", "down").returncode == 0
    # A fresh Anvil on the very same port: same URL, same addresses, different chain.
    port = first["rpc_url"].rsplit(":", 1)[1]
    assert gym_env.run("devnet", "up", "--port", port).returncode == 0
    second = json.loads(gym_env.deployment_file.read_text())
    assert second["rpc_url"] == first["rpc_url"]
    assert second["genesis_hash"] != first["genesis_hash"]

    # Now restart again behind the manifest's back and ask for status.
    gym_env.deployment_file.write_text(json.dumps(first))
    status = gym_env.run("devnet", "status")
    assert status.returncode == 1
    assert "restarted from scratch" in status.stderr
    up = gym_env.run("devnet", "up")
    assert up.returncode == 0 and "deployed contracts (the chain was restarted" in up.stdout
    assert gym_env.run("devnet", "status").returncode == 0


def test_status_detects_missing_contract_code(gym_env):
    assert gym_env.run("devnet", "up").returncode == 0
    manifest = json.loads(gym_env.deployment_file.read_text())
    manifest["contracts"]["ExperienceLedger"]["address"] = "0x" + "11" * 20
    gym_env.deployment_file.write_text(json.dumps(manifest))
    status = gym_env.run("devnet", "status")
    assert status.returncode == 1
    assert "does not hold the deployed code" in status.stderr


def test_port_already_taken_is_one_clear_line(gym_env):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = gym_env.run("devnet", "up", "--port", str(port))
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"error: port {port} on 127.0.0.1 is already in use by another process: stop it, or "
        "pick another port with `gym devnet up --port N` (0 picks a free one)")
    assert "Traceback" not in result.stdout + result.stderr
    assert not gym_env.deployment_file.exists()


@pytest.mark.parametrize("content", ["{not json", '{"version": 1}', ""])
def test_corrupted_manifest_is_one_clear_line(gym_env, content):
    gym_env.deployment_file.write_text(content)
    result = gym_env.run("devnet", "status")
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "is corrupted" in lines[0] and "gym devnet up --redeploy" in lines[0]
    assert "Traceback" not in result.stderr


def test_up_replaces_a_corrupted_manifest(gym_env):
    gym_env.deployment_file.write_text("{not json")
    result = gym_env.run("devnet", "up")
    assert result.returncode == 0, result.stderr
    assert "deployment.json was unreadable" in result.stdout
    assert gym_env.run("devnet", "status").returncode == 0


def test_missing_manifest_says_what_to_run(gym_env):
    result = gym_env.run("devnet", "status")
    assert result.returncode == 1
    assert result.stderr.strip().endswith("run `gym devnet up` to start and deploy the devnet")


def test_unreachable_rpc_is_one_clear_line(gym_env):
    with socket.socket() as closed:  # a port that was free a moment ago: nothing answers
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    for args in (("devnet", "up"), ("devnet", "status")):
        if args[1] == "status":
            gym_env.deployment_file.write_text(json.dumps(_fake_manifest(url)))
        result = gym_env.run(*args, extra_env={"GYM_RPC_URL": url})
        assert result.returncode == 1, args
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: cannot reach the EVM RPC at {url}")
        assert "Traceback" not in result.stderr


def test_status_when_devnet_is_down(gym_env):
    assert gym_env.run("devnet", "up").returncode == 0
    assert gym_env.run("devnet", "down").returncode == 0
    result = gym_env.run("devnet", "status")
    assert result.returncode == 1
    assert "the devnet is not running" in result.stderr and "gym devnet up" in result.stderr


def test_external_rpc_is_deployed_to_without_starting_anvil(gym_env, tmp_path):
    """GYM_RPC_URL pointing at a node gym did not start: deploy there, start nothing."""
    other = tmp_path / "other"
    assert gym_env.run("devnet", "up", extra_env={"GYM_DATA_DIR": str(other),
                                                  "GYM_DEPLOYMENT_FILE": str(other / "d.json")}
                       ).returncode == 0
    url = running_anvil(other).rpc_url
    try:
        result = gym_env.run("devnet", "up", extra_env={"GYM_RPC_URL": url})
        assert result.returncode == 0, result.stderr
        assert "anvil" not in result.stdout.split("deployed")[0]
        assert running_anvil(gym_env.data_dir) is None
        assert json.loads(gym_env.deployment_file.read_text())["rpc_url"] == url
        status = gym_env.run("devnet", "status", extra_env={"GYM_RPC_URL": url})
        assert status.returncode == 0 and "not started by gym" in status.stdout
    finally:
        gym_env.run("devnet", "down", extra_env={"GYM_DATA_DIR": str(other)})


def _exited(pid: int, within_s: float = 5.0) -> bool:
    """True once ``pid`` is gone or a zombie waiting for its parent to reap it."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def _fake_manifest(url: str) -> dict:
    zero = "0x" + "00" * 32
    return {"version": 1, "chain_id": 31337, "rpc_url": url, "deployer": "0x" + "00" * 20,
            "genesis_hash": zero, "deployment_block": 1, "deployment_block_hash": zero,
            "contracts": {}, "created_at": "2026-01-01T00:00:00+00:00"}
