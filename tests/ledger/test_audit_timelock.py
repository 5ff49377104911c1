"""Auditing a log whose owner is a contract: anchors made through a TimelockController.

The log is handed to a fresh OpenZeppelin TimelockController (delay 0, the test account
its proposer and executor), which anchors one checkpoint with ``execute`` and two more in
one ``executeBatch``. The audit must find each inner ``anchor`` call with the node's call
tracer, and still flag tampered content; a node without the tracer must say why it cannot.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from web3 import Web3

from contracts import load_artifact
from devnet.deploy import Deployer
from ledger import ExperienceEntry, LocalBlockStore, LogStore, Provenance, encode_entry
from ledger.audit import audit_log
from ledger.batches import BatchManifest, store_batch
from ledger.chain import LedgerContract, TracingUnavailableError
from ledger.evm import ZERO_ADDRESS
from ledger.multiformats import CID
from ledger.publish import append_entries, ensure_chain_log, publish

pytestmark = pytest.mark.anvil

NAME = "dao/physics"
NO_PREDECESSOR = b"\0" * 32


def experiences(start: int, count: int) -> list[bytes]:
    return [encode_entry(ExperienceEntry(
        text=f"Rule {i}: state the assumption before the derivation.", domain="physics",
        op="add", provenance=Provenance(method="tfgrpo", base_model="SmolLM2-135M-Instruct",
                                        step=i))) for i in range(start, start + count)]


@dataclass
class TimelockLog:
    store: LogStore
    content: LocalBlockStore
    contract: LedgerContract
    log_id: int
    timelock: str  # its address, the log's owner
    execute_tx: str  # anchored size 3
    batch_tx: str  # anchored sizes 5 and 7


def anchor_payload(contract: LedgerContract, store: LogStore, content: LocalBlockStore,
                   log_id: int, old: int, new: int) -> bytes:
    """Calldata of ``anchor`` for checkpoint ``new`` of ``NAME``, its manifest stored."""
    cids = [leaf.cid for leaf in store.leaves(NAME, old, new)]
    batch = store_batch(content, BatchManifest(NAME, log_id, old, new, cids))
    proof = store.consistency_proof(NAME, old, new) if old else []
    return bytes.fromhex(contract.contract.encode_abi(
        "anchor", [log_id, new, store.root(NAME, new), CID.parse(batch).to_bytes(), proof]
    ).removeprefix("0x"))


@pytest.fixture
def timelock_log(ledger_devnet, tmp_path):
    store = LogStore(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    content = LocalBlockStore(ledger_devnet.gym.data_dir / "ipfs")  # the one `gym audit` reads
    contract = ledger_devnet.contract()
    deployer = Deployer(contract.w3, ledger_devnet.owner_key)
    me = deployer.account.address
    deployed = deployer.deploy("TimelockController", 0, [me], [me], ZERO_ADDRESS)
    timelock = deployer.contract(deployed, "TimelockController")

    store.create_log(NAME)
    log_id, _ = contract.create_log(NAME)
    contract.transfer_log_ownership(log_id, deployed.address)
    append_entries(store, content, NAME, experiences(0, 3))
    payload = anchor_payload(contract, store, content, log_id, 0, 3)
    salt = b"\x01" * 32
    deployer.send(timelock.functions.schedule(contract.address, 0, payload, NO_PREDECESSOR,
                                              salt, 0))
    execute = deployer.send(timelock.functions.execute(contract.address, 0, payload,
                                                       NO_PREDECESSOR, salt))

    append_entries(store, content, NAME, experiences(3, 4))
    payloads = [anchor_payload(contract, store, content, log_id, 3, 5),
                anchor_payload(contract, store, content, log_id, 5, 7)]
    batch_args = ([contract.address] * 2, [0, 0], payloads, NO_PREDECESSOR, b"\x02" * 32)
    deployer.send(timelock.functions.scheduleBatch(*batch_args, 0))
    batch = deployer.send(timelock.functions.executeBatch(*batch_args))
    yield TimelockLog(store, content, contract, log_id, deployed.address,
                      execute["transactionHash"].to_0x_hex(), batch["transactionHash"].to_0x_hex())
    store.engine.dispose()


def test_anchor_calls_found_inside_execute_and_execute_batch(timelock_log):
    t = timelock_log
    assert t.contract.log_info(t.log_id).owner == t.timelock
    assert [(c.log_id, c.size) for c in t.contract.anchor_calls(t.execute_tx)] == [(t.log_id, 3)]
    inner = t.contract.anchor_calls(t.batch_tx)
    assert [(c.size, c.root) for c in inner] == [(5, t.store.root(NAME, 5)),
                                                 (7, t.store.root(NAME, 7))]
    assert [c.consistency_proof for c in inner] == [t.store.consistency_proof(NAME, 3, 5),
                                                    t.store.consistency_proof(NAME, 5, 7)]


def test_timelock_log_audits_clean_and_tampering_is_still_flagged(timelock_log, ledger_devnet):
    t = timelock_log
    report = audit_log(t.contract, t.content, t.log_id, from_block=ledger_devnet.deployment_block)
    assert report.ok, report.discrepancies
    assert report.owner == t.timelock
    assert [(c.size, c.tx_hash) for c in report.checkpoints] == [
        (3, t.execute_tx), (5, t.batch_tx), (7, t.batch_tx)]
    assert report.leaves == 7
    out = ledger_devnet.gym.run("audit", "--log-id", str(t.log_id))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "audit clean: 3 checkpoints, 7 entries" in out.stdout

    # Entry 4 (in the batch-anchored checkpoint 5) is rewritten in the store.
    cid = next(iter(t.store.leaves(NAME, 4, 5))).cid
    path = t.content.root / "blocks" / cid
    path.write_bytes(path.read_bytes().replace(b"Rule 4", b"Rule 5"))
    report = audit_log(t.contract, t.content, t.log_id, from_block=ledger_devnet.deployment_block)
    assert {(d.kind, d.checkpoint, d.leaf) for d in report.discrepancies} == {
        ("entry-corrupt", 5, 4), ("root-unverifiable", 5, None), ("root-unverifiable", 7, None)}
    out = ledger_devnet.gym.run("audit", "--log-id", str(t.log_id))
    assert out.returncode == 1 and "entry-corrupt" in out.stdout


class _NoTracerProvider(Web3.HTTPProvider):
    """A node that, like many public RPCs, does not serve the debug namespace."""

    def make_request(self, method, params):
        if method == "debug_traceTransaction":
            return {"jsonrpc": "2.0", "id": 0,
                    "error": {"code": -32601, "message": "Method not found"}}
        return super().make_request(method, params)


def test_without_a_tracer_direct_anchors_audit_and_timelock_anchors_say_why_not(
        timelock_log, ledger_devnet):
    t = timelock_log
    w3 = Web3(_NoTracerProvider(ledger_devnet.rpc_url))
    untraced = LedgerContract(w3, t.contract.address, load_artifact("ExperienceLedger").abi,
                              ledger_devnet.owner_key)
    with pytest.raises(TracingUnavailableError, match="refuses debug_traceTransaction"):
        untraced.anchor_calls(t.batch_tx)

    report = audit_log(untraced, t.content, t.log_id, from_block=ledger_devnet.deployment_block)
    calldata = [d for d in report.discrepancies if d.kind == "calldata"]
    assert [d.checkpoint for d in report.discrepancies] == [3, 5, 7]
    assert len(calldata) == 3 and all(t.timelock in d.message and "Method not found" in d.message
                                      for d in calldata)

    # A log its owner anchors directly needs no tracer: its calldata is the anchor call.
    t.store.create_log("alice/direct")
    direct = ensure_chain_log(t.store, untraced, "alice/direct")
    append_entries(t.store, t.content, "alice/direct", experiences(10, 2))
    publish(t.store, t.content, untraced, "alice/direct")
    append_entries(t.store, t.content, "alice/direct", experiences(12, 3))
    second = publish(t.store, t.content, untraced, "alice/direct")
    assert [c.consistency_proof for c in untraced.anchor_calls(second.tx_hash)] == [
        t.store.consistency_proof("alice/direct", 2, 5)]
    report = audit_log(untraced, t.content, direct, from_block=ledger_devnet.deployment_block)
    assert report.ok, report.discrepancies
    assert [c.size for c in report.checkpoints] == [2, 5]
