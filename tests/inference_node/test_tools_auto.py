"""`tool_choice: "auto"` (issue 16) with a chat template that renders tools: the answer is decoded
under the text-or-calls grammar (free text, or Hermes/Qwen `<tool_call>` blocks whose JSON
matches one tool's schema), answered as `tool_calls` when it ends with calls, streamed with the
same result, and the receipt signs the grammar: the verifier replays it, and a node that breaks
the call syntax fails `response_format`.

The model: `json_model_dir`'s byte-level tiny Llama with a short Hermes-style template, trained
for a few seconds to answer three prompts (a call, text then a call, plain text), so greedy
decoding takes each branch; seeded T=1 answers only have to be valid, whichever branch they
take. No downloads.
"""

from __future__ import annotations

import json
import shutil

import httpx
import jsonschema
import openai
import pytest
import torch
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
    run_server,
    signed_bundle,
)

from inference_node import verify
from inference_node.engine import Generation
from inference_node.errors import ReceiptError
from inference_node.injection import LibraryInjector
from inference_node.library import StaticLibrarySource
from inference_node.normalized_request import check_normalized, constraint_of, from_client_request
from inference_node.receipts import ReceiptSigner, model_digest
from inference_node.response_format import FormatError
from inference_node.tools import answer_of, chat_messages, sendable_length
from trainer.grammar import Grammars, replay

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather now",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "add", "parameters": ADD}}]
SCHEMAS = {"get_weather": WEATHER, "add": ADD}

# A Hermes-style template, short: the tools (by name) in a system message after the
# conversation, an assistant's calls as <tool_call> blocks.
HERMES = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] %}{{ m['content'] }}{% endif %}"
    "{% for c in m['tool_calls'] or [] %}<tool_call>\n{\"name\": \"{{ c['function']['name'] }}\", "
    "\"arguments\": {{ c['function']['arguments'] }}}\n</tool_call>{% endfor %}<|im_end|>\n"
    "{% endfor %}"
    "{% if tools %}<|im_start|>system\n<tools>{% for t in tools %} {{ t['function']['name'] }}"
    "{% endfor %}</tools><|im_end|>\n{% endif %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

OSLO = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "C"}}\n' \
       '</tool_call>'
ADD_CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
TAUGHT = {"weather in Oslo?": OSLO, "add 2 and 3": "Sure. " + ADD_CALL, "hello": "Hi there."}


def body_for(question: str, **fields) -> dict:
    return {"model": MODEL_NAME, "messages": [{"role": "user", "content": question}],
            "tools": TOOLS, "tool_choice": "auto", **fields}


def prompt_ids(tokenizer, body: dict) -> list[int]:
    """The prompt the node builds for ``body`` (the `SNAPSHOT` library injected)."""
    normalized = from_client_request("chat", body, max_tokens=8, seed=0)
    messages, tools = chat_messages(normalized, template_has_tools=True)
    return list(LibraryInjector(tokenizer).chat(messages, SNAPSHOT, tools).prompt.all_token_ids)


@pytest.fixture(scope="module")
def hermes_model_dir(json_model_dir, tmp_path_factory):
    """`json_model_dir` with the Hermes-style template, taught `TAUGHT` (~100 Adam steps)."""
    from transformers import AutoTokenizer, LlamaForCausalLM

    directory = tmp_path_factory.mktemp("hermes-tiny") / "model"
    shutil.copytree(json_model_dir, directory)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    tokenizer.chat_template = HERMES
    tokenizer.save_pretrained(directory)
    torch.manual_seed(0)
    model = LlamaForCausalLM.from_pretrained(directory)
    teach(model, tokenizer, [(body_for(q), a) for q, a in TAUGHT.items()], steps=110)
    model.save_pretrained(directory)
    return directory


def teach(model, tokenizer, turns: list[tuple[dict, str]], *, steps: int) -> None:
    """Fit ``model`` (Adam, lr 1e-2, ``steps`` full-batch steps) to answer each request body
    of ``turns`` with its text then EOS, the loss on the answer only."""
    examples = []
    for body, answer in turns:
        prompt = prompt_ids(tokenizer, body)
        completion = tokenizer(answer, add_special_tokens=False)["input_ids"] + [
            tokenizer.eos_token_id]
        examples.append((torch.tensor([prompt + completion]),
                         torch.tensor([[-100] * len(prompt) + completion])))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(steps):
        loss = sum(model(input_ids=ids, labels=labels).loss for ids, labels in examples)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


@pytest.fixture(scope="module")
def hermes_node(hermes_model_dir):
    engine = make_engine(hermes_model_dir)
    signer = ReceiptSigner(NODE_KEY, DOMAIN, engine.model, model_digest(hermes_model_dir))
    with run_server(engine, StaticLibrarySource(SNAPSHOT), receipts=signer) as running:
        yield running


@pytest.fixture(scope="module")
def client(hermes_node):
    with openai.OpenAI(base_url=hermes_node.base_url, api_key="x", max_retries=0) as c:
        yield c


def ask(client, question, **fields):
    fields.setdefault("max_tokens", 120)
    fields.setdefault("temperature", 0.0)
    return client.chat.completions.create(model=MODEL_NAME, tools=TOOLS, tool_choice="auto",
                                          messages=[{"role": "user", "content": question}],
                                          seed=fields.pop("seed", 0), **fields)


def calls_of(message) -> list[tuple[str, dict]]:
    return [(c.function.name, json.loads(c.function.arguments))
            for c in message.tool_calls or ()]


# --------------------------------------------------------------------------- the grammar


def test_the_auto_grammar_takes_text_or_calls_and_nothing_else(hermes_model_dir):
    """The grammar on token sequences, both branches forced: text (no `<tool_call>` in it),
    text then calls, nothing after the calls, and a call that does not match a tool's schema
    is forbidden at its first wrong token."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(hermes_model_dir)
    eos = tokenizer.eos_token_id
    grammars = Grammars(tokenizer, len(tokenizer), [eos])
    normalized = from_client_request("chat", body_for("x"), max_tokens=8, seed=0)
    source = constraint_of(normalized).schema_json
    assert check_normalized(normalized) == normalized

    def first_refused(text: str, end: bool = True) -> str | None:
        tokens = tokenizer(text, add_special_tokens=False)["input_ids"] + [eos] * end
        _, bad = replay(grammars, source, tokens)
        return None if bad is None else tokenizer.decode(tokens[:bad + 1])

    for text in ["Hi there.", "", "a <tool_ call", OSLO, "Sure. " + ADD_CALL,
                 OSLO + "\n" + ADD_CALL]:
        assert first_refused(text) is None, text
    assert first_refused('<tool_call>\n{"name": "nope"') == '<tool_call>\n{"name": "n'
    assert first_refused(OSLO.replace('"C"', '"K"')).endswith('"unit": "K')
    assert '"city": "Reykjavi' in first_refused(OSLO.replace("Oslo", "Reykjavik"))
    assert "<tool_call>{" in first_refused(OSLO.replace("\n{", "{"))
    assert first_refused(OSLO + " thanks").endswith("</tool_call> ")
    assert first_refused(OSLO + ADD_CALL).endswith("</tool_call><")

    # the answer: calls only when the model ended with them, content the text before them
    content, calls = answer_of(normalized, "Sure. " + ADD_CALL, "stop")
    assert content == "Sure. " and [(c["function"]["name"], json.loads(c["function"][
        "arguments"])) for c in calls] == [("add", {"a": 2, "b": 3})]
    assert answer_of(normalized, OSLO + "\n" + ADD_CALL, "stop")[0] is None
    assert answer_of(normalized, "Sure. " + ADD_CALL[:20], "length") == (
        "Sure. " + ADD_CALL[:20], None)
    assert answer_of(normalized, "Hi there.", "stop") == ("Hi there.", None)
    # streamed, a tail that may begin a call waits
    assert [sendable_length(t) for t in ["Hi", "Hi <tool", "Hi <", "a <tool_call>\n{"]] == \
        [2, 3, 3, 2]
    # a template that does not render tools cannot show the model the syntax
    with pytest.raises(FormatError, match="renders tools"):
        chat_messages(normalized, template_has_tools=False)

    # parallel_tool_calls false: the grammar ends after the first call
    one = from_client_request("chat", body_for("x", parallel_tool_calls=False), max_tokens=8,
                              seed=0)
    assert one["parallel_tool_calls"] is False and "parallel_tool_calls" not in normalized
    source = constraint_of(one).schema_json
    for text in ["Hi there.", OSLO, "Sure. " + ADD_CALL]:
        assert first_refused(text) is None, text
    assert first_refused(OSLO + "\n" + ADD_CALL).endswith("</tool_call>\n")


# --------------------------------------------------------------------------- the node


def test_auto_answers_calls_or_text(client):
    choice = ask(client, "weather in Oslo?").choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    assert calls_of(choice.message) == [("get_weather", {"city": "Oslo", "unit": "C"})]
    assert choice.message.tool_calls[0].id.startswith("call_")
    choice = ask(client, "add 2 and 3").choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Sure. "
    assert calls_of(choice.message) == [("add", {"a": 2, "b": 3})]
    choice = ask(client, "hello").choices[0]
    assert choice.finish_reason == "stop" and choice.message.tool_calls is None
    assert choice.message.content == "Hi there."


def test_sampled_auto_answers_are_valid_whichever_branch(client):
    """T=1 with several seeds: a call's arguments validate against its tool's schema; text
    never holds `<tool_call>` (the grammar would have made it a call)."""
    branches = set()
    for question in TAUGHT:
        for seed in range(3):
            choice = ask(client, question, seed=seed, temperature=1.0, max_tokens=120).choices[0]
            if choice.message.tool_calls:
                assert choice.finish_reason == "tool_calls"
                for name, arguments in calls_of(choice.message):
                    jsonschema.validate(arguments, SCHEMAS[name])
                branches.add("calls")
            else:
                assert choice.finish_reason in ("stop", "length")
                if choice.finish_reason == "stop":
                    assert "<tool_call>" not in choice.message.content
                branches.add("text")
    assert branches == {"calls", "text"}


def test_streamed_auto_gives_the_same_answer(client):
    for question in TAUGHT:
        whole = ask(client, question).choices[0]
        chunks = [c.choices[0] for c in ask(client, question, stream=True) if c.choices]
        content = "".join(c.delta.content or "" for c in chunks)
        assert (content or None) == whole.message.content, question
        assert chunks[-1].finish_reason == whole.finish_reason
        streamed = [(c.function.name, c.function.arguments)
                    for c in chunks[-1].delta.tool_calls or ()]
        assert streamed == [(c.function.name, c.function.arguments)
                            for c in whole.message.tool_calls or ()]
        assert all("<tool" not in (c.delta.content or "") for c in chunks)


def test_auto_with_a_response_format_is_a_400(client):
    with pytest.raises(openai.BadRequestError) as failure:
        ask(client, "hello", response_format={"type": "json_object"})
    assert failure.value.body["param"] == "tool_choice"
    assert "cannot be combined" in failure.value.body["message"]


# --------------------------------------------------------------------------- receipts


@pytest.fixture(scope="module")
def hermes_verifier(hermes_model_dir):
    return verify.load_verifier_model(hermes_model_dir)


def test_an_auto_answer_s_receipt_verifies(hermes_node, hermes_verifier, hermes_model_dir,
                                           monkeypatch):
    """Each branch (greedy) and a sampled answer: the verifier rebuilds the prompt with the
    tools, replays the auto grammar and the sampler."""
    for question, temperature in [*((q, 0.0) for q in TAUGHT), ("add 2 and 3", 1.0)]:
        body = body_for(question, max_tokens=120, seed=3, temperature=temperature)
        data = httpx.post(hermes_node.base_url + "/chat/completions", json=body,
                          timeout=60).json()
        text = data["receipt_evidence"]["completion_text"]
        if temperature == 0.0:
            assert text == TAUGHT[question]
        bundle = answer_bundle("chat", body, data, text)
        checks = offline_checks(bundle, hermes_verifier, hermes_model_dir, monkeypatch)
        assert checks["response_format"].passed and checks["sampling"].passed
        assert "tool_choice grammar" in checks["response_format"].detail


def test_a_langchain_tool_loop_over_two_turns(hermes_node, hermes_verifier, hermes_model_dir,
                                              monkeypatch):
    """LangChain's agent loop against a template that renders tools: the model calls `add`
    (auto), the loop sends the call and its result back, and the node answers the second turn
    with a receipt the verifier checks on the whole conversation (the assistant's call and the
    tool result rendered by the template, as the node rendered them)."""
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_openai import ChatOpenAI

    sent, answers = [], []

    def on_request(request):
        sent.append(json.loads(request.content))

    def on_response(response):
        response.read()
        answers.append(response.json())

    wire = httpx.Client(event_hooks={"request": [on_request], "response": [on_response]},
                        timeout=120)
    chat = ChatOpenAI(base_url=hermes_node.base_url, api_key="x", model=MODEL_NAME,
                      temperature=0, max_tokens=120, max_retries=0, http_client=wire,
                      seed=3).bind_tools(TOOLS, tool_choice="auto")
    history = [HumanMessage("add 2 and 3")]
    first = chat.invoke(history)
    assert [(c["name"], c["args"]) for c in first.tool_calls] == [("add", {"a": 2, "b": 3})]
    history += [first, ToolMessage("5", tool_call_id=first.tool_calls[0]["id"])]
    second = chat.invoke(history)
    assert isinstance(second.content, str)
    body, data = sent[-1], answers[-1]
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "tool"]
    assert body["messages"][1]["tool_calls"][0]["function"]["name"] == "add"
    bundle = answer_bundle("chat", body, data, data["receipt_evidence"]["completion_text"])
    checks = offline_checks(bundle, hermes_verifier, hermes_model_dir, monkeypatch)
    assert checks["response_format"].passed and checks["sampling"].passed


def test_a_node_that_breaks_the_call_syntax_fails_response_format(hermes_model_dir,
                                                                  hermes_verifier,
                                                                  monkeypatch):
    """The attack: the receipt signs tool_choice auto (so the grammar), but the node emits a
    call to a function that is not one of the tools: `response_format` at the first token the
    grammar forbids."""
    engine = make_engine(hermes_model_dir)
    signer = ReceiptSigner(NODE_KEY, DOMAIN, engine.model, model_digest(hermes_model_dir))
    tokenizer = engine.tokenizer
    body = body_for("weather in Oslo?", max_tokens=100, seed=3)
    normalized = from_client_request("chat", body, max_tokens=100, seed=3)
    text = OSLO.replace("get_weather", "delete_all")
    tokens = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    forged = Generation(text, tokens, None, "stop", 0, len(tokens))
    bundle = signed_bundle(signer, body, normalized, prompt_ids(tokenizer, body), forged)
    with pytest.raises(ReceiptError) as failure:
        offline_checks(bundle, hermes_verifier, hermes_model_dir, monkeypatch)
    assert failure.value.reason == "response_format", failure.value
    assert "not allowed by the request's tool_choice grammar" in str(failure.value)
    assert "'d')" in str(failure.value)  # the first letter of the unknown name
