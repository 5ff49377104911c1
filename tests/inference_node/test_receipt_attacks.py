"""Sound receipts (issue 15): what a dishonest node can forge fails with its name, and honest
answers never do.

The attacker is a node with its own signing key and the registered model: it can commit to the
activations of any text (``ReceiptSigner.issue`` runs a real prefill over it) and sign any
receipt. Each attack keeps the client's request (its normalized form is what the receipt
signs), so the signature, digests and TOPLOC commitment all check out; only the termination and
sampling checks, which re-derive every token from the prefill's logits, can refuse it.
The honest run sends a few hundred requests through a real signing node (chat and completion,
greedy and sampled, streamed and not, with and without stop strings) and verifies every
receipt in full, counting near-ties.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass

import pytest
from eth_account import Account
from node_helpers import (
    DOMAIN,
    MODEL_NAME,
    NODE_KEY,
    SNAPSHOT,
    answer_over_http,
    honest_requests,
    make_engine,
)

from inference_node import verify
from inference_node.engine import SamplingParams
from inference_node.errors import ReceiptError
from inference_node.injection import LibraryInjector
from inference_node.normalized_request import (
    from_client_request,
    request_key,
)
from inference_node.receipts import (
    ReceiptDomain,
    ReceiptSigner,
    build_receipt,
    bundle_json,
    library_ref,
    model_digest,
    parse_receipt,
    sign_receipt,
)


@pytest.fixture(scope="module")
def verifier(tiny_model_dir):
    """The verifier's model and tokenizer, loaded once."""
    return verify.load_verifier_model(tiny_model_dir)


@pytest.fixture(scope="module")
def node(tiny_model_dir):
    """The dishonest node's tools: its engine, key and the registered model."""
    engine = make_engine(tiny_model_dir)
    signer = ReceiptSigner(NODE_KEY, DOMAIN, engine.model, model_digest(tiny_model_dir))
    engine.start()
    yield engine, signer
    engine.shutdown()


def check(bundle, verifier, tiny_model_dir, monkeypatch):
    """``verify_receipt_bundle`` with the model; the library's texts taken as the node's (the
    chain's part of that check is test_sync's)."""
    model, tokenizer = verifier
    monkeypatch.setattr(verify, "_check_library", lambda *a: dict(SNAPSHOT.experiences))
    return verify.verify_receipt_bundle(bundle, contract=object(), content=object(),
                                        model=model, tokenizer=tokenizer,
                                        model_dir=tiny_model_dir)


def fails(bundle, reason, verifier, tiny_model_dir, monkeypatch) -> ReceiptError:
    with pytest.raises(ReceiptError) as failure:
        check(bundle, verifier, tiny_model_dir, monkeypatch)
    assert failure.value.reason == reason, failure.value
    return failure.value


# --------------------------------------------------------------------------- the attacker


@dataclass
class Answer:
    request: dict  # the body the client sent
    normalized: dict
    prompt_ids: list[int]
    token_ids: list[int]
    text: str
    finish: str


def run(engine, body: dict, *, actual: dict | None = None, seed: int = 0) -> Answer:
    """What the node runs for ``body`` (a chat request), with ``actual`` overriding the
    sampling parameters it really uses (a dishonest node's choice)."""
    normalized = from_client_request("chat", body, max_tokens=body["max_tokens"],
                                     seed=body.get("seed", seed))
    injected = LibraryInjector(engine.tokenizer).chat(normalized["messages"], SNAPSHOT)
    used = {"temperature": normalized["temperature"], "top_p": normalized["top_p"],
            "seed": normalized["seed"], **(actual or {})}
    params = SamplingParams(max_tokens=normalized["max_tokens"], stop=tuple(normalized["stop"]),
                            request_key=request_key(normalized), **used)
    generation = asyncio.run(engine.generate(injected.prompt, params))
    return Answer(body, normalized, list(injected.prompt.all_token_ids), generation.token_ids,
                  generation.text, generation.finish_reason)


def signed(signer, answer: Answer, *, token_ids=None, text=None, finish=None) -> dict:
    """The bundle of a receipt the node signs for ``answer``, or for what it replaces."""
    token_ids = answer.token_ids if token_ids is None else token_ids
    n = answer.normalized
    receipt = signer.issue(
        library=library_ref(SNAPSHOT.log_id, SNAPSHOT.size, SNAPSHOT.root),
        experience_ids=SNAPSHOT.experience_ids, request_json=n, prompt_ids=answer.prompt_ids,
        text=answer.text if text is None else text, completion_ids=token_ids,
        temperature=n["temperature"], top_p=n["top_p"], max_tokens=n["max_tokens"],
        seed=n["seed"], finish_reason=finish or answer.finish)
    return bundle_json(receipt, DOMAIN, route="chat", request=answer.request,
                       text=answer.text if text is None else text,
                       completion_token_ids=token_ids)


def ask(content: str, **fields) -> dict:
    return {"model": MODEL_NAME, "max_tokens": 8,
            "messages": [{"role": "user", "content": content}], **fields}


def fabricated(tokenizer, count: int) -> tuple[list[int], str]:
    """``count`` tokens of "the units are one and the answer is gym token …" and their text."""
    words = ["the", "units", "are", "one", "and", "the", "answer", "is", "gym", "token", "buys", "stake", "vote"]
    ids = tokenizer.convert_tokens_to_ids(list(itertools.islice(itertools.cycle(words), count)))
    return ids, tokenizer.decode(ids, skip_special_tokens=True)


# --------------------------------------------------------------------------- the attacks


def test_an_honest_bundle_verifies(node, verifier, tiny_model_dir, monkeypatch):
    engine, signer = node
    answer = run(engine, ask("the farmer buys twelve apple", temperature=0.8, seed=5))
    checks = check(signed(signer, answer), verifier, tiny_model_dir, monkeypatch)
    assert [c.name for c in checks[-3:]] == ["activations", "termination", "sampling"]
    assert all(c.passed for c in checks[-3:])


@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"temperature": 1.0, "seed": 3},
                                      {"temperature": 0.7, "top_p": 0.9, "seed": 4}])
def test_fabricated_text_with_a_genuine_prefill_commitment_fails_sampling(
        node, verifier, tiny_model_dir, monkeypatch, sampling):
    """The issue's attack: the answer replaced by the node's own text, committed with a real
    prefill over it and signed; the length matches max_tokens so it ends as "length"."""
    engine, signer = node
    answer = run(engine, ask("the farmer buys twelve apple", **sampling))
    ids, text = fabricated(engine.tokenizer, len(answer.token_ids))
    assert ids != answer.token_ids
    bundle = signed(signer, answer, token_ids=ids, text=text, finish="length")
    failure = fails(bundle, "sampling", verifier, tiny_model_dir, monkeypatch)
    first = next(i for i, (a, b) in enumerate(zip(ids, answer.token_ids, strict=True)) if a != b)
    assert f"completion token {first}:" in str(failure)
    assert (failure.expected, failure.computed) == (answer.token_ids[first], ids[first])


@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"temperature": 1.0, "seed": 8}])
def test_one_token_changed_mid_answer_fails_sampling_at_its_position(
        node, verifier, tiny_model_dir, monkeypatch, sampling):
    engine, signer = node
    answer = run(engine, ask("seven box of banana", **sampling))
    ids = list(answer.token_ids)
    ids[4] = engine.tokenizer.convert_tokens_to_ids("gym" if ids[4] != engine.tokenizer.
                                                    convert_tokens_to_ids("gym") else "zoo")
    text = engine.tokenizer.decode(ids, skip_special_tokens=True)
    failure = fails(signed(signer, answer, token_ids=ids, text=text), "sampling", verifier,
                    tiny_model_dir, monkeypatch)
    assert "completion token 4:" in str(failure)


def test_truncated_answer_reported_as_stop_or_length_fails_termination(
        node, verifier, tiny_model_dir, monkeypatch):
    engine, signer = node
    answer = run(engine, ask("count the apple", temperature=0))
    ids = answer.token_ids[:5]
    text = engine.tokenizer.decode(ids, skip_special_tokens=True)
    for finish in ("stop", "length"):
        failure = fails(signed(signer, answer, token_ids=ids, text=text, finish=finish),
                        "termination", verifier, tiny_model_dir, monkeypatch)
        assert "truncated" in str(failure)


def test_answer_continued_past_eos_fails_termination(node, verifier, tiny_model_dir,
                                                     monkeypatch):
    engine, signer = node
    answer = run(engine, ask("count the apple", temperature=0))
    eos = engine.tokenizer.eos_token_id
    ids = [*answer.token_ids[:4], eos, *answer.token_ids[4:7]]
    text = engine.tokenizer.decode(ids, skip_special_tokens=True)
    for finish in ("stop", "length"):
        failure = fails(signed(signer, answer, token_ids=ids, text=text, finish=finish),
                        "termination", verifier, tiny_model_dir, monkeypatch)
        assert "completion token 4 is an end-of-sequence token and 3 more follow" in str(failure)


def test_answer_continued_past_its_stop_string_fails_termination(
        node, verifier, tiny_model_dir, monkeypatch):
    """A stop string the request named is in the text before its last token: the honest
    answer ended there."""
    engine, signer = node
    honest = run(engine, ask("the farmer buys twelve apple", temperature=0, max_tokens=12))
    stop = engine.tokenizer.decode(honest.token_ids[2:3])  # a word the answer says early
    answer = run(engine, ask("the farmer buys twelve apple", temperature=0, max_tokens=12,
                             stop=[stop]))
    assert answer.finish == "stop" and len(answer.token_ids) < len(honest.token_ids)
    longer = honest.token_ids[:len(answer.token_ids) + 2]  # two tokens past the stop
    failure = fails(signed(signer, answer, token_ids=longer, text=answer.text),
                    "termination", verifier, tiny_model_dir, monkeypatch)
    assert "stop string ends before the last token" in str(failure)


def test_text_that_is_not_the_tokens_fails_response_text(node, verifier, tiny_model_dir,
                                                         monkeypatch):
    """Genuine tokens, another text beside them (the response digest signs both)."""
    engine, signer = node
    answer = run(engine, ask("count the apple", temperature=0))
    _, text = fabricated(engine.tokenizer, len(answer.token_ids))
    fails(signed(signer, answer, text=text), "response_text", verifier, tiny_model_dir,
          monkeypatch)


def differing(engine, body: dict, actual: list[dict]) -> tuple[Answer, dict]:
    """The first of ``actual`` under which the node's tokens differ from the honest ones for
    ``body`` (a claim that changes nothing is not a lie), with the answer it gives."""
    honest = run(engine, body)
    for used in actual:
        answer = run(engine, body, actual=used)
        if answer.token_ids != honest.token_ids:
            return answer, used
    raise AssertionError(f"no parameters of {actual} change the answer to {body}")


@pytest.mark.parametrize("claimed,used", [
    ({"temperature": 0.7, "seed": 1}, [{"temperature": t} for t in (1.5, 2.0, 0.3)]),
    ({"temperature": 1.0, "top_p": 0.5, "seed": 1}, [{"top_p": 1.0}]),
    ({"temperature": 1.0, "seed": 1}, [{"seed": s} for s in range(2, 12)]),
    ({"temperature": 0}, [{"temperature": 1.0, "seed": s} for s in range(1, 11)]),
])
def test_other_sampling_than_claimed_fails_sampling(node, verifier, tiny_model_dir, monkeypatch,
                                                     claimed, used):
    """A different temperature, top-p or seed used than the receipt claims (and greedy
    claimed, sampled used)."""
    engine, signer = node
    answer, _ = differing(engine, ask("the farmer sells seven box", max_tokens=10, **claimed),
                          used)
    fails(signed(signer, answer, finish="length"), "sampling", verifier, tiny_model_dir,
          monkeypatch)


def test_a_smaller_models_text_recommitted_under_the_registered_model_fails_sampling(
        node, other_model_dir, verifier, tiny_model_dir, monkeypatch):
    """The node runs a cheaper model (here: other weights, same tokenizer) and commits to the
    registered model's prefill over its text."""
    engine, signer = node
    cheap = make_engine(other_model_dir)
    try:
        body = ask("the farmer buys twelve apple", temperature=0)
        cheap_answer = run(cheap, body)
    finally:
        cheap.shutdown()
    honest = run(engine, body)
    assert cheap_answer.token_ids != honest.token_ids
    answer = Answer(body, honest.normalized, honest.prompt_ids, cheap_answer.token_ids,
                    cheap_answer.text, cheap_answer.finish)
    fails(signed(signer, answer), "sampling", verifier, tiny_model_dir, monkeypatch)


def test_a_receipt_replayed_for_another_request_fails_request_digest(
        node, verifier, tiny_model_dir, monkeypatch):
    engine, signer = node
    bundle = signed(signer, run(engine, ask("count the apple", temperature=0)))
    other = from_client_request("chat", ask("count the banana", temperature=0),
                                max_tokens=8, seed=bundle["request"]["seed"])
    fails({**bundle, "request": other}, "request_digest", verifier, tiny_model_dir, monkeypatch)


def test_a_v1_receipt_verifies_with_sampling_and_termination_skipped(
        node, verifier, tiny_model_dir, monkeypatch):
    """Receipts of the old version keep verifying under their own rules; the verifier says
    that their tokens could not be checked."""
    engine, signer = node
    answer = run(engine, ask("count the apple", temperature=0))
    receipt = signer.issue(
        library=library_ref(SNAPSHOT.log_id, SNAPSHOT.size, SNAPSHOT.root),
        experience_ids=SNAPSHOT.experience_ids, request_json=answer.request,
        prompt_ids=answer.prompt_ids, text=answer.text, completion_ids=answer.token_ids,
        temperature=0, top_p=1, max_tokens=8, seed=0)
    assert receipt.v == 1
    bundle = bundle_json(receipt, DOMAIN, route="chat", request=answer.request,
                         text=answer.text, completion_token_ids=answer.token_ids)
    checks = check(bundle, verifier, tiny_model_dir, monkeypatch)
    skipped = {c.name: c.detail for c in checks if c.passed is None}
    assert "cannot be checked" in skipped["sampling"] and "receipt v1" in skipped["termination"]
    assert [c.name for c in checks if c.passed][-1] == "activations"


# --------------------------------------------------------------------------- no false alarms

def test_two_hundred_honest_receipts_verify_and_near_ties_are_counted(
        signing_node, verifier, tiny_model_dir, monkeypatch):
    total = near_ties = tokens = 0
    seen, endings = set(), set()
    for route, body, stream in honest_requests(200):
        receipt, evidence, text = answer_over_http(signing_node.base_url, route, body, stream)
        bundle = bundle_json(parse_receipt(receipt), ReceiptDomain.from_json(evidence["domain"]),
                             route=route, request=body, text=text,
                             completion_token_ids=evidence["completion_token_ids"])
        try:
            checks = check(bundle, verifier, tiny_model_dir, monkeypatch)
        except ReceiptError as exc:
            raise AssertionError(f"honest receipt {route} {body} stream={stream}: {exc}") from exc
        sampling = checks[-1]
        assert sampling.name == "sampling" and sampling.passed
        near_ties += sampling.near_ties
        tokens += len(evidence["completion_token_ids"])
        seen.add((route, stream, body["temperature"] == 0))
        endings.add(parse_receipt(receipt).finish_reason)
        total += 1
    assert total == 200
    # every combination of route, streaming and greedy/sampled, and both endings, ran
    assert len(seen) == 8 and endings == {"stop", "length"}, (sorted(seen), endings)
    print(f"\n200 honest receipts, {tokens} tokens: {near_ties} near-ties")


@pytest.mark.parametrize("token_ids,reason", [([3, 10**6], "malformed"), ([3, True], "malformed"),
                                              ([5] * 5000, "token_counts")])
def test_a_hostile_answer_is_refused_before_the_prefill(node, verifier, tiny_model_dir,
                                                        monkeypatch, token_ids, reason):
    """Token ids the model does not have, or more than its context holds, in a receipt the
    node signed: one clear failure, no crash and no huge allocation in the verifier."""
    engine, _ = node
    answer = run(engine, ask("count the apple", temperature=0))
    n = answer.normalized
    receipt = sign_receipt(build_receipt(
        node=Account.from_key(NODE_KEY).address, model_digest=model_digest(tiny_model_dir),
        library=library_ref(SNAPSHOT.log_id, SNAPSHOT.size, SNAPSHOT.root),
        experience_ids=SNAPSHOT.experience_ids, request_json=n, text="x",
        completion_token_ids=token_ids, prompt_tokens=len(answer.prompt_ids),
        temperature=0, top_p=1, max_tokens=8, seed=n["seed"],
        activation_commitment="toploc1:1:32:AA==", finish_reason="length"), NODE_KEY, DOMAIN)
    bundle = bundle_json(receipt, DOMAIN, route="chat", request=answer.request, text="x",
                         completion_token_ids=token_ids)
    fails(bundle, reason, verifier, tiny_model_dir, monkeypatch)
