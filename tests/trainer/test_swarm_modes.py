"""Volunteer training, the other modes and the ways a peer stops: DiLoCo-style local steps
(`--local-steps`) with a joiner of another mode refused, and Ctrl-C or SIGTERM taking hivemind's
child processes down with the peer."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest
from processes import alive
from swarm_peers import Peer
from tiny_sft import write_sft_config

from contracts.devnet_accounts import devnet_account_key


@pytest.mark.slow
def test_local_steps_peers_average_parameters_and_refuse_a_gradient_averaging_joiner(
        gym_env, tmp_path):
    """DiLoCo-style: two peers step their own AdamW every batch and average parameters once
    per collaborative step; a joiner that would average gradients instead is refused."""
    config = write_sft_config(tmp_path, 3)

    def env(account: int) -> dict:
        return {**gym_env.env, "OMP_NUM_THREADS": "1",
                "GYM_PUBLISHER_KEY": devnet_account_key(account)}

    local = ("--local-steps", "2", "--min-peers", "2")  # target: 2 batches x 2 x 2 peers
    a = Peer("a", tmp_path, env(0), config, *local)
    maddr = a.wait_for("swarm peer: ").split()[2]
    peers = [a]
    try:
        a.wait_for("swarm arith: 1 of 2 peers joined")  # its spec is in the DHT
        x = Peer("x", tmp_path, env(2), config, "--initial-peers", maddr, "--min-peers", "2")
        peers.append(x)
        assert x.process.wait(timeout=180) != 0
        error = x.stderr()
        assert "run arith: local_steps" in error and "this peer cannot join it" in error, error
        b = Peer("b", tmp_path, env(1), config, *local, "--initial-peers", maddr)
        peers.append(b)
        out_a, out_b = a.finish(), b.finish()
    finally:
        for peer in peers:
            peer.kill()
    assert not (x.run_dir / "run.json").exists()
    swarm = {p.name: p.manifest()["run"]["hardware"]["swarm"] for p in (a, b)}
    for name, s in swarm.items():
        assert s["local_steps"] == 2 and s["target_batch_size"] == 8
        assert s["collaborative_steps"] == 3
        # the parameter rounds (their groups recorded as the witness's) averaged both peers
        assert s["local"]["steps"] > 0 and s["local"]["rounds"] > 0, (name, s, out_a, out_b)
    assert "averaged by 2 peers" in out_a + out_b
    assert swarm["a"]["final_weights_digest"] == swarm["b"]["final_weights_digest"], (
        swarm, out_a, out_b)
    adapters = {(p.run_dir / "adapter" / "adapter_model.safetensors").read_bytes()
                for p in (a, b)}
    assert len(adapters) == 1
    credited = {c["peer_id"] for c in swarm["a"]["contributors"]}
    assert credited == {swarm["a"]["peer_id"], swarm["b"]["peer_id"]}, swarm["a"]
    assert swarm["a"]["refused"] == []


@pytest.mark.slow
def test_ctrl_c_and_sigterm_stop_a_peer_with_hivemind_s_child_processes(gym_env, tmp_path):
    """A volunteer waiting for its peers stops at once on SIGINT (Ctrl-C) or SIGTERM, and its
    DHT node, averagers and p2pd stop with it (a default SIGTERM left them running)."""
    config = write_sft_config(tmp_path, 3)
    env = {**gym_env.env, "OMP_NUM_THREADS": "1",
           "GYM_PUBLISHER_KEY": devnet_account_key(0)}
    for signum in (signal.SIGINT, signal.SIGTERM):
        peer = Peer(f"p{signum}", tmp_path, env, config, "--min-peers", "2")
        try:
            peer.wait_for("swarm arith: 1 of 2 peers joined")
            group = [int(pid) for pid in subprocess.run(
                ["ps", "-o", "pid=", "-g", str(peer.process.pid)], capture_output=True,
                text=True, check=True).stdout.split()]
            assert len(group) >= 3, group  # gym, hivemind's DHT process, p2pd
            peer.process.send_signal(signum)
            assert peer.process.wait(timeout=30) != 0
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and any(alive(pid) for pid in group):
                time.sleep(0.2)
            assert not [pid for pid in group if alive(pid)], (signum, group)
        finally:
            peer.kill()
