"""committee.audit_reports: a checkpoint's report built from an audit pass, and the rules that
decide whether a published report counts (docs/rewards.md "Audits"): the chain's checkpoint,
the epoch, the rate's floor, and exactly the sample the seed draws, checked at a cost bounded
by the report whatever rate it states."""

from __future__ import annotations

import random

import pytest
from eth_utils import keccak, to_checksum_address

from committee.audit_reports import Checkpoint, ReportChecker, _Draws, report_entry
from committee.audits import (
    AUDIT_DELAY_BLOCKS,
    NOT_RETAINED,
    VERIFIED,
    AuditedCheckpoint,
    AuditFinding,
    audit_seed,
    sample_threshold,
    sampled_leaves,
)
from ledger.entries import AuditEntry

NODE = "0x" + "0a" * 20
VERIFIER = "0x" + "0b" * 20
LOG = 7
FIRST, LAST = 100, 199  # the epoch's blocks


def block_hash(n: int) -> bytes:
    return keccak(b"block %d" % n)


# two checkpoints of the node's log: leaves [0, 40) anchored in block 90 (the previous epoch),
# [40, 240) in block 120
CHECKPOINTS = {LOG: [Checkpoint(0, 40, 90), Checkpoint(40, 240, 120)]}


def checker(**changes) -> ReportChecker:
    args = {"first": FIRST, "last": LAST, "logs": {NODE: LOG}, "checkpoints": CHECKPOINTS,
            "block_hash": block_hash, **changes}
    return ReportChecker(**args)


def sample(rate_bps: int, from_size: int = 40, size: int = 240, block: int = 120) -> list[int]:
    seed = audit_seed(block_hash(block + AUDIT_DELAY_BLOCKS), LOG, size)
    return sampled_leaves(seed, from_size, size, rate_bps)


def report(rate_bps: int = 2_000, leaves: list[int] | None = None, outcomes=None,
           **changes) -> AuditEntry:
    leaves = sample(rate_bps) if leaves is None else leaves
    fields = {"node": NODE, "log_id": LOG, "from_size": 40, "size": 240, "rate_bps": rate_bps,
              "leaves": leaves, "outcomes": outcomes or [VERIFIED] * len(leaves), **changes}
    return AuditEntry(**fields)


def test_a_report_of_the_seeds_sample_counts_with_what_it_checked():
    leaves = sample(2_000)
    assert 20 < len(leaves) < 70  # 200 leaves at 20 %
    counted = checker().check(VERIFIER, "bafkreireport", report())
    assert counted is not None
    assert (counted.verifier, counted.node, counted.log_id, counted.size) == (
        to_checksum_address(VERIFIER), to_checksum_address(NODE), LOG, 240)
    assert (counted.checked, counted.passed) == (len(leaves), True)
    # an abstention is not a failure; one receipt not retained fails the checkpoint
    mixed = ["abstained"] + [VERIFIED] * (len(leaves) - 1)
    assert checker().check(VERIFIER, "c", report(outcomes=mixed)).passed
    lost = [NOT_RETAINED] + [VERIFIED] * (len(leaves) - 1)
    assert not checker().check(VERIFIER, "c", report(outcomes=lost)).passed
    nothing = checker().check(VERIFIER, "c", report(outcomes=["abstained"] * len(leaves)))
    assert (nothing.checked, nothing.passed) == (0, False)


def test_a_report_that_called_a_receipt_a_challenge_proved_bad_verified_counts_nothing():
    leaves = sample(2_000)
    caught = leaves[3]
    proven = checker(disproven={LOG: {caught}})
    assert proven.check(VERIFIER, "c", report()) is None  # every receipt "verified": lazy
    # the verifier that found it failing, or abstained on it, still counts
    failed = [NOT_RETAINED if leaf == caught else VERIFIED for leaf in leaves]
    assert not proven.check(VERIFIER, "c", report(outcomes=failed)).passed
    abstained = ["abstained" if leaf == caught else VERIFIED for leaf in leaves]
    assert proven.check(VERIFIER, "c", report(outcomes=abstained)).passed
    # a receipt outside its sample, or of another log, says nothing about this report
    assert checker(disproven={LOG: {undrawn()}}).check(VERIFIER, "c", report()).passed
    assert checker(disproven={LOG + 1: {caught}}).check(VERIFIER, "c", report()).passed


def undrawn() -> int:
    return next(i for i in range(40, 240) if i not in sample(2_000))


def swapped() -> list[int]:
    return sorted([*sample(2_000)[1:], undrawn()])


@pytest.mark.parametrize("why, entry", [
    ("a leaf the seed did not draw left out", lambda: report(leaves=sample(2_000)[1:])),
    ("one drawn leaf swapped for one not drawn", lambda: report(leaves=swapped())),
    ("a leaf not drawn added", lambda: report(leaves=sorted([*sample(2_000), undrawn()]))),
    ("the sample of another rate", lambda: report(rate_bps=3_000, leaves=sample(2_000))),
    ("a rate under the floor", lambda: report(rate_bps=499, leaves=sample(499))),
    ("another node's log", lambda: report(node="0x" + "0c" * 20)),
    ("a size no checkpoint has", lambda: report(size=239, leaves=[41])),
    ("another previous size", lambda: report(from_size=39, leaves=sample(2_000))),
])
def test_a_report_the_chain_does_not_agree_with_counts_for_nothing(why, entry):
    assert checker().check(VERIFIER, "c", entry()) is None, why


def test_only_checkpoints_of_the_epoch_whose_seed_was_mined_in_it_count():
    old = report(rate_bps=10_000, leaves=list(range(40)), from_size=0, size=40)
    assert checker().check(VERIFIER, "c", old) is None  # anchored before the epoch
    assert checker(first=80).check(VERIFIER, "c", old) is not None  # in an epoch from 80
    assert checker(last=121).check(VERIFIER, "c", report()) is None  # seed block 122
    assert checker(last=122).check(VERIFIER, "c", report()) is not None
    assert checker(logs={}).check(VERIFIER, "c", report()) is None  # the node is not counted


def test_the_draws_agree_with_sampled_leaves_at_every_rate():
    rng = random.Random(48)
    for _ in range(30):
        seed = rng.randbytes(32)
        start = rng.randrange(0, 1000)
        size = start + rng.randrange(1, 400)
        draws = _Draws(seed, start, size)
        for rate in (1, 500, rng.randrange(1, 10_001), 10_000):
            leaves = sampled_leaves(seed, start, size, rate)
            assert draws.is_sample(leaves, rate)
            if leaves:
                assert not draws.is_sample(leaves[1:], rate)
            missing = sorted(set(range(start, size)) - set(leaves))
            if missing:
                assert not draws.is_sample(sorted([*leaves, missing[0]]), rate)
                if leaves:
                    assert not draws.is_sample(sorted([*leaves[1:], missing[0]]), rate)


def test_a_draw_whose_top_bits_tie_the_threshold_is_decided_in_full():
    seed, rate = b"\x07" * 32, 5_000
    draws = _Draws(seed, 0, 50)
    top = sample_threshold(rate) >> 192
    draws.top[3] = top  # as if leaf 3's draw had the threshold's top 64 bits
    draws.sorted = sorted(draws.top)
    exact = int.from_bytes(keccak(seed + (3).to_bytes(32, "big")), "big") < sample_threshold(rate)
    others = [i for i in sampled_leaves(seed, 0, 50, rate) if i != 3]
    assert draws.is_sample(sorted([*others, 3]) if exact else others, rate)
    assert not draws.is_sample(others if exact else sorted([*others, 3]), rate)


def test_the_report_of_an_audit_pass_lists_its_sample_in_order():
    leaves = tuple(sample(2_000))
    checkpoint = AuditedCheckpoint(LOG, NODE, 40, 240, 120, 122, b"", leaves)
    findings = [AuditFinding(LOG, NODE, 240, leaf, "bafkrei", VERIFIED) for leaf in leaves[1:]]
    findings.append(AuditFinding(LOG, NODE, 240, leaves[0], "bafkrei", NOT_RETAINED))
    findings.append(AuditFinding(LOG, NODE, 40, leaves[0], "bafkrei", VERIFIED))  # another cp
    entry = report_entry(checkpoint, findings, 2_000)
    assert entry.leaves == list(leaves) and entry.outcomes[0] == NOT_RETAINED
    assert set(entry.outcomes[1:]) == {VERIFIED}
    assert checker().check(VERIFIER, "c", entry) is not None
    partial = report_entry(checkpoint, findings[2:], 2_000)  # a finding missing: abstained
    assert partial.outcomes[:3] == [NOT_RETAINED, "abstained", "abstained"]
    assert report_entry(AuditedCheckpoint(LOG, NODE, 40, 240, 120, 122, b"", ()), findings,
                        2_000) is None  # nothing sampled: nothing to report


def test_unpublished_reports_are_read_back_and_an_unreadable_file_stops_the_start(tmp_path):
    """The reports a failed publish kept are written to the pending file and read back by the
    next publisher (a restart), once each and at most MAX_PENDING_REPORTS; a file that is not
    a list of audit entries is refused at the start, naming it, and left as it is."""
    from types import SimpleNamespace

    from committee.audit_reports import MAX_PENDING_REPORTS, AuditPublisher
    from ledger.entries import encode_entry
    from ledger.errors import LedgerError

    verifier = SimpleNamespace(account=SimpleNamespace(address=VERIFIER))  # no chain call made
    kept = tmp_path / "audit-reports.json"
    first = AuditPublisher(None, None, verifier, 2_000, kept)

    def one(leaf: int) -> bytes:
        return encode_entry(report(from_size=0, size=leaf + 1, leaves=[leaf],
                                   outcomes=[VERIFIED]))

    data = [one(leaf) for leaf in range(3)]
    first._keep_pending(data + data[:1])
    assert AuditPublisher(None, None, verifier, 2_000, kept).pending == data
    first._keep_pending([one(leaf) for leaf in range(3, MAX_PENDING_REPORTS + 3)])
    assert first.dropped == 3 and first.pending[0] != data[0]
    assert AuditPublisher(None, None, verifier, 2_000, kept).pending == first.pending
    first.pending = []
    first._keep_pending([])
    assert not kept.exists()  # nothing pending: no file

    for broken in (b'{"reports": ["zz"]}', b"[1, 2]", b'{"reports": ["' + b'7b7d' + b'"]}',
                   b'{"reports": ["' + encode_entry(AuditEntry(
                       node=NODE, log_id=LOG, from_size=0, size=1, rate_bps=10_000, leaves=[0],
                       outcomes=[VERIFIED])).hex().encode()[:-4] + b'"]}'):
        kept.write_bytes(broken)
        with pytest.raises(LedgerError, match="audit-reports.json"):
            AuditPublisher(None, None, verifier, 2_000, kept)
        assert kept.read_bytes() == broken
