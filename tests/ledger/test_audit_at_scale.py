"""Auditing from chain + a content endpoint alone: a thousand entries per request (the CARs of
each batch's entries DAG through `dag/export`), the first bad entry named, a resumable state.

The publisher's store is the directory a real `gym ipfs serve` process serves; the auditor
reads only through `KuboStore` (the Kubo RPC). The DAG's fan-out is lowered to 8 in this
process (publisher and auditor compute the same tree from the same constant), so a log of a
few dozen entries spans several chunks and checkpoints.
"""

from __future__ import annotations

import json

import pytest
from ipfs_node import Node

from ledger import ExperienceEntry, LocalBlockStore, LogStore, Provenance, batches, encode_entry
from ledger.audit import audit_log, audit_report_json, first_bad_entry
from ledger.audit_state import AuditState, AuditStateError, decode_state, encode_state
from ledger.kubo import KuboStore
from ledger.publish import append_entries, ensure_chain_log, publish

pytestmark = pytest.mark.anvil

FANOUT = 8


def experiences(start: int, count: int) -> list[bytes]:
    return [encode_entry(ExperienceEntry(
        text=f"Rule {i}: estimate first, then compute.", domain="math", op="add",
        provenance=Provenance(method="tfgrpo", base_model="SmolLM2-135M-Instruct", step=i)))
        for i in range(start, start + count)]


class Counted(KuboStore):
    """A KuboStore that counts its requests by kind."""

    def __init__(self, url: str):
        super().__init__(url)
        self.block_gets = 0
        self.exports = 0

    def get_block(self, cid):
        self.block_gets += 1
        return super().get_block(cid)

    def export_dag(self, cid, **bounds):
        self.exports += 1
        return super().export_dag(cid, **bounds)


@pytest.fixture
def published(ledger_devnet, tmp_path, monkeypatch):
    """A 60-entry log in two checkpoints (25, then 35 entries), published from the store a
    `gym ipfs serve` process serves."""
    monkeypatch.setattr(batches, "ENTRY_DAG_FANOUT", FANOUT)
    node = Node(tmp_path / "endpoint")
    content = LocalBlockStore(node.data_dir)
    store = LogStore(f"sqlite:///{tmp_path / 'publisher.sqlite'}")
    contract = ledger_devnet.contract()
    store.create_log("alice/scale")
    log_id = ensure_chain_log(store, contract, "alice/scale")
    for first, count in ((0, 25), (25, 35)):
        append_entries(store, content, "alice/scale", experiences(first, count))
        publish(store, content, contract, "alice/scale")
    cids = [leaf.cid for leaf in store.leaves("alice/scale", 0, 60)]
    yield node, contract, log_id, cids, ledger_devnet.deployment_block
    store.engine.dispose()
    node.stop()


def test_entries_arrive_a_chunk_per_request(published):
    node, contract, log_id, _cids, start = published
    endpoint = Counted(node.url)
    report = audit_log(contract, endpoint, log_id, from_block=start)
    assert report.ok, report.discrepancies
    assert (report.leaves, len(report.checkpoints)) == (60, 2)
    # 25 entries are 4 chunks of 8, 35 are 5: nine CARs; block/get only for the 2 manifests
    assert endpoint.exports == 9
    assert endpoint.block_gets == 2
    assert first_bad_entry(report) is None


def test_first_bad_entry_is_named_and_the_rest_still_checked(published):
    node, contract, log_id, cids, start = published
    node.block_path(cids[30]).unlink()  # missing on the endpoint
    node.block_path(cids[41]).write_bytes(experiences(99, 1)[0])  # other bytes under its CID
    endpoint = Counted(node.url)
    report = audit_log(contract, endpoint, log_id, from_block=start)
    kinds = [(d.kind, d.leaf, d.entry_cid) for d in report.discrepancies]
    assert ("entry-missing", 30, cids[30]) in kinds
    # the endpoint re-hashes what it serves and refuses the damaged block: not served
    damaged = next(d for d in report.discrepancies if d.leaf == 41)
    assert (damaged.kind, damaged.entry_cid) == ("entry-missing", cids[41])
    assert "does not hash to" in damaged.message
    bad = first_bad_entry(report)
    assert (bad.leaf, bad.entry_cid) == (30, cids[30])
    assert report.leaves == 60 and report.checkpoints[0].ok and not report.checkpoints[1].ok
    assert audit_report_json(report)["first_bad_entry"] == {
        "leaf": 30, "entry_cid": cids[30], "kind": "entry-missing"}
    # only the damaged chunks fell back to reads by CID; the others still came as CARs
    assert endpoint.exports == 9 and endpoint.block_gets < 2 + 16


def test_a_batch_published_without_its_dag_is_read_entry_by_entry(published):
    node, contract, log_id, cids, start = published
    for chunk in batches.batch_dag(cids[25:]).chunks:  # as if published before the DAG existed
        node.block_path(str(chunk.cid)).unlink()
    endpoint = Counted(node.url)
    report = audit_log(contract, endpoint, log_id, from_block=start)
    assert report.ok, report.discrepancies
    assert endpoint.block_gets == 2 + 35


def test_an_interrupted_audit_resumes_where_it_stopped(published):
    node, contract, log_id, cids, start = published
    node.block_path(cids[3]).unlink()  # a discrepancy before the interruption is kept
    whole = audit_report_json(audit_log(contract, KuboStore(node.url), log_id, from_block=start))

    saved: list[AuditState] = []

    def stop_at_leaf_44(done, _total):
        if done == 44:
            raise KeyboardInterrupt

    def save(state):
        saved.append(decode_state(encode_state(state)))  # through its wire format

    with pytest.raises(KeyboardInterrupt):
        audit_log(contract, KuboStore(node.url), log_id, from_block=start,
                  progress=stop_at_leaf_44, save=save, save_every_s=0)
    # saved at every chunk (8 entries) and checkpoint boundary: the last one before leaf 44 is
    # 16 entries into the second checkpoint's batch
    assert [(s.prev_size, s.position) for s in saved] == [(0, 8), (0, 16), (0, 24), (25, 0),
                                                          (25, 8), (25, 16)]
    last = saved[-1]
    assert last.leaves == 41 and last.tree_size == 3  # leaf 3 is missing: the tree stopped there

    endpoint = Counted(node.url)
    seen = []
    resumed = audit_log(contract, endpoint, log_id, from_block=start, resume=last,
                        on_entry=lambda index, cid, data: seen.append(index))
    assert seen[0] == last.leaves and seen[-1] == 59  # nothing before the resume again
    assert endpoint.exports == 3  # the chunks after the resume point only
    # the same report as the audit that was never interrupted
    assert audit_report_json(resumed) == whole
    assert whole["first_bad_entry"]["leaf"] == 3 and whole["leaves_replayed"] == 60

    # resumed at a checkpoint boundary: the next checkpoint's anchor call is still checked
    at_boundary = saved[3]
    traced = []
    anchor_calls = contract.anchor_calls
    contract.anchor_calls = lambda tx: traced.append(tx) or anchor_calls(tx)
    try:
        again = audit_log(contract, KuboStore(node.url), log_id, from_block=start,
                          resume=at_boundary)
    finally:
        del contract.anchor_calls
    assert len(traced) == 1 and audit_report_json(again) == whole


def test_a_state_of_another_log_or_a_rewritten_chain_is_refused(published):
    node, contract, log_id, _cids, start = published
    states: list[AuditState] = []
    audit_log(contract, KuboStore(node.url), log_id, from_block=start, save=states.append)
    final = states[-1]
    assert (final.prev_size, final.position, final.leaves) == (60, 0, 60)
    other = AuditState(final.chain_id, final.ledger, log_id + 1)
    with pytest.raises(AuditStateError, match="not of log"):
        audit_log(contract, KuboStore(node.url), log_id, from_block=start, resume=other)
    forged = AuditState(**{**final.__dict__, "prev_size": 25, "prev_root": "0x" + "ab" * 32,
                           "checkpoints": final.checkpoints[:1]})
    with pytest.raises(AuditStateError, match="audit again without --resume"):
        audit_log(contract, KuboStore(node.url), log_id, from_block=start, resume=forged)


@pytest.mark.parametrize("change, match", [
    (lambda s: s.update(v=2), "not an audit-state v1"),
    (lambda s: s.update(tree=["0x" + "00" * 32] * 3), "subtree roots"),
    (lambda s: s.update(leaves=-1), "leaves must be a non-negative"),
    (lambda s: s.update(prev_root="0x12"), "prev_root"),
    (lambda s: s.update(flagged_at=5), "flagged_at"),
    (lambda s: s.update(checkpoints=[1]), "checkpoints must be a list of objects"),
    (lambda s: s.update(checkpoints=[{"size": 3}]), r"checkpoints\[0\] must have exactly"),
    (lambda s: s.update(checkpoints=[{"size": 3, "root": "0x12", "tx_hash": "0x", "ok": True,
                                      "block_number": 1, "batch_cid": None}]),
     r"checkpoints\[0\].root"),
    (lambda s: s.update(discrepancies=[{"kind": "x", "message": "m", "checkpoint": None,
                                        "leaf": -1, "entry_cid": None, "expected": None,
                                        "computed": None}]), r"discrepancies\[0\].leaf"),
])
def test_a_malformed_state_is_one_clear_error(change, match):
    state = json.loads(encode_state(AuditState(31337, "0x" + "11" * 20, 1, tree_size=2,
                                               tree=["0x" + "00" * 32])))
    change(state)
    with pytest.raises(AuditStateError, match=match):
        decode_state(json.dumps(state).encode())


def test_gym_audit_saves_its_state_and_resume_replays_only_what_is_new(published,
                                                                      ledger_devnet):
    node, _contract, log_id, cids, _start = published
    gym = ledger_devnet.gym
    env = {"GYM_IPFS_API": node.url}
    first = gym.run("audit", str(log_id), extra_env=env)
    assert first.returncode == 0, first.stderr
    assert "audit clean: 2 checkpoints, 60 entries" in first.stdout
    (state_file,) = (gym.data_dir / "audits").iterdir()
    assert state_file.name.endswith(f"-{log_id}.json")
    assert decode_state(state_file.read_bytes()).leaves == 60

    again = gym.run("audit", str(log_id), "--resume", extra_env=env)
    assert again.returncode == 0, again.stderr
    assert f"resuming the audit of log {log_id} at leaf 60" in again.stderr
    assert "audit clean: 2 checkpoints, 60 entries" in again.stdout

    # (this subprocess reads with the real fan-out of 1024, which finds no DAG of that shape
    # here: it reads entry by entry, the path of batches published before the DAG existed)
    node.block_path(cids[7]).unlink()  # damage found by a full replay, named in its report
    full = gym.run("audit", str(log_id), extra_env=env)
    assert full.returncode == 1
    assert f"first bad entry: leaf 7, {cids[7]} (entry-missing)" in full.stdout
