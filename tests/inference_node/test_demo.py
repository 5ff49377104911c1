"""The node step of `gym demo` (`inference_node.demo.demo_node`) against a devnet with a small
curated library and the tiny random model: it serves, answers through the openai SDK, writes a
receipt bundle that verifies, and stops the node gracefully."""

from __future__ import annotations

import json

import pytest
from rich.console import Console
from test_sync import TEXTS, experience
from web3 import Web3

from devnet.runtime import ledger_runtime
from devnet.settings import ANVIL_DEV_KEYS, GymSettings
from inference_node.demo import demo_node
from inference_node.registry import NodeRegistry
from inference_node.verify import verify_receipt_bundle
from ledger import rfc9162
from ledger.blockstore import LocalBlockStore
from ledger.chain import LogKind
from ledger.entries import entry_cid

pytestmark = [pytest.mark.slow, pytest.mark.anvil]
NODE_KEY = ANVIL_DEV_KEYS[4]  # as `gym demo`: holds GYM to stake, signs nothing else


def test_demo_node_serves_answers_and_verifies(ledger_devnet, tiny_model_dir):
    gym = ledger_devnet.gym
    settings = GymSettings(data_dir=gym.data_dir, deployment_file=gym.deployment_file)
    rt = ledger_runtime(settings)
    content = LocalBlockStore(gym.data_dir / "ipfs")
    entries = [experience(t) for t in TEXTS]
    for data in entries:
        content.add_file(data, pin=True)
    contract = ledger_devnet.contract()
    log_id, _ = contract.create_log("gym/curated-test", LogKind.CURATED)
    contract.append_leaves(log_id, [rfc9162.leaf_hash(e) for e in entries],
                           [entry_cid(e) for e in entries])

    console = Console(record=True, width=200)
    demo_node(settings, rt, console, library_log_id=log_id, curated=True,
              model_dir=tiny_model_dir, node_key=NODE_KEY)
    text = console.export_text()
    assert "library log" in text and "verified at size 2, 2 experiences active" in text
    assert "injected 2 experiences" in text and "A:" in text
    assert "receipt verified" in text and "node stopped gracefully" in text

    bundles = list((gym.data_dir / "receipts").glob("*.json"))
    assert len(bundles) == 1
    bundle = json.loads(bundles[0].read_text())
    node = Web3().eth.account.from_key(NODE_KEY).address
    assert bundle["receipt"]["node"] == node.lower()
    assert bundle["receipt"]["experience_ids"] == [entry_cid(e) for e in entries]
    manifest = json.loads(gym.deployment_file.read_text())
    registry = NodeRegistry(rt.contract.w3, manifest["contracts"]["NodeRegistry"]["address"])
    checks = verify_receipt_bundle(bundle, contract=rt.contract, content=content,
                                   registry=registry, from_block=rt.chain.deployment_block)
    assert [c.name for c in checks if c.passed] == [
        "signature", "request/response", "registration", "library", "inclusion", "anchoring"]
    assert registry.node_of(node).active

    # the dishonest node: its forged answer is caught by name and challenged on chain
    assert "forged receipt FAILS: sampling: completion token 0" in text
    challenges = registry.challenges_against(node)
    assert len(challenges) == 1 and challenges[0].status.name == "OPEN"
    evidence = json.loads(content.cat(challenges[0].evidence_cid))
    assert evidence["reason"].startswith("sampling: ")
    assert evidence["bundle"]["receipt"]["node"] == node.lower()
    assert evidence["bundle"]["response"]["text"] != bundle["response"]["text"]
