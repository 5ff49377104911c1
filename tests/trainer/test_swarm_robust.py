"""Robust swarm averaging: the aggregator, the update commitments, and hivemind averagers on
loopback with one hostile peer in each mode (trainer.swarm.robust, .commitments, .gather)."""

from __future__ import annotations

import itertools
import json
import math
import time
from pathlib import Path
from statistics import NormalDist

import pytest
import torch

from trainer.swarm.ban_evidence import check_ban, local_reader
from trainer.swarm.commitments import (
    decode_commitment,
    equivocation,
    non_finite_evidence,
    sign_commitment,
    update_payload,
    verify_commitment,
)
from trainer.swarm.records import SwarmRecordError
from trainer.swarm.robust import aggregate, boundary, centered_clip

pytestmark = pytest.mark.timeout(300)


def honest_updates(n: int, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    center = torch.randn(64, generator=g)
    return [center + 0.1 * torch.randn(64, generator=g) for _ in range(n)]


def alie(honest: list[torch.Tensor], n: int, f: int) -> torch.Tensor:
    """"A Little Is Enough" (Baruch et al. 2019) as ByzFL's ALIE attack: the honest mean minus
    z standard deviations, z from the count of peers the attacker needs on its side."""
    s = math.floor(n / 2 + 1) - f
    z = NormalDist().inv_cdf((n - s) / n)
    stacked = torch.stack(honest)
    return stacked.mean(0) - z * stacked.std(0)


# ----------------------------------------------------------------------------- the aggregator


def test_centered_clip_is_the_mean_of_agreeing_parts_and_bounds_an_outlier():
    parts = honest_updates(3)
    assert torch.allclose(centered_clip(parts), torch.stack(parts).mean(0), atol=0.08)
    mean = torch.stack(parts).mean(0)
    spread = max(float(torch.linalg.vector_norm(p - mean)) for p in parts)
    for hostile in (-1e6 * parts[0], torch.full((64,), 7.0), -parts[0] * 50):
        result = centered_clip([*parts, hostile])
        # a hostile part moves the result by less than the honest spread, whatever its norm
        assert float(torch.linalg.vector_norm(result - mean)) < spread
        plain = torch.stack([*parts, hostile]).mean(0)
        assert float(torch.linalg.vector_norm(plain - mean)) > spread
    # two identical honest parts and one other: the honest value itself
    assert torch.equal(centered_clip([parts[0], parts[0], torch.zeros(64)]), parts[0])


def test_centered_clip_is_the_same_bits_for_the_same_parts_in_peer_order():
    parts = honest_updates(4, seed=3)
    updates = {f"peer{i}": [p.reshape(8, 8)] for i, p in enumerate(parts)}
    first = aggregate(updates)[0]
    again = aggregate(dict(reversed(list(updates.items()))))[0]
    assert torch.equal(first, again) and first.shape == (8, 8)


def test_the_boundary_refuses_non_finite_and_out_of_bound_parts_only():
    parts = honest_updates(3)
    updates = {"a": [parts[0]], "b": [parts[1]], "c": [parts[2]]}
    assert boundary(updates) == {}
    assert boundary({**updates, "x": [parts[0] * float("nan")]}) == {"x": "non_finite"}
    assert boundary({**updates, "x": [parts[0] * 1e6]}) == {"x": "out_of_bound"}
    assert boundary({**updates, "x": [-parts[0]]}) == {}  # sign flips pass: clipped instead
    # zero-initialised tensors (LoRA's B) that one peer already moved are not out of bound
    zeros = {"a": [torch.zeros(64)], "b": [torch.zeros(64)], "c": [0.01 * parts[0]]}
    assert boundary(zeros) == {}


# ----------------------------------------------------------------------------- commitments


@pytest.mark.parametrize("codec, tolerance", [("none", 0), ("float16", 1e-3), ("8bit", 0.02)])
def test_an_update_round_trips_through_each_codec(codec, tolerance):
    from trainer.swarm.commitments import decode_payload, payload_size

    tensors = [torch.linspace(-1, 1, 12).reshape(3, 4), torch.zeros(5), torch.tensor(2.5)]
    shapes = [t.shape for t in tensors]
    payload = update_payload(tensors, codec)
    assert len(payload) == payload_size(shapes, codec)
    decoded = decode_payload(payload, shapes, codec)
    assert all(torch.allclose(a, b, atol=tolerance, rtol=0) for a, b in zip(
        decoded, tensors, strict=True))
    with pytest.raises(SwarmRecordError, match="bytes, not"):
        decode_payload(payload + b"\0", shapes, codec)
    poisoned = decode_payload(update_payload([tensors[0] * float("nan")], codec), shapes[:1],
                              codec)
    assert not bool(torch.isfinite(poisoned[0]).all())


def test_a_commitment_verifies_and_proves_equivocation_and_poison(identities):
    _, der, peer = identities[0]
    one = update_payload([torch.ones(3)])
    two = update_payload([torch.full((3,), 2.0)])
    a = sign_commitment(der, peer, "run-1", "grad", b"\x01\x02", one)
    b = sign_commitment(der, peer, "run-1", "grad", b"\x01\x02", two)
    assert verify_commitment(decode_commitment(a.encode()), run="run-1", averager="grad",
                             group=b"\x01\x02", peer_id=peer) == a
    assert equivocation(a, b) == peer
    with pytest.raises(SwarmRecordError, match="same update"):
        equivocation(a, a)
    other_round = sign_commitment(der, peer, "run-1", "grad", b"\x03", two)
    with pytest.raises(SwarmRecordError, match="different rounds"):
        equivocation(a, other_round)
    with pytest.raises(SwarmRecordError, match="this round's"):
        verify_commitment(a, group=b"\x03")
    # another peer's key cannot sign for this peer id
    _, der2, _ = identities[1]
    forged = sign_commitment(der2, peer, "run-1", "grad", b"\x01\x02", two)
    with pytest.raises(SwarmRecordError, match="not the key of peer"):
        verify_commitment(forged)
    changed = json.loads(a.encode())
    changed["digest"] = "sha256:" + "0" * 64
    with pytest.raises(SwarmRecordError, match="did not sign"):
        verify_commitment(decode_commitment(json.dumps(changed)))
    poison = update_payload([torch.tensor([1.0, float("nan")])])
    bad = sign_commitment(der, peer, "run-1", "grad", b"\x09", poison)
    assert non_finite_evidence(bad, poison, [(2,)]) == peer
    with pytest.raises(SwarmRecordError, match="finite"):
        non_finite_evidence(a, one, [(3,)])
    with pytest.raises(SwarmRecordError, match="not the payload"):
        non_finite_evidence(bad, one, [(3,)])


GROUP = b"\x05\x06"


def signed_update(directory: Path, der: bytes, peer: str, tensor: torch.Tensor):
    """``peer``'s commitment of ``tensor`` for round GROUP, its payload kept in ``directory``."""
    payload = update_payload([tensor])
    commitment = sign_commitment(der, peer, "run-1", "grad", GROUP, payload)
    (directory / f"{commitment.digest[7:]}.update").write_bytes(payload)
    return commitment


def ban_line(reason: str, accused, others, **extra) -> dict:
    """A ban of ``accused``'s update with the round of ``others``' updates, as a peer writes it."""
    members = {c.peer_id: {"commitment": c.encode(), "payload": f"{c.digest[7:]}.update"}
               for c in [accused, *others]}
    return {"peer_id": accused.peer_id, "reason": reason, "averager": "grad",
            "group": GROUP.hex(), "evidence": {
                "commitment": accused.encode(), "codec": "none", "shapes": [[4]],
                "payload": members[accused.peer_id]["payload"], "round": members, **extra}}


def test_ban_evidence_proves_what_it_says_and_a_forged_line_is_refused(identities, tmp_path):
    (_, hostile_der, hostile), (_, der1, peer1), (_, der2, peer2) = identities[:3]
    read = local_reader(tmp_path)

    def signed(der, peer, tensor):
        return signed_update(tmp_path, der, peer, tensor)

    honest = [signed(der1, peer1, torch.ones(4)), signed(der2, peer2, torch.full((4,), 1.1))]
    huge = signed(hostile_der, hostile, torch.full((4,), 1e6))
    assert check_ban(ban_line("out_of_bound", huge, honest), read).proven
    poisoned = signed(hostile_der, hostile, torch.tensor([1.0, float("nan"), 1.0, 1.0]))
    assert check_ban(ban_line("non_finite", poisoned, []), read).proven
    mild = signed(hostile_der, hostile, torch.full((4,), 1.2))
    refusals = [
        (ban_line("out_of_bound", mild, honest), "does not refuse its update"),  # within the bound
        (ban_line("out_of_bound", huge, []), "2 to 64"),
        (ban_line("non_finite", mild, []), "finite"),
        ({**ban_line("non_finite", poisoned, []), "group": "07"}, "another round"),
        ({**ban_line("non_finite", poisoned, []), "peer_id": peer1}, "another peer"),
        (ban_line("equivocation", mild, [], commitments=[mild.encode(), mild.encode()]),
         "same update"),
        (ban_line("equivocation", mild, [], commitments=[mild.encode(), honest[0].encode()]),
         "different rounds or peers"),
        ({**ban_line("non_finite", poisoned, []), "reason": "disliked"}, "one of"),
    ]
    # an evidence file that is not the signed update, or not a file of the run's evidence
    swapped = ban_line("out_of_bound", huge, honest)
    swapped["evidence"]["round"][peer1]["payload"] = f"{honest[1].digest[7:]}.update"
    refusals.append((swapped, "not its signed update"))
    outside = ban_line("non_finite", poisoned, [])
    outside["evidence"]["payload"] = "../../etc/passwd"
    refusals.append((outside, "named by its sha256"))
    for forged, message in refusals:
        with pytest.raises(SwarmRecordError, match=message):
            check_ban(forged, read)
    assert check_ban(ban_line("equivocation", mild, [], commitments=[
        mild.encode(), poisoned.encode()]), read).reason == "equivocation"


@pytest.mark.parametrize("text, message", [
    ("[]", "exactly the fields"), ("x" * 600_000, "at most 524288"), ("{", "not JSON"),
    (b"\xff", "UTF-8")])
def test_a_malformed_commitment_is_one_clear_error(text, message):
    with pytest.raises(SwarmRecordError, match=message):
        decode_commitment(text)


# ----------------------------------------------------------------------------- on loopback


@pytest.fixture(scope="module")
def swarm(identities):
    """Four DHT nodes on loopback, each under its libp2p identity."""
    import hivemind

    dhts = []
    for path, _, _ in identities:
        initial = [str(m) for m in dhts[0].get_visible_maddrs()] if dhts else []
        dhts.append(hivemind.DHT(start=True, identity_path=str(path), initial_peers=initial,
                                 host_maddrs=["/ip4/127.0.0.1/tcp/0"]))
    yield dhts
    for dht in dhts:
        dht.shutdown()


_prefixes = itertools.count()


def averagers(swarm, identities, tmp_path, tensors, hostile=None, cls=None, max_epoch=None):
    """One averager per DHT node, the last one ``hostile`` (a dict of methods) if given."""
    import hivemind

    from trainer.swarm.gather import GymRound, RobustAveraging

    base = cls or type("GymTestAverager", (RobustAveraging, hivemind.DecentralizedAverager), {})
    prefix = f"robust{next(_prefixes)}"
    out = []
    for i, (dht, (_, der, _), values) in enumerate(zip(swarm, identities, tensors,
                                                        strict=True)):
        kind = base if hostile is None or i < len(swarm) - 1 else type(
            base.__name__, (base,), hostile)  # hivemind's handler names are the class name's
        out.append(kind([v.clone() for v in values], dht=dht, prefix=prefix,
                        target_group_size=len(swarm), min_matchmaking_time=3.0,
                        request_timeout=3.0, start=True,
                        gym=GymRound(run="robust", averager="state" if cls else "grad",
                                     identity=der,
                                     evidence_dir=tmp_path / f"peer{i}",
                                     # CI's load once kept an honest update past 5 s: that
                                     # member then averaged without it, apart from the others
                                     wait_s=20.0, max_epoch=max_epoch)))
    time.sleep(1.0)  # every averager announced in the DHT before the round
    return out


def one_round(group, weights=None):
    controls = [a.step(wait=False, timeout=90, weight=(weights or {}).get(i, 1.0))
                for i, a in enumerate(group)]
    results = []
    for control in controls:
        try:
            results.append({p.to_base58() for p in control.result()})
        except Exception:  # noqa: BLE001 (a hostile peer's own round may fail)
            results.append(None)
    tensors = []
    for a in group:
        with a.get_tensors() as held:
            tensors.append([t.clone() for t in held])
    return results, tensors


def shutdown(group):
    for a in group:
        a.shutdown()


def scaled(factor):
    return {"_gym_prepare": lambda self, ts: [t * factor for t in ts]}


def flipped():
    return {"_gym_prepare": lambda self, ts: [-10 * t for t in ts]}


def alie_update(honest):
    value = alie(honest, n=4, f=1)
    return {"_gym_prepare": lambda self, ts: [value.clone()]}


def equivocating():
    from trainer.swarm.commitments import sign_commitment as sign

    def outgoing(self, served, requester):
        local = torch.frombuffer(bytearray(served.payload), dtype=torch.float32)
        payload = update_payload([local * (1 + (hash(requester) % 7))])
        commitment = sign(self.gym.identity, self._gym_me(), self.gym.run, self.gym.averager,
                          bytes.fromhex(served.commitment.group), payload)
        return commitment, payload
    return {"_gym_outgoing": outgoing}


ATTACKS = {
    "nan": (lambda honest: scaled(float("nan")), "non_finite"),
    "times_1e6": (lambda honest: scaled(1e6), "out_of_bound"),
    "sign_flip_inflated_weight": (lambda honest: flipped(), None),
    "a_little_is_enough": (alie_update, None),
    "equivocation": (lambda honest: equivocating(), "equivocation"),
}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_one_hostile_peer_of_four_cannot_spoil_the_honest_peers_average(swarm, identities,
                                                                        tmp_path, attack):
    from trainer.swarm.gather import read_bans

    honest = honest_updates(3, seed=7)
    make, banned_for = ATTACKS[attack]
    group = averagers(swarm, identities, tmp_path, [[h] for h in honest] + [[honest[0]]],
                      hostile=make(honest))
    try:
        results, tensors = one_round(group, weights={3: 1e6})  # the hostile's declared weight
    finally:
        shutdown(group)
    hostile_id = identities[3][2]
    honest_mean = torch.stack(honest).mean(0)
    spread = max(float(torch.linalg.vector_norm(h - honest_mean)) for h in honest)
    first = tensors[0][0]
    for i in range(3):  # all three honest in one group (matchmaking under load), then:
        assert results[i] is not None and len(results[i]) >= 3, results
        assert torch.equal(tensors[i][0], first), f"honest peer {i} ends elsewhere"
    assert bool(torch.isfinite(first).all())
    assert float(torch.linalg.vector_norm(first - honest_mean)) < spread
    if banned_for is not None:
        for i in range(3):
            bans = read_bans(tmp_path / f"peer{i}")
            assert bans[hostile_id]["reason"] == banned_for, bans
            assert hostile_id not in results[i]  # not credited with the round
            # the evidence proves the ban to anyone who holds it (as `gym audit` re-checks it)
            check = check_ban(read_bans(tmp_path / f"peer{i}")[hostile_id],
                              local_reader(tmp_path / f"peer{i}"))
            assert (check.peer_id, check.reason, check.proven) == (hostile_id, banned_for, True)
    else:
        assert all(read_bans(tmp_path / f"peer{i}") == {} for i in range(3))
    if attack == "sign_flip_inflated_weight":  # plain averaging of the same parts, to compare
        plain = torch.stack([*honest, -10 * honest[0]]).mean(0)
        assert float(torch.linalg.vector_norm(plain - honest_mean)) > 10 * spread


def state_averager_class():
    import hivemind

    from trainer.swarm.gather import RobustAveraging

    class GymStateTest(RobustAveraging, hivemind.DecentralizedAverager):
        main_parameters = (None,)  # one parameter tensor, then the rest of the state

        def get_current_state(self):
            with self.get_tensors() as tensors:
                return {"epoch": 3, "lr": 1e-3}, [t.clone() for t in tensors], None

    return GymStateTest


def test_a_late_joiner_does_not_load_a_poisoned_state_served_at_the_highest_priority(
        swarm, identities, tmp_path):
    from trainer.swarm.gather import parameters_digest

    good = [torch.full((4,), 0.5), torch.ones(2)]
    poison = {"get_current_state": lambda self: ({"epoch": 10**9, "lr": 1e9},
                                                 [torch.full((4,), 7.0), torch.ones(2)], None)}
    joiner_state = [torch.zeros(4), torch.zeros(2)]
    group = averagers(swarm, identities, tmp_path,
                      [joiner_state, good, good, good], hostile=poison,
                      cls=state_averager_class())
    try:
        group[3].state_sharing_priority = 1e9
        group[0].allow_state_sharing = False
        time.sleep(2.0)  # priorities reach the DHT
        metadata, tensors = group[0].load_state_from_peers(timeout=20)
        assert metadata["epoch"] == 3 and metadata["lr"] == 1e-3  # never the hostile's
        assert torch.equal(tensors[0], good[0])
        # asked for a digest, only a source holding it is taken
        metadata, tensors = group[0].load_state_from_peers(
            digest=parameters_digest(good[:1]), timeout=20)
        assert torch.equal(tensors[0], good[0])
        assert group[0].load_state_from_peers(digest=parameters_digest([torch.ones(4)]),
                                              timeout=20) is None
    finally:
        shutdown(group)


def test_a_state_claiming_an_epoch_past_the_run_s_end_is_refused(swarm, identities, tmp_path):
    """The only source a lagging peer finds serves a state at epoch 10^9 (a real run's
    optimizer would step its LR scheduler 10^9 times to catch up: a CI run hung on it): past the
    run's last step, it is refused, and nothing is loaded."""
    poison = {"get_current_state": lambda self: ({"epoch": 10**9, "lr": 1e9},
                                                 [torch.full((4,), 7.0), torch.ones(2)], None)}
    state = [torch.zeros(4), torch.zeros(2)]
    group = averagers(swarm, identities, tmp_path, [state, state, state, state], hostile=poison,
                      cls=state_averager_class(), max_epoch=50)
    try:
        for honest in group[:3]:
            honest.allow_state_sharing = False  # the hostile peer is the only source
        time.sleep(2.0)
        assert group[0].load_state_from_peers(timeout=20) is None
    finally:
        shutdown(group)


def test_a_poisoned_state_is_outvoted_by_a_median_when_the_sources_disagree(
        swarm, identities, tmp_path):
    values = [torch.zeros(3), torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.1, 2.1, 3.1]),
              torch.full((3,), 7.0)]
    group = averagers(swarm, identities, tmp_path, [[v] for v in values],
                      cls=state_averager_class())
    try:
        group[0].allow_state_sharing = False
        time.sleep(2.0)
        _, tensors = group[0].load_state_from_peers(timeout=20)
        assert torch.equal(tensors[0], values[2])  # the median of the three sources
    finally:
        shutdown(group)


def test_of_two_sources_that_disagree_the_one_nearest_this_peer_is_taken():
    from trainer.swarm.gather import _choose_state

    own = [torch.zeros(3)]
    near, far = [torch.full((3,), 0.1), torch.ones(2)], [torch.full((3,), 7.0), torch.ones(2)]
    assert _choose_state([(5, far), (4, near)], own, None) == (4, near)
    assert _choose_state([(5, far)], own, None) == (5, far)  # the only source there is
    assert _choose_state([], own, None) is None


def test_a_state_larger_than_this_run_s_is_refused(swarm, identities, tmp_path):
    big = {"get_current_state": lambda self: ({"epoch": 3}, [torch.zeros(10**6)], None)}
    group = averagers(swarm, identities, tmp_path, [[torch.zeros(3)]] * 4, hostile=big,
                      cls=state_averager_class())
    try:
        for a in group[:3]:
            a.allow_state_sharing = False
        time.sleep(2.0)
        assert group[0].load_state_from_peers(timeout=20) is None
    finally:
        shutdown(group)


def test_bans_are_read_back_and_a_torn_line_is_skipped(tmp_path):
    from trainer.swarm.gather import BANS, read_bans

    (tmp_path / BANS).write_text(json.dumps({"peer_id": "QmA", "reason": "equivocation"})
                                 + "\n{\"peer_id\": \"Qm")
    assert read_bans(tmp_path) == {"QmA": {"peer_id": "QmA", "reason": "equivocation"}}
    assert read_bans(Path(tmp_path) / "none") == {}


def test_the_end_median_is_the_same_bits_in_any_order_and_outvotes_one_state():
    from trainer.swarm.gather import _median_state

    a = (6, [torch.tensor([1.0, 2.0]), torch.ones(1)])
    b = (6, [torch.tensor([1.5, 2.5]), torch.ones(1)])
    poisoned = (10**9, [torch.full((2,), 7.0), torch.ones(1)])
    first = _median_state([a, b, poisoned])
    again = _median_state([poisoned, b, a])
    assert first[0] == again[0] == 6
    assert torch.equal(first[1][0], again[1][0]) and torch.equal(first[1][0], b[1][0])
    assert torch.equal(_median_state([a, b])[1][0], torch.tensor([1.25, 2.25]))  # two: the mean


def test_the_audit_re_checks_published_bans_and_refuses_credit_it_cannot_account_for(
        identities, tmp_path):
    """What `gym audit` runs on a published swarm run: the evidence files go out with the run
    entry (the publishing code's own path), and the audit reads them back from the content
    store; credit to a banned peer, to a run the log lacks, or without a passed check is named."""
    from eth_account import Account

    from contracts.devnet_accounts import devnet_account_key
    from ledger.blockstore import LocalBlockStore
    from ledger.contributions import sign_contribution_data
    from ledger.entries import entry_cid
    from trainer.adapters.publish import build_adapter_entries
    from trainer.swarm.audit import SwarmCollector, check_swarm

    (_, hostile_der, hostile), (_, der1, peer1), (_, der2, peer2) = identities[:3]
    run_dir = tmp_path / "run"
    evidence = run_dir / "swarm_evidence"
    evidence.mkdir(parents=True)
    honest = [signed_update(evidence, der1, peer1, torch.ones(4)),
              signed_update(evidence, der2, peer2, torch.full((4,), 1.1))]
    ban = ban_line("out_of_bound", signed_update(evidence, hostile_der, hostile,
                                                 torch.full((4,), 1e6)), honest)
    (run_dir / "adapter").mkdir()
    (run_dir / "adapter" / "adapter_config.json").write_text('{"r": 8}')
    swarm = {"run": "run-1", "peer_id": peer1, "local_steps": 0, "banned": [ban]}
    (run_dir / "run.json").write_text(json.dumps({
        "method": "sft", "base_model": {"name": "tiny", "weights_digest": "sha256:" + "cd" * 32},
        "adapter_dir": "adapter", "adapter": {"dataset_digest": "sha256:" + "ef" * 32},
        "run": {"config": {}, "code_version": "test", "packages": {},
                               "hardware": {"swarm": swarm}, "dataset_digests": [],
                               "metrics": {}}}))

    def row(peer: str, key: int, credited: int, checks: dict | None) -> dict:
        account = Account.from_key(devnet_account_key(key))
        fields = {"run": "run-1", "config_digest": "sha256:" + "ab" * 32, "peer_id": peer,
                  "contributor": account.address.lower(), "samples": 8, "steps": 2,
                  "epoch": 1, "rounds": [{"epoch": 1, "samples": 8}]}
        view = type("Record", (), {**fields, "rounds": [
            type("Round", (), r) for r in fields["rounds"]]})
        record = {**fields, "signature": sign_contribution_data(view, account.key)}
        return {"record": record, "credited_samples": credited, "credited_rounds": 1,
                "share": 0.5, **({"checks": checks} if checks else {})}

    passed = {"checked": 1, "passed": 1, "tolerance": 0.001}
    rows = [row(peer1, 1, 8, None),  # the publisher's own work: no check needed
            row(peer2, 2, 8, passed)]

    def audit(rows):
        (run_dir / "swarm_records.json").write_text(json.dumps({"records": rows}))
        content = LocalBlockStore(tmp_path / f"ipfs{len(rows)}")
        entries = build_adapter_entries(run_dir, content)
        collector = SwarmCollector()
        for index, data in enumerate([entries.run, entries.adapter, *entries.contributions]):
            collector(index, entry_cid(data), data)
        return check_swarm(collector, content), entries

    clean, entries = audit(rows)
    assert clean.ok, clean.problems
    assert (clean.runs, clean.contributions) == (1, 2)
    assert [(b.peer_id, b.reason, b.proven) for b in clean.bans] == [
        (hostile, "out_of_bound", True)]
    run = json.loads(entries.run)
    assert sorted(run["artifacts"]) == sorted(
        ["run.json"] + [f"swarm_evidence/{c.digest[7:]}.update" for c in [
            *honest, decode_commitment(ban["evidence"]["commitment"])]])

    unchecked = audit([*rows, row(peer2, 3, 8, None), row(hostile, 4, 0, None)])[0]
    assert unchecked.problems == [
        f"leaf 4: 8 samples credited to {peer2} without a passed work check",
        f"leaf 5: a contribution of {hostile}, whom the run banned"]

    # a run published with a payload that is not the one its member signed
    honest_file = evidence / f"{honest[0].digest[7:]}.update"
    honest_file.write_bytes(update_payload([torch.zeros(4)]))
    swapped = audit(rows)[0]
    assert len(swapped.problems) == 1 and "not its signed update" in swapped.problems[0]
    # and one whose evidence files are not on the endpoint
    honest_file.write_bytes(update_payload([torch.ones(4)]))
    collector = SwarmCollector()
    collector(0, entry_cid(entries.run), entries.run)
    gone = check_swarm(collector, LocalBlockStore(tmp_path / "empty"))
    assert len(gone.problems) == 1 and "not in the local content store" in gone.problems[0]
