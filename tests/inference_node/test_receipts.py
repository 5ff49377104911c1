"""Receipts: EIP-712 signature round trip, TOPLOC activation commitment, and every named failure,
with a node that signs over loopback (no chain: the unbound domain)."""

from __future__ import annotations

import base64
import copy
import functools
import json

import httpx
import pytest
from node_helpers import CIDS, DOMAIN, MODEL_NAME, NODE_KEY, SNAPSHOT, make_engine, run_server

from devnet.settings import ANVIL_DEV_KEYS
from inference_node.errors import ReceiptError
from inference_node.library import StaticLibrarySource
from inference_node.receipts import (
    ReceiptDomain,
    ReceiptSigner,
    bundle_json,
    library_ref,
    model_digest,
    parse_receipt,
    receipt_hash,
    sign_receipt,
    verify_receipt_signature,
)
from inference_node.verify import verify_receipt_bundle
from ledger.entries import encode_entry

OTHER_KEY = ANVIL_DEV_KEYS[0]  # a public devnet key


REQUEST = {"model": MODEL_NAME, "temperature": 0, "max_tokens": 8,
           "messages": [{"role": "user", "content": "the farmer buys twelve apple"}]}


def ask(node, request=REQUEST) -> tuple[dict, httpx.Response]:
    reply = httpx.post(f"{node.base_url}/chat/completions", json=request, timeout=60)
    assert reply.status_code == 200, reply.text
    return reply.json(), reply


def bundle_of(body: dict, request=REQUEST) -> dict:
    evidence = body["receipt_evidence"]
    return bundle_json(parse_receipt(body["receipt"]), ReceiptDomain.from_json(evidence["domain"]),
                       route="chat", request=request,
                       text=body["choices"][0]["message"]["content"],
                       completion_token_ids=evidence["completion_token_ids"])


@pytest.fixture(scope="module")
def answered(signing_node):
    body, reply = ask(signing_node)
    return body, reply


@functools.cache
def _verifier_model(weights_dir):
    """A verifier's model and tokenizer, loaded once per weights (verifying never changes them)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(weights_dir), AutoTokenizer.from_pretrained(weights_dir)


def offline_verify(bundle, weights_dir, **kwargs):
    """The bundle checked with the model, its experiences' texts taken as the node's."""
    from inference_node import verify

    texts = dict(SNAPSHOT.experiences)
    original = verify._check_library
    verify._check_library = lambda *a: texts  # the chain's part is test_sync's
    model, tokenizer = _verifier_model(weights_dir)
    try:
        return verify_receipt_bundle(bundle, contract=object(), content=object(), model=model,
                                     tokenizer=tokenizer, **kwargs)
    finally:
        verify._check_library = original


def test_receipt_in_body_and_header_signature_round_trip(answered):
    body, reply = answered
    receipt = parse_receipt(body["receipt"])
    header = reply.headers["x-gym-receipt"]
    assert parse_receipt(header) == receipt
    assert reply.headers["x-gym-receipt-cid"] == body["receipt_evidence"]["receipt_cid"]
    assert base64.urlsafe_b64decode(header + "=" * (-len(header) % 4)) == encode_entry(receipt)
    signer = ReceiptSigner(NODE_KEY, DOMAIN, None, "sha256:" + "0" * 64).address
    assert verify_receipt_signature(receipt, DOMAIN) == signer == receipt.node
    assert receipt.library == library_ref("0x07", 2, "ab" * 32)
    assert receipt.experience_ids == CIDS
    assert receipt.sampling.temperature == 0 and receipt.sampling.max_tokens == 8
    assert receipt.tokens.completion == 8 == body["usage"]["completion_tokens"]
    assert receipt.activation_commitment.startswith("toploc1:64:32:")
    assert len(receipt_hash(receipt, DOMAIN)) == 32


def test_seedless_request_gets_a_recorded_seed(signing_node):
    request = {**REQUEST, "temperature": 1.0}
    body, _ = ask(signing_node, request)
    seed = parse_receipt(body["receipt"]).sampling.seed
    again, _ = ask(signing_node, {**request, "seed": seed})
    assert again["choices"][0]["message"]["content"] == body["choices"][0]["message"]["content"]


def test_full_bundle_verifies_with_the_model(answered, tiny_model_dir):
    checks = offline_verify(bundle_of(answered[0]), tiny_model_dir, model_dir=tiny_model_dir)
    assert [c.name for c in checks if c.passed] == ["signature", "request/response", "library",
                                                   "activations", "termination", "sampling"]


def _resign(receipt_json: dict, **changes) -> dict:
    receipt = parse_receipt(receipt_json).model_copy(update={**changes, "signature": None})
    return json.loads(encode_entry(sign_receipt(receipt, NODE_KEY, DOMAIN)))


@pytest.mark.parametrize("mutation, reason", [
    ("edited-response", "response_digest"),
    ("changed-prompt", "request_digest"),
    ("dropped-experience-unsigned", "wrong_signer"),
    ("dropped-experience-resigned", "token_counts"),
    ("edited-receipt-field", "wrong_signer"),
    ("wrong-signer", "wrong_signer"),
    ("no-signature", "bad_signature"),
    ("other-domain", "wrong_domain"),
])
def test_named_failures(answered, tiny_model_dir, mutation, reason):
    bundle = bundle_of(answered[0])
    bad = copy.deepcopy(bundle)
    domain = None
    if mutation == "edited-response":
        bad["response"]["text"] += " seven"
    elif mutation == "changed-prompt":
        bad["request"]["messages"][0]["content"] = "the farmer sells twelve apple"
    elif mutation == "dropped-experience-unsigned":
        bad["receipt"]["experience_ids"] = CIDS[:1]
    elif mutation == "dropped-experience-resigned":  # the prompt had both: counts differ
        bad["receipt"] = _resign(bundle["receipt"], experience_ids=CIDS[:1])
    elif mutation == "edited-receipt-field":
        bad["receipt"]["time"] += 1
    elif mutation == "wrong-signer":
        receipt = parse_receipt(bundle["receipt"]).model_copy(update={"signature": None})
        other = ReceiptSigner(OTHER_KEY, DOMAIN, None, "sha256:" + "0" * 64)
        forged = sign_receipt(receipt.model_copy(update={"node": other.address}), OTHER_KEY,
                              DOMAIN)
        bad["receipt"] = {**json.loads(encode_entry(forged)), "node": receipt.node}
    elif mutation == "no-signature":
        del bad["receipt"]["signature"]
    elif mutation == "other-domain":
        domain = ReceiptDomain(31337, "0x" + "11" * 20)
    with pytest.raises(ReceiptError) as failure:
        offline_verify(bad, tiny_model_dir, domain=domain)
    assert failure.value.reason == reason
    offline_verify(bundle, tiny_model_dir)  # the unmutated bundle still passes


def test_other_model_fails_the_activation_check(tiny_model_dir, other_model_dir):
    """A node runs another model but claims the verifier's model digest."""
    engine = make_engine(other_model_dir)
    signer = ReceiptSigner(NODE_KEY, DOMAIN, engine.model, model_digest(tiny_model_dir))
    with run_server(engine, StaticLibrarySource(SNAPSHOT), receipts=signer) as node:
        body, _ = ask(node)
    with pytest.raises(ReceiptError) as failure:
        offline_verify(bundle_of(body), tiny_model_dir, model_dir=tiny_model_dir)
    assert failure.value.reason == "activation_mismatch"
    assert "exponents differ" in str(failure.value)


def test_model_digest_named(answered, tiny_model_dir, other_model_dir):
    with pytest.raises(ReceiptError) as failure:
        offline_verify(bundle_of(answered[0]), other_model_dir, model_dir=other_model_dir)
    assert failure.value.reason == "model_digest"


def test_verify_receipt_command_offline(answered, tmp_path):
    import typer
    from typer.testing import CliRunner

    from inference_node.cli import verify_receipt

    app = typer.Typer()
    app.command("receipt")(verify_receipt)
    app.command("other")(lambda: None)  # two commands: `receipt` stays a subcommand
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    bundle = bundle_of(answered[0])
    good.write_text(json.dumps(bundle))
    bundle["response"]["text"] += " seven"
    bad.write_text(json.dumps(bundle))
    ok = CliRunner().invoke(app, ["receipt", str(good), "--offline"])
    assert ok.exit_code == 0 and "signature" in ok.output, ok.output
    failed = CliRunner().invoke(app, ["receipt", str(bad), "--offline"])
    assert failed.exit_code == 1 and "response_digest" in failed.output


def test_key_from_env_or_keystore_never_printed(tmp_path, monkeypatch):
    from eth_account import Account

    from inference_node.launch import load_key

    monkeypatch.setenv("GYM_NODE_KEY", NODE_KEY)
    assert load_key("GYM_NODE_KEY", None, "PW") == NODE_KEY
    keystore = tmp_path / "node.json"
    keystore.write_text(json.dumps(Account.encrypt(NODE_KEY, "s3cret")))
    monkeypatch.setenv("PW", "s3cret")
    assert load_key(None, keystore, "PW") == NODE_KEY
    monkeypatch.setenv("PW", "wrong")
    with pytest.raises(Exception) as failure:
        load_key(None, keystore, "PW")
    assert "wrong" not in str(failure.value) and NODE_KEY[4:] not in str(failure.value)


def test_completion_route_receipt_verifies(signing_node, tiny_model_dir):
    request = {"model": MODEL_NAME, "prompt": "seven apple and three banana is",
               "max_tokens": 6, "temperature": 0, "echo": True}
    reply = httpx.post(f"{signing_node.base_url}/completions", json=request, timeout=60)
    body = reply.json()
    evidence = body["receipt_evidence"]
    text = body["choices"][0]["text"].removeprefix(request["prompt"])  # the digest skips echo
    bundle = bundle_json(parse_receipt(body["receipt"]), ReceiptDomain.from_json(
        evidence["domain"]), route="completion", request=request, text=text,
        completion_token_ids=evidence["completion_token_ids"])
    checks = offline_verify(bundle, tiny_model_dir, model_dir=tiny_model_dir)
    assert [c.name for c in checks[-3:]] == ["activations", "termination", "sampling"]
    assert all(c.passed for c in checks[-3:])
    with pytest.raises(ReceiptError) as failure:
        offline_verify({**bundle, "request": {**bundle["request"], "route": "chat"}},
                       tiny_model_dir)
    assert failure.value.reason == "malformed"  # a chat request has messages, not a prompt


def test_receipt_hash_is_eip712_as_eth_account_computes_it(answered):
    """The hand-written struct hash equals eth-account's generic EIP-712 encoder, and the
    signature is the one eth-account's typed-data signing gives (RFC 6979 nonces)."""
    from eth_account import Account
    from eth_account.messages import encode_typed_data
    from eth_utils import keccak

    from inference_node.receipts import typed_data

    served = parse_receipt(answered[0]["receipt"]).model_copy(update={"signature": None})
    variants = [served, served.model_copy(update={"adapter_cid": CIDS[0], "experience_ids": []}),
                served.model_copy(update={"time": 2**40, "node": "0x" + "ab" * 20})]
    for receipt in variants:
        for domain in (DOMAIN, ReceiptDomain(31337, "0x" + "12" * 20)):
            signable = encode_typed_data(full_message=typed_data(receipt, domain))
            assert receipt_hash(receipt, domain) == keccak(
                b"\x19" + signable.version + signable.header + signable.body)
    domain = ReceiptDomain(31337, "0x" + "12" * 20)
    ours = sign_receipt(served, NODE_KEY, domain).signature
    theirs = Account.from_key(NODE_KEY).sign_message(
        encode_typed_data(full_message=typed_data(served, domain))).signature
    assert ours == "0x" + bytes(theirs).hex()
    # A node signs through libsecp256k1 directly (coincurve, in the serve extra) or, without
    # it, through eth-account: the same deterministic signature either way.
    signer = ReceiptSigner(NODE_KEY, domain, None, served.model_digest)
    assert signer._secp256k1 is not None
    digest = receipt_hash(served, domain)
    native = signer.sign_digest(digest)
    signer._secp256k1 = None
    assert native == signer.sign_digest(digest) == bytes(theirs)
