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
    return list(facts._checkpoint_entries(sources, LOG, sources.ledger.anchored(LOG), first))


def test_an_epoch_reads_the_checkpoints_anchored_in_its_blocks(log):
    sources, cids = log
    read = entries(sources, 15)
    assert [cid for cid, _ in read] == cids[3:9]
    assert all(entry.text.startswith("Rule") for _, entry in read)


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
