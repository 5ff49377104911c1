"""`n > 1` (issue 16): choice i is sampled with seed `seed + i` as its own engine request and
signed on its own; each choice's receipt verifies as a one-choice answer with that seed would,
through the official `openai` SDK, streamed and not, chat and completions."""

from __future__ import annotations

import httpx
import openai
import pytest
from node_helpers import MODEL_NAME, answer_bundle, offline_checks

MESSAGES = [{"role": "user", "content": "say something"}]


@pytest.fixture(scope="module")
def client(json_node):
    with openai.OpenAI(base_url=json_node.base_url, api_key="x", max_retries=0) as c:
        yield c


def verify_choice(route, body, fields, text, verifier, model_dir, monkeypatch):
    return offline_checks(answer_bundle(route, body, fields, text), verifier, model_dir,
                          monkeypatch)


def test_each_chat_choice_is_the_one_choice_answer_with_seed_plus_index(client):
    many = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, n=3, seed=10,
                                          max_tokens=12)
    assert [c.index for c in many.choices] == [0, 1, 2]
    for i, choice in enumerate(many.choices):
        one = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, seed=10 + i,
                                             max_tokens=12).choices[0]
        assert choice.message.content == one.message.content
        assert choice.model_extra["receipt"]["sampling"]["seed"] == 10 + i
    assert "receipt" not in (many.model_extra or {})
    assert many.usage.completion_tokens == sum(
        len(c.model_extra["receipt_evidence"]["completion_token_ids"]) for c in many.choices)


def test_each_choice_s_receipt_verifies(client, json_verifier, json_model_dir, monkeypatch):
    body = {"model": MODEL_NAME, "messages": MESSAGES, "max_tokens": 10, "seed": 5,
            "temperature": 1.0}
    reply = client.chat.completions.create(**body, n=2)
    for i, choice in enumerate(reply.choices):
        checks = verify_choice("chat", {**body, "seed": 5 + i}, choice.model_extra,
                               choice.message.content, json_verifier, json_model_dir, monkeypatch)
        assert checks["sampling"].passed


def test_streamed_choices_carry_their_index_and_receipt(client, json_verifier, json_model_dir,
                                                        monkeypatch):
    body = {"model": MODEL_NAME, "messages": MESSAGES, "max_tokens": 10, "seed": 21}
    whole = client.chat.completions.create(**body, n=2)
    texts, receipts = {0: "", 1: ""}, {}
    usage = None
    for chunk in client.chat.completions.create(**body, n=2, stream=True,
                                                stream_options={"include_usage": True}):
        usage = chunk.usage or usage
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
            if choice.finish_reason is not None:
                receipts[choice.index] = choice.model_extra
    assert texts == {i: c.message.content for i, c in enumerate(whole.choices)}
    assert usage.completion_tokens == whole.usage.completion_tokens
    for i in (0, 1):
        checks = verify_choice("chat", {**body, "seed": 21 + i}, receipts[i], texts[i],
                               json_verifier, json_model_dir, monkeypatch)
        assert checks["sampling"].passed


def test_completions_with_n(client, json_verifier, json_model_dir, monkeypatch):
    body = {"model": MODEL_NAME, "prompt": "once upon", "max_tokens": 8, "seed": 3}
    reply = client.completions.create(**body, n=2)
    assert [c.index for c in reply.choices] == [0, 1]
    streamed = {0: "", 1: ""}
    for chunk in client.completions.create(**body, n=2, stream=True):
        for choice in chunk.choices:
            streamed[choice.index] += choice.text
    assert streamed == {c.index: c.text for c in reply.choices}
    checks = verify_choice("completion", {**body, "seed": 4}, reply.choices[1].model_extra,
                           reply.choices[1].text, json_verifier, json_model_dir, monkeypatch)
    assert checks["sampling"].passed


@pytest.mark.parametrize("fields,param", [({"n": 17}, "n"), ({"n": 0}, "n"),
                                          ({"n": 3, "seed": 2**53 - 2}, "seed")])
def test_bad_n_is_a_400(client, fields, param):
    with pytest.raises(openai.BadRequestError) as failure:
        client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=4,
                                       **fields)
    assert failure.value.body["param"] == param


# --------------------------------------------------------------------------- a list prompt


def test_a_list_prompt_is_batched_each_choice_signing_its_own_prompt(json_node, json_verifier,
                                                                    json_model_dir, monkeypatch):
    """vLLM batches a list `prompt` on /v1/completions (once refused here): choice i answers
    prompt i // n with seed + i, and its receipt signs that prompt alone."""
    prompts = ["one", "two two", "three three three"]
    body = {"model": MODEL_NAME, "prompt": prompts, "n": 2, "max_tokens": 6, "seed": 40,
            "temperature": 1.0, "echo": True}
    data = httpx.post(json_node.base_url + "/completions", json=body, timeout=60).json()
    assert [c["index"] for c in data["choices"]] == list(range(6))
    for choice in data["choices"]:
        prompt = prompts[choice["index"] // 2]
        assert choice["text"].startswith(prompt)  # echo: its own prompt
        alone = {**body, "prompt": prompt, "n": 1, "seed": 40 + choice["index"], "echo": False}
        same = httpx.post(json_node.base_url + "/completions", json=alone, timeout=60).json()
        assert prompt + same["choices"][0]["text"] == choice["text"]  # the same sample
        checks = offline_checks(answer_bundle("completion", alone, choice,
                                              choice["text"][len(prompt):]),
                                json_verifier, json_model_dir, monkeypatch)
        assert checks["sampling"].passed
    single = httpx.post(json_node.base_url + "/completions", timeout=60,
                        json={**body, "prompt": prompts[0], "n": 1}).json()["usage"]
    assert data["usage"]["prompt_tokens"] > single["prompt_tokens"]  # each prompt counted once
    too_many = httpx.post(json_node.base_url + "/completions", timeout=60,
                          json={**body, "prompt": ["x"] * 9, "n": 2})
    assert too_many.status_code == 400 and too_many.json()["error"]["param"] == "n"
