"""Library sync from chain + content store, against a real Anvil (`gym devnet up`): the node follows
a publisher log it is told to trust, verifies every leaf and root before serving, fails closed on
tampering, and stays up; receipts logged, anchored and verified end to end."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import gym_forkserver
import httpx
import pytest
from node_helpers import make_engine
from test_receipts import NODE_KEY, REQUEST, bundle_of, run_server

from inference_node.errors import ReceiptError
from inference_node.protocol import ChatCompletionRequest
from inference_node.receipt_log import ReceiptLog
from inference_node.receipts import (
    ReceiptDomain,
    ReceiptSigner,
    model_digest,
    parse_receipt,
    sign_receipt,
)
from inference_node.serving import OpenAIServing
from inference_node.settings import NodeSettings
from inference_node.sync import ChainLibrarySource
from inference_node.verify import verify_receipt_bundle
from ledger import rfc9162
from ledger.batches import BatchManifest, store_batch
from ledger.blockstore import LocalBlockStore
from ledger.chain import LogKind
from ledger.entries import ExperienceEntry, LibraryRef, Provenance, encode_entry, entry_cid
from ledger.logstore import LogStore
from ledger.multiformats import CID
from ledger.publish import append_entries, publish

pytestmark = pytest.mark.anvil

TEXTS = ["check each step and count the units", "answer with a number"]


def experience(text: str, op: str = "add", target: str | None = None) -> bytes:
    return encode_entry(ExperienceEntry(
        text=text, domain="math", op=op, target=target,
        provenance=Provenance(method="tfgrpo", base_model="tiny", step=1)))


@pytest.fixture
def chain(ledger_devnet, tmp_path):
    store = LogStore(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    content = LocalBlockStore(tmp_path / "ipfs")
    return ledger_devnet, store, content, ledger_devnet.contract()


def published_log(chain, name="alice/math", texts=TEXTS) -> tuple[int, list[str]]:
    _, store, content, contract = chain
    store.create_log(name)
    entries = [experience(t) for t in texts]
    append_entries(store, content, name, entries)
    result = publish(store, content, contract, name)
    return result.log_id, [entry_cid(e) for e in entries]


def follow(chain, log_id) -> ChainLibrarySource:
    devnet, _, content, contract = chain
    source = ChainLibrarySource(contract, content, log_id, LogKind.PUBLISHER,
                                from_block=devnet.deployment_block)
    source.refresh()
    return source


def test_happy_path_follows_updates_and_ignores_unanchored(chain, tiny_model_dir):
    _, store, content, contract = chain
    log_id, cids = published_log(chain)
    source = follow(chain, log_id)
    snapshot = source.current()
    assert source.status().error is None
    assert snapshot.experiences == tuple(zip(cids, TEXTS))
    assert snapshot.size == 2 and snapshot.root == "0x" + contract.root_at(log_id, 2).hex()

    with run_server(make_engine(tiny_model_dir), source) as node:
        health = httpx.get(f"{node.root_url}/health").json()
        assert health["status"] == "ok"
        assert (health["library"]["size"], health["library"]["root"]) == (2, snapshot.root)
        serving = OpenAIServing(node.engine, source, NodeSettings())
        prepared = asyncio.run(serving.prepare_chat(ChatCompletionRequest.model_validate(REQUEST)))
        assert all(text in prepared.injected.prompt.prefix.text for text in TEXTS)

        held = source.current()  # an in-flight request's snapshot
        append_entries(store, content, "alice/math",
                       [experience("answer with one number", "update", cids[1])])
        publish(store, content, contract, "alice/math")
        append_entries(store, content, "alice/math", [experience("seven")])  # never anchored
        source.refresh()
        assert source.current().experiences == ((cids[0], TEXTS[0]),
                                                (cids[1], "answer with one number"))
        assert source.current().size == 3 and held.size == 2  # swapped, not mutated
        assert httpx.get(f"{node.root_url}/health").json()["library"]["size"] == 3


def _assert_fails_closed(source, node, words: str) -> None:
    status = source.status()
    assert status.error and words in status.error, status.error
    assert source.current().experiences == ()
    health = httpx.get(f"{node.root_url}/health").json()
    assert health["status"] == "degraded" and words in health["library"]["error"]
    assert health["library"]["experiences"] == 0
    reply = httpx.post(f"{node.base_url}/chat/completions", json=REQUEST, timeout=60)
    assert reply.status_code == 200  # still serving, without the log's experiences
    assert reply.headers["x-gym-library-size"] == "0"


def test_tampered_content_serves_nothing(chain, tiny_model_dir):
    _, _, content, _ = chain
    log_id, cids = published_log(chain)
    block = content._block_path(CID.parse(cids[1]))
    data = bytearray(block.read_bytes())
    data[5] ^= 0x01
    block.write_bytes(bytes(data))
    source = follow(chain, log_id)
    with run_server(make_engine(tiny_model_dir), source) as node:
        _assert_fails_closed(source, node, "failed verification")
        assert "leaf 1" in source.status().error


def test_root_mismatch_serves_nothing(chain, tiny_model_dir):
    _, _store, content, contract = chain
    entries = [experience(t) for t in TEXTS]
    for data in entries:
        content.add_file(data, pin=True)
    log_id, _ = contract.create_log("mallory/math", LogKind.PUBLISHER)
    batch = BatchManifest(log="mallory/math", log_id=log_id, from_size=0, to_size=2,
                          entries=[entry_cid(e) for e in entries])
    contract.anchor(log_id, 2, b"\x11" * 32, store_batch(content, batch), [])
    source = follow(chain, log_id)
    with run_server(make_engine(tiny_model_dir), source) as node:
        _assert_fails_closed(source, node, "root over the fetched entries")


def test_unanchored_checkpoint_is_not_served(chain):
    _, store, content, contract = chain
    store.create_log("bob/math")
    append_entries(store, content, "bob/math", [experience(TEXTS[0])])
    log_id, _ = contract.create_log("bob/math", LogKind.PUBLISHER)
    source = follow(chain, log_id)
    assert source.current().experiences == () and source.status().error is None


def test_receipts_logged_anchored_and_verified(chain, tiny_model_dir):
    devnet, store, content, contract = chain
    log_id, cids = published_log(chain)
    source = follow(chain, log_id)
    engine = make_engine(tiny_model_dir)
    domain = ReceiptDomain(contract.w3.eth.chain_id, contract.address.lower())
    signer = ReceiptSigner(NODE_KEY, domain, engine.model, model_digest(tiny_model_dir))
    receipt_log = ReceiptLog(store, content, contract, "node/receipts", interval_s=3600)
    with run_server(engine, source, receipts=signer, receipt_log=receipt_log) as node:
        body = httpx.post(f"{node.base_url}/chat/completions", json=REQUEST, timeout=60).json()
        assert receipt_log.pending() == 1
        other = httpx.post(f"{node.base_url}/chat/completions", json=REQUEST, timeout=60).json()
        receipt_log.flush()
        cid = body["receipt_evidence"]["receipt_cid"]
        proof = httpx.get(f"{node.base_url}/receipts/{cid}/proof").json()
        other_cid = other["receipt_evidence"]["receipt_cid"]
        other_proof = httpx.get(f"{node.base_url}/receipts/{other_cid}/proof").json()
    # Another receipt's genuine proof that names this receipt's CID: the CID is only a claim,
    # the proven leaf hash is not this receipt's.
    borrowed = {key: value for key, value in other_proof.items() if key != "entry"}
    borrowed["entry_cid"] = cid
    bundle = {**bundle_of(body), "inclusion": proof}
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs = {"domain": domain, "contract": contract, "content": content,
                  "from_block": devnet.deployment_block}
    checks = verify_receipt_bundle(
        bundle, model=AutoModelForCausalLM.from_pretrained(tiny_model_dir),
        tokenizer=AutoTokenizer.from_pretrained(tiny_model_dir), model_dir=tiny_model_dir,
        **kwargs)
    assert [c.name for c in checks if not c.passed] == ["registration"], checks  # no registry
    assert {c.name for c in checks} >= {"library", "inclusion", "anchoring", "activations"}

    def resigned(**changes):  # the node itself signs a false claim
        receipt = parse_receipt(bundle["receipt"]).model_copy(update={**changes,
                                                                      "signature": None})
        signed = sign_receipt(receipt, NODE_KEY, domain)
        return {**bundle, "receipt": json.loads(encode_entry(signed)), "inclusion": None}

    for bad, reason in ((resigned(experience_ids=cids[:1]), "library_state"),
                        (resigned(library=LibraryRef(log_id=log_id, size=2,
                                                     root="0x" + "22" * 32)), "library_root"),
                        ({**bundle, "inclusion": {**proof, "index": 1}}, "not_included"),
                        ({**bundle, "inclusion": borrowed}, "not_included")):
        with pytest.raises(ReceiptError) as failure:
            verify_receipt_bundle(bad, **kwargs)
        assert failure.value.reason == reason


def test_gym_node_serve_follows_log_signs_and_anchors_on_shutdown(ledger_devnet, tiny_model_dir,
                                                                  tmp_path):
    """The real `gym` CLI: publish with `gym ledger`, serve with --follow-log and --key-env,
    stop with SIGINT (graceful): the pending receipt is anchored, and it verifies."""
    import signal
    import sys

    gym_bin = Path(sys.executable).parent / "gym"
    from node_helpers import free_port, wait_for_health

    gym = ledger_devnet.gym
    samples = tmp_path / "experiences.jsonl"
    samples.write_text("".join(experience(t).decode() + "\n" for t in TEXTS))
    for args in (("create", "alice/math"), ("append", "alice/math", str(samples)),
                 ("publish", "alice/math")):
        result = gym.run("ledger", *args)
        assert result.returncode == 0, result.stderr
    contract = ledger_devnet.contract()
    log_id = next(e.log_id for e in contract.logs_created() if e.name == "alice/math")
    port = free_port()
    env = {**gym.env, "GYM_NODE_KEY": NODE_KEY, "OMP_NUM_THREADS": "1"}
    proc = gym_forkserver.popen(gym_bin, ["node", "serve", "--model", str(tiny_model_dir),
                                          "--device", "cpu", "--served-model-name", "tiny-llama",
                                          "--port", str(port), "--follow-log", str(log_id),
                                          "--key-env", "GYM_NODE_KEY", "--anchor-interval",
                                          "3600"], env)
    try:
        health = wait_for_health(proc, port, timeout_s=90)
        assert health["status"] == "ok" and health["library"]["size"] == 2
        reply = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=REQUEST,
                           timeout=60)
        assert reply.status_code == 200 and "x-gym-receipt" in reply.headers
        body = reply.json()
    finally:
        proc.send_signal(signal.SIGINT)
        output = proc.communicate(timeout=60)[0].decode()
    assert proc.returncode == 0, output  # a graceful stop, not death by signal
    assert NODE_KEY[2:] not in output
    receipts_name = f"node/{body['receipt']['node']}/receipts"
    receipts_id = next(e.log_id for e in contract.logs_created() if e.name == receipts_name)
    assert contract.log_info(receipts_id).size == 1, output  # anchored on shutdown
    proof = gym.run("ledger", "proof", receipts_name, "0", "--json")
    assert proof.returncode == 0, proof.stderr
    bundle = {**bundle_of(body), "inclusion": json.loads(proof.stdout)}
    checks = verify_receipt_bundle(
        bundle, domain=ReceiptDomain(contract.w3.eth.chain_id, contract.address.lower()),
        contract=contract, content=LocalBlockStore(gym.data_dir / "ipfs"),
        from_block=ledger_devnet.deployment_block)
    assert [c.name for c in checks if c.passed] == ["signature", "request/response", "library",
                                                   "inclusion", "anchoring"]


def test_curated_log_from_leaf_events_and_bad_leaf_hash(chain):
    """A curated log (LeafAppended + CuratedCheckpoint), owned here by the test key instead of
    the DAO timelock; then a leaf whose entry does not hash to its on-chain leaf hash."""
    devnet, _, content, contract = chain
    entries = [experience(t) for t in TEXTS]
    for data in entries:
        content.add_file(data, pin=True)
    log_id, _ = contract.create_log("curated/math", LogKind.CURATED)
    contract.append_leaves(log_id, [rfc9162.leaf_hash(e) for e in entries],
                           [entry_cid(e) for e in entries])
    source = ChainLibrarySource(contract, content, log_id, LogKind.CURATED,
                                from_block=devnet.deployment_block)
    source.refresh()
    assert source.status().error is None
    assert [text for _, text in source.current().experiences] == TEXTS
    assert source.current().root == "0x" + contract.log_info(log_id).root.hex()

    third = experience("seven")
    content.add_file(third, pin=True)
    contract.append_leaves(log_id, [b"\x33" * 32], [entry_cid(third)])
    source.refresh()
    assert "leaf 2" in source.status().error and "leaf hash" in source.status().error
    assert source.current().experiences == ()
