"""A hostile volunteer in a real `gym train sft --swarm` run on loopback (docs/swarm.md
"Hostile peers"): it sends NaN gradients, serves a poisoned state (every weight 7.0, a far
later epoch) at the highest priority under a peer id chosen to sort first, and its own
records claim its work. The honest peers ban it with the signed evidence, refuse its records,
and end with identical, finite weights whose loss is within 2 % of an honest-only run of the
same length. The modes this run does not show
(scaling, sign flips, ALIE, equivocation, a poisoned state for a late joiner) are shown on
hivemind's averagers directly, in tests/trainer/test_swarm_robust.py."""

from __future__ import annotations

import json
import math

import pytest
from swarm_peers import Peer
from tiny_sft import REPO, write_sft_config

from contracts.devnet_accounts import devnet_account_key

STEPS = 6

HOSTILE = """
import torch
import trainer.swarm.gather as gather
import trainer.swarm.peer as peer

gather.GymGradAverager._gym_prepare = lambda self, tensors: [t * float("nan") for t in tensors]
honest_state = gather.GymStateAverager.get_current_state

def poisoned_state(self):
    metadata, tensors, infos = honest_state(self)
    return {**metadata, "epoch": 10**9}, [torch.full_like(t, 7.0) for t in tensors], infos

gather.GymStateAverager.get_current_state = poisoned_state
honest_converge = peer.SwarmSession._converge

def converge(self, model):
    self.optimizer.state_averager.state_sharing_priority = 1e9
    return honest_converge(self, model)

peer.SwarmSession._converge = converge

# its peer id chosen to sort first (a key whose base58 id sorts below "QmQ": the ids of RSA keys
# run from "QmNL…" to "QmfZ…", so about one key in 11), as a takeover under "adopt the smallest
# peer id" would choose it
import os
from hivemind.p2p import P2P
from hivemind.proto import crypto_pb2
from trainer.swarm.records import libp2p_peer_id, sign_with_libp2p_key

one_identity = P2P.generate_identity

def smallest_identity(path):
    for _ in range(200):
        one_identity(path)
        der = crypto_pb2.PrivateKey.FromString(open(path, "rb").read()).data
        if libp2p_peer_id(bytes.fromhex(sign_with_libp2p_key(der, b"")[0])) < "QmQ":
            return
        os.chmod(path, 0o600)
        os.unlink(path)

P2P.generate_identity = staticmethod(smallest_identity)
"""

# A lazy volunteer: no forward pass (a zero loss on the parameters, so hivemind still gets
# gradients, all zero), yet it claims a full local batch for every step and signs records of it
LAZY = """
import trainer.swarm.peer as peer
from trl import SFTTrainer

def no_forward(self, model, inputs, return_outputs=False, num_items_in_batch=None):
    return sum(p.sum() for p in model.parameters() if p.requires_grad) * 0.0

SFTTrainer.compute_loss = no_forward
honest_attach = peer.SwarmSession.attach

def attach(self, trainer, base):
    honest_attach(self, trainer, base)
    honest_claim = self.work.claim

    def claim(samples):
        self.local.samples += self.batch_per_step  # what its signed records will claim
        honest_claim(self.batch_per_step)

    self.work.claim = claim

peer.SwarmSession.attach = attach
"""


def run(tmp_path, names: str, hostile: str = "", prelude: str = HOSTILE, steps: int = STEPS,
        target: int = 16) -> dict[str, Peer]:
    tmp_path.mkdir()
    config = write_sft_config(tmp_path, steps)
    shared = ("--target-batch-size", str(target), "--averaging-timeout", "20", "--min-peers",
              str(len(names)))
    peers: dict[str, Peer] = {}
    maddr = None
    try:
        for i, name in enumerate(names):
            env = {**_env(tmp_path), "GYM_PUBLISHER_KEY": devnet_account_key(i)}
            extra = ("--initial-peers", maddr) if maddr else ()
            if name == hostile:
                peers[name] = Peer(name, tmp_path, env, config, *shared, *extra, warm=True,
                                   prelude=prelude)
                peers[name].go()
            else:
                peers[name] = Peer(name, tmp_path, env, config, *shared, *extra)
            if i == 0:
                maddr = peers[name].wait_for("swarm peer: ").split()[2]
        for peer in peers.values():
            peer.finish(300)
    finally:
        for peer in peers.values():
            peer.kill()
    return peers


def _env(tmp_path) -> dict:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("GYM_")}
    env.update(GYM_DATA_DIR=str(tmp_path / "data"), COLUMNS="200", NO_COLOR="1",
               OMP_NUM_THREADS="1")
    return env


@pytest.fixture(scope="module")
def honest_only(tmp_path_factory):
    """Two honest peers: the run the hostile runs are compared with."""
    peers = run(tmp_path_factory.mktemp("swarm") / "honest", "xy")
    return peers, loss(peers["x"])


def summary(peers: dict[str, Peer]) -> str:
    """What each peer did, for a failing assertion: its rounds, bans, credit and end, and the
    tail of what it printed (a run on a loaded machine fails in ways one field cannot show)."""
    lines = []
    for name, peer in peers.items():
        try:
            s = peer.manifest()["run"]["hardware"]["swarm"]
        except (OSError, KeyError, ValueError) as error:
            lines.append(f"{name}: no run.json ({error}); {peer.lines[-10:]}")
            continue
        lines.append(
            f"{name} {s['peer_id'][-8:]}: steps {s['collaborative_steps']}, local "
            f"{s['local']}, converged {s['converged']}, digest {s['final_weights_digest'][:16]}, "
            f"banned {[(b['peer_id'][-8:], b['reason']) for b in s['banned']]}, credited "
            f"{[(c['peer_id'][-8:], c['samples'], c.get('checked')) for c in s['contributors']]}"
            f", refused {[(r['peer_id'][-8:], r['reason'][:60]) for r in s['refused']]}")
        lines += [f"  {line}" for line in peer.lines[-4:]]
        lines += [f"  {line}" for line in peer.stderr().splitlines()
                  if "banned" in line or "Error" in line][-6:]
    return "\n".join(lines)


def loss(peer: Peer) -> float:
    """The adapter's mean causal-LM loss over the run's 16 training rows (prompt and answer)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(peer.run_dir / "base"),
                                      peer.run_dir / "adapter").eval()
    tokenizer = AutoTokenizer.from_pretrained(peer.run_dir / "base")
    rows = [json.loads(line) for line in
            (REPO / "trainer/data/sft_arith_alpaca.jsonl").read_text().splitlines()[:16]]
    total = 0.0
    with torch.no_grad():
        for row in rows:
            ids = tokenizer("\n".join((row["instruction"], row["input"], row["output"])),
                            return_tensors="pt").input_ids
            total += float(model(input_ids=ids, labels=ids).loss)
    return total / len(rows)


@pytest.mark.slow
def test_a_hostile_volunteer_is_banned_and_cannot_spoil_or_take_over_the_run(tmp_path,
                                                                           honest_only):
    from ledger.blockstore import LocalBlockStore
    from ledger.entries import decode_entry, entry_cid
    from trainer.adapters.publish import build_adapter_entries
    from trainer.swarm.audit import SwarmCollector, check_swarm
    from trainer.swarm.peer import settings_digest

    baseline = honest_only[1]
    for attempt in (1, 2):
        peers = run(tmp_path / f"hostile-{attempt}", "abh", hostile="h")
        swarm = {name: p.manifest()["run"]["hardware"]["swarm"] for name, p in peers.items()}
        hostile_id = swarm["h"]["peer_id"]
        if attempt == 2 or any(b["peer_id"] == hostile_id for n in "ab"
                               for b in swarm[n]["banned"]):
            break
        # on a loaded machine the tiny model's steps can outrun the DHT so that the hostile
        # peer never shares a round with an honest one: the attack did not happen; once more
        print(f"\nthe hostile peer shared no round with an honest one:\n{summary(peers)}")
    banners = []
    for name in "ab":
        s = swarm[name]
        assert s["collaborative_steps"] == STEPS and s["converged"], summary(peers)
        credited = {c["peer_id"]: c["samples"] for c in s["contributors"]}
        assert credited.get(hostile_id, 0) == 0, s["contributors"]
        banned = {b["peer_id"]: b for b in s["banned"]}
        if hostile_id not in banned:
            continue  # this peer never shared a gradient round with it (the tiny model's
            # steps outrun the DHT): it averaged nothing of it, and credits it nothing
        banners.append(name)
        assert banned[hostile_id]["reason"] == "non_finite", s["banned"]
        # published, the ban is proven by its evidence as `gym audit` reads it back
        content = LocalBlockStore(tmp_path / f"ipfs-{name}")
        entries = build_adapter_entries(peers[name].run_dir, content)
        collector = SwarmCollector()
        for index, data in enumerate([entries.run, entries.adapter, *entries.contributions]):
            collector(index, entry_cid(data), data)
        audit = check_swarm(collector, content)
        assert audit.ok, audit.problems
        assert [(b.peer_id, b.reason, b.proven) for b in audit.bans] == [
            (hostile_id, "non_finite", True)]
        refused = [r for r in s["refused"] if r["peer_id"] == hostile_id]
        assert refused and all(r["reason"].startswith("banned from the run")
                               for r in refused), s["refused"]
        # its own signed record is kept beside the ban: what a challenge of its stake names
        assert {r["record"]["contributor"] for r in refused} == {swarm["h"]["address"]}
        # the records it signed name the published run's settings, base weights and dataset
        published = decode_entry(entries.run)
        assert {r["record"]["config_digest"] for r in refused} == {settings_digest(
            published.config, published.config["base_model"]["weights_digest"],
            published.dataset_digests[0])}
    assert banners, summary(peers)  # its first round with an honest peer banned it
    adapters = {(peers[n].run_dir / "adapter" / "adapter_model.safetensors").read_bytes()
                for n in "ab"}
    assert len(adapters) == 1, summary(peers)  # the same bits, not the 7.0 state
    assert swarm["a"]["final_weights_digest"] == swarm["b"]["final_weights_digest"]
    spoiled = loss(peers["a"])
    assert math.isfinite(spoiled)
    assert abs(spoiled - baseline) <= 0.02 * baseline, (spoiled, baseline)
    honest_ids = sorted(swarm[n]["peer_id"] for n in "ab")
    print(f"\neval loss: honest-only {baseline:.4f}, with the hostile peer {spoiled:.4f}; its "
          f"chosen id {hostile_id[:6]}… sorts {'before' if hostile_id < honest_ids[0] else 'after'}"
          f" the honest peers' ({', '.join(i[:6] + '…' for i in honest_ids)})")


@pytest.mark.slow
def test_a_lazy_volunteer_that_claims_work_it_never_did_is_credited_nothing(tmp_path,
                                                                           honest_only):
    from trainer.swarm.work import TOLERANCE

    # a larger target: the tiny model's steps outrun the DHT, and only claims made at the
    # parameters a checker holds (the peers in step) can be re-computed
    peers = run(tmp_path / "lazy", "abl", hostile="l", prelude=LAZY, target=48)
    swarm = {name: p.manifest()["run"]["hardware"]["swarm"] for name, p in peers.items()}
    lazy_id = swarm["l"]["peer_id"]
    assert swarm["l"]["local"]["samples"] > 0  # what it claims in its signed records
    for name in "ab":
        s = swarm[name]
        credited = {c["peer_id"]: c for c in s["contributors"]}
        # whatever this peer could check of it, the lazy peer is credited with nothing
        assert credited.get(lazy_id, {"samples": 0})["samples"] == 0, s
        banned = {b["peer_id"]: b for b in s["banned"]}
        if lazy_id in banned:  # a check of one of its claims ran: the sketch was all zero
            assert banned[lazy_id]["reason"] == "work_check"
            assert banned[lazy_id]["evidence"]["difference"] > TOLERANCE
    # a ban needs a round where an honest peer held the parameters the lazy one claimed at:
    # on the tiny model, whose steps outrun the DHT, not every run has one (2 runs of 3 here)
    bans = sum(b["peer_id"] == lazy_id for n in "ab" for b in swarm[n]["banned"])
    print(f"\nthe lazy peer: credited 0 by both honest peers, banned by {bans} of them")
    # the honest peers still end together, their loss that of the honest-only run
    adapters = {(peers[n].run_dir / "adapter" / "adapter_model.safetensors").read_bytes()
                for n in "ab"}
    assert len(adapters) == 1, summary(peers)
    assert abs(loss(peers["a"]) - honest_only[1]) <= 0.02 * honest_only[1]
