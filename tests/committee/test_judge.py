"""committee.judge (docs/committee.md "Judging"): what a verifier signs for a challenge, from
real receipts of the tiny model (honest, and forged as test_receipt_attacks forges them),
checked offline with a stand-in NodeRegistry; junk evidence; and a verifier that cannot judge.
"""

from __future__ import annotations

import asyncio
import json

import pytest
import torch
from eth_account import Account
from node_helpers import DOMAIN, MODEL_NAME, NODE_KEY, SNAPSHOT, make_engine
from test_receipt_attacks import ask, fabricated, run, signed

from committee import (
    REJECTED,
    UPHELD,
    SecretKey,
    SignedVerdict,
    decode_signed_verdict,
    reason_bytes,
    reason_text,
)
from committee.judge import (
    ABSTAIN_OUTCOME,
    ABSTAIN_REASONS,
    EVIDENCE_REASONS,
    MAX_EVIDENCE_BYTES,
    REJECTED_OUTCOME,
    UPHELD_OUTCOME,
    UPHELD_REASONS,
    Judgement,
    judge,
    reason_name,
)
from inference_node import verify
from inference_node.challenges import challenge_evidence
from inference_node.errors import REASONS, NodeError, ReceiptError
from inference_node.receipts import (
    ReceiptSigner,
    bundle_json,
    library_ref,
    model_digest,
    parse_receipt,
    receipt_hash,
    sign_receipt,
)
from inference_node.registry import RegisteredNode

torch.set_num_threads(1)  # two shared cores: OpenMP's spinning threads slow tiny models down

CHAIN_ID, COMMITTEE = 31337, "0x5615dEB798BB3E4dFa0139dFa1b3D433Cc23b72f"
OPERATOR = "0x" + "0a" * 20


class Registry:
    """A NodeRegistry in which the test node is active, serving ``digest``."""

    def __init__(self, digest: str):
        self.digest = digest

    def operator_of_signer(self, signer: str) -> str:
        return OPERATOR

    def node_of(self, operator: str) -> RegisteredNode:
        return RegisteredNode(operator, Account.from_key(NODE_KEY).address, 1, 0, self.digest,
                              10**21, 1, "http://node", True)

    def min_stake(self) -> int:
        return 10**20


def offline_check(verifier, model_dir, monkeypatch, *, registry=True, model=True):
    """The ``check`` a verifier passes to ``judge``, offline: the full verification with the
    library's texts taken as `SNAPSHOT`'s and a stand-in registry."""
    monkeypatch.setattr(verify, "_check_library", lambda *a: dict(SNAPSHOT.experiences))
    loaded_model, tokenizer = verifier
    kwargs = {"contract": object(), "content": object()}
    if registry:
        kwargs["registry"] = Registry(model_digest(model_dir))
    if model:
        kwargs.update(model=loaded_model, tokenizer=tokenizer, model_dir=model_dir)
    return lambda bundle: verify.verify_receipt_bundle(bundle, **kwargs)


def evidence_of(bundle: dict, reason: str = "sampling") -> tuple[bytes, bytes]:
    """The evidence document for ``bundle`` and the receipt hash a challenge names."""
    digest = receipt_hash(parse_receipt(bundle["receipt"]), DOMAIN)
    return challenge_evidence(reason, digest, bundle), digest


def not_called(bundle):
    raise AssertionError("check must not run on evidence that is refused first")


def honest_bundle(node) -> dict:
    engine, signer = node
    return signed(signer, run(engine, ask("the farmer buys twelve apple", temperature=0.8,
                                          seed=5)))


# --------------------------------------------------------------------------- verdicts


def test_an_honest_receipt_s_challenge_is_rejected_and_the_verdict_signs(
        node, verifier, tiny_model_dir, monkeypatch):
    evidence, digest = evidence_of(honest_bundle(node))
    judgement = judge(evidence, digest, check=offline_check(verifier, tiny_model_dir,
                                                            monkeypatch))
    assert (judgement.outcome, judgement.reason) == (REJECTED_OUTCOME, ""), judgement
    assert "the receipt verifies" in judgement.detail
    verdict = judgement.verdict(7, digest)
    assert (verdict.verdict, verdict.reason, verdict.receipt_hash) == (REJECTED, bytes(32),
                                                                        digest)
    sk = SecretKey.from_seed("gym-verifier-0")
    signed_verdict = SignedVerdict.create(sk, verdict, chain_id=CHAIN_ID, committee=COMMITTEE,
                                          verifier_index=0, verifier=OPERATOR)
    again = decode_signed_verdict(signed_verdict.to_bytes())
    assert again.to_bytes() == signed_verdict.to_bytes() and again.verdict == verdict
    assert again.verify(sk.pk1(), chain_id=CHAIN_ID, committee=COMMITTEE)


def forged(node, kind: str) -> dict:
    """A bundle of a receipt the node signed over something other than its honest answer."""
    engine, signer = node
    if kind == "fabricated text":
        answer = run(engine, ask("the farmer buys twelve apple", temperature=0.7, top_p=0.9,
                                 seed=4))
        ids, text = fabricated(engine.tokenizer, len(answer.token_ids))
        return signed(signer, answer, token_ids=ids, text=text, finish="length")
    if kind == "one token changed":
        answer = run(engine, ask("seven box of banana", temperature=0))
        ids = list(answer.token_ids)
        gym = engine.tokenizer.convert_tokens_to_ids("gym")
        ids[4] = gym if ids[4] != gym else engine.tokenizer.convert_tokens_to_ids("zoo")
        return signed(signer, answer, token_ids=ids,
                      text=engine.tokenizer.decode(ids, skip_special_tokens=True))
    if kind == "truncated":
        answer = run(engine, ask("count the apple", temperature=0))
        ids = answer.token_ids[:5]
        return signed(signer, answer, token_ids=ids, finish="stop",
                      text=engine.tokenizer.decode(ids, skip_special_tokens=True))
    if kind == "text not the tokens":
        answer = run(engine, ask("count the apple", temperature=0))
        return signed(signer, answer, text=fabricated(engine.tokenizer,
                                                      len(answer.token_ids))[1])
    raise AssertionError(kind)


@pytest.mark.parametrize("kind,reason", [("fabricated text", "sampling"),
                                         ("one token changed", "sampling"),
                                         ("truncated", "termination"),
                                         ("text not the tokens", "response_text")])
def test_a_forged_receipt_s_challenge_is_upheld_with_the_failing_check(
        node, verifier, tiny_model_dir, monkeypatch, kind, reason):
    evidence, digest = evidence_of(forged(node, kind))
    judgement = judge(evidence, digest, check=offline_check(verifier, tiny_model_dir,
                                                            monkeypatch))
    assert (judgement.outcome, judgement.reason) == (UPHELD_OUTCOME, reason), judgement
    verdict = judgement.verdict(3, digest)
    assert (verdict.verdict, reason_text(verdict.reason)) == (UPHELD, reason)
    sk = SecretKey.from_seed("gym-verifier-1")
    signed_verdict = decode_signed_verdict(SignedVerdict.create(
        sk, verdict, chain_id=CHAIN_ID, committee=COMMITTEE, verifier_index=1,
        verifier=OPERATOR).to_bytes())
    assert signed_verdict.verdict == verdict
    assert signed_verdict.verify(sk.pk1(), chain_id=CHAIN_ID, committee=COMMITTEE)
    assert not signed_verdict.verify(SecretKey.from_seed("gym-verifier-2").pk1(),
                                     chain_id=CHAIN_ID, committee=COMMITTEE)


def test_a_receipt_that_ignores_its_grammar_is_upheld_as_response_format(
        json_model_dir, monkeypatch):
    """The structured-output attack: the receipt signs a schema the node decoded without."""
    from node_helpers import signed_bundle

    from inference_node.engine import SamplingParams
    from inference_node.injection import LibraryInjector
    from inference_node.normalized_request import from_client_request, request_key

    engine = make_engine(json_model_dir)
    signer = ReceiptSigner(NODE_KEY, DOMAIN, engine.model, model_digest(json_model_dir))
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}},
              "required": ["answer"], "additionalProperties": False}
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "plan"}],
            "max_tokens": 24, "seed": 4, "temperature": 1.0,
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "answer", "schema": schema}}}
    normalized = from_client_request("chat", body, max_tokens=24, seed=4)
    injected = LibraryInjector(engine.tokenizer).chat(normalized["messages"], SNAPSHOT)
    engine.start()
    try:
        params = SamplingParams(max_tokens=24, temperature=1.0, seed=4,
                                request_key=request_key(normalized))  # no constraint
        out = asyncio.run(engine.generate(injected.prompt, params))
    finally:
        engine.shutdown()
    bundle = signed_bundle(signer, body, normalized, list(injected.prompt.all_token_ids), out)
    evidence, digest = evidence_of(bundle, "response_format")
    check = offline_check(verify.load_verifier_model(json_model_dir), json_model_dir,
                          monkeypatch)
    judgement = judge(evidence, digest, check=check)
    assert (judgement.outcome, judgement.reason) == (UPHELD_OUTCOME, "response_format")


# --------------------------------------------------------------------------- the challenger's part


def test_evidence_for_another_receipt_is_rejected(node):
    evidence, _ = evidence_of(honest_bundle(node))
    judgement = judge(evidence, b"\x01" * 32, check=not_called)
    assert judgement.outcome == REJECTED_OUTCOME
    assert "not the challenged 0x0101" in judgement.detail
    # the document's own receipt_hash must agree with the bundle's receipt too
    doc = json.loads(evidence)
    digest = bytes.fromhex(doc["receipt_hash"][2:])
    doc["receipt_hash"] = "0x" + "01" * 32
    judgement = judge(json.dumps(doc).encode(), digest, check=not_called)
    assert judgement.outcome == REJECTED_OUTCOME and "names receipt" in judgement.detail


def edited(bundle: dict, what: str) -> dict:
    """``bundle`` with a part the node did not sign replaced by the challenger."""
    bundle = json.loads(json.dumps(bundle))
    if what == "request":
        bundle["request"]["messages"][0]["content"] = "count the banana"
    elif what == "response":
        bundle["response"]["text"] += " gym"
    elif what == "signature":  # the same receipt, signed by another key: wrong_signer
        other = sign_receipt(parse_receipt({**bundle["receipt"],
                                            "node": Account.from_key(b"\x07" * 32)
                                            .address.lower()}), b"\x07" * 32, DOMAIN)
        bundle["receipt"]["signature"] = other.signature
    elif what == "garbage signature":
        bundle["receipt"]["signature"] = "0x" + "00" * 65
    return bundle


@pytest.mark.parametrize("what,detail", [
    ("request", "request is not the one the receipt signs"),
    ("response", "response is not the one the receipt signs"),
    ("signature", "signature is not the node's"),
    ("garbage signature", "signature is not the node's"),
])
def test_a_bundle_edited_where_the_node_did_not_sign_is_rejected(node, what, detail):
    """The request, response and signature travel beside the signed digests: a challenger who
    changes them shows nothing about the node (an honest node is not slashed for them)."""
    bundle = honest_bundle(node)
    digest = receipt_hash(parse_receipt(bundle["receipt"]), DOMAIN)
    judgement = judge(challenge_evidence("x", digest, edited(bundle, what)), digest,
                      check=not_called)
    assert judgement.outcome == REJECTED_OUTCOME and detail in judgement.detail, judgement


def test_a_forged_inclusion_proof_does_not_decide(node, verifier, tiny_model_dir, monkeypatch):
    """The receipt-log proof is not signed: the judge drops it, the receipt itself decides."""
    bundle = {**honest_bundle(node), "inclusion": {"type": "proof", "junk": True}}
    evidence, digest = evidence_of(bundle, "not_included")
    judgement = judge(evidence, digest, check=offline_check(verifier, tiny_model_dir,
                                                            monkeypatch))
    assert judgement.outcome == REJECTED_OUTCOME and "the receipt verifies" in judgement.detail


def test_a_v1_bundle_s_unsigned_route_must_fit_its_request(node):
    engine, signer = node
    answer = run(engine, ask("count the apple", temperature=0))
    receipt = signer.issue(
        library=library_ref(SNAPSHOT.log_id, SNAPSHOT.size, SNAPSHOT.root),
        experience_ids=SNAPSHOT.experience_ids, request_json=answer.request,
        prompt_ids=answer.prompt_ids, text=answer.text, completion_ids=answer.token_ids,
        temperature=0, top_p=1, max_tokens=8, seed=0)
    bundle = bundle_json(receipt, DOMAIN, route="completion", request=answer.request,
                         text=answer.text, completion_token_ids=answer.token_ids)
    evidence, digest = evidence_of(bundle)
    judgement = judge(evidence, digest, check=not_called)
    assert judgement.outcome == REJECTED_OUTCOME and "route" in judgement.detail


@pytest.mark.parametrize("evidence,detail", [
    (b"not json", "malformed evidence (invalid)"),
    (b"[" * 100 + b"]" * 100, "malformed evidence (too_deep)"),
    (b" " * (MAX_EVIDENCE_BYTES + 1), "malformed evidence (too_large)"),
    (b'{"a": 1, "a": 2}', "malformed evidence (duplicate_key)"),
    (b'{"type": "challenge-evidence", "v": 1}', "not a challenge-evidence v1 object"),
    (json.dumps({"type": "receipt-bundle", "v": 1, "reason": "x", "receipt_hash": "0x",
                 "bundle": {}}).encode(), "not a challenge-evidence v1 object"),
    (json.dumps({"type": "challenge-evidence", "v": 1, "reason": "x", "receipt_hash": "0x",
                 "bundle": []}).encode(), "not a challenge-evidence v1 object"),
    (json.dumps({"type": "challenge-evidence", "v": 1, "reason": "x", "receipt_hash": "0x",
                 "bundle": {"type": "receipt-bundle", "v": 2}}).encode(),
     "the bundle's receipt or domain"),
    (json.dumps({"type": "challenge-evidence", "v": 1, "reason": "x", "receipt_hash": "0x",
                 "bundle": {"type": "receipt-bundle", "v": True}}).encode(),
     "not a receipt-bundle v1 or v2"),
])
def test_malformed_evidence_is_rejected_with_one_detail(evidence, detail):
    judgement = judge(evidence, bytes(32), check=not_called)
    assert judgement.outcome == REJECTED_OUTCOME and detail in judgement.detail, judgement
    assert judgement.verdict(1, bytes(32)).verdict == REJECTED


# --------------------------------------------------------------------------- abstaining


@pytest.mark.parametrize("error", [NodeError("the content store is unreachable"),
                                   ConnectionError("connection refused"),
                                   ReceiptError("model_digest", "the model given is not the "
                                                "receipt's"),
                                   ReceiptError("experience_content", "cannot fetch")])
def test_a_verifier_that_cannot_check_abstains(node, error):
    evidence, digest = evidence_of(honest_bundle(node))

    def check(bundle):
        raise error

    judgement = judge(evidence, digest, check=check)
    assert judgement.outcome == ABSTAIN_OUTCOME and "cannot judge" in judgement.detail
    assert judgement.verdict(1, digest) is None


@pytest.mark.parametrize("missing,skipped", [("model", "activations"),
                                             ("registry", "registration")])
def test_a_verifier_without_its_model_or_registry_abstains(
        node, verifier, tiny_model_dir, monkeypatch, missing, skipped):
    """Every check it could run passes, but it could not run them all: no vote. (A failure
    found without the registry is still upheld: ``check`` is given everything in production,
    the judge only sees what was skipped when nothing fails.)"""
    bundle = forged(node, "fabricated text") if missing == "model" else honest_bundle(node)
    evidence, digest = evidence_of(bundle)
    check = offline_check(verifier, tiny_model_dir, monkeypatch, **{missing: False})
    judgement = judge(evidence, digest, check=check)
    assert judgement.outcome == ABSTAIN_OUTCOME and f"{skipped}:" in judgement.detail
    assert judgement.verdict(1, digest) is None


def test_a_receipt_for_another_deployment_is_rejected(node):
    evidence, digest = evidence_of(honest_bundle(node))

    def check(bundle):
        raise ReceiptError("wrong_domain", "the receipt is signed for another deployment")

    assert judge(evidence, digest, check=check).outcome == REJECTED_OUTCOME


# --------------------------------------------------------------------------- reasons


def test_every_receipt_reason_has_one_outcome_and_is_its_own_name():
    sets = [UPHELD_REASONS, EVIDENCE_REASONS, ABSTAIN_REASONS]
    assert set().union(*sets) == set(REASONS)
    assert sum(len(s) for s in sets) == len(REASONS)
    for reason in REASONS:
        assert reason_name(reason) == reason
        reason_bytes(reason)


@pytest.mark.parametrize("code", ["a reason with spaces", "ü" * 3, "x" * 40,
                                  "a_new_check_whose_name_is_too_long_for_bytes32", ""])
def test_an_unknown_reason_is_upheld_under_a_deterministic_name(node, code):
    evidence, digest = evidence_of(honest_bundle(node))
    error = ReceiptError("sampling", "a later check")
    error.reason = code

    def check(bundle):
        raise error

    judgement = judge(evidence, digest, check=check)
    assert judgement.outcome == UPHELD_OUTCOME
    assert judgement.reason == reason_name(code) == reason_name(code)
    assert reason_text(judgement.verdict(1, digest).reason) == judgement.reason
    assert len(judgement.reason) <= 32
    if len(code) > 32:
        assert judgement.reason != reason_name(code[:-1] + "?")


def test_a_judgement_s_verdict_follows_its_outcome():
    digest = b"\x05" * 32
    assert Judgement(ABSTAIN_OUTCOME).verdict(1, digest) is None
    upheld = Judgement(UPHELD_OUTCOME, "sampling").verdict(1, digest)
    assert (upheld.verdict, upheld.reason) == (UPHELD, reason_bytes("sampling"))
    rejected = Judgement(REJECTED_OUTCOME).verdict(1, digest)
    assert (rejected.verdict, rejected.reason) == (REJECTED, bytes(32))
