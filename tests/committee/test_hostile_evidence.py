"""Evidence that would stall a verifier is a verdict: the challenger published it, so its
challenge is rejected (issue "judges that cannot be stalled": verifiers always move on)."""

from __future__ import annotations

import time

from hostile_dags import honest_repeating_dag, repeating_dag

from committee.client import OpenedChallenge
from committee.judge import ABSTAIN_OUTCOME, MAX_EVIDENCE_BYTES, REJECTED_OUTCOME
from committee.service import evidence_judge
from ledger import LocalBlockStore

RECEIPT = bytes(range(32))


def _opened(cid: str) -> OpenedChallenge:
    return OpenedChallenge(challenge_id=7, registry_challenge_id=7, operator="0x" + "11" * 20,
                           challenger="0x" + "22" * 20, receipt_hash=RECEIPT, bond=1,
                           evidence_cid=cid, block_number=1)


def _judge(store):
    checked = []
    return evidence_judge(store, lambda bundle: checked.append(bundle)), checked


def test_a_repeating_zero_size_dag_is_rejected_at_once(tmp_path):
    store = LocalBlockStore(tmp_path / "ipfs")
    judge_challenge, checked = _judge(store)
    started = time.monotonic()
    judgement = judge_challenge(_opened(repeating_dag(store, levels=4, fanout=2000)))
    assert time.monotonic() - started < 5
    assert judgement.outcome == REJECTED_OUTCOME and judgement.reason == ""
    assert "declares 0 bytes" in judgement.detail
    assert judgement.verdict(7, RECEIPT).verdict == 2  # signed and sent: the bond is forfeited
    assert checked == []  # the receipt check never ran


def test_evidence_declaring_more_than_the_limit_is_rejected_unread(tmp_path):
    store = LocalBlockStore(tmp_path / "ipfs")
    judge_challenge, _ = _judge(store)
    root, size = honest_repeating_dag(store, levels=3, fanout=1000)
    assert size > MAX_EVIDENCE_BYTES
    judgement = judge_challenge(_opened(root))
    assert judgement.outcome == REJECTED_OUTCOME
    assert f"over the {MAX_EVIDENCE_BYTES}-byte limit" in judgement.detail
    # a real file just over the limit: refused from its root, before its leaves are read
    big = store.add_file(bytes(MAX_EVIDENCE_BYTES + 1))
    assert judge_challenge(_opened(big)).outcome == REJECTED_OUTCOME


def test_evidence_the_store_does_not_have_is_still_an_abstention(tmp_path):
    """Missing content may arrive later, and is no proof the challenger cheated."""
    store = LocalBlockStore(tmp_path / "ipfs")
    judge_challenge, _ = _judge(store)
    missing = "bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku"
    assert judge_challenge(_opened(missing)).outcome == ABSTAIN_OUTCOME
