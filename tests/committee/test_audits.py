"""committee.audits (docs/committee.md "Random audits"): the chain-fixed seed and the per-leaf
sampling rule; an auditor over hostile nodes with a stand-in chain; and on a real Anvil
ExperienceLedger a receipt log anchored, pending until the seed block is mined, then audited
at 100 % (one receipt failing `check`, challenged with its reason) and at 50 % (the sample is
the one the block hash fixes)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from eth_abi import encode as abi_encode
from eth_account import Account
from eth_utils import keccak
from node_helpers import NODE_KEY

from committee.audits import (
    ABSTAINED,
    AUDIT_DELAY_BLOCKS,
    ERROR,
    FAILED,
    INVALID_BUNDLE,
    MAX_CHECKPOINT_LEAVES,
    NOT_RETAINED,
    PENDING,
    UNAUDITABLE,
    UNREACHABLE,
    VERIFIED,
    AuditCursor,
    Auditor,
    audit_seed,
    is_sampled,
    sample_threshold,
    sampled_leaves,
)
from committee.judge import REQUIRED_CHECKS
from inference_node.bundle_sources import NotRetainedError
from inference_node.errors import NodeError, ReceiptError
from inference_node.receipts import (
    ReceiptDomain,
    build_receipt,
    bundle_json,
    library_ref,
    parse_receipt,
    sign_receipt,
)
from inference_node.registry import RegisteredNode
from inference_node.verify import ReceiptCheck
from ledger.batches import BatchManifest, encode_batch
from ledger.blockstore import LocalBlockStore
from ledger.chain import AnchoredEvent
from ledger.entries import encode_entry, entry_cid
from ledger.multiformats import CID

# --------------------------------------------------------------------------- seed and sample


def test_the_seed_is_keccak_of_the_abi_encoded_block_hash_log_and_size():
    block_hash = bytes.fromhex("ab" * 32)
    seed = audit_seed(block_hash, 7, 12)
    assert seed == keccak(block_hash + (7).to_bytes(32, "big") + (12).to_bytes(32, "big"))
    assert seed == audit_seed(block_hash, 7, 12)  # deterministic
    assert len({seed, audit_seed(bytes.fromhex("ac" * 32), 7, 12), audit_seed(block_hash, 8, 12),
                audit_seed(block_hash, 7, 13)}) == 4


def test_a_leaf_is_drawn_by_its_index_alone_below_the_rate_threshold():
    seed = audit_seed(b"\x01" * 32, 1, 1000)
    draw = int.from_bytes(keccak(abi_encode(["bytes32", "uint256"], [seed, 5])), "big")
    assert is_sampled(seed, 5, 10_000) and not is_sampled(seed, 5, 0)
    assert is_sampled(seed, 5, 2500) == (draw < 2500 * 2**256 // 10_000)
    assert sample_threshold(10_000) == 2**256 and sample_threshold(1) == 2**256 // 10_000
    assert sampled_leaves(seed, 3, 9, 10_000) == [3, 4, 5, 6, 7, 8]
    assert sampled_leaves(seed, 0, 500, 0) == [] and sampled_leaves(seed, 4, 4, 5000) == []
    everything = sampled_leaves(seed, 0, 1000, 2500)
    # independent per leaf: a sub-range's sample is the whole range's, cut
    assert sampled_leaves(seed, 200, 700, 2500) == [i for i in everything if 200 <= i < 700]
    assert everything == [i for i in range(1000) if is_sampled(seed, i, 2500)]
    # another block hash, another sample
    other = audit_seed(b"\x02" * 32, 1, 1000)
    assert sampled_leaves(other, 0, 1000, 2500) != everything


@pytest.mark.parametrize("rate_bps", [100, 500, 1000])
def test_the_sampled_fraction_is_the_rate(rate_bps):
    n = 100_000
    p = rate_bps / 10_000
    count = len(sampled_leaves(audit_seed(b"\x07" * 32, 3, n), 0, n, rate_bps))
    sigma = (n * p * (1 - p)) ** 0.5
    assert abs(count - n * p) < 6 * sigma, (count, n * p)


@pytest.mark.parametrize("rate", [-1, 10_001, 2.5, True])
def test_a_rate_outside_basis_points_is_refused(rate):
    with pytest.raises(ValueError):
        sample_threshold(rate)


def test_a_range_too_large_or_reversed_is_refused():
    with pytest.raises(ValueError):
        sampled_leaves(b"\x00" * 32, 5, 4, 500)
    with pytest.raises(ValueError):
        sampled_leaves(b"\x00" * 32, 0, MAX_CHECKPOINT_LEAVES + 1, 500)


def test_the_cursor_round_trips_and_refuses_junk():
    cursor = AuditCursor.from_json(b'{"type":"audit-cursor","v":1,"logs":{"3":{"size":8,'
                                   b'"block":40},"4":{"size":null,"block":0}}}')
    assert (cursor.logs[3].size, cursor.logs[3].block, cursor.logs[4].size) == (8, 40, None)
    assert AuditCursor.from_json(json.dumps(cursor.to_json()).encode()) == cursor
    for junk in (b"[]", b'{"type":"audit-cursor","v":1,"logs":{"x":{"size":1,"block":1}}}',
                 b'{"type":"audit-cursor","v":1,"logs":{"1":{"size":-1,"block":1}}}', b"{"):
        with pytest.raises(ValueError):
            AuditCursor.from_json(junk)


# --------------------------------------------------------------------------- receipts


def receipt_bundle(i: int, domain: ReceiptDomain, key: str = NODE_KEY) -> dict:
    """A v1 receipt signed by ``key`` under ``domain``, with the request and response its
    digests sign: evidence the judge accepts (what it then says is `check`'s)."""
    request = {"messages": [{"role": "user", "content": f"question {i}"}], "max_tokens": 4}
    unsigned = build_receipt(
        node=Account.from_key(key).address, model_digest="sha256:" + "ab" * 32,
        library=library_ref("", 0, ""), experience_ids=[], request_json=request,
        text=f"answer {i}", completion_token_ids=[i, i + 1], prompt_tokens=3, temperature=0.0,
        top_p=1.0, max_tokens=4, seed=i, activation_commitment="toploc1:1:32:AA==",
        at=1_700_000_000)
    receipt = sign_receipt(unsigned, key, domain)
    return bundle_json(receipt, domain, route="chat", request=request, text=f"answer {i}",
                       completion_token_ids=[i, i + 1])


def cid_of(bundle: dict) -> str:
    return entry_cid(encode_entry(parse_receipt(bundle["receipt"])))


class Check:
    """A stand-in for `check_receipt_bundle`: every required check passes, except for the
    receipts named in ``failing`` (CID -> reason)."""

    def __init__(self, failing: dict[str, str] | None = None):
        self.failing = failing or {}
        self.seen: list[str] = []

    def __call__(self, bundle: dict) -> list[ReceiptCheck]:
        cid = cid_of(bundle)
        self.seen.append(cid)
        assert "inclusion" not in bundle  # the judge drops the unsigned proof
        if cid in self.failing:
            raise ReceiptError(self.failing[cid], "the verifier's prefill disagrees")
        return [ReceiptCheck(name, True, "ok") for name in REQUIRED_CHECKS]


class Challenges:
    def __init__(self):
        self.opened: list[tuple[str, str]] = []

    def __call__(self, bundle: dict, reason: str) -> int:
        self.opened.append((cid_of(bundle), reason))
        return len(self.opened)


def registered(operator: str, log_id: int, endpoint: str, active: bool = True) -> RegisteredNode:
    return RegisteredNode(operator, Account.from_key(NODE_KEY).address, 1, 0,
                          "sha256:" + "ab" * 32, 10**20, log_id, endpoint, active)


# --------------------------------------------------------------------------- stand-in chain


class FakeChain:
    """What the auditor reads of the ExperienceLedger: ``anchored`` events, block hashes."""

    def __init__(self):
        self.events: dict[int, list[AnchoredEvent]] = {}
        self.head = 0
        self.broken: set[int] = set()
        self.w3 = SimpleNamespace(eth=self)

    @property
    def block_number(self) -> int:
        return self.head

    def get_block(self, number: int) -> dict:
        assert number <= self.head
        return {"hash": keccak(b"block %d" % number)}

    def anchored(self, log_id: int, from_block: int = 0, to_block: int | None = None):
        if log_id in self.broken:
            raise ConnectionError("RPC down for this log")
        return [e for e in self.events.get(log_id, [])
                if from_block <= e.block_number <= (to_block if to_block is not None else 1e9)]

    def anchor(self, content, log_id: int, cids: list[str], block: int,
               batch: bool = True) -> None:
        old = self.events[log_id][-1].size if self.events.get(log_id) else 0
        manifest = BatchManifest(log=f"log{log_id}", log_id=log_id, from_size=old,
                                 to_size=old + len(cids), entries=cids)
        # the manifest alone (a hostile node's batch may name entries it never stored, which
        # store_batch refuses: it pins the batch's entries DAG)
        cid = content.add_file(encode_batch(manifest), pin=True) if batch else entry_cid(
            b"never stored")
        self.events.setdefault(log_id, []).append(AnchoredEvent(
            log_id, old + len(cids), b"\x00" * 32, cid, CID.parse(cid).to_bytes(), "0x",
            block, 0))
        self.head = max(self.head, block)


def test_hostile_nodes_are_contained_and_each_checkpoint_audited_once(tmp_path):
    domain = ReceiptDomain(31337, "0x" + "12" * 20)
    content = LocalBlockStore(tmp_path / "content")
    chain = FakeChain()
    bundles = {f"http://honest/{cid_of(b)}": b for b in
               (receipt_bundle(i, domain) for i in range(4))}
    honest = [url.rsplit("/", 1)[1] for url in bundles]
    forged = honest[2]
    chain.anchor(content, 1, honest, block=10)
    odd = [cid_of(receipt_bundle(10 + i, domain)) for i in range(6)]
    chain.anchor(content, 2, odd, block=11)
    chain.anchor(content, 3, honest[:1], block=12)  # its RPC breaks below
    chain.anchor(content, 4, honest[1:2], block=12, batch=False)  # the manifest never published
    chain.broken.add(3)
    # node 2 answers each receipt differently; 5 is another receipt's bundle
    tampered = receipt_bundle(15, domain)
    tampered["response"]["text"] = "not what was signed"
    answers = {odd[0]: NotRetainedError("gone"), odd[1]: NodeError("connection refused"),
               odd[2]: RuntimeError("a hostile node's surprise"),
               odd[3]: receipt_bundle(0, domain), odd[4]: {"receipt": 5}, odd[5]: tampered}

    def fetch(endpoint: str, cid: str) -> dict:
        if endpoint == "http://odd":
            answer = answers[cid]
            if isinstance(answer, Exception):
                raise answer
            return answer
        return bundles[f"{endpoint}/{cid}"]

    check, challenges = Check({forged: "activation_mismatch"}), Challenges()
    nodes = [registered("0x" + "01" * 20, 1, "http://honest"),
             registered("0x" + "02" * 20, 2, "http://odd"),
             registered("0x" + "03" * 20, 3, "http://honest"),
             registered("0x" + "04" * 20, 4, "http://honest"),
             registered("0x" + "05" * 20, 5, "http://honest", active=False)]
    registry = SimpleNamespace(nodes=lambda: nodes)
    auditor = Auditor(chain, registry, content, from_block=0, check=check,
                      open_challenge=challenges, fetch=fetch, rate_bps=10_000)

    chain.head = 12 + AUDIT_DELAY_BLOCKS - 1  # logs 1, 2 seeded; 3 and 4 not yet
    first = auditor.run_once()
    by_leaf = {(f.log_id, f.leaf): f for f in first.findings}
    assert [by_leaf[1, i].outcome for i in range(4)] == [VERIFIED, VERIFIED, FAILED, VERIFIED]
    assert (by_leaf[1, 2].reason, by_leaf[1, 2].challenge_id) == ("activation_mismatch", 1)
    assert challenges.opened == [(forged, "activation_mismatch")]
    assert [by_leaf[2, i].outcome for i in range(6)] == [
        NOT_RETAINED, UNREACHABLE, UNREACHABLE, INVALID_BUNDLE, INVALID_BUNDLE, INVALID_BUNDLE]
    assert "another receipt" in by_leaf[2, 3].detail
    assert by_leaf[3, None].outcome == ERROR and "RPC down" in by_leaf[3, None].detail
    assert by_leaf[4, None].outcome == PENDING
    assert 5 not in {f.log_id for f in first.findings}  # inactive: not audited
    assert [c.sampled for c in first.checkpoints] == [(0, 1, 2, 3), tuple(range(6))]

    chain.head += 1
    chain.broken.clear()
    chain.anchor(content, 1, [cid_of(receipt_bundle(20, domain))], block=chain.head)
    bundles[f"http://honest/{cid_of(receipt_bundle(20, domain))}"] = receipt_bundle(20, domain)
    second = auditor.run_once()
    outcomes = sorted((f.log_id, f.leaf, f.outcome) for f in second.findings)
    assert outcomes == [(1, None, PENDING), (3, 0, VERIFIED), (4, None, UNAUDITABLE)]
    assert len(challenges.opened) == 1  # nothing audited twice
    chain.head += AUDIT_DELAY_BLOCKS
    third = auditor.run_once()
    assert [(f.log_id, f.leaf, f.outcome) for f in third.findings] == [(1, 4, VERIFIED)]
    assert auditor.run_once().findings == []
    assert {k: (c.size, c.block) for k, c in auditor.cursor.logs.items()} == {
        1: (5, chain.head - AUDIT_DELAY_BLOCKS), 2: (6, 11), 3: (1, 12), 4: (1, 12)}


def test_a_failed_open_and_a_verifier_that_cannot_judge_are_reported(tmp_path):
    domain = ReceiptDomain(31337, "0x" + "12" * 20)
    content = LocalBlockStore(tmp_path / "content")
    chain = FakeChain()
    bundles = [receipt_bundle(i, domain) for i in range(3)]
    cids = [cid_of(b) for b in bundles]
    chain.anchor(content, 1, cids, block=5)
    chain.head = 5 + AUDIT_DELAY_BLOCKS

    def check(bundle):
        cid = cid_of(bundle)
        if cid == cids[0]:
            raise ReceiptError("sampling", "token 3 is not the sampler's")
        if cid == cids[1]:
            raise ReceiptError("model_digest", "the verifier has another model")
        return [ReceiptCheck(name, None if name == "activations" else True, "")
                for name in REQUIRED_CHECKS]  # no model: skipped

    def refuse(bundle, reason):
        raise ConnectionError("the committee's RPC is down")

    auditor = Auditor(chain, SimpleNamespace(nodes=lambda: [registered("0x" + "01" * 20, 1,
                                                                          "http://n")]),
                      content, from_block=0, check=check, open_challenge=refuse,
                      fetch=lambda endpoint, cid: bundles[cids.index(cid)], rate_bps=10_000)
    found = auditor.run_once().findings
    assert [(f.outcome, f.reason, f.challenge_id) for f in found] == [
        (FAILED, "sampling", None), (ABSTAINED, "", None), (ABSTAINED, "", None)]
    assert "could not open the challenge" in found[0].detail


def test_bad_parameters_are_refused():
    for kwargs in ({"rate_bps": 20_000}, {"delay_blocks": 0}, {"max_checks": 0}):
        with pytest.raises(ValueError):
            Auditor(None, None, None, from_block=0, check=print, open_challenge=print, **kwargs)


# --------------------------------------------------------------------------- on Anvil


@pytest.mark.anvil
def test_a_receipt_log_on_anvil_is_audited_with_the_later_block_s_hash(ledger_devnet, tmp_path):
    from inference_node.receipt_log import ReceiptLog
    from ledger.logstore import LogStore

    contract = ledger_devnet.contract()
    w3 = contract.w3
    domain = ReceiptDomain(w3.eth.chain_id, contract.address)
    store = LogStore(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    content = LocalBlockStore(tmp_path / "content")
    receipt_log = ReceiptLog(store, content, contract, "node/audited/receipts")
    bundles = [receipt_bundle(i, domain) for i in range(5)]
    for bundle in bundles:
        receipt_log.append(parse_receipt(bundle["receipt"]))
    anchored = receipt_log.anchor()
    assert (anchored.old_size, anchored.size) == (0, 5)
    served = {cid_of(b): b for b in bundles}
    forged = cid_of(bundles[3])
    check, challenges = Check({forged: "activation_mismatch"}), Challenges()
    node = registered("0x" + "0a" * 20, anchored.log_id, "http://node")
    fetched: list[tuple[str, str]] = []

    def fetch(endpoint, cid):
        fetched.append((endpoint, cid))
        return served[cid]

    auditor = Auditor(contract, SimpleNamespace(nodes=lambda: [node]), content,
                      from_block=ledger_devnet.deployment_block, check=check,
                      open_challenge=challenges, fetch=fetch, rate_bps=10_000)
    head = w3.eth.block_number
    assert head < anchored.block_number + AUDIT_DELAY_BLOCKS  # Anvil mines only on demand
    pending = auditor.run_once()
    assert [f.outcome for f in pending.findings] == [PENDING] and fetched == []

    for _ in range(AUDIT_DELAY_BLOCKS):
        w3.provider.make_request("evm_mine", [])
    audited = auditor.run_once()
    seed_hash = bytes(w3.eth.get_block(anchored.block_number + AUDIT_DELAY_BLOCKS)["hash"])
    assert audited.checkpoints[0].seed == audit_seed(seed_hash, anchored.log_id, 5)
    outcomes = {f.cid: (f.outcome, f.reason, f.challenge_id) for f in audited.findings}
    assert outcomes.pop(forged) == (FAILED, "activation_mismatch", 1)
    assert set(outcomes.values()) == {(VERIFIED, "", None)} and len(outcomes) == 4
    assert challenges.opened == [(forged, "activation_mismatch")]
    assert {endpoint for endpoint, _ in fetched} == {"http://node"}
    assert auditor.run_once().findings == []  # audited once

    # A second checkpoint at 50 %: the sample is the one the later block's hash fixes.
    more = [receipt_bundle(i, domain) for i in range(5, 45)]
    served.update((cid_of(b), b) for b in more)
    for bundle in more:
        receipt_log.append(parse_receipt(bundle["receipt"]))
    second = receipt_log.anchor()
    for _ in range(AUDIT_DELAY_BLOCKS):
        w3.provider.make_request("evm_mine", [])
    half = Auditor(contract, SimpleNamespace(nodes=lambda: [node]), content,
                   from_block=second.block_number, check=Check(), open_challenge=challenges,
                   fetch=fetch, rate_bps=5_000, cursor=AuditCursor())
    result = half.run_once()
    seed = audit_seed(bytes(w3.eth.get_block(second.block_number + AUDIT_DELAY_BLOCKS)["hash"]),
                      second.log_id, 45)
    expected = sampled_leaves(seed, 5, 45, 5_000)
    assert [c.sampled for c in result.checkpoints] == [tuple(expected)]
    assert 0 < len(expected) < 40  # 40 leaves at 50 %: about 20
    assert [f.leaf for f in result.findings] == expected
    assert {f.outcome for f in result.findings} == {VERIFIED}
    store.engine.dispose()
