"""Swarm records (trainer/swarm/records.py) and the witness's check of contributions
(trainer/swarm/witness.py): signing, hostile decoding, and every refusal."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import pytest
from eth_account import Account

from trainer.swarm.records import (
    MAX_ROUNDS,
    Contribution,
    PeerSpec,
    Round,
    SwarmRecordError,
    check_run_id,
    decode_contribution,
    decode_spec,
    libp2p_peer_id,
    sign_binding,
    sign_contribution,
    spec_difference,
    typed_data,
    verify_contribution,
)
from trainer.swarm.witness import RoundSeen, Witness, check_contribution, judge_records, shares

ALICE, BOB, MALLORY = (Account.from_key(bytes([n]) * 32) for n in (1, 2, 3))
DIGEST = "sha256:" + "ab" * 32


def _record(account=ALICE, peer="peer-a", rounds=((1, 8), (2, 6)), **changes) -> Contribution:
    rounds = tuple(Round(e, s) for e, s in rounds)
    fields = {"run": "arith-1", "config_digest": DIGEST, "peer_id": peer,
              "contributor": account.address.lower(), "samples": sum(r.samples for r in rounds),
              "steps": 7, "epoch": 2, "rounds": rounds}
    return Contribution(**{**fields, **changes})


def _passed(*peers: str, claimed: int = 100) -> dict:
    """Work checks (trainer.swarm.work) of ``peers``' claims in a round: one step, passed."""
    return {peer: {"claimed": claimed, "checked": 1, "passed": 1} for peer in peers}


def _witness() -> Witness:
    witness = Witness("arith-1", DIGEST, batch_size_per_step=2, target_batch_size=8, epoch=3)
    members = frozenset({"peer-a", "peer-b"})
    witness.rounds[1] = RoundSeen(1, members, {"peer-a": 8, "peer-b": 2},
                                  _passed("peer-a", "peer-b"))
    witness.rounds[2] = RoundSeen(2, members, {"peer-a": 6, "peer-b": 4},
                                  _passed("peer-a", "peer-b"))
    witness.rounds[3] = RoundSeen(3, frozenset({"peer-b"}), {"peer-b": 8}, _passed("peer-b"))
    witness.bind("peer-a", ALICE.address.lower())
    witness.bind("peer-b", BOB.address.lower())
    return witness


def test_a_signed_record_verifies_and_any_change_breaks_it():
    record = sign_contribution(_record(), ALICE.key)
    assert verify_contribution(record) == ALICE.address.lower()
    assert decode_contribution(record.to_json()) == record  # the JSON form round-trips
    for change in ({"samples": 15}, {"steps": 8}, {"epoch": 3}, {"peer_id": "peer-b"},
                   {"rounds": (Round(1, 8), Round(2, 7))}, {"run": "arith-2"},
                   {"config_digest": "sha256:" + "cd" * 32}):
        with pytest.raises(SwarmRecordError, match="signed by|does not recover"):
            verify_contribution(replace(record, **change))
    with pytest.raises(SwarmRecordError, match="missing"):
        verify_contribution(_record())
    with pytest.raises(SwarmRecordError, match="is not the contributor"):
        sign_contribution(_record(), BOB.key)


def test_typed_data_is_eip712_with_checksummed_contributor_and_bytes32_digest():
    data = typed_data(_record())
    assert data["primaryType"] == "SwarmContribution"
    assert data["domain"] == {"name": "GymLedger Swarm", "version": "1"}
    assert data["message"]["contributor"] == ALICE.address  # EIP-55
    assert data["message"]["configDigest"] == "0x" + "ab" * 32
    assert data["message"]["rounds"] == [{"epoch": 1, "samples": 8}, {"epoch": 2, "samples": 6}]


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda d: d.update(extra=1), "unknown field 'extra'"),
    (lambda d: d.pop("steps"), "missing field 'steps'"),
    (lambda d: d.update(samples=True), "contribution.samples"),
    (lambda d: d.update(samples=-1), "contribution.samples"),
    (lambda d: d.update(samples=2**53), "contribution.samples"),
    (lambda d: d.update(samples="14"), "contribution.samples"),
    (lambda d: d.update(contributor="0x" + "AB" * 20), "contribution.contributor"),
    (lambda d: d.update(run="../x"), "run id"),
    (lambda d: d.update(peer_id="p" * 300), "contribution.peer_id"),
    (lambda d: d.update(signature="0x1234"), "contribution.signature"),
    (lambda d: d.update(rounds=[{"epoch": 2, "samples": 1}, {"epoch": 1, "samples": 1}]),
     "increasing epoch"),
    (lambda d: d.update(rounds=[{"epoch": 1}]), "rounds\\[0\\]: missing field 'samples'"),
    (lambda d: d.update(rounds=[{"epoch": 1, "samples": 1}] * (MAX_ROUNDS + 1)), "at most"),
    (lambda d: d.update(rounds="all"), "contribution.rounds"),
])
def test_decoding_refuses_a_malformed_record_naming_the_field(mutate, message):
    data = sign_contribution(_record(), ALICE.key).to_json()
    mutate(data)
    with pytest.raises(SwarmRecordError, match=message):
        decode_contribution(data)


def test_decoding_refuses_what_is_not_an_object():
    for value in (None, [], "record", 3, {1: 2}):
        with pytest.raises(SwarmRecordError):
            decode_contribution(value)
        with pytest.raises(SwarmRecordError):
            decode_spec(value)


@pytest.fixture(scope="module")
def libp2p_keys():
    """Two libp2p RSA identities (PKCS#8 DER), as hivemind's P2P.generate_identity makes."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    return [rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()) for _ in range(2)]


def _spec(identity: bytes, **changes) -> PeerSpec:
    spec = PeerSpec(
        run="arith-1", peer_id="", address=ALICE.address.lower(), method="sft",
        base_model="tiny-random:0123", base_digest=DIGEST, dataset_digest=DIGEST,
        config_digest=DIGEST, target_batch_size=8, local_steps=0, max_steps=6,
        maddrs=("/ip4/127.0.0.1/tcp/1/p2p/x",))
    spec = replace(spec, dht_owner=hashlib.sha256(identity).hexdigest(), **changes)
    key, binding = sign_binding(identity, spec.run, spec.address, spec.dht_owner)
    return replace(spec, peer_id=libp2p_peer_id(bytes.fromhex(key)), libp2p_key=key,
                   binding=binding)


def test_libp2p_peer_id_is_hivemind_s():
    import tempfile
    from pathlib import Path

    from hivemind.p2p import P2P, PeerID
    from hivemind.proto import crypto_pb2

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "identity.key"
        P2P.generate_identity(str(path))
        identity = path.read_bytes()
    der = crypto_pb2.PrivateKey.FromString(identity).data
    key, _ = sign_binding(der, "arith-1", ALICE.address.lower(), "00")
    assert libp2p_peer_id(bytes.fromhex(key)) == PeerID.from_identity(identity).to_base58()


def test_spec_round_trips_and_a_joiner_that_differs_is_named(libp2p_keys):
    mine = _spec(libp2p_keys[0])
    assert decode_spec(mine.to_json()) == mine
    other = _spec(libp2p_keys[1], dataset_digest="sha256:" + "cd" * 32)
    assert spec_difference(mine, other) == (
        f"dataset_digest is {DIGEST} here but sha256:{'cd' * 32} at peer {other.peer_id}")
    assert spec_difference(mine, _spec(libp2p_keys[1], maddrs=())) is None
    assert "max_steps is 6 here but 7" in spec_difference(mine, _spec(libp2p_keys[1],
                                                                      max_steps=7))
    bad = mine.to_json() | {"maddrs": ["m"] * 9}
    with pytest.raises(SwarmRecordError, match="maddrs"):
        decode_spec(bad)
    with pytest.raises(SwarmRecordError, match="run id"):
        check_run_id("")


def test_a_spec_binds_its_address_to_its_peer_id(libp2p_keys):
    """Nobody can publish a spec that gives another peer's id their own address, or that
    claims another DHT owner key for a peer's spec."""
    alice, bob = _spec(libp2p_keys[0]), _spec(libp2p_keys[1], address=BOB.address.lower())
    claims = [  # (mutation, what decode_spec says)
        ({"address": MALLORY.address.lower()}, "did not sign"),  # Alice's key, Mallory's address
        ({"dht_owner": "ab" * 32}, "did not sign"),  # Alice's spec, Mallory's DHT owner key
        ({"peer_id": bob.peer_id}, "not the key of peer"),  # Alice's key for Bob's id
        ({"libp2p_key": bob.libp2p_key}, "not the key of peer"),  # Bob's key, Alice's id
        ({"libp2p_key": "00" * 40}, "not a hex DER public key"),
        ({"binding": "zz"}, "not a hex DER public key"),
        ({"binding": "ab" * 2000}, "peer spec.binding"),
    ]
    for mutation, reason in claims:
        with pytest.raises(SwarmRecordError, match=reason):
            decode_spec(alice.to_json() | mutation)


def test_the_witness_accepts_an_honest_record_and_credits_the_rounds_it_saw():
    verdict = check_contribution(sign_contribution(_record(), ALICE.key), _witness())
    assert (verdict.accepted, verdict.credited_samples, verdict.credited_rounds) == (True, 14, 2)
    # a round the witness did not average in (step 5: it was alone) is not credited
    unseen = _record(rounds=((1, 8), (2, 6), (5, 2)), epoch=3, steps=8)
    verdict = check_contribution(sign_contribution(unseen, ALICE.key), _witness())
    assert (verdict.accepted, verdict.credited_samples) == (True, 14)
    # nor is a round of another group of the same step (the witness averaged step 3 without
    # Alice): even inflated, it is not held against her
    other_group = _record(rounds=((1, 8), (2, 6), (3, 40)), epoch=3, steps=40)
    verdict = check_contribution(sign_contribution(other_group, ALICE.key), _witness())
    assert (verdict.accepted, verdict.credited_samples, verdict.credited_rounds) == (True, 14, 2)


def test_a_round_credits_another_peer_only_what_its_re_computed_claims_hold():
    record = sign_contribution(_record(), ALICE.key)  # rounds 1 (8 samples) and 2 (6)

    def credit(checks_1, checks_2, me=""):
        witness = _witness()
        witness.me = me
        witness.rounds[1] = replace(witness.rounds[1], checks=checks_1)
        witness.rounds[2] = replace(witness.rounds[2], checks=checks_2)
        verdict = check_contribution(record, witness)
        return verdict.credited_samples, verdict.credited_rounds, verdict.checked, verdict.passed

    assert credit(_passed("peer-a"), _passed("peer-a")) == (14, 2, 2, 2)
    assert credit({}, _passed("peer-a")) == (6, 1, 1, 1)  # no step of round 1 re-computed
    failed = {"peer-a": {"claimed": 8, "checked": 1, "passed": 0}}
    assert credit(failed, _passed("peer-a")) == (6, 1, 2, 1)
    assert credit(_passed("peer-a", claimed=4), _passed("peer-a")) == (10, 2, 2, 2)  # its claims
    assert credit({}, {}, me="peer-a") == (14, 2, 0, 0)  # the witness's own work
    unchecked = _witness()
    unchecked.unchecked = True  # a local-steps run: nothing can be re-computed
    unchecked.rounds[1] = replace(unchecked.rounds[1], checks={})
    assert check_contribution(record, unchecked).credited_samples == 14


@pytest.mark.parametrize(("forge", "reason"), [
    # another key signs a record in Alice's name
    (lambda: replace(sign_contribution(_record(account=MALLORY), MALLORY.key),
                     contributor=ALICE.address.lower()), "signed by"),
    # Mallory signs with her own key for Alice's peer id
    (lambda: sign_contribution(_record(account=MALLORY), MALLORY.key), "joined as"),
    (lambda: sign_contribution(_record(peer="peer-z"), ALICE.key), "never joined"),
    # samples inflated past twice the target batch (8, +2 local steps of 2) in one round
    (lambda: sign_contribution(_record(rounds=((1, 21), (2, 6)), steps=14), ALICE.key),
     "claims 21 samples at step 1; a round holds at most 16"),
    (lambda: sign_contribution(_record(samples=15), ALICE.key), "local steps of at most 2"),
    (lambda: sign_contribution(_record(epoch=4), ALICE.key), "the run reached 3"),
    (lambda: sign_contribution(_record(samples=4), ALICE.key), "more samples than its total"),
    (lambda: sign_contribution(_record(run="arith-2"), ALICE.key), "is not this run"),
])
def test_the_witness_refuses_a_forged_or_inflated_record(forge, reason):
    verdict = check_contribution(forge(), _witness())
    assert not verdict.accepted and reason in verdict.reason, verdict.reason
    assert verdict.credited_samples == 0


def test_shares_are_of_the_accepted_credited_samples():
    witness = _witness()
    alice = check_contribution(sign_contribution(_record(), ALICE.key), witness)
    bob = check_contribution(sign_contribution(
        _record(account=BOB, peer="peer-b", rounds=((1, 2), (2, 4), (3, 8)), epoch=3),
        BOB.key), witness)
    forged = check_contribution(sign_contribution(_record(account=MALLORY), MALLORY.key), witness)
    rows = shares([alice, bob, forged])
    assert [(r["peer_id"], r["samples"], r["share"]) for r in rows] == [
        ("peer-a", 14, 0.5), ("peer-b", 14, 0.5)]
    assert shares([forged]) == []


def test_judging_the_dht_values_ties_each_record_to_its_spec(libp2p_keys):
    alice_spec = _spec(libp2p_keys[0])
    bob_spec = _spec(libp2p_keys[1], address=BOB.address.lower())
    witness = Witness("arith-1", DIGEST, batch_size_per_step=2, target_batch_size=8, epoch=3)
    members = frozenset({alice_spec.peer_id, bob_spec.peer_id})
    witness.rounds[1] = RoundSeen(1, members, {alice_spec.peer_id: 8, bob_spec.peer_id: 4},
                                  _passed(alice_spec.peer_id, bob_spec.peer_id))

    def value(spec, account, samples, steps=4, **changes):
        record = _record(account=account, peer=spec.peer_id, rounds=((1, samples),),
                         steps=steps, **changes)
        return {"spec": spec.to_json(), "contribution": sign_contribution(record, account.key)
                .to_json(), "_owner": spec.dht_owner}

    values = [
        value(alice_spec, ALICE, 8),
        value(bob_spec, BOB, 4),
        value(bob_spec, BOB, 3),  # Bob published twice: the smaller credit counts
        value(bob_spec, BOB, 40, steps=20),  # inflated past twice the target (16 + 2 steps)
        {"spec": bob_spec.to_json(), "contribution": value(alice_spec, ALICE, 8)["contribution"],
         "_owner": bob_spec.dht_owner},
        {"spec": alice_spec.to_json() | {"address": MALLORY.address.lower()},
         "contribution": value(alice_spec, ALICE, 8)["contribution"],
         "_owner": alice_spec.dht_owner},
        value(bob_spec, BOB, 1) | {"_owner": "ab" * 32},  # a copy of Bob's, stored by another
        {"spec": alice_spec.to_json(), "contribution": {"run": "arith-1"},
         "_owner": alice_spec.dht_owner},
        {"spec": alice_spec.to_json()},  # a spec with no record yet: nothing to judge
        "not a record",
    ]
    contributors, refused, accepted = judge_records(values, witness)
    assert [(c["peer_id"], c["samples"], c["share"]) for c in contributors] == [
        (alice_spec.peer_id, 8, round(8 / 11, 6)), (bob_spec.peer_id, 3, round(3 / 11, 6))]
    # the accepted records, as signed, in the contributors' order: Bob's smaller one
    assert [(v.record.peer_id, v.record.samples) for v in accepted] == [
        (alice_spec.peer_id, 8), (bob_spec.peer_id, 3)]
    reasons = [r["reason"] for r in refused]
    assert len(reasons) == 5
    assert reasons[0].startswith("no valid spec beside the record: peer spec.binding")
    assert refused[1] == {"peer_id": bob_spec.peer_id, "reason": "stored under another DHT "
                          "owner key than its spec binds (a copy of the spec)"}
    assert "claims 40 samples at step 1; a round holds at most 16" in reasons[2]
    assert reasons[3] == f"published beside the spec of peer {bob_spec.peer_id}"
    assert "missing field" in reasons[4]


def test_accepted_records_become_contribution_entries_and_bad_rows_are_refused(tmp_path):
    """What a swarm peer writes beside run.json (`write_accepted_records`) is what publishing
    turns into `contribution` entries; a row that is not an accepted, signed record stops the
    publication with one error naming the row."""
    import json

    from ledger.entries import decode_entry
    from trainer.adapters.errors import AdapterRunError
    from trainer.adapters.publish import contribution_entries
    from trainer.swarm.peer import SWARM_RECORDS, write_accepted_records
    from trainer.swarm.witness import Verdict

    run_cid = "bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku"
    alice = sign_contribution(_record(peer="peer-a"), ALICE.key)
    bob = sign_contribution(_record(account=BOB, peer="peer-b", rounds=((1, 2),)), BOB.key)
    verdicts = [Verdict(alice, True, "", 14, 2), Verdict(bob, True, "", 2, 1)]
    write_accepted_records(tmp_path, shares(verdicts), verdicts)
    entries = [decode_entry(data) for data in contribution_entries(tmp_path, run_cid)]
    assert [(e.peer_id, e.contributor, e.credited_samples, e.share, e.run_cid) for e in entries] \
        == [("peer-a", ALICE.address.lower(), 14, 0.875, run_cid),
            ("peer-b", BOB.address.lower(), 2, 0.125, run_cid)]
    assert contribution_entries(tmp_path / "elsewhere", run_cid) == ()  # no swarm run

    path = tmp_path / SWARM_RECORDS
    rows = json.loads(path.read_text())["records"]
    for broken, message in [
        ({**rows[1], "record": {**rows[1]["record"], "samples": 200}}, "signature: signed by"),
        ({**rows[1], "credited_samples": 999}, "credits more than the record claims"),
        ({**rows[1], "record": {**rows[1]["record"], "extra": 1}}, "extra"),
        ("not a row", "each row is"),
    ]:
        path.write_text(json.dumps({"records": [rows[0], broken]}))
        with pytest.raises(AdapterRunError, match=r"records\[1\]") as caught:
            contribution_entries(tmp_path, run_cid)
        assert message in str(caught.value), caught.value
    path.write_text("[1, 2]")
    with pytest.raises(AdapterRunError, match="not a list of accepted records"):
        contribution_entries(tmp_path, run_cid)


def test_a_banned_peer_s_records_are_refused_and_the_watcher_counts_its_bans(libp2p_keys):
    from types import SimpleNamespace

    from trainer.swarm.peer import _peer_rows

    alice_spec = _spec(libp2p_keys[0])
    bob_spec = _spec(libp2p_keys[1], address=BOB.address.lower())
    witness = Witness("arith-1", DIGEST, batch_size_per_step=2, target_batch_size=8, epoch=3)
    witness.rounds[1] = RoundSeen(1, frozenset({alice_spec.peer_id, bob_spec.peer_id}), {},
                                  _passed(alice_spec.peer_id, bob_spec.peer_id))
    witness.banned = {bob_spec.peer_id: "non_finite"}

    def value(spec, account):
        record = _record(account=account, peer=spec.peer_id, rounds=((1, 4),), steps=4)
        return {"spec": spec.to_json(), "contribution": sign_contribution(record, account.key)
                .to_json(), "_owner": spec.dht_owner}

    bob_value = value(bob_spec, BOB)
    contributors, refused, _ = judge_records([value(alice_spec, ALICE), bob_value], witness)
    assert [c["peer_id"] for c in contributors] == [alice_spec.peer_id]
    # Bob's own signed record is kept beside the refusal: what a challenge of his stake names
    assert refused == [{"peer_id": bob_spec.peer_id, "reason": "banned from the run: non_finite",
                        "record": bob_value["contribution"]}]

    # the watcher: Alice lists Bob (and a peer that is not in the run) as banned; a value
    # beside a copy of Bob's spec, under another owner key, listing Alice speaks for nobody
    def item(spec, banned, owner=None):
        data = {"spec": spec.to_json(), "banned": banned}
        return bytes.fromhex(owner or spec.dht_owner), SimpleNamespace(
            value=data, expiration_time=1000.0 + 24 * 3600)

    found = SimpleNamespace(value=dict([
        item(alice_spec, [bob_spec.peer_id, "QmNobody"]), item(bob_spec, []),
        item(bob_spec, [alice_spec.peer_id], owner="ab" * 32)]))
    rows = {r["peer_id"]: r for r in _peer_rows(found, None, now=1000.0)}
    assert rows[bob_spec.peer_id]["banned_by"] == 1
    assert rows[alice_spec.peer_id]["banned_by"] == 0  # the copy under another owner is nobody
