"""Structured outputs (issue 16): `response_format` enforced by grammar-constrained decoding,
through the official `openai` SDK; formats the node cannot enforce refused with a 400; the
format signed in the receipt and re-checked by the verifier, token by token.

The model is a tiny *random* Llama with a byte-level tokenizer (`json_model_dir`): unconstrained
it writes noise, so every answer that parses and validates does so because of the grammar.
"""

from __future__ import annotations

import asyncio
import json
import re

import httpx
import jsonschema
import openai
import pytest
from node_helpers import (
    DOMAIN,
    MODEL_NAME,
    NODE_KEY,
    SCHEMAS,
    SNAPSHOT,
    answer_bundle,
    make_engine,
    offline_checks,
    signed_bundle,
)

from inference_node.engine import SamplingParams
from inference_node.errors import ReceiptError
from inference_node.injection import LibraryInjector
from inference_node.normalized_request import from_client_request, request_key
from inference_node.receipts import ReceiptSigner, model_digest
from inference_node.response_format import Constraint, FormatError, canonical_response_format


def schema_format(schema: dict, name: str = "answer") -> dict:
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema,
                                                   "strict": True}}


@pytest.fixture(scope="module")
def client(json_node):
    with openai.OpenAI(base_url=json_node.base_url, api_key="x", max_retries=0) as c:
        yield c


def ask(client, response_format: dict, seed: int, **fields):
    fields.setdefault("max_tokens", 160)
    return client.chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": "describe the thing"}],
        response_format=response_format, temperature=1.0, seed=seed, **fields)


@pytest.mark.parametrize("index", range(len(SCHEMAS)))
def test_every_answer_parses_and_validates_against_its_schema(client, index):
    schema = SCHEMAS[index]
    for seed in range(3):
        reply = ask(client, schema_format(schema), seed)
        choice = reply.choices[0]
        assert choice.finish_reason == "stop", choice.message.content
        jsonschema.validate(json.loads(choice.message.content), schema)


def test_properties_come_in_the_schema_order(client):
    schema = {"type": "object", "properties": {"zeta": {"enum": [1]}, "alpha": {"enum": [2]}},
              "required": ["zeta", "alpha"], "additionalProperties": False}
    assert ask(client, schema_format(schema), 0).choices[0].message.content == \
        '{"zeta": 1, "alpha": 2}'


def test_json_object_gives_a_json_object(client):
    for seed in range(4):
        content = ask(client, {"type": "json_object"}, seed, max_tokens=400
                      ).choices[0].message.content
        try:
            value = json.loads(content)
        except json.JSONDecodeError:  # cut by max_tokens: still a prefix of an object
            assert content.startswith("{")
            continue
        assert isinstance(value, dict)


def test_a_streamed_answer_is_the_same_valid_json(client):
    schema = SCHEMAS[4]
    whole = ask(client, schema_format(schema), 7).choices[0].message.content
    parts = [chunk.choices[0].delta.content or ""
             for chunk in ask(client, schema_format(schema), 7, stream=True) if chunk.choices]
    assert "".join(parts) == whole
    jsonschema.validate(json.loads(whole), schema)


def test_the_text_format_is_no_constraint(client):
    reply = client.chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": "hi"}], seed=3, max_tokens=12,
        response_format={"type": "text"})
    plain = client.chat.completions.create(
        model=MODEL_NAME, messages=[{"role": "user", "content": "hi"}], seed=3, max_tokens=12)
    assert reply.choices[0].message.content == plain.choices[0].message.content


@pytest.mark.parametrize("response_format,words", [
    ({"type": "yaml"}, "unsupported response_format type 'yaml'"),
    ({"type": "json_schema"}, "json_schema must be an object"),
    (schema_format({"type": "object", "not": {"type": "string"}}), "'not' is not supported"),
    (schema_format({"type": "object", "properties": {"a": {"oneOf": [{"type": "string"}]}}}),
     "properties.a: the keyword 'oneOf' is not supported"),
    (schema_format({"type": "array", "uniqueItems": True}), "'uniqueItems' is not supported"),
    (schema_format({"type": "array", "maxItems": 100000}), "maxItems 100000 is above"),
    (schema_format({"type": "string", "format": "hostname"}), "format 'hostname'"),
    (schema_format({"type": "string", "pattern": "^[a-z]{1,10000}$"}),
     "pattern repetition {1,10000} is above"),
    (schema_format({"type": "string", "pattern": "a" * 1001}), "at most 1000 characters"),
    (schema_format({"type": "integer", "minimum": "zero"}), "not a valid JSON Schema"),
    (schema_format({"$ref": "https://example.com/s.json"}), "only local $ref"),
    (schema_format({"type": "object"}, name="no spaces allowed"), "json_schema.name"),
    ({"type": "json_schema", "json_schema": {"name": "a", "schema": {}, "extra": 1}},
     "unsupported fields ['extra']"),
])
def test_a_format_the_node_cannot_enforce_is_a_400(client, response_format, words):
    with pytest.raises(openai.BadRequestError) as failure:
        ask(client, response_format, 0)
    error = failure.value.body
    assert words in error["message"], error
    assert error["param"] == "response_format"


def test_a_schema_the_grammar_compiler_refuses_is_a_400(client):
    with pytest.raises(openai.BadRequestError) as failure:
        ask(client, schema_format({"type": "object", "$ref": "#/$defs/missing"}), 0)
    assert "cannot be compiled to a grammar" in failure.value.body["message"]
    assert failure.value.body["param"] == "response_format"
    ask(client, schema_format(SCHEMAS[0]), 0)  # and the node goes on serving


def test_the_canonical_form_ignores_description_and_fills_strict():
    given = {"type": "json_schema", "json_schema": {"name": "a", "description": "d",
                                                    "schema": {"type": "object"}}}
    assert canonical_response_format(given) == {
        "type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object"},
                                               "strict": False}}
    assert canonical_response_format({"type": "text"}) is None
    with pytest.raises(FormatError):
        canonical_response_format({"type": "json_object", "json_schema": {}})


# --------------------------------------------------------------------------- receipts


def test_a_constrained_answer_s_receipt_verifies_with_its_grammar(
        json_node, json_verifier, json_model_dir, monkeypatch):
    for index, seed, temperature in [(4, 1, 1.0), (3, 2, 0.0), (7, 3, 0.7)]:
        body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "plan"}],
                "max_tokens": 160, "seed": seed, "temperature": temperature,
                "response_format": schema_format(SCHEMAS[index])}
        data = httpx.post(json_node.base_url + "/chat/completions", json=body, timeout=60).json()
        bundle = answer_bundle("chat", body, data, data["choices"][0]["message"]["content"])
        checks = offline_checks(bundle, json_verifier, json_model_dir, monkeypatch)
        assert checks["response_format"].passed and checks["sampling"].passed


def test_a_node_that_ignores_the_format_fails_response_format(json_model_dir, json_verifier,
                                                               monkeypatch):
    """The attack: a node claims the schema (the receipt signs it) but decodes without the
    grammar. Its tokens are the verifiable sampler's genuine choices on the unmasked logits,
    so only the grammar replay can catch it: `response_format` at the first token the
    grammar forbids."""
    engine = make_engine(json_model_dir)
    signer = ReceiptSigner(NODE_KEY, DOMAIN, engine.model, model_digest(json_model_dir))
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "plan"}],
            "max_tokens": 24, "seed": 4, "temperature": 1.0,
            "response_format": schema_format(SCHEMAS[0])}
    normalized = from_client_request("chat", body, max_tokens=24, seed=4)
    injected = LibraryInjector(engine.tokenizer).chat(normalized["messages"], SNAPSHOT)
    engine.start()
    try:
        bundles = {}
        for name, constraint in [("honest", Constraint.of_schema(SCHEMAS[0])),
                                 ("ignored", None)]:
            params = SamplingParams(max_tokens=24, temperature=1.0, seed=4,
                                    request_key=request_key(normalized), constraint=constraint)
            out = asyncio.run(engine.generate(injected.prompt, params))
            bundles[name] = signed_bundle(signer, body, normalized,
                                          list(injected.prompt.all_token_ids), out)
    finally:
        engine.shutdown()
    offline_checks(bundles["honest"], json_verifier, json_model_dir, monkeypatch)
    with pytest.raises(ReceiptError) as failure:
        offline_checks(bundles["ignored"], json_verifier, json_model_dir, monkeypatch)
    assert failure.value.reason == "response_format", failure.value
    assert "not allowed by the request's json_schema grammar" in str(failure.value)


def test_the_receipt_signs_the_format_and_its_property_order():
    """Two schemas with the same keys in another order are different requests (the answer
    writes properties in schema order), so their digests differ."""
    one = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}
    two = {"type": "object", "properties": {"b": {"type": "integer"}, "a": {"type": "integer"}}}
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "x"}]}
    digests = {json.dumps(s): request_key(from_client_request(
        "chat", {**body, "response_format": schema_format(s)}, max_tokens=8, seed=0))
        for s in (one, two)}
    plain = request_key(from_client_request("chat", body, max_tokens=8, seed=0))
    assert len(set(digests.values()) | {plain}) == 3


@pytest.mark.parametrize("field,value", [
    ("functions", [{"name": "f"}]), ("function_call", "auto"), ("modalities", ["audio"]),
    ("audio", {"voice": "x"}), ("prediction", {"type": "content", "content": "x"}),
    # vLLM's extras the node does not honour (the sampling knobs it does: test_sampler_knobs_node)
    ("length_penalty", 0.5), ("bad_words", ["x"]), ("use_beam_search", True),
    ("guided_grammar", "root ::= \"a\""),
    ("structured_outputs", {"grammar": "root ::= \"a\""})])
def test_an_openai_parameter_the_node_does_not_implement_is_a_400(json_node, field, value):
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "x"}],
            "max_tokens": 2, field: value}
    reply = httpx.post(json_node.base_url + "/chat/completions", json=body, timeout=60)
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == field
    assert "not supported by this node" in reply.json()["error"]["message"] or \
        "on this node" in reply.json()["error"]["message"]


@pytest.mark.parametrize("field,value", [
    ("presence_penalty", 0), ("frequency_penalty", 0.0), ("logit_bias", {}),
    ("modalities", ["text"]), ("parallel_tool_calls", True), ("best_of", 1),
    ("parallel_tool_calls", False), ("top_k", -1), ("min_tokens", 0),
    ("repetition_penalty", 1.0), ("guided_choice", None), ("stop_token_ids", [])])
def test_the_no_op_value_of_an_unimplemented_parameter_is_accepted(json_node, field, value):
    route, body = ("/completions", {"prompt": "x"}) if field == "best_of" else (
        "/chat/completions", {"messages": [{"role": "user", "content": "x"}]})
    reply = httpx.post(json_node.base_url + route, timeout=60,
                       json={"model": MODEL_NAME, "max_tokens": 2, field: value, **body})
    assert reply.status_code == 200, reply.text


ADD_TOOL = {"type": "function", "function": {"name": "add", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"]}}}


@pytest.mark.parametrize("extra, param", [
    ({"top_logprobs": 2}, "top_logprobs"),  # without logprobs, as OpenAI and vLLM refuse it
    ({"stream_options": {"include_usage": True}}, "stream_options"),  # without stream
])
def test_openai_edges_are_400s_naming_the_field(json_node, extra, param):
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "x"}],
            "max_tokens": 2, **extra}
    reply = httpx.post(json_node.base_url + "/chat/completions", json=body, timeout=60)
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == param


def test_parallel_tool_calls_false_with_a_named_function_is_one_call(json_node):
    """LangChain's with_structured_output(method="function_calling") sends exactly this: a
    named function and parallel_tool_calls false. (A boolean argument keeps the random tiny
    model's call short.)"""
    confirm = {"type": "function", "function": {"name": "confirm", "parameters": {
        "type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}}}
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "is 2 + 3 = 5?"}],
            "max_tokens": 40, "tools": [confirm, ADD_TOOL], "parallel_tool_calls": False,
            "tool_choice": {"type": "function", "function": {"name": "confirm"}}}
    reply = httpx.post(json_node.base_url + "/chat/completions", json=body, timeout=120)
    assert reply.status_code == 200, reply.text
    choice = reply.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls", choice
    (call,) = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "confirm"
    assert json.loads(call["function"]["arguments"]).keys() == {"ok"}


def test_a_model_is_retrieved_by_id_and_an_unknown_route_names_the_routes(json_node):
    card = httpx.get(f"{json_node.base_url}/models/{MODEL_NAME}", timeout=30)
    assert card.status_code == 200 and card.json()["id"] == MODEL_NAME
    missing = httpx.get(f"{json_node.base_url}/models/other-model", timeout=30)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"
    responses = httpx.post(f"{json_node.base_url}/responses", json={"input": "hi"}, timeout=30)
    assert responses.status_code == 404
    error = responses.json()["error"]
    assert error["type"] == "not_found_error" and "POST /v1/chat/completions" in error["message"]
    assert "POST /v1/responses" in error["message"]  # what was asked, then what is served
    wrong = httpx.get(f"{json_node.base_url}/chat/completions", timeout=30)
    assert wrong.status_code == 405 and "POST /v1/chat/completions" in wrong.json()["error"]["message"]


# --------------------------------------------------------------------------- vLLM's guided forms


@pytest.mark.parametrize("route, extra, check", [
    ("chat", {"guided_choice": ["yes", "no"]}, lambda text: text in ("yes", "no")),
    ("chat", {"structured_outputs": {"choice": ["left", "right", "up"]}},
     lambda text: text in ("left", "right", "up")),
    ("chat", {"guided_regex": "[0-9]{3}-[a-c]{2}"},
     lambda text: re.fullmatch("[0-9]{3}-[a-c]{2}", text) is not None),
    ("chat", {"guided_json": {"type": "object", "properties": {"ok": {"type": "boolean"}},
                              "required": ["ok"]}},
     lambda text: isinstance(json.loads(text)["ok"], bool)),
    ("completion", {"guided_choice": ["yes", "no"]}, lambda text: text in ("yes", "no")),
])
def test_guided_forms_constrain_the_answer_and_its_receipt_verifies(
        json_node, json_verifier, json_model_dir, monkeypatch, route, extra, check):
    """Each once answered 200 with the form ignored (a guided_choice of yes/no said "No.")."""
    path, body = ("/chat/completions", {"messages": [{"role": "user", "content": "ok?"}]}) \
        if route == "chat" else ("/completions", {"prompt": "ok?"})
    for seed in range(3):
        body = {"model": MODEL_NAME, "max_tokens": 40, "seed": seed, "temperature": 1.0,
                **body, **extra}
        data = httpx.post(json_node.base_url + path, json=body, timeout=60).json()
        choice = data["choices"][0]
        text = choice["message"]["content"] if route == "chat" else choice["text"]
        assert choice["finish_reason"] == "stop" and check(text), (extra, text)
        checks = offline_checks(answer_bundle(route, body, data, text), json_verifier,
                                json_model_dir, monkeypatch)
        assert checks["response_format"].passed and checks["sampling"].passed


@pytest.mark.parametrize("extra, param", [
    ({"guided_choice": ["a"], "guided_regex": "b"}, "guided_regex"),
    ({"guided_json": {"type": "object"}, "response_format": {"type": "json_object"}},
     "guided_json"),
    ({"guided_regex": "[0-9]{1000}"}, "guided_regex"),
    ({"guided_regex": "("}, "guided_regex"),
    ({"guided_choice": ["a", "a"]}, "guided_choice"),
    ({"guided_choice": []}, "guided_choice"),
    ({"tools": [ADD_TOOL], "tool_choice": "required", "guided_choice": ["a"]}, "tool_choice"),
])
def test_bad_guided_forms_are_400s_naming_the_field(json_node, extra, param):
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "x"}],
            "max_tokens": 2, **extra}
    reply = httpx.post(json_node.base_url + "/chat/completions", json=body, timeout=60)
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == param, reply.json()
