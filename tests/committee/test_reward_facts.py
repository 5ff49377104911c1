"""What an epoch reads of one log is bounded, the same cut for everyone: real batch manifests
and entries in a real block store, the chain's ``Anchored`` events given as the ledger client
returns them."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from committee.rewards import facts
from ledger.batches import BatchManifest, store_batch
from ledger.blockstore import LocalBlockStore
from ledger.chain import AnchoredEvent
from ledger.entries import entry_cid
from ledger.publish import entry_from_json

LOG = 7


def _entry(i: int) -> bytes:
    return entry_from_json({"type": "experience", "v": 1, "op": "add", "domain": "math",
                            "text": f"Rule {i}: write the units.",
                            "provenance": {"method": "tfgrpo", "base_model": "m", "step": i}})


@pytest.fixture
def log(tmp_path):
    """Log ``LOG`` anchored at sizes 3 (block 10), 6 (block 20) and 9 (block 30)."""
    content = LocalBlockStore(tmp_path / "ipfs")
    cids, events, size = [], [], 0
    for block in (10, 20, 30):
        batch = []
        for i in range(size, size + 3):
            data = _entry(i)
            content.add_file(data, pin=True)
            batch.append(entry_cid(data))
        cid = store_batch(content, BatchManifest("log", LOG, size, size + 3, batch))
        size += 3
        cids += batch
        events.append(AnchoredEvent(LOG, size, bytes(32), cid, cid.encode(), "0x", block, 0))

    def anchored(log_id, from_block=0, to_block=None):
        return [e for e in events if from_block <= e.block_number <= (to_block or 10**9)]

    sources = SimpleNamespace(ledger=SimpleNamespace(anchored=anchored), content=content,
                              from_block=0)
    return sources, cids


def entries(sources, first: int) -> list:
    """(cid, entry) of what an epoch from block ``first`` reads."""
    read = facts._checkpoint_entries(sources, LOG, sources.ledger.anchored(LOG), first)
    return [(cid, entry) for _leaf, cid, entry in read]


def test_an_epoch_reads_the_checkpoints_anchored_in_its_blocks(log):
    sources, cids = log
    read = list(facts._checkpoint_entries(sources, LOG, sources.ledger.anchored(LOG), 15))
    assert [(leaf, cid) for leaf, cid, _ in read] == list(enumerate(cids))[3:9]
    assert all(entry.text.startswith("Rule") for _, _, entry in read)


def test_a_log_costs_an_epoch_at_most_its_leaf_and_byte_budgets(log, monkeypatch):
    sources, cids = log
    monkeypatch.setattr(facts, "MAX_EPOCH_LEAVES", 5)
    # 3 leaves, then a checkpoint of 3 more than the 2 left: nothing from it on
    assert [cid for cid, _ in entries(sources, 0)] == cids[:3]
    monkeypatch.setattr(facts, "MAX_EPOCH_LEAVES", 1 << 20)
    size = len(_entry(0))
    monkeypatch.setattr(facts, "MAX_EPOCH_BYTES", 4 * size + 1)
    read = entries(sources, 0)
    # four whole entries fit; the fifth is read up to what is left, too little: no entry
    assert [cid for cid, _ in read] == cids[:5]
    assert [entry is not None for _, entry in read] == [True] * 4 + [False]


def test_a_missing_manifest_counts_nothing_and_the_next_checkpoint_still_counts(log, tmp_path):
    sources, cids = log
    other = LocalBlockStore(tmp_path / "other")  # an endpoint with the third checkpoint only
    for cid in cids[6:9]:
        other.add_file(sources.content.cat(cid), pin=True)
    third = store_batch(other, BatchManifest("log", LOG, 6, 9, cids[6:9]))
    assert third == sources.ledger.anchored(LOG)[2].batch_cid
    sources.content = other
    assert [cid for cid, _ in entries(sources, 0)] == cids[6:9]


# --------------------------------------------------------------------------- audit reports

VERIFIER, NODE, AUDITS, RECEIPTS = "0x" + "0b" * 20, "0x" + "0a" * 20, 9, 8


def test_audit_reports_count_within_the_node_logs_leaf_budget(tmp_path, monkeypatch):
    """A verifier's reports on two checkpoints of a node's receipt log anchored in the epoch
    (blocks 100-199); with a leaf budget that holds only the first, the report on the second
    counts nothing (a hostile node cannot make the table hash more than the budget), and a
    verifier's second report on a checkpoint never counts."""
    from eth_utils import keccak, to_checksum_address

    from committee.audit_reports import AUDITS_LOG
    from committee.audits import AUDIT_DELAY_BLOCKS, audit_seed, sampled_leaves
    from ledger.chain import LogCreatedEvent, LogKind
    from ledger.entries import AuditEntry, encode_entry

    def block_hash(n: int) -> bytes:
        return keccak(b"block %d" % n)

    node_events = [AnchoredEvent(RECEIPTS, size, bytes(32), None, b"", "0x", block, 0)
                   for size, block in ((40, 110), (80, 120))]

    def report(from_size: int, size: int, block: int) -> bytes:
        seed = audit_seed(block_hash(block + AUDIT_DELAY_BLOCKS), RECEIPTS, size)
        leaves = sampled_leaves(seed, from_size, size, 2_000)
        return encode_entry(AuditEntry(node=NODE, log_id=RECEIPTS, from_size=from_size,
                                       size=size, rate_bps=2_000, leaves=leaves,
                                       outcomes=["verified"] * len(leaves)))

    content = LocalBlockStore(tmp_path / "ipfs")
    reports = [report(0, 40, 110), report(40, 80, 120)]
    cids = []
    for data in reports:
        content.add_file(data, pin=True)
        cids.append(entry_cid(data))
    # the first report twice: its second copy counts nothing
    manifest = store_batch(content, BatchManifest(AUDITS_LOG, AUDITS, 0, 3,
                                                  [cids[0], cids[1], cids[0]]))
    audit_events = [AnchoredEvent(AUDITS, 3, bytes(32), manifest, manifest.encode(), "0x", 150,
                                  0)]
    slot = SimpleNamespace(active=True, verifier=to_checksum_address(VERIFIER))
    sources = SimpleNamespace(
        content=content, from_block=0,
        committee=SimpleNamespace(
            events=lambda name, *_: [(None, {"verifier": VERIFIER, "index": 0})],
            slot=lambda index, block: slot),
        ledger=SimpleNamespace(
            w3=SimpleNamespace(eth=SimpleNamespace(get_block=lambda n: {"hash": block_hash(n)})),
            logs_created=lambda *_: [LogCreatedEvent(AUDITS, to_checksum_address(VERIFIER),
                                                     LogKind.PUBLISHER, AUDITS_LOG, "0x", 5, 0)],
            anchored=lambda log_id, *_: audit_events if log_id == AUDITS else node_events))
    monkeypatch.setattr(facts, "_owner_at", lambda *_: to_checksum_address(VERIFIER))

    counted = facts.audit_reports(sources, 100, 199, {to_checksum_address(NODE): RECEIPTS},
                                  {RECEIPTS: node_events})
    assert [(r.size, r.entry) for r in counted] == [(40, cids[0]), (80, cids[1])]
    monkeypatch.setattr(facts, "MAX_EPOCH_LEAVES", 60)  # holds the first checkpoint only
    counted = facts.audit_reports(sources, 100, 199, {to_checksum_address(NODE): RECEIPTS},
                                  {RECEIPTS: node_events})
    assert [(r.size, r.entry, r.passed) for r in counted] == [(40, cids[0], True)]
