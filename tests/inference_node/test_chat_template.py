"""Auto tool choice for a model whose chat template does not render tools (issue 45), in vLLM's
terms: `gym node serve --chat-template FILE` and `--enable-auto-tool-choice --tool-call-parser
hermes`, the SmolLM2 tools template the node ships, and the receipt binding the template's
digest, so a verifier re-renders the prompt under the same template (or fails `chat_template`).

Models: `json_model_dir`'s byte-level tiny Llama, given SmolLM2's own chat template (the node
then picks the shipped tools template for it, as for the shipped model), or given a Hermes-style
template by file. For the agent frameworks it is taught, for a few seconds, an agent's round
trip (a call, then text after the tool's result, the tool as the OpenAI Agents SDK and
pydantic-ai send it); each library's run only has to keep the protocol, whichever branch the
sampled answer takes (default settings sample at temperature 1). The shipped SmolLM2 itself
(which, at 135M, answers in text): `test_openai_agents_against_the_shipped_model` (slow).
openai-agents and pydantic-ai are dev extras; a test whose library is missing skips.
"""

from __future__ import annotations

import json
import shutil

import httpx
import openai
import pytest
import torch
from fastapi.testclient import TestClient
from node_helpers import (
    DOMAIN,
    MODEL_NAME,
    NODE_KEY,
    SNAPSHOT,
    Wire,
    make_engine,
    node_env,
    node_process,
    offline_checks,
    run_server,
    signing_node_command,
    stop_node,
    wait_for_health,
)
from test_tools_auto import HERMES, teach

from devnet.anvil import free_port
from inference_node import verify
from inference_node.bundle_sources import bundle_from_response
from inference_node.chat_templates import (
    SHIPPED,
    TEMPLATES,
    choose_chat_template,
    template_digest,
    template_for_receipt,
)
from inference_node.errors import NodeError, ReceiptError
from inference_node.injection import LibraryInjector
from inference_node.launch import NodeLaunch, start_node
from inference_node.library import StaticLibrarySource
from inference_node.normalized_request import from_client_request
from inference_node.receipts import (
    ReceiptSigner,
    model_digest,
    parse_receipt,
    receipt_hash,
    typed_data,
    verify_receipt_signature,
)
from inference_node.settings import NodeSettings
from inference_node.tools import CALL_CLOSE, CALL_OPEN, chat_messages

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

# SmolLM2-Instruct's own chat template (the shipped model's), which renders no tools.
SMOLLM2_OWN = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}")
SHIPPED_TEXT = (TEMPLATES / "smollm2_tools.jinja").read_text()

INSTRUCTIONS = "Answer questions about the weather; call get_weather for a city's weather."
QUESTION = "What is the weather in Oslo?"
# get_weather as the OpenAI Agents SDK sends it (`function_tool`, strict schema)
AGENT_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather now in a city.", "strict": True,
    "parameters": {"properties": {"city": {"title": "City", "type": "string"}},
                   "required": ["city"], "title": "get_weather_args", "type": "object",
                   "additionalProperties": False}}}
# ... and as pydantic-ai sends it (no titles)
PLAIN_TOOL = {"type": "function", "function": {**AGENT_TOOL["function"], "parameters": {
    "properties": {"city": {"type": "string"}}, "required": ["city"], "type": "object",
    "additionalProperties": False}}}
OSLO_CALL = CALL_OPEN + '{"name": "get_weather", "arguments": {"city": "Oslo"}}' + CALL_CLOSE


def get_weather(city: str) -> str:
    """The weather now in a city."""
    return f"sunny in {city}"


def agent_turns(tool: dict = AGENT_TOOL) -> list[tuple[dict, str]]:
    """The two requests of an agent's round trip with ``tool``, and what the model is taught
    to answer each: the call, then text after the tool's result."""
    first = [{"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": QUESTION}]
    called = [*first, {"role": "assistant", "content": None, "tool_calls": [{
        "id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": get_weather("Oslo")}]
    return [({"model": MODEL_NAME, "messages": first, "tools": [tool]}, OSLO_CALL),
            ({"model": MODEL_NAME, "messages": called, "tools": [tool]},
             "It is sunny in Oslo.")]


@pytest.fixture(scope="module")
def smol_dir(json_model_dir, tmp_path_factory):
    """`json_model_dir` with SmolLM2's own chat template."""
    from transformers import AutoTokenizer

    directory = tmp_path_factory.mktemp("smol-tiny") / "model"
    shutil.copytree(json_model_dir, directory)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    tokenizer.chat_template = SMOLLM2_OWN
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def smol_tokenizer(smol_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smol_dir)


@pytest.fixture(scope="module")
def hermes_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("template") / "hermes.jinja"
    path.write_text(HERMES)
    return path


def signing_node(model_dir, **options):
    """A node serving ``model_dir`` with the chat template ``options`` choose (as `gym node
    serve` does), signing unbound receipts, with the `SNAPSHOT` library."""
    engine = make_engine(model_dir)
    template = choose_chat_template(engine.tokenizer, **options)
    template.install(engine.tokenizer)
    signer = ReceiptSigner(NODE_KEY, DOMAIN, engine.model, model_digest(model_dir),
                           chat_template=template.digest)
    return run_server(engine, StaticLibrarySource(SNAPSHOT), receipts=signer)


def saved_bundle(body: dict, answer: dict) -> dict:
    """The bundle of a saved answer and its request, read as `gym verify receipt --response
    --request` reads them (``bundle_sources.bundle_from_response``)."""
    return bundle_from_response(answer, body)


def saved_answer_checks(body: dict, answer: dict, verifier, model_dir, monkeypatch) -> dict:
    """A saved answer and its request checked as `gym verify receipt` checks them,
    re-rendered under the template the receipt binds; every check passed."""
    bundle = saved_bundle(body, answer)
    model, tokenizer = verifier
    rendering = template_for_receipt(parse_receipt(answer["receipt"]), tokenizer)
    checks = offline_checks(bundle, (model, rendering), model_dir, monkeypatch)
    assert all(c.passed for c in checks.values() if c.passed is not None), checks
    assert checks["activations"].passed and checks["sampling"].passed, checks
    return checks


# --------------------------------------------------------------------------- the template


def test_the_shipped_template_is_smollm2_s_own_until_tools_are_given(smol_tokenizer):
    """Without tools the shipped template renders a conversation byte for byte as SmolLM2's
    own; with tools, the system turn holds the system message, then the model card's
    function-calling prompt with each tool as JSON; an assistant's calls are the Hermes blocks
    the auto grammar writes, a tool result a user turn in <tool_response>."""
    assert SHIPPED[template_digest(SMOLLM2_OWN)] == "smollm2_tools.jinja"

    def render(messages, template, **kwargs):
        return smol_tokenizer.apply_chat_template(messages, chat_template=template,
                                                  tokenize=False, **kwargs)

    for messages in ([{"role": "user", "content": "hi"}],
                     [{"role": "system", "content": "Be brief."},
                      {"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hi."},
                      {"role": "user", "content": "and?"}],
                     [{"role": "developer", "content": "d"}, {"role": "user", "content": "hi"}]):
        for generation_prompt in (True, False):
            assert render(messages, SHIPPED_TEXT, add_generation_prompt=generation_prompt) == \
                render(messages, SMOLLM2_OWN, add_generation_prompt=generation_prompt)

    body, _ = agent_turns()[1]
    normalized = from_client_request("chat", body, max_tokens=8, seed=0)
    messages, tools = chat_messages(normalized, template_has_tools=True)
    text = render(messages, SHIPPED_TEXT, tools=tools, add_generation_prompt=True)
    system, user, assistant, result, generation = text.split("<|im_start|>")[1:]
    assert system.startswith(f"system\n{INSTRUCTIONS}\n\nYou are an expert in composing "
                             "functions.")
    assert "\n<tools>\n" + json.dumps(tools[0]) + "\n</tools>\n" in system
    assert user == f"user\n{QUESTION}<|im_end|>\n"
    assert assistant == "assistant\n" + OSLO_CALL + "<|im_end|>\n"
    assert result == "user\n<tool_response>\nsunny in Oslo\n</tool_response><|im_end|>\n"
    assert generation == "assistant\n"

    # the library block opens the system turn, so its KV cache is still shared
    smol_tokenizer.chat_template = SHIPPED_TEXT
    try:
        injected = LibraryInjector(smol_tokenizer).chat(messages, SNAPSHOT, tools)
    finally:
        smol_tokenizer.chat_template = SMOLLM2_OWN
    assert injected.prompt.prefix is not None


@pytest.mark.parametrize(("options", "message"), [
    ({"auto_tool_choice": True, "tool_call_parser": "mistral"},
     "--tool-call-parser mistral: the node decodes tool_choice 'auto' in the Hermes"),
    ({"auto_tool_choice": True}, "--enable-auto-tool-choice needs --tool-call-parser hermes"),
    ({"tool_call_parser": "hermes"}, "--tool-call-parser goes with --enable-auto-tool-choice"),
    ({"auto_tool_choice": True, "tool_call_parser": "hermes", "own": "plain"},
     ("--enable-auto-tool-choice: the model's chat template does not render tools, and the "
      "node ships none for it; give --chat-template FILE")),
    ({"chat_template": "{% for m in messages %}{{ m.content }"},
     "not a Jinja template (line 1: unexpected '}')"),
    ({"chat_template": "{{ raise_exception('roles must alternate') }}"},
     "rendering a conversation fails: roles must alternate"),
    ({"chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}",
      "auto_tool_choice": True, "tool_call_parser": "hermes"},
     "--enable-auto-tool-choice needs a template that renders the tools it is given"),
])
def test_options_are_refused_in_one_line(smol_tokenizer, tmp_path, options, message):
    tokenizer = smol_tokenizer
    if options.pop("own", None):  # a model whose own template renders no tools, not SmolLM2's
        from copy import copy

        tokenizer = copy(smol_tokenizer)
        tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    if "chat_template" in options:
        path = tmp_path / "template.jinja"
        path.write_text(options["chat_template"])
        options["chat_template"] = path
    with pytest.raises(NodeError) as refused:
        choose_chat_template(tokenizer, **options)
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_options_choose_the_template(smol_tokenizer, hermes_file):
    own = choose_chat_template(smol_tokenizer)
    assert (own.text, own.digest) == (None, None)
    shipped = choose_chat_template(smol_tokenizer, auto_tool_choice=True,
                                   tool_call_parser="hermes")
    assert shipped.text == SHIPPED_TEXT and shipped.digest == template_digest(SHIPPED_TEXT)
    given = choose_chat_template(smol_tokenizer, chat_template=hermes_file,
                                 auto_tool_choice=True, tool_call_parser="hermes")
    assert given.text == HERMES and given.digest == template_digest(HERMES)
    assert str(hermes_file) in given.source


def test_gym_node_serve_refuses_a_bad_template_before_loading(smol_dir, tmp_path):
    import gym_forkserver
    from node_helpers import GYM

    bad = tmp_path / "bad.jinja"
    bad.write_text("{% if %}")
    result = gym_forkserver.run(GYM, ["node", "serve", "--model", str(smol_dir), "--device",
                                      "cpu", "--chat-template", str(bad)], node_env(tmp_path))
    assert result.returncode == 1, result.stderr
    assert f"error: --chat-template {bad}: not a Jinja template" in result.stderr
    assert "loading" not in result.stderr  # before the model loads


def test_start_node_renders_with_the_shipped_template_and_binds_it(smol_dir, tmp_path):
    """`gym node serve --enable-auto-tool-choice --tool-call-parser hermes` for a model with
    SmolLM2's template: the engine renders with the shipped one, /health and every chat
    receipt name its digest; without the options `auto` is a 400 that names them."""
    from ledger.runtime import LedgerRuntime

    rt = LedgerRuntime(database_url=f"sqlite:///{tmp_path / 'gym.db'}",
                       content_dir=tmp_path / "data" / "ipfs")
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": QUESTION}],
            "tools": [AGENT_TOOL], "max_tokens": 8, "seed": 1}
    launch = NodeLaunch(model=smol_dir, device="cpu", engine="transformers", key=NODE_KEY,
                        offline=True, bundle_retention_s=0,
                        server=NodeSettings(served_model_name=MODEL_NAME),
                        enable_auto_tool_choice=True, tool_call_parser="hermes")
    with start_node(launch, rt) as node, TestClient(node.app) as client:
        assert node.engine.tokenizer.chat_template == SHIPPED_TEXT
        assert client.get("/health").json()["receipts"]["chat_template"] == \
            template_digest(SHIPPED_TEXT)
        reply = client.post("/v1/chat/completions", json=body)
        assert reply.status_code == 200, reply.text
        assert reply.json()["receipt"]["chat_template"] == template_digest(SHIPPED_TEXT)
        completion = client.post("/v1/completions", json={
            "model": MODEL_NAME, "prompt": "hi", "max_tokens": 2}).json()
        assert "chat_template" not in completion["receipt"]  # no template renders it
    plain = NodeLaunch(model=smol_dir, device="cpu", engine="transformers",
                       server=NodeSettings(served_model_name=MODEL_NAME))
    with start_node(plain) as node, TestClient(node.app) as client:
        reply = client.post("/v1/chat/completions", json=body)
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "tool_choice"
    assert "--enable-auto-tool-choice --tool-call-parser hermes" in \
        reply.json()["error"]["message"]


# --------------------------------------------------------------------------- the receipt


@pytest.fixture(scope="module")
def hermes_node(json_model_dir, hermes_file):
    """The byte-level tiny model, whose own template renders no tools, given a Hermes-style
    one by --chat-template."""
    with signing_node(json_model_dir, chat_template=hermes_file, auto_tool_choice=True,
                      tool_call_parser="hermes") as running:
        yield running


def test_a_receipt_binds_the_template_and_fails_under_another(hermes_node, json_verifier,
                                                              json_model_dir, monkeypatch):
    """Auto tool choice under a template given by file: the answer is text or calls, its
    receipt signs the template's digest (EIP-712 `bytes32 chatTemplate`, which cannot be
    dropped or swapped), and it verifies only re-rendered under that template: the model's
    own, or any other, fails `chat_template`."""
    from eth_account.messages import encode_typed_data
    from eth_utils import keccak

    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": QUESTION}],
            "tools": [AGENT_TOOL], "max_tokens": 24, "seed": 5}
    answer = httpx.post(hermes_node.base_url + "/chat/completions", json=body,
                        timeout=60).json()
    assert answer["choices"][0]["finish_reason"] in ("stop", "length", "tool_calls")
    receipt = parse_receipt(answer["receipt"])
    assert receipt.chat_template == template_digest(HERMES)
    typed = typed_data(receipt.model_copy(update={"signature": None}), DOMAIN)
    assert typed["types"]["Receipt"][-1] == {"name": "chatTemplate", "type": "bytes32"}
    signable = encode_typed_data(full_message=typed)  # eth-account's generic EIP-712
    assert receipt_hash(receipt, DOMAIN) == keccak(
        b"\x19" + signable.version + signable.header + signable.body)
    for forged in (receipt.model_copy(update={"chat_template": None}),
                   receipt.model_copy(update={"chat_template": template_digest("x")})):
        with pytest.raises(ReceiptError) as failure:
            verify_receipt_signature(forged, DOMAIN)
        assert failure.value.reason == "wrong_signer"

    model, own = json_verifier
    saved_answer_checks(body, answer, (model, template_for_receipt(receipt, own, HERMES)),
                        json_model_dir, monkeypatch)
    for given in (None, SHIPPED_TEXT):
        with pytest.raises(ReceiptError) as failure:
            template_for_receipt(receipt, own, given)
        assert failure.value.reason == "chat_template", failure.value
        assert failure.value.expected == template_digest(HERMES)
    with pytest.raises(ReceiptError) as failure:  # never as if under the model's own
        offline_checks(saved_bundle(body, answer), json_verifier, json_model_dir, monkeypatch)
    assert failure.value.reason == "chat_template"


# --------------------------------------------------------------------------- agent frameworks


@pytest.fixture(scope="module")
def agent_model_dir(smol_dir, tmp_path_factory):
    """`smol_dir` taught the agents' round trip under the shipped template (~150 Adam steps,
    the tool as the Agents SDK and as pydantic-ai send it); its tokenizer keeps SmolLM2's own
    template, so a node needs the options."""
    from transformers import AutoTokenizer, LlamaForCausalLM

    directory = tmp_path_factory.mktemp("agent-tiny") / "model"
    shutil.copytree(smol_dir, directory)
    tokenizer = AutoTokenizer.from_pretrained(directory)
    tokenizer.chat_template = SHIPPED_TEXT
    torch.manual_seed(0)
    model = LlamaForCausalLM.from_pretrained(directory)
    teach(model, tokenizer, agent_turns(AGENT_TOOL) + agent_turns(PLAIN_TOOL), steps=150)
    model.save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def agent_node(agent_model_dir):
    """`gym node serve --enable-auto-tool-choice --tool-call-parser hermes` of the taught
    model: the shipped SmolLM2 tools template."""
    with signing_node(agent_model_dir, auto_tool_choice=True,
                      tool_call_parser="hermes") as running:
        yield running


@pytest.fixture(scope="module")
def agent_verifier(agent_model_dir):
    return verify.load_verifier_model(agent_model_dir)


@pytest.fixture
def wire() -> Wire:
    return Wire()


def async_client(wire: Wire) -> httpx.AsyncClient:
    """`wire.client()` for the asyncio libraries."""
    async def on_request(request: httpx.Request) -> None:
        if request.url.path.endswith("/chat/completions"):
            wire.requests.append(json.loads(request.content))

    async def on_response(response: httpx.Response) -> None:
        if response.request.url.path.endswith("/chat/completions"):
            await response.aread()
            wire.answers.append(response.json())

    return httpx.AsyncClient(event_hooks={"request": [on_request], "response": [on_response]},
                             timeout=120)


def check_round_trip(wire: Wire, verifier, model_dir, monkeypatch) -> None:
    """The protocol of an agent's run, whichever way the model went: `auto` by default, each
    answer text or calls; after calls, the next request sends the calls and the tool's result
    back; every answer's receipt binds the shipped template and verifies from the saved answer
    (re-rendered under the shipped template, which the verifier finds by the digest)."""
    assert wire.requests and len(wire.requests) == len(wire.answers)
    for i, (body, answer) in enumerate(zip(wire.requests, wire.answers, strict=True)):
        assert "tool_choice" not in body or body["tool_choice"] == "auto", body
        assert [t["function"]["name"] for t in body["tools"]] == ["get_weather"]
        choice = answer["choices"][0]
        calls = choice["message"].get("tool_calls")
        assert (choice["finish_reason"] == "tool_calls") == bool(calls), choice
        if calls and i + 1 < len(wire.requests):
            sent = wire.requests[i + 1]["messages"]
            assert sent[-1 - len(calls)]["tool_calls"][0]["id"] == calls[0]["id"]
            assert sent[-1]["role"] == "tool" and "sunny in" in sent[-1]["content"]
        assert answer["receipt"]["chat_template"] == template_digest(SHIPPED_TEXT)
        saved_answer_checks(body, answer, verifier, model_dir, monkeypatch)


def test_openai_agents_with_one_tool_and_default_settings(agent_node, wire, agent_verifier,
                                                          agent_model_dir, monkeypatch):
    """The OpenAI Agents SDK's default path: one tool, no tool_choice (so `auto`), no sampling
    settings; the run completes (a final text answer), calling the tool or not."""
    agents = pytest.importorskip("agents")
    agents.set_tracing_disabled(True)  # no network: traces would go to OpenAI
    client = openai.AsyncOpenAI(base_url=agent_node.base_url, api_key="x", max_retries=0,
                                http_client=async_client(wire))
    agent = agents.Agent(name="weather", instructions=INSTRUCTIONS,
                         tools=[agents.function_tool(get_weather)],
                         model=agents.OpenAIChatCompletionsModel(model=MODEL_NAME,
                                                                 openai_client=client))
    result = agents.Runner.run_sync(agent, QUESTION)
    assert isinstance(result.final_output, str)
    assert wire.requests[0]["tools"] == [AGENT_TOOL]
    assert "temperature" not in wire.requests[0]
    check_round_trip(wire, agent_verifier, agent_model_dir, monkeypatch)


def test_a_pydantic_ai_agent_with_a_tool(agent_node, wire, agent_verifier, agent_model_dir,
                                         monkeypatch):
    """A pydantic-ai agent with a tool (it sends tool_choice "auto" itself); the tool's
    schema is given as pydantic-ai would derive it, in the order the model was taught."""
    pydantic_ai = pytest.importorskip("pydantic_ai")
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(base_url=agent_node.base_url, api_key="x",
                              http_client=async_client(wire))
    function = PLAIN_TOOL["function"]
    tool = pydantic_ai.Tool.from_schema(get_weather, function["name"], function["description"],
                                        function["parameters"])
    agent = pydantic_ai.Agent(OpenAIChatModel(MODEL_NAME, provider=provider),
                              instructions=INSTRUCTIONS, tools=[tool], retries=3)
    result = agent.run_sync(QUESTION)
    assert isinstance(result.output, str)
    check_round_trip(wire, agent_verifier, agent_model_dir, monkeypatch)


def test_langchain_bind_tools_with_its_default_tool_choice(agent_node, wire, agent_verifier,
                                                           agent_model_dir, monkeypatch):
    """`bind_tools` without tool_choice sends none (`auto`); LangChain's tool loop: a call is
    run and its result sent back for the next answer. (The tool as the Agents SDK gives it,
    which the model was taught: LangChain takes an OpenAI tool as it is.)"""
    from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage
    from langchain_openai import ChatOpenAI

    chat = ChatOpenAI(base_url=agent_node.base_url, api_key="x", model=MODEL_NAME,
                      max_retries=0, http_client=wire.client()).bind_tools([AGENT_TOOL])
    history = [SystemMessage(INSTRUCTIONS), HumanMessage(QUESTION)]
    for _ in range(3):
        message = chat.invoke(history)
        if not message.tool_calls:
            break
        history.append(message)
        history += [ToolMessage(get_weather(**call["args"]), tool_call_id=call["id"])
                    for call in message.tool_calls]
    check_round_trip(wire, agent_verifier, agent_model_dir, monkeypatch)


@pytest.mark.slow
def test_openai_agents_against_the_shipped_model(tmp_path, monkeypatch):
    """The issue's case: the shipped SmolLM2, served by `gym node serve --model "$(gym node
    model)" --enable-auto-tool-choice --tool-call-parser hermes`, and the OpenAI Agents SDK
    with one tool and default settings: the run completes, and each answer's receipt verifies
    from the saved answer and request (as `gym verify receipt --response --request --model`
    checks them). The model is converted from the packaged GGUF on first use (no download)."""
    agents = pytest.importorskip("agents")
    from trainer.backends import default_model_dir

    model_dir = default_model_dir()
    port = free_port()
    command = [*signing_node_command(model_dir, port), "--enable-auto-tool-choice",
               "--tool-call-parser", "hermes"]
    wire = Wire()
    with node_process(command, node_env(tmp_path)) as proc:
        wait_for_health(proc, port, timeout_s=300)
        agents.set_tracing_disabled(True)
        client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x",
                                    max_retries=0, http_client=async_client(wire))
        agent = agents.Agent(name="weather", instructions=INSTRUCTIONS,
                             tools=[agents.function_tool(get_weather)],
                             model=agents.OpenAIChatCompletionsModel(model=MODEL_NAME,
                                                                     openai_client=client))
        result = agents.Runner.run_sync(agent, QUESTION)
        output = stop_node(proc)
    assert isinstance(result.final_output, str), output
    assert "smollm2_tools.jinja" in output
    model, tokenizer = verify.load_verifier_model(model_dir)
    for body, answer in zip(wire.requests, wire.answers, strict=True):
        receipt = parse_receipt(answer["receipt"])
        assert receipt.chat_template == template_digest(SHIPPED_TEXT)
        (tmp_path / "answer.json").write_text(json.dumps(answer))  # what a client saves
        (tmp_path / "request.json").write_text(json.dumps(body))
        bundle = saved_bundle(json.loads((tmp_path / "request.json").read_text()),
                              json.loads((tmp_path / "answer.json").read_text()))
        checks = verify.check_receipt_bundle(
            bundle, offline=True, model_dir=model_dir,
            loaded=(model, template_for_receipt(receipt, tokenizer)))
        assert all(c.passed is not False for c in checks)
        assert {c.name for c in checks if c.passed} >= {"activations", "sampling"}
