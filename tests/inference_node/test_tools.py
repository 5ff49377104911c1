"""Function calling (issue 16): `tools` and `tool_choice` on the chat route through the
official `openai` SDK. A forced call ("required", or a named function) is decoded under its call
schema, so the tiny random model's answer parses and validates; "none" is plain content; "auto"
is a 400 here, where the chat template does not render tools (test_tools_auto covers "auto" with
one that does); the receipt signs the tools and the verifier replays the call grammar."""

from __future__ import annotations

import asyncio
import json

import httpx
import jsonschema
import openai
import pytest
from node_helpers import (
    ADD,
    DOMAIN,
    MODEL_NAME,
    NODE_KEY,
    SNAPSHOT,
    WEATHER,
    answer_bundle,
    make_engine,
    offline_checks,
    signed_bundle,
)

from inference_node.engine import SamplingParams
from inference_node.errors import ReceiptError
from inference_node.injection import LibraryInjector
from inference_node.normalized_request import (
    check_normalized,
    constraint_of,
    from_client_request,
    request_key,
)
from inference_node.receipts import ReceiptSigner, model_digest
from inference_node.tools import MAX_PARALLEL_CALLS, chat_messages

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather now",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "add", "parameters": ADD, "strict": True}}]
SCHEMAS = {"get_weather": WEATHER, "add": ADD}
MESSAGES = [{"role": "user", "content": "weather in Oslo?"}]


@pytest.fixture(scope="module")
def client(json_node):
    with openai.OpenAI(base_url=json_node.base_url, api_key="x", max_retries=0) as c:
        yield c


def ask(client, tool_choice, seed=0, **fields):
    fields.setdefault("max_tokens", 200)
    return client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, tools=TOOLS,
                                          tool_choice=tool_choice, seed=seed, **fields)


def test_required_gives_calls_to_the_tools_with_valid_arguments(client):
    for seed in range(4):
        choice = ask(client, "required", seed, max_tokens=600).choices[0]  # room for 4 calls
        assert choice.finish_reason == "tool_calls", choice.message
        assert choice.message.content is None and choice.message.tool_calls
        for call in choice.message.tool_calls:
            assert call.type == "function" and call.id.startswith("call_")
            jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


def test_a_named_function_gets_one_call_to_it(client):
    for seed in range(3):
        choice = ask(client, {"type": "function", "function": {"name": "add"}}, seed).choices[0]
        assert choice.finish_reason == "tool_calls"
        [call] = choice.message.tool_calls
        assert call.function.name == "add"
        jsonschema.validate(json.loads(call.function.arguments), ADD)


def test_none_is_plain_content(client):
    choice = ask(client, "none", 3, max_tokens=12).choices[0]
    assert choice.message.tool_calls is None and choice.finish_reason in ("stop", "length")
    assert isinstance(choice.message.content, str)
    # the tools are signed (another sampler key) but not shown to the model
    normalized = from_client_request("chat", {"model": MODEL_NAME, "messages": MESSAGES,
                                              "tools": TOOLS, "tool_choice": "none"},
                                     max_tokens=8, seed=0)
    assert chat_messages(normalized, template_has_tools=False) == (MESSAGES, None)


def test_a_call_cut_before_it_is_complete_is_content_with_length(client):
    choice = ask(client, "required", 1, max_tokens=3).choices[0]
    assert choice.finish_reason == "length" and choice.message.tool_calls is None
    assert choice.message.content.startswith("[")


def test_required_is_bounded_and_parallel_false_is_one_call(client):
    counts = []
    for seed in range(6):
        calls = ask(client, "required", seed, max_tokens=600).choices[0].message.tool_calls
        counts.append(len(calls))
        one = ask(client, "required", seed, max_tokens=600, parallel_tool_calls=False).choices[0]
        assert one.finish_reason == "tool_calls" and len(one.message.tool_calls) == 1
    assert max(counts) <= MAX_PARALLEL_CALLS and max(counts) > 1, counts


def test_a_required_answer_cut_after_complete_calls_gives_those_calls(json_node):
    """Cut by max_tokens after complete calls: those calls (finish_reason "length"), never a
    JSON array as content (LangChain's bind_tools(tool_choice="any") read no calls from it)."""
    for seed, limit in [(seed, limit) for limit in (80, 120, 160) for seed in range(8)]:
        body = {"model": MODEL_NAME, "messages": MESSAGES, "tools": TOOLS, "seed": seed,
                "tool_choice": "required", "max_tokens": limit}
        data = httpx.post(json_node.base_url + "/chat/completions", json=body, timeout=60).json()
        choice, text = data["choices"][0], data["receipt_evidence"]["completion_text"]
        if choice["finish_reason"] == "length" and choice["message"]["tool_calls"]:
            break
    else:
        pytest.fail("no seed cut a required answer after a complete call")
    assert choice["message"]["content"] is None
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)  # the array itself was cut
    decoder, at = json.JSONDecoder(), text.index("[") + 1
    for call in choice["message"]["tool_calls"]:  # each a complete item of it, in order
        item, at = decoder.raw_decode(text, at)
        at = text.index(",", at) + 1
        assert call["function"]["name"] == item["name"]
        assert json.loads(call["function"]["arguments"]) == item["arguments"]


def test_a_required_receipt_signed_before_the_bound_still_verifies_its_form():
    body = {"model": MODEL_NAME, "messages": MESSAGES, "tools": TOOLS, "tool_choice": "required"}
    normalized = from_client_request("chat", body, max_tokens=8, seed=0)
    assert normalized["parallel_tool_calls"] is True
    assert '"maxItems":4' in constraint_of(normalized).schema_json
    legacy = {k: v for k, v in normalized.items() if k != "parallel_tool_calls"}
    assert check_normalized(legacy) == legacy  # decoded under the unbounded grammar then
    assert "maxItems" not in constraint_of(legacy).schema_json
    with pytest.raises(ReceiptError, match="not a valid chat request"):
        check_normalized({**normalized, "parallel_tool_calls": "yes"})


def test_streamed_call_arrives_whole_with_the_finish_chunk(client):
    whole = ask(client, "required", 2).choices[0].message.tool_calls
    chunks = [c for c in ask(client, "required", 2, stream=True) if c.choices]
    last = chunks[-1].choices[0]
    assert last.finish_reason == "tool_calls"
    assert [(c.function.name, c.function.arguments) for c in last.delta.tool_calls] == \
        [(c.function.name, c.function.arguments) for c in whole]
    assert all(not c.choices[0].delta.content for c in chunks)


def test_an_agent_loop_sends_the_call_and_its_result_back(client):
    call = ask(client, {"type": "function", "function": {"name": "add"}}).choices[0] \
        .message.tool_calls[0]
    messages = [*MESSAGES, {"role": "assistant", "content": None, "tool_calls": [
        call.model_dump()]}, {"role": "tool", "tool_call_id": call.id, "content": "42"}]
    reply = client.chat.completions.create(model=MODEL_NAME, messages=messages, tools=TOOLS,
                                           tool_choice="none", seed=0, max_tokens=8)
    assert reply.choices[0].message.content is not None


@pytest.mark.parametrize("fields,param,words", [
    ({"tools": TOOLS}, "tool_choice", "use tool_choice 'required'"),
    ({"tools": TOOLS, "tool_choice": "auto"}, "tool_choice", "does not render tools"),
    ({"tools": TOOLS, "tool_choice": "sometimes"}, "tool_choice", "unsupported tool_choice"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice", "not one of the tools"),
    ({"tool_choice": "required"}, "tool_choice", "needs tools"),
    ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools", "name"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "not": {}}}}]}, "tools", "'not' is not supported"),
    ({"tools": [TOOLS[0], TOOLS[0]]}, "tools", "given twice"),
    ({"tools": [TOOLS[1]] * 65}, "tools", "at most 64"),
    ({"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}},
     "tool_choice", "cannot be combined"),
    ({"tools": TOOLS, "tool_choice": "auto", "response_format": {"type": "json_object"}},
     "tool_choice", "cannot be combined"),
])
def test_unsupported_tools_are_a_400_naming_the_field(client, fields, param, words):
    with pytest.raises(openai.BadRequestError) as failure:
        client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=4,
                                       **fields)
    assert failure.value.body["param"] == param, failure.value.body
    assert words in failure.value.body["message"], failure.value.body


def test_the_normalized_request_signs_tools_and_round_trips():
    body = {"model": MODEL_NAME, "messages": MESSAGES, "tools": TOOLS, "tool_choice": "required"}
    normalized = from_client_request("chat", body, max_tokens=8, seed=0)
    assert normalized["tool_choice"] == "required"
    assert normalized["tools"][0]["parameters"] == json.dumps(WEATHER, separators=(",", ":"))
    assert check_normalized(normalized) == normalized
    assert constraint_of(normalized).schema["items"]["anyOf"][1]["properties"]["name"] == \
        {"const": "add"}
    swapped = {**body, "tools": TOOLS[::-1]}
    assert request_key(from_client_request("chat", swapped, max_tokens=8, seed=0)) != \
        request_key(normalized)
    messages, tools = chat_messages(normalized, template_has_tools=False)
    assert tools is None and messages[0]["role"] == "system"
    assert "get_weather: Weather now" in messages[0]["content"]


# --------------------------------------------------------------------------- receipts


def test_a_tool_call_answer_s_receipt_verifies(json_node, json_verifier, json_model_dir,
                                               monkeypatch):
    for tool_choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        body = {"model": MODEL_NAME, "messages": MESSAGES, "max_tokens": 200, "seed": 5,
                "tools": TOOLS, "tool_choice": tool_choice}
        data = httpx.post(json_node.base_url + "/chat/completions", json=body, timeout=60).json()
        # the text signed is the model's JSON, which tool_calls reshape
        bundle = answer_bundle("chat", body, data, data["receipt_evidence"]["completion_text"])
        checks = offline_checks(bundle, json_verifier, json_model_dir, monkeypatch)
        assert checks["response_format"].passed and checks["sampling"].passed
        assert "tool_choice grammar" in checks["response_format"].detail


def test_a_node_that_ignores_the_tool_grammar_fails_response_format(json_model_dir,
                                                                    json_verifier,
                                                                    monkeypatch):
    engine = make_engine(json_model_dir)
    signer = ReceiptSigner(NODE_KEY, DOMAIN, engine.model, model_digest(json_model_dir))
    body = {"model": MODEL_NAME, "messages": MESSAGES, "max_tokens": 24, "seed": 4,
            "tools": TOOLS, "tool_choice": "required"}
    normalized = from_client_request("chat", body, max_tokens=24, seed=4)
    messages, tools = chat_messages(normalized, template_has_tools=False)
    injected = LibraryInjector(engine.tokenizer).chat(messages, SNAPSHOT, tools)
    engine.start()
    try:
        params = SamplingParams(max_tokens=24, temperature=1.0, seed=4,
                                request_key=request_key(normalized), constraint=None)
        out = asyncio.run(engine.generate(injected.prompt, params))
    finally:
        engine.shutdown()
    bundle = signed_bundle(signer, body, normalized, list(injected.prompt.all_token_ids), out)
    with pytest.raises(ReceiptError) as failure:
        offline_checks(bundle, json_verifier, json_model_dir, monkeypatch)
    assert failure.value.reason == "response_format", failure.value
    assert "tool_choice grammar" in str(failure.value)
