"""Publishing to, refusals by, and audits from a real ExperienceLedger on Anvil."""

from __future__ import annotations

import pytest

from ledger import ExperienceEntry, LocalBlockStore, LogStore, Provenance, encode_entry
from ledger.audit import audit_log
from ledger.batches import BatchManifest, store_batch
from ledger.chain import ChainError, ContractRevertError, LogKind
from ledger.publish import (
    CheckpointMismatchError,
    NothingToPublishError,
    append_entries,
    ensure_chain_log,
    publish,
)
from ledger.rfc9162 import leaf_hash
from ledger.rfc9162 import root as merkle_root

pytestmark = pytest.mark.anvil


def experiences(start: int, count: int) -> list[bytes]:
    return [encode_entry(ExperienceEntry(
        text=f"Rule {i}: check the units before comparing magnitudes.", domain="physics",
        op="add", provenance=Provenance(method="tfgrpo", base_model="SmolLM2-135M-Instruct",
                                        step=i))) for i in range(start, start + count)]


@pytest.fixture
def ledger(ledger_devnet, tmp_path, database_url):
    """A publisher's log on the devnet, its index on SQLite and on PostgreSQL (issue "past
    one machine": publish and audit pass the same tests on both)."""
    store = LogStore(database_url)
    content = LocalBlockStore(tmp_path / "content")
    contract = ledger_devnet.contract()
    store.create_log("alice/physics")
    log_id = ensure_chain_log(store, contract, "alice/physics")
    yield store, content, contract, log_id, ledger_devnet
    store.engine.dispose()


def test_publish_twice_then_audit_clean(ledger):
    store, content, contract, log_id, devnet = ledger
    append_entries(store, content, "alice/physics", experiences(0, 3))
    first = publish(store, content, contract, "alice/physics")
    assert (first.old_size, first.size, first.log_id, first.proof_length) == (0, 3, log_id, 0)
    append_entries(store, content, "alice/physics", experiences(3, 4))
    second = publish(store, content, contract, "alice/physics")
    assert (second.old_size, second.size) == (3, 7) and second.proof_length > 0
    assert contract.root_at(log_id, 3) == first.root == store.root("alice/physics", 3)
    assert contract.log_info(log_id).root == second.root
    assert [(c.size, c.tx_hash) for c in store.checkpoints("alice/physics")] == [
        (3, first.tx_hash), (7, second.tx_hash)]
    assert contract.anchor_calldata(second.tx_hash).consistency_proof == (
        store.consistency_proof("alice/physics", 3, 7))

    seen = []
    report = audit_log(contract, content, log_id, from_block=devnet.deployment_block,
                       progress=lambda done, total: seen.append((done, total)))
    assert report.ok, report.discrepancies
    assert (report.size, report.leaves, len(report.checkpoints)) == (7, 7, 2)
    assert seen[-1] == (7, 7)

    with pytest.raises(NothingToPublishError, match="gym ledger append alice/physics"):
        publish(store, content, contract, "alice/physics")


def test_chain_refuses_a_rewrite_and_nothing_is_recorded(ledger):
    store, content, contract, log_id, _ = ledger
    append_entries(store, content, "alice/physics", experiences(0, 3))
    first = publish(store, content, contract, "alice/physics")
    batch = first.batch_cid

    # A different history of 5 leaves with a forged proof: the contract refuses it.
    forged = [leaf_hash(b"forged %d" % i) for i in range(2)]
    with pytest.raises(ContractRevertError) as refused:
        contract.anchor(log_id, 5, leaf_hash(b"other root"), batch, forged)
    assert refused.value.name == "ExperienceLedgerInvalidConsistencyProof"
    assert f"ExperienceLedgerInvalidConsistencyProof(logId={log_id}, oldSize=3" in str(refused.value)

    with pytest.raises(ContractRevertError,
                       match=rf"ExperienceLedgerStaleCheckpoint\(logId={log_id}, size=3, "
                             r"anchoredSize=3\)"):
        contract.anchor(log_id, 3, first.root, batch, [])

    # Another key: the contract refuses it, and the refused publish leaves no local trace.
    append_entries(store, content, "alice/physics", experiences(3, 2))
    other = ledger[4].contract(ledger[4].other_key)
    with pytest.raises(ChainError, match="ExperienceLedgerNotLogOwner.*GYM_PUBLISHER_KEY"):
        publish(store, content, other, "alice/physics")
    assert [c.size for c in store.checkpoints("alice/physics")] == [3]
    assert contract.log_info(log_id).size == 3


def test_publish_refuses_when_someone_else_anchored(ledger):
    store, content, contract, log_id, _ = ledger
    append_entries(store, content, "alice/physics", experiences(0, 4))
    # Another installation holding the same key anchors size 2 of another history.
    other = [leaf_hash(e) for e in experiences(100, 2)]
    batch = store_batch(content, BatchManifest("alice/physics", log_id, 0, 2,
                                               [leaf.cid for leaf in store.leaves("alice/physics", 0, 2)]))
    contract.anchor(log_id, 2, merkle_root(other), batch, [])
    with pytest.raises(CheckpointMismatchError,
                       match="at size 2 with a root that is not this log's root at that size.*"
                             "someone else anchored it"):
        publish(store, content, contract, "alice/physics")
    assert store.checkpoints("alice/physics") == []


def test_a_publish_that_died_after_its_anchor_was_mined_is_recovered(ledger):
    """The anchor transaction of size 4 is mined but the checkpoint never recorded (the
    process died in between): the next publish adopts it and anchors what came after."""
    store, content, contract, log_id, devnet = ledger
    name = "alice/physics"
    append_entries(store, content, name, experiences(0, 4))
    batch = store_batch(content, BatchManifest(name, log_id, 0, 4,
                                               [leaf.cid for leaf in store.leaves(name)]))
    lost = contract.anchor(log_id, 4, store.root(name), batch, [])  # ... and nothing recorded
    append_entries(store, content, name, experiences(4, 2))

    result = publish(store, content, contract, name)
    assert result.recovered == (4,) and result.sent
    assert (result.old_size, result.size) == (4, 6)
    assert result.proof_length == len(store.consistency_proof(name, 4, 6)) > 0
    assert [(c.size, c.tx_hash, c.batch_cid) for c in store.checkpoints(name)] == [
        (4, lost.tx_hash, batch), (6, result.tx_hash, result.batch_cid)]
    assert contract.log_info(log_id).root == store.root(name)
    assert audit_log(contract, content, log_id, from_block=devnet.deployment_block).ok


def test_audit_detects_tampered_missing_entries_and_a_lying_manifest(ledger):
    store, content, contract, log_id, devnet = ledger
    name = "alice/physics"
    append_entries(store, content, name, experiences(0, 4))
    leaves = list(store.leaves(name))
    # Checkpoint 4 names its entries in the wrong order: a valid manifest that lies.
    swapped = [leaves[1].cid, leaves[0].cid, leaves[2].cid, leaves[3].cid]
    contract.anchor(log_id, 4, store.root(name, 4),
                    store_batch(content, BatchManifest(name, log_id, 0, 4, swapped)), [])
    append_entries(store, content, name, experiences(4, 3))
    # Checkpoint 7's manifest claims to come from another log.
    cids = [leaf.cid for leaf in store.leaves(name, 4, 7)]
    contract.anchor(log_id, 7, store.root(name, 7),
                    store_batch(content, BatchManifest(name, log_id + 5, 4, 7, cids)),
                    store.consistency_proof(name, 4, 7))
    # Entry 5 is tampered with on disk, entry 6 is gone.
    (content.root / "blocks" / cids[1]).write_bytes(b'{"type":"experience","v":1}')
    content.delete_block(cids[2])

    report = audit_log(contract, content, log_id, from_block=devnet.deployment_block)
    found = {(d.kind, d.checkpoint, d.leaf) for d in report.discrepancies}
    assert found == {
        ("root-mismatch", 4, None),
        ("batch-mismatch", 7, None),
        ("entry-corrupt", 7, 5),
        ("entry-missing", 7, 6),
        ("root-unverifiable", 7, None),
    }
    mismatch = next(d for d in report.discrepancies if d.kind == "root-mismatch")
    assert mismatch.expected == "0x" + store.root(name, 4).hex() != mismatch.computed
    lie = next(d for d in report.discrepancies if d.kind == "batch-mismatch")
    assert (lie.expected, lie.computed) == (log_id, log_id + 5)
    assert [c.ok for c in report.checkpoints] == [False, False]


def test_audit_without_events_before_the_start_block_says_so(ledger):
    store, content, contract, log_id, _ = ledger
    append_entries(store, content, "alice/physics", experiences(0, 2))
    result = publish(store, content, contract, "alice/physics")
    report = audit_log(contract, content, log_id, from_block=result.block_number + 1)
    assert [d.kind for d in report.discrepancies] == ["head-mismatch"]


def test_curated_log_appended_on_chain_audits_clean(ledger):
    _, content, contract, _, devnet = ledger
    curated, _ = contract.create_log("library/physics", LogKind.CURATED)
    entries = experiences(0, 5)
    cids = [content.add_file(e) for e in entries]
    contract.append_leaves(curated, [leaf_hash(e) for e in entries[:2]], cids[:2])
    contract.append_leaves(curated, [leaf_hash(e) for e in entries[2:]], cids[2:])
    report = audit_log(contract, content, curated, from_block=devnet.deployment_block)
    assert report.ok, report.discrepancies
    assert (report.kind, report.leaves, [c.size for c in report.checkpoints]) == (
        LogKind.CURATED, 5, [2, 5])

    content.delete_block(cids[3])
    report = audit_log(contract, content, curated, from_block=devnet.deployment_block)
    assert [(d.kind, d.leaf) for d in report.discrepancies] == [("entry-missing", 3)]


def test_events_are_paged_in_small_block_ranges(ledger):
    store, content, contract, log_id, devnet = ledger
    for start in range(0, 6, 2):
        append_entries(store, content, "alice/physics", experiences(start, 2))
        publish(store, content, contract, "alice/physics")
    contract.page_blocks = 1
    assert [e.size for e in contract.anchored(log_id, devnet.deployment_block)] == [2, 4, 6]
