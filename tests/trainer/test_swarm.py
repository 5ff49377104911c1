"""Volunteer training on loopback, through the real `gym` command and hivemind: three peers
train the tiny model with `--swarm`, one is killed with SIGKILL mid-run, a fourth joins late and
catches up; the survivors end with the same adapter; the publishing peer refuses forged
contribution records and publishes the adapter with the contributors' shares on the devnet."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from swarm_peers import GYM, Peer, popen
from tiny_sft import write_sft_config

from contracts.devnet_accounts import devnet_account_key

REPO = Path(__file__).resolve().parents[2]
STEPS = 16  # long enough for the late joiner to start up and average (12 once ended, under
# CI's load, as the late joiner caught up)


def _forge_records(maddr: str, victim_peer_id: str) -> None:
    """Publish three forged records, each from a DHT node of its own (one owner key,
    one value): a copy of the victim's spec (devnet account 1) beside a record of the victim's
    key claiming 1000 samples; and Mallory (account 9), joined under a libp2p identity and spec
    of her own, claiming far more samples than her local steps hold, and a record of hers
    signed by another key. The victim's spec is in the DHT from the moment it joined: nothing
    here waits for the run to progress (the test forges before anyone trains)."""
    import tempfile

    import hivemind
    from eth_account import Account
    from hivemind.dht.crypto import RSASignatureValidator
    from hivemind.p2p import P2P
    from hivemind.proto import crypto_pb2
    from hivemind.utils import get_dht_time
    from hivemind.utils.crypto import RSAPrivateKey

    from trainer.swarm.records import (
        Contribution,
        Round,
        libp2p_peer_id,
        sign_binding,
        sign_contribution,
    )

    def store(value: Callable[[str, dict], dict]) -> None:
        """``value(owner_hex, victim's value)`` stored under a new owner key."""
        validator = RSASignatureValidator(RSAPrivateKey())
        dht = hivemind.DHT(start=True, initial_peers=[maddr], startup_timeout=60,
                           host_maddrs=["/ip4/127.0.0.1/tcp/0"], record_validators=[validator])
        try:
            deadline = time.monotonic() + 120
            while True:
                found = dht.get("arith_gym_peers", latest=True)
                victim = next((item.value for item in (found.value.values() if found else ())
                               if item.value["spec"]["peer_id"] == victim_peer_id), None)
                if victim is not None:
                    break
                assert time.monotonic() < deadline, "the victim's spec never reached the DHT"
                time.sleep(0.5)
            # hivemind's store_many answers with the verdict of the last replica to reply, so
            # False even where another replica stored it; CI saw one False under load (which
            # replica refused, and why, is not known). Stored again, with a later expiry, until
            # an attempt reports it; the publisher's three refusals below show all three landed
            for attempt in range(1, 11):
                if dht.store("arith_gym_peers", subkey=validator.local_public_key,
                             value=value(validator.local_public_key.hex(), victim),
                             expiration_time=get_dht_time() + 600):
                    break
                time.sleep(1)
            else:
                raise AssertionError(f"no store of the forgery was accepted in {attempt} tries")
        finally:
            dht.shutdown()

    def copy_of_the_victim(_owner: str, victim: dict) -> dict:
        spec = victim["spec"]
        record = Contribution(spec["run"], spec["config_digest"], victim_peer_id,
                              spec["address"], samples=1000, steps=1, epoch=1,
                              rounds=(Round(1, 1000),))
        return {"spec": spec, "contribution": sign_contribution(
            record, devnet_account_key(1)).to_json()}

    mallory = Account.from_key(devnet_account_key(9))
    with tempfile.TemporaryDirectory() as tmp:
        P2P.generate_identity(f"{tmp}/id.key")
        identity = crypto_pb2.PrivateKey.FromString(Path(f"{tmp}/id.key").read_bytes()).data
    address = mallory.address.lower()

    def as_mallory(signed_by: Account | None) -> Callable[[str, dict], dict]:
        """Her value under an owner key: her own spec (binding that key) beside a record of
        1000 samples in 1 local step (signed by her), or of 2 samples signed by another."""
        def value(owner: str, victim: dict) -> dict:
            run = victim["spec"]["run"]
            key, binding = sign_binding(identity, run, address, owner)
            peer_id = libp2p_peer_id(bytes.fromhex(key))
            spec = {**victim["spec"], "peer_id": peer_id, "address": address,
                    "libp2p_key": key, "dht_owner": owner, "binding": binding, "maddrs": []}
            mine = Contribution(run, spec["config_digest"], peer_id, address, samples=1000,
                                steps=1, epoch=1)
            if signed_by is None:
                record = sign_contribution(mine, mallory.key)
            else:
                other = sign_contribution(replace(mine, contributor=signed_by.address.lower(),
                                                  samples=2), signed_by.key)
                record = replace(mine, samples=2, signature=other.signature)
            return {"spec": spec, "contribution": record.to_json()}
        return value

    forgeries = (copy_of_the_victim, as_mallory(None),
                 as_mallory(Account.from_key(devnet_account_key(8))))
    for value in forgeries:  # one after the other: three p2p daemons at once overload CI
        store(value)


@pytest.mark.anvil
@pytest.mark.slow
def test_volunteers_train_one_adapter_and_the_ledger_lists_their_shares(ledger_devnet,
                                                                        tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    gym = ledger_devnet.gym
    config = write_sft_config(tmp_path, STEPS)
    env = {**gym.env, "OMP_NUM_THREADS": "1"}
    shared = ("--target-batch-size", "32", "--averaging-timeout", "15")
    # the forgeries go in while a and b wait for --min-peers, before anyone trains: a spec is
    # all --min-peers counts, so Mallory's is one of the four (docs/swarm.md)
    a = Peer("a", tmp_path, env, config, *shared, "--account", "0", "--min-peers", "4",
             "--publish", "alice/swarm")
    peers = [a]
    try:
        maddr = a.wait_for("swarm peer: ").split()[2]
        b = Peer("b", tmp_path, env, config, *shared, "--account", "1", "--initial-peers",
                 maddr, "--min-peers", "4")
        peers.append(b)
        b_peer = b.peer_id()
        try:
            _forge_records(maddr, b_peer)
        except Exception as exc:  # what the peer it bootstraps from was doing
            raise AssertionError(f"forging failed: {exc}; peer a exit {a.process.poll()}, "
                                 f"{a.lines[-5:]} {a.stderr()[-3000:]}") from exc
        # the late joiner's interpreter starts now and imports what it needs: under CI's load
        # the imports alone took so long that the run had ended when it joined
        d = Peer("d", tmp_path, env, config, *shared, "--account", "3", "--initial-peers",
                 maddr, warm=True)
        peers.append(d)
        c = Peer("c", tmp_path, env, config, *shared, "--account", "2", "--initial-peers",
                 maddr, "--min-peers", "4")
        peers.append(c)
        a.wait_for("swarm arith: step ", at_least=1)
        c_peer = c.peer_id()
        c.kill()  # SIGKILL mid-run: the others go on
        d.go()  # joins late
        # an operator's view, from outside the run: the peers, their steps and addresses,
        # a new table at each change until no peer is training (or Ctrl-C)
        watch = popen([str(GYM), "swarm", "peers", "arith", "--initial-peers", maddr,
                        "--watch", "2"], env={**env, "COLUMNS": "200"},
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       start_new_session=True)  # its DHT process and p2pd die with it
        out_a, out_b, out_d = a.finish(), b.finish(), d.finish()
        try:  # it ends by itself once it sees no peer training; the DHT copies it reads
            watched, watch_err = watch.communicate(timeout=20)  # may lag: then Ctrl-C
        except subprocess.TimeoutExpired:
            watch.send_signal(signal.SIGINT)
            watched, watch_err = watch.communicate(timeout=60)
    finally:
        for peer in peers:
            peer.kill()
        if "watch" in locals():
            try:
                os.killpg(watch.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass  # it ended with its children
    assert c.process.wait(timeout=10) == -9
    assert watch.returncode == 0, watch_err
    tables = [t for t in watched.split("swarm arith: ") if "│" in t]
    assert len(tables) >= 2, watched  # the peers moved while it watched
    a_peer = maddr.rpartition("/p2p/")[2]

    def states(table: str) -> dict[str, str]:
        return {line.split()[1]: line.split()[-2] for line in table.splitlines()
                if line.startswith("│")}

    seen = [states(t) for t in tables]
    assert all(a_peer in s and b_peer in s for s in seen[1:]), watched
    assert "training" in seen[0].values(), watched
    # the killed peer fell silent (no record republished for 15 s)
    assert any(s.get(c_peer) == "silent" for s in seen), watched

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
    assert local["d"]["rounds"] > 0 and local["d"]["first_round"] > 1, (
        f"{local}\n{out_d[-3000:]}\n{d.stderr()[-4000:]}")
    assert all(f"step {STEPS}/{STEPS}" in out for out in (out_a, out_b))

    # the publisher's verdicts: the three survivors credited, the forgeries refused
    contributors = {c["peer_id"]: c for c in swarm["a"]["contributors"]}
    survivors = {swarm[name]["peer_id"] for name in "abd"}
    assert survivors <= set(contributors)
    assert abs(sum(c["share"] for c in contributors.values()) - 1) < 1e-5
    assert contributors[swarm["a"]["peer_id"]]["samples"] > 0
    refused = swarm["a"]["refused"]
    assert len(refused) == 3, refused
    # a copy of Bob's spec speaks for nobody: his key's inflated record, published by another
    assert [r["reason"] for r in refused if r["peer_id"] == b_peer] == [
        "stored under another DHT owner key than its spec binds (a copy of the spec)"], refused
    mallory = {r["peer_id"] for r in refused} - {b_peer}
    assert len(mallory) == 1 and mallory.isdisjoint(contributors), refused
    texts = " | ".join(r["reason"] for r in refused)
    assert "claims 1000 samples in 1 local steps of at most 2" in texts, texts
    assert "contribution.signature: signed by" in texts, texts

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
    audit = gym.run("audit", "alice/swarm")  # re-checks each contribution's signature, and
    assert audit.returncode == 0, audit.stdout + audit.stderr  # that credit to another peer
    assert (f"swarm: 1 run, {len(contributors)} contributions; 0 bans re-checked"  # passed
            in audit.stdout and "swarm audit clean" in audit.stdout), audit.stdout  # its checks

    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(a.run_dir / "base"),
                                      a.run_dir / "adapter")
    lora = [p for name, p in model.named_parameters() if "lora_B" in name]
    assert lora and any(p.abs().sum() > 0 for p in lora)  # trained: B starts at zero


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
