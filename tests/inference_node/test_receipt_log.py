"""The receipt log's background appender: receipts submitted from many threads are appended in
batches (one transaction for a burst), in submission order; a failing store is retried and loses
nothing; proofs and anchors wait for what is queued."""

from __future__ import annotations

import threading

from node_helpers import DOMAIN, NODE_KEY

from inference_node.receipt_log import ReceiptLog
from inference_node.receipts import build_receipt, library_ref, sign_receipt
from ledger.blockstore import LocalBlockStore
from ledger.entries import encode_entry, entry_cid
from ledger.errors import LedgerError
from ledger.logstore import LogStore
from ledger.proofs import verify_proof_document


def receipts(n: int) -> list:
    from eth_account import Account

    node = Account.from_key(NODE_KEY).address
    out = []
    for i in range(n):
        unsigned = build_receipt(
            node=node, model_digest="sha256:" + "ab" * 32, library=library_ref("", 0, ""),
            experience_ids=[], request_json={"i": i}, text=f"answer {i}",
            completion_token_ids=[i], prompt_tokens=3, temperature=0.0, top_p=1.0,
            max_tokens=4, seed=i, activation_commitment="toploc1:1:32:AA==", at=1_700_000_000)
        out.append(sign_receipt(unsigned, NODE_KEY, DOMAIN))
    return out


class CountingStore(LogStore):
    """A real LogStore that counts its append transactions."""

    appends = 0

    def append(self, name, entries):
        self.appends += 1
        return super().append(name, entries)


def test_burst_is_appended_in_batches_in_order(tmp_path, database_url):
    store = CountingStore(database_url)
    content = LocalBlockStore(tmp_path / "ipfs")
    log = ReceiptLog(store, content, None, "node/receipts")
    batch = receipts(40)
    cids: list[str] = []
    lock = threading.Lock()

    def submit_all(part):
        for receipt in part:
            with lock:  # submission order = the order recorded here
                cids.append(log.submit(receipt))

    threads = [threading.Thread(target=submit_all, args=(batch[i::4],)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert log.flush_appends(30)
    assert [leaf.cid for leaf in store.leaves("node/receipts")] == cids
    assert set(cids) == {entry_cid(encode_entry(r)) for r in batch}
    assert store.appends < len(batch)  # batched: fewer transactions than receipts
    assert log.pending() == 40  # appended, no chain to anchor on
    for cid in (cids[0], cids[-1]):
        proof = verify_proof_document(log.proof(cid))
        assert proof.entry_cid == cid and proof.size == 40


class FlakyStore(LocalBlockStore):
    """A real local store whose first write fails, as an unreachable Kubo would."""

    failures = 1

    def add_file(self, source, *, pin=False):
        if self.failures:
            self.failures -= 1
            raise LedgerError("store unreachable")
        return super().add_file(source, pin=pin)


def test_failed_append_is_retried_and_loses_nothing(tmp_path, database_url):
    store = LogStore(database_url)
    log = ReceiptLog(store, FlakyStore(tmp_path / "ipfs"), None, "node/receipts")
    cids = [log.submit(r) for r in receipts(3)]
    assert log.pending() >= 3
    assert log.flush_appends(30)
    assert [leaf.cid for leaf in store.leaves("node/receipts")] == cids
    assert log.last_error is None
    assert log.append(receipts(4)[3]) == entry_cid(encode_entry(receipts(4)[3]))
    assert store.get_log("node/receipts").size == 4
