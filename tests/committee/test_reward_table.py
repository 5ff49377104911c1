"""The reward table's rules on facts built here: pools within budget, the data pool's
stake-sized slices (a node that signs receipts to itself moves only its own slice), integer
amounts that are the same whatever order the facts come in, and a document that decodes only
when its accounts, totals and root are its lines'."""

from __future__ import annotations

import json
import random

import pytest
from eth_utils import to_checksum_address

from committee.rewards.table import (
    POOLS,
    AuditReport,
    Contribution,
    EpochFacts,
    EpochWindow,
    RewardsError,
    Settlement,
    Use,
    compute_table,
    decode_table,
    encode_table,
    pool_budgets,
)
from ledger.merkle_distribution import RewardTree, verify_proof

GYM = 10**18
N1, N2 = "0x" + "11" * 20, "0x" + "22" * 20  # node operators
ALICE, BOB, CAROL = "0x" + "a1" * 20, "0x" + "b0" * 20, "0x" + "c0" * 20  # experience authors
V1, V2, V3 = "0x" + "d1" * 20, "0x" + "d2" * 20, "0x" + "d3" * 20  # verifiers
X, Y, Z = "bafkreix", "bafkreiy", "bafkreiz"


def facts(**overrides) -> EpochFacts:
    base = {
        "window": EpochWindow(31337, "0x" + "ee" * 20, 3, 3000, 3999, 100 * GYM,
                              (4000, 3000, 1500, 1500)),
        "stakes": {N1: 300 * GYM, N2: 100 * GYM},
        "uses": (Use(N1, X, ALICE, 6), Use(N1, Y, BOB, 2), Use(N2, Z, CAROL, 5)),
        "contributions": (Contribution("bafyrun", "bafyc1", ALICE, 30),
                          Contribution("bafyrun", "bafyc2", BOB, 10)),
        "settlements": (Settlement(1, (V1, V2)), Settlement(2, (V1, V2, V3))),
        # N1: one of its two audited checkpoints passed; N2: its one; V3's report abstained
        "audits": (AuditReport(V1, "bafkreia1", N1, 7, 10, 3, True),
                   AuditReport(V2, "bafkreia2", N1, 7, 20, 2, False),
                   AuditReport(V1, "bafkreia3", N2, 8, 5, 1, True),
                   AuditReport(V3, "bafkreia4", N2, 8, 5, 0, False))}
    base.update(overrides)
    return EpochFacts(**base)


def earned(table, account: str, pool: str) -> int:
    return table.accounts.get(to_checksum_address(account), {}).get(pool, 0)


def test_each_pool_pays_by_its_rule_within_its_budget():
    table = compute_table(facts())
    budgets = pool_budgets(100 * GYM, (4000, 3000, 1500, 1500))
    for pool in POOLS:
        assert table.paid(pool) <= budgets[pool]
        assert budgets[pool] - table.paid(pool) < 10  # only floors' dust is left
    # data: N1 holds 3/4 of the stake of nodes with uses; its 8 uses split 6:2
    assert earned(table, ALICE, "data") == budgets["data"] * 3 * 6 // (4 * 8)
    assert earned(table, BOB, "data") == budgets["data"] * 3 * 2 // (4 * 8)
    assert earned(table, CAROL, "data") == budgets["data"] // 4
    # compute: 30 and 10 credited samples
    assert earned(table, ALICE, "compute") == budgets["compute"] * 3 // 4
    # verification: five signatures that counted and three reports that checked something:
    # V1 two and two, V2 two and one, V3 one (its report abstained on everything)
    point = budgets["verification"] // 8
    assert [earned(table, v, "verification") for v in (V1, V2, V3)] == [4 * point, 3 * point,
                                                                        point]
    # availability: stake x the share of audited checkpoints that passed: N1 300 x 1/2, N2 100
    assert earned(table, N1, "availability") == budgets["availability"] * 150 // 250
    assert earned(table, N2, "availability") == budgets["availability"] * 100 // 250
    assert table.total() == sum(amount for _, amount in table.values())


def test_a_node_signing_receipts_to_itself_moves_only_its_own_slice():
    """N2 (a quarter of the stake) signs 1,000 receipts naming Z: Z's author gains at most
    N2's slice of the data pool, and the other node's experiences keep their amounts."""
    honest = compute_table(facts())
    inflated = compute_table(facts(uses=(*facts().uses[:2], Use(N2, Z, CAROL, 1005))))
    slice_n2 = pool_budgets(100 * GYM, (4000, 3000, 1500, 1500))["data"] // 4
    assert earned(inflated, CAROL, "data") == earned(honest, CAROL, "data") == slice_n2
    assert earned(inflated, ALICE, "data") == earned(honest, ALICE, "data")
    # and naming another node's experience 1,000 times takes its slice there, no more
    moved = compute_table(facts(uses=(*facts().uses, Use(N2, X, ALICE, 1000))))
    gain = earned(moved, ALICE, "data") - earned(honest, ALICE, "data")
    assert 0 < gain <= slice_n2
    assert earned(moved, CAROL, "data") < earned(honest, CAROL, "data")


def test_unstaked_nodes_and_empty_pools_pay_nothing():
    table = compute_table(facts(stakes={N1: 300 * GYM}, contributions=(), settlements=(),
                                audits=()))
    assert table.paid("compute") == table.paid("verification") == 0
    assert table.paid("availability") == 0
    assert CAROL.lower() not in {a.lower() for a in table.accounts}  # N2 is not active
    empty = compute_table(facts(stakes={}, uses=(), contributions=(), settlements=(),
                                audits=()))
    assert empty.accounts == {} and empty.root == bytes(32)
    assert decode_table(encode_table(empty)).root == bytes(32)


def test_audits_pay_one_report_per_verifier_and_checkpoint_and_failures_cost_availability():
    base = facts()
    again = AuditReport(V1, "bafkreia0", N1, 7, 10, 3, True)  # V1's second report of (7, 10)
    assert compute_table(facts(audits=(*base.audits, again))).accounts == \
        compute_table(base).accounts
    # N1's second checkpoint passes too (V3 says so): N1 is paid its full stake's weight
    passed = compute_table(facts(audits=(*base.audits,
                                         AuditReport(V3, "bafkreia5", N1, 7, 20, 2, True))))
    budgets = pool_budgets(100 * GYM, (4000, 3000, 1500, 1500))
    assert earned(passed, N1, "availability") == budgets["availability"] * 300 // 400
    # every audit of N2 failed: it earns no availability, whatever its stake
    failed = compute_table(facts(audits=(AuditReport(V1, "bafkreia3", N2, 8, 5, 1, False),),
                                 stakes={N1: 300 * GYM, N2: 10**6 * GYM}))
    assert earned(failed, N2, "availability") == 0 and failed.paid("availability") == 0
    # a report on the log of a node inactive at the epoch's end counts for nothing
    gone = compute_table(facts(stakes={N1: 300 * GYM}))
    assert earned(gone, N2, "availability") == 0
    assert earned(gone, V1, "verification") == 3 * (budgets["verification"] // 7)


def test_the_same_facts_in_any_order_give_the_same_bytes():
    base = facts()
    data = encode_table(compute_table(base))
    rng = random.Random(5)
    for _ in range(5):
        uses, contributions = list(base.uses), list(base.contributions)
        audits = list(base.audits)
        rng.shuffle(uses)
        rng.shuffle(contributions)
        rng.shuffle(audits)
        shuffled = facts(uses=tuple(uses), contributions=tuple(contributions),
                         audits=tuple(audits), stakes=dict(reversed(list(base.stakes.items()))))
        assert encode_table(compute_table(shuffled)) == data


def test_the_document_decodes_to_its_table_and_its_root_proves_every_claim():
    table = compute_table(facts())
    data = encode_table(table)
    back = decode_table(data)
    assert back == table
    tree = RewardTree.of(table.values())
    assert tree.root == table.root
    for account, amount in table.values():
        assert verify_proof(table.root, account, amount, tree.proof(account))
        assert not verify_proof(table.root, account, amount + 1, tree.proof(account))


def _tampered(data: bytes, change) -> bytes:
    doc = json.loads(data)
    change(doc)
    from ledger.canonical_json import canonical_bytes

    return canonical_bytes(doc)


@pytest.mark.parametrize("change, message", [
    (lambda d: d["accounts"][0].update(total=str(int(d["accounts"][0]["total"]) + 1)),
     "not those of its source lines"),
    (lambda d: d["sources"]["data"][0].update(amount=str(int(d["sources"]["data"][0]["amount"])
                                                           - 1)), "not those of its source"),
    (lambda d: d.update(root="0x" + "00" * 32), "not those of its source lines"),
    (lambda d: d["sources"]["compute"][0].update(amount=str(10**30)), "over its budget"),
    (lambda d: d.update(pool_bps=[5000, 3000, 1500, 1500]), "sums to 11000"),
    (lambda d: d.update(format="gym-rewards/0"), "format"),
    (lambda d: d["sources"]["data"][0].update(account="0x1234"), "expected an address"),
    (lambda d: d["sources"]["data"][0].pop("uses"), "exactly the fields"),
    (lambda d: d.pop("sources"), "exactly the fields"),
])
def test_a_forged_table_is_refused_with_one_clear_error(change, message):
    data = encode_table(compute_table(facts()))
    with pytest.raises(RewardsError, match=message):
        decode_table(_tampered(data, change))


def test_bytes_that_are_not_a_table_are_refused():
    for data in (b"", b"[]", b"{" * 100, b'{"format": "gym-rewards/2"}', b"\xff"):
        with pytest.raises(RewardsError):
            decode_table(data)
    data = encode_table(compute_table(facts()))
    with pytest.raises(RewardsError, match="canonical"):
        decode_table(data + b" ")


def test_the_published_table_gives_the_same_root_to_openzeppelins_merkle_tree(tmp_path):
    """scripts/reward-root.mjs: the table's JSON and @openzeppelin/merkle-tree (npm), nothing
    of this project's."""
    import shutil
    import subprocess
    from pathlib import Path

    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed (scripts/setup.sh requires it)")
    table = compute_table(facts())
    path = tmp_path / "table.json"
    path.write_bytes(encode_table(table))
    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run([node, str(repo / "scripts" / "reward-root.mjs"), str(path)],
                          capture_output=True, text=True, timeout=60, cwd=repo,
                          check=False)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["root"] == "0x" + table.root.hex()
    assert int(out["total"]) == table.total() and out["accounts"] == len(table.accounts)


def test_a_signed_root_decodes_and_a_malformed_one_is_one_bls_error():
    from committee import BLSError, SecretKey
    from committee.rewards.attestation import RootClaim, SignedRoot, decode_signed_root

    sk = SecretKey.from_seed("reward-table-test")
    claim = RootClaim(3, b"\x01" * 32, 100 * GYM,
                      "bafkreigunhqakt5pluxk2s5rrdc7j3ajganuwbrarjdnjnwvo4h67j4w4q")
    signed = SignedRoot.create(sk, claim, chain_id=31337, distributor=V1, verifier_index=2,
                               verifier=V2)
    assert decode_signed_root(signed.to_bytes()).to_json() == signed.to_json()
    assert signed.verify(sk.pk1(), chain_id=31337, distributor=V1)
    assert not signed.verify(sk.pk1(), chain_id=31337, distributor=V2)  # another distributor
    for change in ({"total": str(2**256)}, {"total": "-1"}, {"epoch": -1}, {"root": "0x12"},
                   {"verifier_index": 256}, {"v": 2}, {"table_cid": "not a cid!"}):
        with pytest.raises(BLSError):
            decode_signed_root(json.dumps({**signed.to_json(), **change}))
    with pytest.raises(BLSError):
        decode_signed_root(b"{" * 5000)
