"""Structured outputs on the vLLM engine: `GymSampler` applies the transformers engine's grammar
masks, so constrained answers parse and validate, are token-identical to `TransformersEngine`'s
for the same request, and a signing vLLM node's receipt passes the verifier's grammar replay.

Needs vLLM (skipped without it); one engine serves the module, on `vllm_json_model_dir` (the
byte-level tiny model with 32-dimensional heads): unconstrained it writes noise.
"""

from __future__ import annotations

import asyncio
import hashlib
import json

import httpx
import jsonschema
import pytest
from node_helpers import (
    DOMAIN,
    MODEL_NAME,
    NODE_KEY,
    SCHEMAS,
    SNAPSHOT,
    Wire,
    answer_bundle,
    make_engine,
    needs_vllm,
    offline_checks,
    run_server,
)

from inference_node import verify
from inference_node.engine import SamplingParams
from inference_node.injection import LibraryInjector
from inference_node.library import StaticLibrarySource
from inference_node.receipts import (
    ReceiptSigner,
    model_digest,
)
from inference_node.response_format import Constraint, FormatError

KEY = hashlib.sha256(b"a constrained request").digest()


@pytest.fixture(scope="module")
def engine(vllm_json_model_dir):
    from inference_node.vllm_engine import VLLMEngine

    engine = VLLMEngine.from_pretrained(vllm_json_model_dir, model_name=MODEL_NAME,
                                        enforce_eager=True, block_size=32, max_batch=8,
                                        kv_cache_gib=0.25)
    yield engine
    engine.shutdown()


async def answers(engine, prompt, requests):
    """Token ids of each (schema, params) request, run concurrently."""
    async def one(schema, params):
        params = SamplingParams(**{**params, "constraint": Constraint.of_schema(schema)})
        deltas = [d async for d in engine.stream(prompt, params)]
        return [t for d in deltas for t in d.token_ids], deltas[-1].finish_reason
    return await asyncio.gather(*(one(s, p) for s, p in requests))


@needs_vllm
def test_constrained_answers_validate_and_match_the_transformers_engine(
        engine, vllm_json_model_dir):
    """Every schema, greedy and seeded T=1.0: vLLM's tokens equal TransformersEngine's, the
    text parses and validates (the model is random: only the grammar makes it JSON)."""
    reference = make_engine(vllm_json_model_dir)
    prompt = LibraryInjector(engine.tokenizer).chat(
        [{"role": "user", "content": "describe the thing"}], SNAPSHOT).prompt
    requests = [(schema, {"max_tokens": 160, "temperature": temperature, "seed": seed,
                          "request_key": KEY})
                for seed, schema in enumerate(SCHEMAS) for temperature in (0.0, 1.0)]
    try:
        ours = asyncio.run(answers(engine, prompt, requests))
        theirs = asyncio.run(answers(reference, prompt, requests))
    finally:
        reference.shutdown()
    assert ours == theirs
    for (schema, _), (tokens, finish) in zip(requests, ours, strict=True):
        if finish == "stop":  # the grammar ended it: complete JSON
            jsonschema.validate(json.loads(engine.tokenizer.decode(
                tokens, skip_special_tokens=True)), schema)
    assert sum(finish == "stop" for _, finish in ours) >= len(ours) // 2


@needs_vllm
def test_a_schema_the_grammar_refuses_is_refused_before_vllm(engine):
    with pytest.raises(FormatError):
        engine.check_constraint(Constraint.of_schema({"type": "object", "$ref": "#/$defs/missing"}))


@needs_vllm
def test_a_constrained_vllm_answer_s_receipt_verifies(engine, vllm_json_model_dir, monkeypatch):
    """A signing vLLM node's constrained answers: the verifier replays the grammar and the
    sampler on a transformers prefill, and every check passes."""
    signer = ReceiptSigner(NODE_KEY, DOMAIN, engine.model, model_digest(vllm_json_model_dir))
    verifier = verify.load_verifier_model(vllm_json_model_dir)
    with run_server(engine, StaticLibrarySource(SNAPSHOT), receipts=signer,
                    keep_engine=True) as node:
        for index, seed, temperature in [(4, 1, 1.0), (3, 2, 0.0)]:
            body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "plan"}],
                    "max_tokens": 160, "seed": seed, "temperature": temperature,
                    "response_format": {"type": "json_schema", "json_schema": {
                        "name": "answer", "schema": SCHEMAS[index], "strict": True}}}
            data = httpx.post(node.base_url + "/chat/completions", json=body,
                              timeout=120).json()
            bundle = answer_bundle("chat", body, data, data["choices"][0]["message"]["content"])
            checks = offline_checks(bundle, verifier, vllm_json_model_dir, monkeypatch)
            assert checks["response_format"].passed and checks["sampling"].passed
            assert checks["activations"].passed


@needs_vllm
def test_tool_choice_auto_s_grammar_holds_on_vllm(engine, vllm_json_model_dir):
    """`tool_choice: "auto"`'s text-or-calls grammar (a structural tag) reaches `GymSampler` as
    a schema does: vLLM's tokens equal TransformersEngine's, and a replay of the grammar allows
    every one of them. (The engine-level half: the chat template's rendering of the tools is
    the serving layer's, shared by both engines.)"""
    from inference_node.normalized_request import constraint_of, from_client_request
    from trainer.grammar import replay

    tools = [{"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"], "additionalProperties": False}}}]
    normalized = from_client_request("chat", {
        "model": MODEL_NAME, "messages": [{"role": "user", "content": "add"}], "tools": tools,
        "tool_choice": "auto"}, max_tokens=64, seed=0)
    constraint = constraint_of(normalized)
    engine.check_constraint(constraint)
    reference = make_engine(vllm_json_model_dir)
    prompt = LibraryInjector(engine.tokenizer).chat(
        [{"role": "user", "content": "add"}], SNAPSHOT).prompt

    async def run(on):
        async def one(seed):
            params = SamplingParams(max_tokens=64, temperature=1.0, seed=seed,
                                    request_key=KEY, constraint=constraint)
            return [t for d in [d async for d in on.stream(prompt, params)] for t in d.token_ids]
        return await asyncio.gather(*(one(seed) for seed in range(3)))

    try:
        ours, theirs = asyncio.run(run(engine)), asyncio.run(run(reference))
    finally:
        reference.shutdown()
    assert ours == theirs
    for tokens in ours:  # the node's Grammars is built as the verifier builds it
        assert replay(engine.grammars(), constraint.schema_json, tokens)[1] is None


@needs_vllm
def test_guided_forms_on_vllm_match_the_transformers_engine(engine, vllm_json_model_dir):
    """vLLM's own request forms (guided_choice, guided_regex) through the node's grammar: the
    vLLM engine's tokens equal TransformersEngine's, and the answers are the form's."""
    import re

    from inference_node.guided import constraint_source

    forms = [({"guided_choice": ["yes", "no", "maybe"]}, lambda t: t in ("yes", "no", "maybe")),
             ({"guided_regex": "[0-9]{3}-[a-c]{2}"},
              lambda t: re.fullmatch("[0-9]{3}-[a-c]{2}", t) is not None)]
    reference = make_engine(vllm_json_model_dir)
    prompt = LibraryInjector(engine.tokenizer).chat(
        [{"role": "user", "content": "ok?"}], SNAPSHOT).prompt

    async def run(which):
        async def one(form, seed):
            params = SamplingParams(max_tokens=24, temperature=1.0, seed=seed, request_key=KEY,
                                    constraint=Constraint(constraint_source(form)))
            deltas = [d async for d in which.stream(prompt, params)]
            return [t for d in deltas for t in d.token_ids], deltas[-1].finish_reason
        return await asyncio.gather(*(one(form, seed) for form, _ in forms for seed in range(3)))

    try:
        ours, theirs = asyncio.run(run(engine)), asyncio.run(run(reference))
    finally:
        reference.shutdown()
    assert ours == theirs
    checks = [check for _, check in forms for _ in range(3)]
    for (tokens, finish), check in zip(ours, checks, strict=True):
        text = engine.tokenizer.decode(tokens, skip_special_tokens=True)
        assert finish == "stop" and check(text), text


@needs_vllm
@pytest.mark.filterwarnings("ignore::DeprecationWarning",
                            "ignore::pydantic.PydanticDeprecatedSince20")
def test_client_libraries_and_sampler_knobs_on_a_vllm_node(engine, vllm_json_model_dir,
                                                           monkeypatch):
    """What test_client_libraries and test_sampler_knobs_node drive on the transformers engine,
    on a signing vLLM node: LangChain's structured output by function calling, instructor in
    JSON-schema mode, LiteLLM with a JSON schema, and the openai client with gym-sampler/2's
    knobs. Every receipt verifies
    on a transformers prefill (grammar, sampler with the knobs, termination), and the knobs'
    answers are the transformers node's, token for token."""
    import instructor
    import openai
    from langchain_openai import ChatOpenAI
    from pydantic import BaseModel

    class Verdict(BaseModel):
        correct: bool

    signer = ReceiptSigner(NODE_KEY, DOMAIN, engine.model, model_digest(vllm_json_model_dir))
    verifier = verify.load_verifier_model(vllm_json_model_dir)
    reference = make_engine(vllm_json_model_dir)
    wire = Wire()
    knobs = [{"top_k": 3, "min_p": 0.02, "repetition_penalty": 1.5},
             {"frequency_penalty": 1.0, "presence_penalty": 0.5, "logit_bias": {"2": 5}},
             {"min_tokens": 4, "logit_bias": {"2": 100}},
             {"ignore_eos": True, "stop_token_ids": [40], "logit_bias": {"40": 8}}]
    answers = {}
    with run_server(engine, StaticLibrarySource(SNAPSHOT), receipts=signer,
                    keep_engine=True) as node, \
            run_server(reference, StaticLibrarySource(SNAPSHOT), receipts=ReceiptSigner(
                NODE_KEY, DOMAIN, reference.model, model_digest(vllm_json_model_dir))
            ) as transformers_node:
        chat = ChatOpenAI(base_url=node.base_url, api_key="x", model=MODEL_NAME, max_tokens=48,
                          temperature=0, max_retries=0, http_client=wire.client())
        assert isinstance(chat.with_structured_output(Verdict, method="function_calling")
                          .invoke("Is 2 + 3 = 5?"), Verdict)
        wire.verify_last(verifier, vllm_json_model_dir, monkeypatch)
        client = instructor.from_openai(openai.OpenAI(
            base_url=node.base_url, api_key="x", http_client=wire.client(), max_retries=0),
            mode=instructor.Mode.JSON_SCHEMA)
        assert isinstance(client.chat.completions.create(
            model=MODEL_NAME, response_model=Verdict, max_retries=0, max_tokens=48,
            temperature=0, messages=[{"role": "user", "content": "Is 2 + 3 = 5?"}]), Verdict)
        wire.verify_last(verifier, vllm_json_model_dir, monkeypatch)
        monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch of its prices
        import litellm

        response = litellm.completion(
            model=f"openai/{MODEL_NAME}", api_base=node.base_url, api_key="x", max_tokens=48,
            temperature=0, messages=[{"role": "user", "content": "Is 2 + 3 = 5?"}],
            response_format={"type": "json_schema", "json_schema": {
                "name": "Verdict", "schema": Verdict.model_json_schema()}})
        Verdict.model_validate_json(response.choices[0].message.content)
        assert response.model_dump()["receipt"]["v"] == 2

        for url in (node.base_url, transformers_node.base_url):
            plain = openai.OpenAI(base_url=url, api_key="x", max_retries=0,
                                  http_client=wire.client())
            for index, extra in enumerate(knobs):
                plain.chat.completions.create(
                    model=MODEL_NAME, messages=[{"role": "user", "content": "plan"}],
                    max_tokens=16, seed=index, temperature=0.9, top_p=0.95, extra_body=extra)
                answers.setdefault(index, []).append(
                    wire.answers[-1]["receipt_evidence"]["completion_token_ids"])
                if url == node.base_url:
                    body, answer = wire.requests[-1], wire.answers[-1]
                    assert answer["receipt"]["sampler"] == "gym-sampler/2"
                    checks = offline_checks(answer_bundle(
                        "chat", body, answer, answer["choices"][0]["message"]["content"]),
                        verifier, vllm_json_model_dir, monkeypatch)
                    assert all(c.passed for c in checks.values() if c.passed is not None)
                    assert checks["sampling"].passed and checks["termination"].passed
    assert all(ours == theirs for ours, theirs in answers.values()), answers
    assert len(answers[2][0]) == 5 and answers[3][0][-1] == 40  # min_tokens; stop_token_ids
