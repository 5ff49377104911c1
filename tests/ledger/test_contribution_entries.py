"""`contribution` entries: a volunteer peer's signed record as a ledger entry (format rules,
canonical bytes), and `gym audit` refusing one whose EIP-712 signature is not its
contributor's."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from eth_account import Account

from contracts.devnet_accounts import devnet_account_key
from ledger.contributions import recover_contributor, sign_contribution_data
from ledger.entries import ContributionEntry, decode_entry, encode_entry
from ledger.errors import EntryError

ALICE = Account.from_key(devnet_account_key(1))
RUN_CID = "bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku"


@dataclass(frozen=True)
class _Round:
    epoch: int
    samples: int


def record(account=ALICE, **changes) -> dict:
    fields = {"run": "arith-1", "config_digest": "sha256:" + "ab" * 32, "peer_id": "QmPeerA",
              "contributor": account.address.lower(), "samples": 14, "steps": 7, "epoch": 2,
              "rounds": [{"epoch": 1, "samples": 8}, {"epoch": 2, "samples": 6}]}
    fields.update(changes)
    view = type("Record", (), {**fields, "rounds": [_Round(**r) for r in fields["rounds"]]})
    return {**fields, "signature": sign_contribution_data(view, account.key)}


def entry(signed: dict, **changes) -> ContributionEntry:
    return ContributionEntry(**{"run_cid": RUN_CID, **signed, "credited_samples": 14,
                                "credited_rounds": 2, "share": 0.5, **changes})


def test_a_signed_record_round_trips_as_an_entry_and_recovers_its_contributor():
    good = entry(record())
    data = encode_entry(good)
    assert decode_entry(data) == good
    assert recover_contributor(decode_entry(data)) == ALICE.address.lower()
    assert json.loads(data)["type"] == "contribution"
    # one contributor holds the whole run: a share of 1 is canonical "1" and decodes back
    whole = encode_entry(entry(record(), share=1.0))
    assert b'"share":1,' in whole and decode_entry(whole).share == 1
    # the publisher's work checks of the peer's claimed steps ride along; without, no field
    checked = entry(record(), checks={"checked": 3, "passed": 3, "tolerance": 0.001})
    assert decode_entry(encode_entry(checked)).checks.passed == 3
    assert b'"checks"' not in data


@pytest.mark.parametrize(("changes", "field", "message"), [
    ({"rounds": [{"epoch": 2, "samples": 8}, {"epoch": 1, "samples": 6}]}, "rounds[1].epoch",
     "increasing epoch"),
    ({"credited_samples": 15}, "credited_samples", "credits more than the record claims"),
    ({"share": 1.5}, "share", "less than or equal to 1"),
    ({"contributor": ALICE.address}, "contributor", None),  # EIP-55 spelling: not the format
    ({"run": "../x"}, "run", None),
    ({"rounds": [{"epoch": i, "samples": 1} for i in range(4097)]}, "rounds", "at most 4096"),
    ({"checks": {"checked": 1, "passed": 2, "tolerance": 0.001}}, "checks.passed",
     "more passed than checked"),
])
def test_malformed_contribution_entries_are_refused_naming_the_field(changes, field, message):
    fields = {"run_cid": RUN_CID, **record(), "credited_samples": 14, "credited_rounds": 2,
              "share": 0.5}
    fields.update(changes)
    with pytest.raises(EntryError) as caught:
        ContributionEntry(**fields)
    assert caught.value.field == field, caught.value
    if message is not None:
        assert message in str(caught.value)


def test_a_record_changed_after_signing_does_not_recover():
    forged = entry({**record(), "samples": 140}, credited_samples=14)
    with pytest.raises(EntryError, match="signature: signed by 0x"):
        recover_contributor(forged)
    mallory = Account.from_key(devnet_account_key(9))
    # Mallory's signature of her own record, put on Alice's
    stolen = entry({**record(), "signature": record(mallory)["signature"]})
    with pytest.raises(EntryError, match="not by the contributor"):
        recover_contributor(stolen)


@pytest.mark.anvil
def test_audit_refuses_a_contribution_entry_its_contributor_did_not_sign(ledger_devnet,
                                                                         tmp_path):
    """Formats pass append and publish; the audit checks every contribution's signature and
    names the leaf whose record was inflated after signing."""
    gym = ledger_devnet.gym
    honest = encode_entry(entry(record()))
    inflated = encode_entry(entry({**record(), "samples": 140}))
    path = tmp_path / "contributions.jsonl"
    path.write_bytes(honest + b"\n" + inflated + b"\n")
    for args in (("ledger", "create", "alice/swarm"), ("ledger", "append", "alice/swarm", str(path)),
                 ("ledger", "publish", "alice/swarm")):
        done = gym.run(*args)
        assert done.returncode == 0, done.stderr
    audit = gym.run("audit", "alice/swarm", "--json")
    assert audit.returncode == 1, audit.stdout + audit.stderr
    report = json.loads(audit.stdout)
    assert report["first_bad_entry"]["leaf"] == 1, report
    problems = [d for d in report["discrepancies"] if d["kind"] == "entry-invalid"]
    assert len(problems) == 1 and "signature: signed by" in problems[0]["message"], report
