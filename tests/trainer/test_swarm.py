"""Volunteer training on loopback, through the real `gym` command and hivemind: three peers
train the tiny model with `--swarm`, one is killed with SIGKILL mid-run, a fourth joins late and
catches up; the survivors end with the same adapter; the publishing peer refuses forged
contribution records and publishes the adapter with the contributors' shares on the devnet."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from processes import alive
from tiny_sft import write_sft_config

from contracts.devnet_accounts import devnet_account_key

REPO = Path(__file__).resolve().parents[2]
GYM = Path(sys.executable).parent / "gym"
STEPS = 8


class Peer:
    """One `gym train sft --swarm` process; its stdout lines collected as they come."""

    def __init__(self, name: str, tmp_path: Path, env: dict, config: Path, *extra: str) -> None:
        self.name, self.run_dir = name, tmp_path / name
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [str(GYM), "train", "sft", str(config), "--swarm", "arith", "--output",
             str(self.run_dir), "--host-maddrs", "/ip4/127.0.0.1/tcp/0", "--matchmaking-time",
             "2", *extra],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True)  # its own process group: hivemind's children die with it
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, prefix: str, timeout: float = 240, at_least: int | None = None) -> str:
        """The first line starting with ``prefix`` (with ``at_least``: followed by a number that
        is at least that, as "step 3/8")."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if line.startswith(prefix) and (at_least is None or int(
                        line.removeprefix(prefix).partition("/")[0]) >= at_least):
                    return line
            if self.process.poll() is not None and not self._reader.isalive():
                break
            time.sleep(0.2)
        raise AssertionError(f"peer {self.name} never printed {prefix!r}: {self.lines} "
                             f"{self.process.stderr.read() if self.process.poll() else ''}")

    def kill(self) -> None:
        """SIGKILL the peer and every process it started (hivemind's DHT and averagers, p2pd),
        as a machine that dies takes them all."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # gone already, with its group
        self.process.wait(timeout=30)

    def peer_id(self) -> str:
        return self.wait_for("swarm peer: ").split()[2].rpartition("/p2p/")[2]

    def finish(self, timeout: float = 300) -> str:
        self.process.wait(timeout=timeout)
        self._reader.join(timeout=10)
        stderr = self.process.stderr.read()
        assert self.process.returncode == 0, (self.name, stderr, self.lines[-10:])
        return "\n".join(self.lines)

    def manifest(self) -> dict:
        return json.loads((self.run_dir / "run.json").read_text())


def _forge_records(maddr: str, victim_peer_id: str) -> None:
    """Publish two forged records for the victim (devnet account 1), each from a DHT node of
    its own (one owner key, one value): one signed by another key, one with the victim's key
    and inflated samples; each beside a copy of the victim's spec."""
    import hivemind
    from eth_account import Account
    from hivemind.dht.crypto import RSASignatureValidator
    from hivemind.utils import get_dht_time
    from hivemind.utils.crypto import RSAPrivateKey

    from trainer.swarm.records import Round, decode_contribution, sign_contribution

    def store(value: dict | None) -> dict:
        validator = RSASignatureValidator(RSAPrivateKey())
        dht = hivemind.DHT(start=True, initial_peers=[maddr],
                           host_maddrs=["/ip4/127.0.0.1/tcp/0"], record_validators=[validator])
        try:
            deadline = time.monotonic() + 120
            while value is None:  # the victim's latest record, once it lists a round
                found = dht.get("arith_gym_peers", latest=True)
                for item in found.value.values() if found else ():
                    if (item.value["spec"]["peer_id"] == victim_peer_id
                            and item.value.get("contribution", {}).get("rounds")):
                        return item.value
                assert time.monotonic() < deadline, "the victim never published a round"
                time.sleep(1)
            assert dht.store("arith_gym_peers", subkey=validator.local_public_key, value=value,
                             expiration_time=get_dht_time() + 600)
            return value
        finally:
            dht.shutdown()

    victim = store(None)
    honest = decode_contribution(victim["contribution"])
    mallory = devnet_account_key(9)
    wrong_key = sign_contribution(
        replace(honest, contributor=Account.from_key(mallory).address.lower()), mallory)
    # each round 100 samples more, past what the victim's local steps can hold
    inflated = sign_contribution(replace(
        honest, samples=honest.samples + 100 * len(honest.rounds),
        rounds=tuple(Round(r.epoch, r.samples + 100) for r in honest.rounds)),
        devnet_account_key(1))
    for record in (wrong_key, inflated):
        store({"spec": victim["spec"], "contribution": record.to_json()})


@pytest.mark.anvil
@pytest.mark.slow
def test_volunteers_train_one_adapter_and_the_ledger_lists_their_shares(ledger_devnet,
                                                                        tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    gym = ledger_devnet.gym
    config = write_sft_config(tmp_path, STEPS)
    env = {**gym.env, "OMP_NUM_THREADS": "1"}
    shared = ("--target-batch-size", "32")
    a = Peer("a", tmp_path, env, config, *shared, "--account", "0", "--min-peers", "3",
             "--publish", "alice/swarm")
    maddr = a.wait_for("swarm peer: ").split()[2]
    b = Peer("b", tmp_path, env, config, *shared, "--account", "1", "--initial-peers", maddr,
             "--min-peers", "3")
    c = Peer("c", tmp_path, env, config, *shared, "--account", "2", "--initial-peers", maddr,
             "--min-peers", "3")
    try:
        a.wait_for("swarm arith: step ", at_least=1)
        c.kill()  # SIGKILL mid-run: the others go on
        d = Peer("d", tmp_path, env, config, *shared, "--account", "3", "--initial-peers",
                 maddr)  # joins late
        b_peer = b.peer_id()
        # an operator's view, from outside the run: the peers, their steps and addresses,
        # a new table at each change until no peer is training
        watch = subprocess.Popen([str(GYM), "swarm", "peers", "arith", "--initial-peers", maddr,
                                  "--watch", "1"], env={**env, "COLUMNS": "200"},
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _forge_records(maddr, b_peer)
        out_a, out_b, out_d = a.finish(), b.finish(), d.finish()
        watched, watch_err = watch.communicate(timeout=120)
    finally:
        for peer in (a, b, c) + ((d,) if "d" in locals() else ()):
            peer.kill()
        if "watch" in locals() and watch.poll() is None:
            watch.kill()
    assert c.process.wait(timeout=10) == -9
    assert watch.returncode == 0, watch_err
    tables = [t for t in watched.split("swarm arith: ") if "│" in t]
    assert len(tables) >= 2, watched  # the peers moved while it watched
    a_peer = maddr.rpartition("/p2p/")[2]

    def states(table: str) -> dict[str, str]:
        return {line.split()[1]: line.split()[-2] for line in table.splitlines()
                if line.startswith("│")}

    assert states(tables[0])[a_peer] in ("training", "done"), tables[0]
    assert "training" in {s for t in tables for s in states(t).values()}, watched
    last = states(tables[-1])
    assert last[a_peer] == last[b_peer] == "done" and "training" not in last.values(), watched

    manifests = {p.name: p.manifest() for p in (a, b, d)}
    swarm = {name: m["run"]["hardware"]["swarm"] for name, m in manifests.items()}
    # every survivor stopped at the run's last collaborative step, with the same weights
    assert all(s["collaborative_steps"] == STEPS for s in swarm.values())
    digests = {m["run"]["hardware"]["distributed"]["ranks"][0]["weights_digest"]
               for m in manifests.values()}
    assert len(digests) == 1, digests
    adapters = {(p.run_dir / "adapter" / "adapter_model.safetensors").read_bytes()
                for p in (a, b, d)}
    assert len(adapters) == 1
    # the late joiner loaded the state of a later step from its peers, then averaged with them
    local = {name: s["local"] for name, s in swarm.items()}
    first_d = next(line for line in out_d.splitlines() if line.startswith("swarm arith: step "))
    assert "caught up: state loaded from the peers" in first_d, out_d
    assert local["d"]["rounds"] > 0 and local["d"]["steps"] < local["a"]["steps"], local
    assert all(f"step {STEPS}/{STEPS}" in out for out in (out_a, out_b))

    # the publisher's verdicts: the three survivors credited, the forgeries refused
    contributors = {c["peer_id"]: c for c in swarm["a"]["contributors"]}
    survivors = {swarm[name]["peer_id"] for name in "abd"}
    assert survivors <= set(contributors)
    assert abs(sum(c["share"] for c in contributors.values()) - 1) < 1e-5
    assert contributors[swarm["a"]["peer_id"]]["samples"] > 0
    refused = swarm["a"]["refused"]
    assert sorted(r["peer_id"] for r in refused) == [b_peer, b_peer], refused
    reasons = " | ".join(r["reason"] for r in refused)
    assert "joined as" in reasons and "local steps of at most 2" in reasons, reasons

    # published: the run entry lists the contributors and their shares; the log audits clean
    assert "run entry" in out_a and "adapter entry" in out_a and "contribution entry" in out_a
    shown = gym.run("ledger", "show", "alice/swarm", "0", "--json")
    assert shown.returncode == 0, shown.stderr
    entry = json.loads(shown.stdout)["entry"]
    assert entry["type"] == "run"
    assert entry["hardware"]["swarm"]["contributors"] == swarm["a"]["contributors"]
    # then one contribution entry per credited peer, signed by it, naming the run entry
    listed = json.loads(gym.run("ledger", "show", "alice/swarm", "--json").stdout)
    assert listed["size"] == 2 + len(contributors)
    run_cid = json.loads(gym.run("ledger", "show", "alice/swarm", "0", "--json").stdout)[
        "entry_cid"]
    entries = [json.loads(gym.run("ledger", "show", "alice/swarm", str(i), "--json").stdout)
               ["entry"] for i in range(2, listed["size"])]
    assert all(e["type"] == "contribution" and e["run_cid"] == run_cid for e in entries)
    assert [(e["peer_id"], e["contributor"], e["credited_samples"], e["share"])
            for e in entries] == [(c["peer_id"], c["address"], c["samples"], c["share"])
                                  for c in swarm["a"]["contributors"]]
    audit = gym.run("audit", "alice/swarm")  # re-checks each contribution's signature
    assert audit.returncode == 0, audit.stdout + audit.stderr

    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(a.run_dir / "base"),
                                      a.run_dir / "adapter")
    lora = [p for name, p in model.named_parameters() if "lora_B" in name]
    assert lora and any(p.abs().sum() > 0 for p in lora)  # trained: B starts at zero


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
        error = x.process.stderr.read()
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


def test_swarm_options_are_checked_before_anything_starts(gym_env, tmp_path):
    config = tmp_path / "sft.yaml"
    config.write_text(
        "method: sft\nmodel: tiny-random\n"
        f"dataset: {{path: {REPO / 'trainer/data/sft_arith_alpaca.jsonl'}, format: alpaca}}\n"
        "training: {batch_size: 2}\n")
    key = {"GYM_PUBLISHER_KEY": devnet_account_key(1)}
    cases = [
        (["--initial-peers", "/ip4/127.0.0.1/tcp/1"], "--initial-peers applies to a --swarm run"),
        (["--swarm", "r", "--num-processes", "2"], "--swarm and --num-processes: one at a time"),
        (["--swarm", "../r", "--max-steps", "2"], "run id '../r': 1 to 64 letters"),
        (["--swarm", "r"], "a swarm run counts collaborative steps: set training.max_steps"),
        (["--swarm", "r", "--max-steps", "2", "--compression", "zip"], "--compression is one of"),
    ]
    for extra, message in cases:
        result = gym_env.run("train", "sft", str(config), "--output", str(tmp_path / "run"),
                             *extra, extra_env=key)
        assert result.returncode != 0 and message in result.stderr, (extra, result.stderr)
        assert not (tmp_path / "run").exists()


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
