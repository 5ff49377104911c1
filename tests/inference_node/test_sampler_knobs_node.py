"""gym-sampler/2's knobs through the node (transformers engine), with the `openai` client: each
knob's effect on the answer, its receipt naming gym-sampler/2 and verifying on the model, and the
400s for values outside vLLM's domains. The vLLM engine's side: test_vllm_engine's knob parity."""

from __future__ import annotations

import json
from collections import Counter

import httpx
import pytest

from inference_node.generation_checks import eos_token_ids
from tests.inference_node.node_helpers import MODEL_NAME, answer_bundle, offline_checks

openai = pytest.importorskip("openai")

PROMPT = [{"role": "user", "content": "Count the colours of the rainbow"}]


@pytest.fixture(scope="module")
def client(json_node):
    return openai.OpenAI(base_url=json_node.base_url, api_key="x", max_retries=0)


@pytest.fixture(scope="module")
def eos(json_verifier) -> int:
    model, tokenizer = json_verifier
    return min(eos_token_ids(model, tokenizer))


def _ask(client, **params):
    """The answer (raw JSON), the body sent, and the tokens."""
    body = {"model": MODEL_NAME, "messages": PROMPT, "max_tokens": 12, "seed": 3, **params}
    extra = {k: body.pop(k) for k in list(body) if k in (
        "top_k", "min_p", "min_tokens", "repetition_penalty", "ignore_eos", "stop_token_ids")}
    raw = client.chat.completions.with_raw_response.create(**body, extra_body=extra)
    answer = json.loads(raw.text)
    return answer, {**body, **extra}, answer["receipt_evidence"]["completion_token_ids"]


def _verified(answer, body, json_verifier, json_model_dir, monkeypatch) -> dict:
    checks = offline_checks(answer_bundle("chat", body, answer,
                                          answer["choices"][0]["message"]["content"]),
                            json_verifier, json_model_dir, monkeypatch)
    assert all(c.passed for c in checks.values() if c.passed is not None), checks
    assert checks["sampling"].passed and checks["termination"].passed
    return checks


def test_without_knobs_the_receipt_names_gym_sampler_1(client, json_verifier, json_model_dir,
                                                       monkeypatch):
    answer, body, _ = _ask(client, temperature=0.8)
    assert answer["receipt"]["sampler"] == "gym-sampler/1"
    _verified(answer, body, json_verifier, json_model_dir, monkeypatch)


@pytest.mark.parametrize("knob", [{"top_k": 1}, {"min_p": 1.0}])
def test_top_k_1_and_min_p_1_at_temperature_1_give_the_greedy_answer(
        client, knob, json_verifier, json_model_dir, monkeypatch):
    _, _, greedy = _ask(client, temperature=0)
    _, _, sampled = _ask(client, temperature=1.0)
    answer, body, tokens = _ask(client, temperature=1.0, **knob)
    assert tokens == greedy != sampled
    assert answer["receipt"]["sampler"] == "gym-sampler/2"
    _verified(answer, body, json_verifier, json_model_dir, monkeypatch)


def test_logit_bias_min_tokens_ignore_eos_and_stop_token_ids(client, eos, json_verifier,
                                                             json_model_dir, monkeypatch):
    ends = {"logit_bias": {str(eos): 100}}
    answer, body, tokens = _ask(client, temperature=0.7, **ends)
    assert tokens == [eos] and answer["choices"][0]["finish_reason"] == "stop"
    _verified(answer, body, json_verifier, json_model_dir, monkeypatch)

    answer, body, tokens = _ask(client, temperature=0.7, min_tokens=5, **ends)
    assert len(tokens) == 6 and eos not in tokens[:5] and tokens[5] == eos
    _verified(answer, body, json_verifier, json_model_dir, monkeypatch)

    answer, body, tokens = _ask(client, temperature=0.7, ignore_eos=True, **ends)
    assert tokens == [eos] * 12 and answer["choices"][0]["finish_reason"] == "length"
    _verified(answer, body, json_verifier, json_model_dir, monkeypatch)

    _, _, greedy = _ask(client, temperature=0)
    stop_on = greedy[2]
    answer, body, tokens = _ask(client, temperature=0, stop_token_ids=[stop_on])
    assert tokens == greedy[:greedy.index(stop_on) + 1]
    assert answer["choices"][0]["finish_reason"] == "stop"
    _verified(answer, body, json_verifier, json_model_dir, monkeypatch)

    banned = {"logit_bias": {str(greedy[0]): -100}}
    answer, body, tokens = _ask(client, temperature=0, **banned)
    assert greedy[0] not in tokens
    _verified(answer, body, json_verifier, json_model_dir, monkeypatch)


@pytest.mark.parametrize("knob", [{"frequency_penalty": 2.0}, {"presence_penalty": 2.0},
                                  {"repetition_penalty": 2.0}])
def test_penalties_change_the_answer(client, knob, json_verifier, json_model_dir, monkeypatch):
    """The tiny model's greedy answer repeats one token: the frequency and presence penalties
    break the loop; the repetition penalty (which also reads the prompt, and only divides a
    logit) moves the answer off the prompt's token."""
    _, _, plain = _ask(client, temperature=0, max_tokens=24)
    answer, body, tokens = _ask(client, temperature=0, max_tokens=24, **knob)
    assert tokens != plain
    if "repetition_penalty" not in knob:
        assert Counter(tokens).most_common(1)[0][1] < Counter(plain).most_common(1)[0][1]
    assert answer["receipt"]["sampler"] == "gym-sampler/2"
    checks = _verified(answer, body, json_verifier, json_model_dir, monkeypatch)
    assert next(iter(knob)) in checks["sampling"].detail


def test_a_receipt_for_the_knobs_fails_without_them(client, json_verifier, json_model_dir,
                                                   monkeypatch):
    """The knobs are signed: the same answer offered for the request without them fails its
    request digest."""
    answer, body, _ = _ask(client, temperature=0, max_tokens=24, frequency_penalty=2.0)
    del body["frequency_penalty"]
    checks = None
    with pytest.raises(Exception, match="request"):
        checks = offline_checks(answer_bundle("chat", body, answer,
                                              answer["choices"][0]["message"]["content"]),
                                json_verifier, json_model_dir, monkeypatch)
    assert checks is None


@pytest.mark.parametrize("field,value,says", [
    ("presence_penalty", 2.5, "less than or equal to 2"),
    ("repetition_penalty", 0, "greater than 0"),
    ("top_k", -2, "greater than or equal to -1"),
    ("min_p", 1.5, "less than or equal to 1"),
    ("logit_bias", {"x1": 3}, "token ids"),
    ("logit_bias", {"1": 101}, "between -100 and 100"),
    ("logit_bias", {"999999": 1}, "outside the model's vocabulary"),
    ("stop_token_ids", [999999], "outside the model's vocabulary"),
    ("min_tokens", 20, "more than the completion's limit"),
    ("logit_bias", {"07": 1}, "no leading zeros"),
    ("top_k", 2**40, "less than or equal to"),
    ("ignore_eos", "yes", "valid boolean"),
])
def test_a_knob_outside_its_domain_is_a_400_naming_it(json_node, field, value, says):
    body = {"model": MODEL_NAME, "messages": PROMPT, "max_tokens": 12, field: value}
    reply = httpx.post(json_node.base_url + "/chat/completions", json=body, timeout=60)
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == field
    assert says in reply.json()["error"]["message"]


@pytest.mark.parametrize("other", [{"stop": ["."]}, {"response_format": {"type": "json_object"}},
                                   {"guided_choice": ["yes", "no"]}])
def test_min_tokens_with_a_stop_string_or_a_constraint_is_a_400(json_node, other):
    body = {"model": MODEL_NAME, "messages": PROMPT, "max_tokens": 12, "min_tokens": 2, **other}
    reply = httpx.post(json_node.base_url + "/chat/completions", json=body, timeout=60)
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "min_tokens", reply.text



def test_min_tokens_beyond_the_nodes_default_limit_is_a_400(json_node):
    """Without max_tokens the node's default limit applies, and min_tokens is held to it."""
    body = {"model": MODEL_NAME, "messages": PROMPT, "min_tokens": 100_000}
    reply = httpx.post(json_node.base_url + "/chat/completions", json=body, timeout=60)
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "min_tokens", reply.text
    assert "tokens here" in reply.json()["error"]["message"]
