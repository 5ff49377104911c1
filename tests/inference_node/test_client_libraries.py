"""The client libraries applications use, against a node (transformers engine) over HTTP:
LangChain's structured output by function calling (it sends `parallel_tool_calls: false`,
once a 400 here) and by JSON schema, `bind_tools` with a named tool, instructor in its tools
and JSON-schema modes, and LiteLLM. Each request and answer is taken off the wire (an httpx
event hook) and the answer's receipt re-verified, grammar and sampling included.

The model is the tiny random byte-level Llama of the structured-output tests: only the grammar
makes its answers parse, so every parsed answer here is the constraint at work.
"""

from __future__ import annotations

from typing import Literal

import openai
import pytest
from node_helpers import MODEL_NAME, Wire
from pydantic import BaseModel

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning",
                                        "ignore::pydantic.PydanticDeprecatedSince20")


class Verdict(BaseModel):
    """Whether the sum is right."""

    correct: bool
    confidence: Literal["low", "high"]


@pytest.fixture
def wire() -> Wire:
    return Wire()


def _chat(json_node, wire: Wire):
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(base_url=json_node.base_url, api_key="x", model=MODEL_NAME,
                      max_tokens=48, temperature=0, max_retries=0, http_client=wire.client())


def test_langchain_structured_output_by_function_calling(json_node, wire, json_verifier,
                                                         json_model_dir, monkeypatch):
    verdict = _chat(json_node, wire).with_structured_output(
        Verdict, method="function_calling").invoke("Is 2 + 3 = 5?")
    assert isinstance(verdict, Verdict)
    sent = wire.requests[-1]
    assert sent["parallel_tool_calls"] is False  # what LangChain always sends
    assert sent["tool_choice"]["function"]["name"] == "Verdict"
    assert wire.answers[-1]["choices"][0]["finish_reason"] == "tool_calls"
    wire.verify_last(json_verifier, json_model_dir, monkeypatch)


def test_langchain_structured_output_by_json_schema(json_node, wire, json_verifier,
                                                    json_model_dir, monkeypatch):
    verdict = _chat(json_node, wire).with_structured_output(
        Verdict, method="json_schema").invoke("Is 2 + 3 = 5?")
    assert isinstance(verdict, Verdict)
    assert wire.requests[-1]["response_format"]["type"] == "json_schema"
    wire.verify_last(json_verifier, json_model_dir, monkeypatch)


def test_langchain_bind_tools_with_a_named_tool(json_node, wire):
    def confirm(correct: bool) -> bool:
        """Confirm whether a sum is right."""
        return correct

    message = _chat(json_node, wire).bind_tools([confirm], tool_choice="confirm").invoke(
        "Is 2 + 3 = 5?")
    (call,) = message.tool_calls
    assert call["name"] == "confirm" and isinstance(call["args"]["correct"], bool)


def test_langchain_bind_tools_any_always_gets_calls(json_node, wire):
    """tool_choice "any" is "required": at most 4 calls, as tool_calls (a small model once
    repeated the call until max_tokens, and the answer came back as a JSON array in content;
    a cut answer's complete calls: tests/inference_node/test_tools.py)."""
    def confirm(correct: bool) -> bool:
        """Confirm whether a sum is right."""
        return correct

    def check(sum_is: Literal["right", "wrong"]) -> str:
        """Say whether a sum is right."""
        return sum_is

    chat = _chat(json_node, wire)  # temperature 0: short arguments keep the tiny model's calls whole
    for seed in range(3):
        message = chat.bind_tools([confirm, check], tool_choice="any").invoke(
            "What is 2 plus 3?", max_tokens=600, seed=seed)
        assert wire.requests[-1]["tool_choice"] == "required"
        assert 1 <= len(message.tool_calls) <= 4, (message.content, message.tool_calls)
        assert message.content == "" and {c["name"] for c in message.tool_calls} <= {"confirm",
                                                                                    "check"}


@pytest.mark.parametrize("mode", ["TOOLS", "JSON_SCHEMA"])
def test_instructor(json_node, wire, mode, json_verifier, json_model_dir, monkeypatch):
    import instructor

    client = instructor.from_openai(
        openai.OpenAI(base_url=json_node.base_url, api_key="x", http_client=wire.client(),
                      max_retries=0), mode=getattr(instructor.Mode, mode))
    verdict = client.chat.completions.create(
        model=MODEL_NAME, response_model=Verdict, max_retries=0, max_tokens=48, temperature=0,
        messages=[{"role": "user", "content": "Is 2 + 3 = 5?"}])
    assert isinstance(verdict, Verdict)
    wire.verify_last(json_verifier, json_model_dir, monkeypatch)


def test_litellm_json_schema_and_receipt(json_node, monkeypatch):
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch of its price list
    import litellm

    schema = Verdict.model_json_schema()
    response = litellm.completion(
        model=f"openai/{MODEL_NAME}", api_base=json_node.base_url, api_key="x",
        messages=[{"role": "user", "content": "Is 2 + 3 = 5?"}], max_tokens=48, temperature=0,
        response_format={"type": "json_schema",
                         "json_schema": {"name": "Verdict", "schema": schema}})
    Verdict.model_validate_json(response.choices[0].message.content)
    # the node's receipt and its evidence reach a LiteLLM user on the response
    answer = response.model_dump()
    assert answer["receipt"]["v"] == 2
    assert answer["receipt_evidence"]["receipt_cid"].startswith("bafkrei")
