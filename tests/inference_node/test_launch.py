"""`inference_node.launch.start_node` and `inference_node.challenges`, called directly (the
CLI only parses, calls them and prints): a node started from options, the key's errors naming
their option, the challenge evidence and its refusals."""

from __future__ import annotations

import json

import pytest
import rfc8785
from fastapi.testclient import TestClient
from node_helpers import DOMAIN, LIBRARY, NODE_KEY
from test_receipt_log import receipts

from inference_node.challenges import (
    challenge_evidence,
    challenged_receipt,
    open_challenge,
)
from inference_node.errors import KeyLoadError, NodeError, ReceiptError
from inference_node.launch import NodeLaunch, load_key, start_node
from inference_node.receipts import ReceiptDomain, bundle_json, receipt_hash
from inference_node.settings import NodeSettings


def test_start_node_from_options_prints_nothing_and_serves(tiny_model_dir, tmp_path, capsys):
    library = tmp_path / "library.json"
    library.write_text(json.dumps(LIBRARY))
    launch = NodeLaunch(model=tiny_model_dir, library=library, device="cpu",
                        server=NodeSettings(served_model_name="tiny"))
    with start_node(launch) as node:
        assert node.choice.kind == "transformers" and "--device" in node.choice.reason
        assert node.signer is None and node.receipt_log is None and node.workdir is None
        with TestClient(node.app) as client:
            health = client.get("/health").json()
    assert health["model"] == "tiny" and health["library"]["size"] == 3
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(("launch", "why"), [
    ({"key": NODE_KEY}, "signing receipts"),
    ({"follow_log": 1}, "--follow-log"),
    ({"adapter": "bafkreigh2akiscaildcqabsyg3dfr6chu3fgpregiymsck7e7aqa4s52zy"}, "--adapter"),
])
def test_what_needs_the_chain_says_so_without_a_ledger(tiny_model_dir, launch, why):
    with pytest.raises(NodeError, match=f"{why} needs the chain configuration"):
        start_node(NodeLaunch(model=tiny_model_dir, device="cpu", **launch))


def test_key_errors_name_their_option(tmp_path, monkeypatch):
    monkeypatch.delenv("GYM_TEST_UNSET_KEY", raising=False)
    with pytest.raises(KeyLoadError) as unset:
        load_key("GYM_TEST_UNSET_KEY", None, "PW")
    assert unset.value.option == "--key-env"
    keystore = tmp_path / "node.json"
    keystore.write_text("{}")
    with pytest.raises(KeyLoadError) as both:
        load_key("GYM_TEST_UNSET_KEY", keystore, "PW")
    assert both.value.option is None and "not both" in str(both.value)
    assert repr(NodeLaunch(model=tmp_path, key=NODE_KEY)).count(NODE_KEY[4:]) == 0


class FakeRegistry:
    def __init__(self, operator: str | None) -> None:
        self.operator, self.calls = operator, []

    def operator_of_signer(self, signer: str) -> str | None:
        return self.operator

    def challenge(self, operator, digest, signature, evidence_cid) -> int:
        self.calls.append((operator, digest, signature, evidence_cid))
        return 7


class FakeContent:
    def __init__(self) -> None:
        self.files: list[bytes] = []

    def add_file(self, data: bytes, *, pin: bool = False) -> str:
        assert pin
        self.files.append(data)
        return "bafy-evidence"


def test_open_challenge_stores_evidence_and_calls_the_registry():
    receipt = receipts(1)[0]
    bundle = bundle_json(receipt, DOMAIN, route="chat", request={"i": 0}, text="answer 0",
                         completion_token_ids=[0])
    challenged = challenged_receipt(bundle)
    assert challenged.signer == receipt.node
    registry, content = FakeRegistry("0x" + "11" * 20), FakeContent()
    opened = open_challenge(challenged, "wrong answer", registry=registry, content=content,
                            domain=DOMAIN)
    digest = receipt_hash(receipt, DOMAIN)
    assert (opened.id, opened.operator, opened.receipt_hash, opened.evidence_cid) == (
        7, "0x" + "11" * 20, digest, "bafy-evidence")
    assert registry.calls == [("0x" + "11" * 20, digest, bytes.fromhex(receipt.signature[2:]),
                               "bafy-evidence")]
    assert content.files == [challenge_evidence("wrong answer", digest, bundle)]
    assert json.loads(content.files[0]) == {"type": "challenge-evidence", "v": 1,
                                            "reason": "wrong answer",
                                            "receipt_hash": "0x" + digest.hex(), "bundle": bundle}
    assert content.files[0] == rfc8785.dumps(json.loads(content.files[0]))

    with pytest.raises(NodeError, match="signed for chain 0"):
        open_challenge(challenged, "x", registry=registry, content=content,
                       domain=ReceiptDomain(31337, "0x" + "22" * 20))
    with pytest.raises(NodeError, match="nothing to challenge"):
        open_challenge(challenged, "x", registry=FakeRegistry(None), content=content,
                       domain=DOMAIN)
    with pytest.raises(NodeError, match="is not a receipt bundle"):
        challenged_receipt([bundle], what="b.json")
    tampered = {**bundle, "receipt": {**bundle["receipt"], "time": 1}}
    with pytest.raises(ReceiptError) as failure:
        challenged_receipt(tampered)
    assert failure.value.reason == "wrong_signer"
