"""Every answer the node gives verifies from what a client saves (issue 45).

The matrix: each answer kind (plain, `n` > 1, tool calls named / required / auto, structured
output, logprobs, completions with echo and with a list prompt) × each form a client saves it
in (the JSON body, the openai SDK's `model_dump()`, litellm's, a stream saved as the array of
its chunks: the events' JSON with and without `include_usage`, the openai SDK's chunk dumps;
litellm's own stream drops the receipt, so a litellm user keeps the events, below).
`bundle_sources.signed_answers` reads each; every choice's receipt verifies in full on the
model (grammar and sampling replayed), and the same answer with one byte of what it shows
changed (a tool call's arguments, else the text) fails `response_digest`.

Then: the issue's report through `gym verify receipt --response/--request` (a tool call, a
streamed `required` answer), what an answer that cannot be read lacks, arbitrary edits of a
saved stream (read or refused by name, never a crash), and the eight client
libraries of docs/node.md: openai 2.x, langchain-openai, instructor and litellm run here against
the node; openai 3.x, pydantic-ai, openai-agents, dspy and llama-index-llms-openai-like are not
installed, and the request bodies they sent (recorded by `record_client_requests.py`,
`client_requests.json`) are replayed verbatim.

One node for the module: `test_tools_auto`'s tiny byte-level Llama with a Hermes-style
template, taught to answer a call, text then a call, and plain text, so `tool_choice: "auto"`
takes each branch under greedy decoding.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Literal

import httpx
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from node_helpers import (
    DOMAIN,
    MODEL_NAME,
    NODE_KEY,
    SNAPSHOT,
    Wire,
    make_engine,
    offline_checks,
    run_server,
)
from pydantic import BaseModel
from test_tools_auto import TOOLS, hermes_model_dir  # noqa: F401  (a fixture)
from test_verify_sources import gym_verify, save

from inference_node import verify
from inference_node.bundle_sources import bundle_from_response, fetch_bundle, signed_answers
from inference_node.bundle_store import BundleStore
from inference_node.errors import ReceiptError
from inference_node.library import StaticLibrarySource
from inference_node.receipts import ReceiptSigner, model_digest

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning",
                                        "ignore:Pydantic serializer warnings:UserWarning",
                                        "ignore::pydantic.PydanticDeprecatedSince20")

RECORDED = Path(__file__).with_name("client_requests.json")
VERDICT = {"type": "object", "properties": {"correct": {"type": "boolean"},
                                            "confidence": {"enum": ["low", "high"]}},
           "required": ["correct", "confidence"], "additionalProperties": False}
NAMED = {"type": "function", "function": {"name": "get_weather"}}


def chat(question: str, **fields) -> tuple[str, dict]:
    return "chat", {"model": MODEL_NAME, "messages": [{"role": "user", "content": question}],
                    "max_tokens": 60, "temperature": 0, **fields}


KINDS = {
    "plain": chat("hello", temperature=0.8, seed=3, max_tokens=10),
    "n=3": chat("hello", n=3, temperature=1.0, seed=7, max_tokens=8),
    "named call": chat("weather in Oslo?", tools=TOOLS, tool_choice=NAMED),
    "required": chat("weather in Oslo?", tools=TOOLS[:1], tool_choice="required"),
    "required n=2": chat("weather in Oslo?", tools=TOOLS[:1], tool_choice="required", n=2,
                         temperature=1.0, seed=11),
    "auto call": chat("weather in Oslo?", tools=TOOLS, tool_choice="auto", max_tokens=120),
    "auto text and call": chat("add 2 and 3", tools=TOOLS, max_tokens=120),  # auto: the default
    "json_schema": chat("hello", response_format={"type": "json_schema", "json_schema": {
        "name": "Verdict", "schema": VERDICT}}),
    "logprobs": chat("hello", logprobs=True, top_logprobs=2, temperature=0.7, seed=2,
                     max_tokens=8),
    "completion echo": ("completion", {"model": MODEL_NAME, "prompt": "Sure. Hi", "echo": True,
                                       "logprobs": 2, "max_tokens": 6, "seed": 1,
                                       "temperature": 0.5}),
    "completion list": ("completion", {"model": MODEL_NAME, "prompt": ["hello", "Sure."],
                                       "n": 2, "max_tokens": 5, "seed": 9, "temperature": 1.0}),
}
CHAT_FORMS = ["body", "openai", "litellm", "sse", "sse+usage", "openai chunks"]
COMPLETION_FORMS = ["body", "openai", "sse", "sse+usage", "openai chunks"]
CELLS = [(kind, form) for kind, (route, _) in KINDS.items()
         for form in (CHAT_FORMS if route == "chat" else COMPLETION_FORMS)]


@pytest.fixture(scope="module")
def node(hermes_model_dir, tmp_path_factory):  # noqa: F811
    engine = make_engine(hermes_model_dir)
    signer = ReceiptSigner(NODE_KEY, DOMAIN, engine.model, model_digest(hermes_model_dir))
    bundles = BundleStore(tmp_path_factory.mktemp("bundles") / "b.sqlite", retention_s=3600)
    with run_server(engine, StaticLibrarySource(SNAPSHOT), receipts=signer,
                    bundles=bundles) as running:
        yield running


@pytest.fixture(scope="module")
def verifier(hermes_model_dir):  # noqa: F811
    return verify.load_verifier_model(hermes_model_dir)


@pytest.fixture(scope="module")
def client(node):
    with openai.OpenAI(base_url=node.base_url, api_key="x", max_retries=0) as c:
        yield c


@pytest.fixture
def litellm(monkeypatch):
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch of its price list
    import litellm

    return litellm


def streamed_events(node, route: str, body: dict) -> list[dict]:
    """A streamed answer as a client saves it from the wire: each `data:` event's JSON."""
    path = "/chat/completions" if route == "chat" else "/completions"
    events = []
    with httpx.stream("POST", node.base_url + path, json=body, timeout=120) as reply:
        assert reply.status_code == 200, reply.read()
        for line in reply.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                events.append(json.loads(line[6:]))
    return events


def saved_answer(node, client, litellm, route: str, body: dict, form: str
                 ) -> tuple[object, dict]:
    """The answer to ``body`` in ``form`` and the request body the client sent for it."""
    streamed = {"sse": {"stream": True}, "sse+usage": {
        "stream": True, "stream_options": {"include_usage": True}}, "openai chunks": {
        "stream": True, "stream_options": {"include_usage": True}}}.get(form, {})
    request = {**body, **streamed}
    api = client.chat.completions if route == "chat" else client.completions
    if form == "body":
        path = "/chat/completions" if route == "chat" else "/completions"
        reply = httpx.post(node.base_url + path, json=request, timeout=120)
        assert reply.status_code == 200, reply.text
        return reply.json(), request
    if form in ("sse", "sse+usage"):
        return streamed_events(node, route, request), request
    if form == "openai":
        return api.create(**request).model_dump(), request
    if form == "openai chunks":
        return [chunk.model_dump() for chunk in api.create(**request)], request
    assert route == "chat" and form == "litellm"
    fields = {k: v for k, v in request.items() if k != "model"}
    return litellm.completion(model=f"openai/{MODEL_NAME}", api_base=node.base_url,
                              api_key="x", **fields).model_dump(), request


def checks_pass(bundle: dict, verifier, model_dir, monkeypatch) -> dict:
    checks = offline_checks(bundle, verifier, model_dir, monkeypatch)
    assert all(c.passed for c in checks.values() if c.passed is not None), checks
    assert checks["sampling"].passed and checks["termination"].passed, checks
    return checks


def change_one_byte(answer) -> str:
    """Change one character of what the answer shows for its last choice: a tool call's
    arguments when it has any, else its content (or text). Returns the changed field's name."""
    places = []  # (choice index, is a call, container, key)
    for chunk in answer if isinstance(answer, list) else [answer]:
        for choice in chunk.get("choices") or ():
            shown = choice.get("message") or choice.get("delta") or choice
            for call in shown.get("tool_calls") or ():
                places.append((choice.get("index", 0), 1, call["function"], "arguments"))
            key = "text" if "text" in choice else "content"
            if isinstance(shown.get(key), str):
                places.append((choice.get("index", 0), 0, shown, key))
    last = max(index for index, *_ in places)
    calls = [p for p in places if p[0] == last and p[1]]
    texts = [p for p in places if p[0] == last and p[2].get(p[3])]
    _, _, container, key = (calls or texts or places)[-1]
    value = container[key]
    container[key] = value[:-1] + ("x" if value[-1:] != "x" else "y") if value else "x"
    return key


# --------------------------------------------------------------------------- the matrix


@pytest.mark.parametrize(("kind", "form"), CELLS, ids=[f"{k}|{f}" for k, f in CELLS])
def test_every_answer_verifies_from_every_saved_form(node, client, litellm, verifier,
                                                     hermes_model_dir, monkeypatch,  # noqa: F811
                                                     kind, form):
    route, body = KINDS[kind]
    answer, request = saved_answer(node, client, litellm, route, body, form)
    json.dumps(answer)  # what the client writes to a file
    answers = signed_answers(answer, request)
    expected = body.get("n", 1) * (len(body["prompt"]) if isinstance(body.get("prompt"),
                                                                     list) else 1)
    assert [a.index for a in answers] == list(range(expected))
    for signed in answers:
        checks = checks_pass(signed.bundle(), verifier, hermes_model_dir, monkeypatch)
        if "tools" in body or "response_format" in body:  # the grammar was replayed
            assert checks["response_format"].passed, checks
    if "call" in kind or "required" in kind:
        shown = json.dumps(answer)
        assert '"tool_calls": [' in shown, f"{kind} answered no call: {shown[:400]}"

    changed = copy.deepcopy(answer)
    field = change_one_byte(changed)
    with pytest.raises(ReceiptError) as failure:
        for signed in signed_answers(changed, request):
            verify.verify_receipt_bundle(signed.bundle())
    assert failure.value.reason == "response_digest", (field, failure.value)


# --------------------------------------------------------------------------- the CLI


def test_a_saved_tool_call_verifies_through_the_cli(hermes_model_dir, tmp_path):  # noqa: F811
    """The issue's report: `gym verify receipt --response --request --model` on a tool-call
    answer (content null) said "the answer's chat choice has no text", and a streamed
    `required` answer saved as its chunks failed response_digest. (A node without a library:
    `--offline --model` rebuilds the prompt without the chain's experience texts.)"""
    engine = make_engine(hermes_model_dir)
    signer = ReceiptSigner(NODE_KEY, DOMAIN, engine.model, model_digest(hermes_model_dir))
    with run_server(engine, StaticLibrarySource(), receipts=signer) as bare, \
            openai.OpenAI(base_url=bare.base_url, api_key="x", max_retries=0) as client:
        body = KINDS["named call"][1]
        answer = client.chat.completions.create(**body).model_dump()
        streamed_body = {**KINDS["required"][1], "stream": True}
        chunks = [c.model_dump() for c in client.chat.completions.create(**streamed_body)]
        several = {**KINDS["named call"][1], "n": 2}
        pair = client.chat.completions.create(**several).model_dump()
    assert answer["choices"][0]["message"]["content"] is None
    request = save(tmp_path, "request.json", body)
    done = gym_verify(tmp_path, "--response", save(tmp_path, "call.json", answer), "--request",
                      request, "--model", str(hermes_model_dir))
    assert done.returncode == 0, done.stdout + done.stderr
    for check in ("signature", "response_format", "sampling"):
        assert any(f" {check} " in line and " ok " in line
                   for line in done.stdout.splitlines()), done.stdout
    done = gym_verify(tmp_path, "--response", save(tmp_path, "stream.json", chunks),
                      "--request", save(tmp_path, "s.json", streamed_body))
    assert done.returncode == 0, done.stdout + done.stderr
    # n = 2: each choice has its own receipt, picked by --choice
    pair_files = ("--response", save(tmp_path, "pair.json", pair), "--request",
                  save(tmp_path, "pair-request.json", several))
    for index in (0, 1):
        done = gym_verify(tmp_path, *pair_files, "--choice", str(index))
        assert done.returncode == 0, done.stdout + done.stderr
    unnamed = gym_verify(tmp_path, *pair_files)
    assert unnamed.returncode == 1 and "--choice INDEX" in unnamed.stderr, unnamed.stderr
    change_one_byte(answer)
    failed = gym_verify(tmp_path, "--response", save(tmp_path, "edited.json", answer),
                        "--request", request)
    assert failed.returncode == 1 and "response_digest" in failed.stderr, failed.stderr
    assert "tool_calls" in failed.stderr


# --------------------------------------------------------------------------- unreadable answers


def test_what_an_unreadable_answer_lacks_is_named(node, client):
    _, body = KINDS["required"]
    answer = client.chat.completions.create(**body).model_dump()
    plain_body = KINDS["plain"][1]
    plain = client.chat.completions.create(**plain_body).model_dump()

    def fails(edit, saved=answer, sent=body, **kwargs) -> str:
        broken = copy.deepcopy(saved)
        edit(broken)
        with pytest.raises(ReceiptError) as failure:
            bundle_from_response(broken, sent, **kwargs)
        assert failure.value.reason == "malformed", failure.value
        return str(failure.value)

    assert "receipt_evidence has no completion_text" in fails(
        lambda a: a["receipt_evidence"].pop("completion_text"))
    assert "receipt_evidence.completion_token_ids" in fails(
        lambda a: a["receipt_evidence"].pop("completion_token_ids"))
    assert "receipt_evidence.domain" in fails(lambda a: a["receipt_evidence"].pop("domain"))
    assert "choices[0].message is missing" in fails(lambda a: a["choices"][0].pop("message"))
    assert "choices[0].message.tool_calls[0].function.arguments" in fails(
        lambda a: a["choices"][0]["message"]["tool_calls"][0]["function"].update(arguments={}))
    assert "choices[0].message.content is missing" in fails(
        lambda a: a["choices"][0]["message"].update(content=None), plain, plain_body)
    assert "carries 0 receipts" in fails(lambda a: a.pop("receipt"), plain, plain_body)
    for bad in ([2**64], [1.5], ["7"]):  # not token ids: refused before a digest is computed
        assert "completion_token_ids" in fails(
            lambda a, bad=bad: a["receipt_evidence"].update(completion_token_ids=bad))
    assert "nests too deep" in fails(
        lambda a: a["receipt_evidence"].update(completion_text="[" * 100_000))
    lone = copy.deepcopy(answer)
    lone["receipt_evidence"]["completion_text"] = "\ud800"
    with pytest.raises(ReceiptError) as failure:
        for signed in signed_answers(lone, body):
            verify.verify_receipt_bundle(signed.bundle())
    assert failure.value.reason in ("malformed", "response_digest")

    several = client.chat.completions.create(**KINDS["n=3"][1]).model_dump()
    assert "3 choices, each with its own receipt" in fails(lambda a: None, several,
                                                            KINDS["n=3"][1])
    assert "no choice 5" in fails(lambda a: None, several, KINDS["n=3"][1], choice=5)
    assert "a receipt at the top" in fails(
        lambda a: a.update(receipt=a["choices"][0]["receipt"]), several, KINDS["n=3"][1])
    bundle = bundle_from_response(several, KINDS["n=3"][1], choice=2)
    assert bundle["request"]["seed"] == 7 + 2
    verify.verify_receipt_bundle(bundle)


JSON = st.recursive(st.none() | st.booleans() | st.integers(-2, 2**64) | st.floats()
                    | st.text(max_size=4) | st.just("\ud800"),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.sampled_from(["index", "content", "function", "x"]),
                                      inner, max_size=3), max_leaves=6)


def paths(value, at=()):
    """Every path into ``value`` (dict keys and list positions), the root included."""
    yield at
    items = value.items() if isinstance(value, dict) else enumerate(value) \
        if isinstance(value, list) else ()
    for key, inner in items:
        yield from paths(inner, (*at, key))


@pytest.fixture(scope="module")
def honest_stream(client) -> tuple[list, dict]:
    body = {**KINDS["required n=2"][1], "stream": True,
            "stream_options": {"include_usage": True}}
    return [c.model_dump() for c in client.chat.completions.create(**body)], body


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_edit_of_a_saved_answer_is_read_or_refused_by_name(honest_stream, data):
    """Hostile input: one subtree of an honest saved stream (two choices, tool-call deltas,
    a usage chunk) replaced by arbitrary JSON is read, or refused with a `ReceiptError`, never
    another exception; and what is read verifies or fails by name."""
    chunks, request = honest_stream
    edited = copy.deepcopy(chunks)
    path = data.draw(st.sampled_from(list(paths(edited))))
    value = data.draw(JSON)
    if not path:
        edited = value
    else:
        parent = edited
        for key in path[:-1]:
            parent = parent[key]
        parent[path[-1]] = value
    try:
        for signed in signed_answers(edited, request):
            verify.verify_receipt_bundle(signed.bundle())
    except ReceiptError as failure:
        assert failure.reason in ("malformed", "response_digest", "request_digest",
                                  "bad_signature", "wrong_signer", "token_counts"), failure


# --------------------------------------------------------------------------- client libraries


class Verdict(BaseModel):
    """Whether the sum is right."""

    correct: bool
    confidence: Literal["low", "high"]


def verifies(answer, request, verifier, model_dir, monkeypatch) -> None:
    for signed in signed_answers(answer, request):
        checks_pass(signed.bundle(), verifier, model_dir, monkeypatch)


def test_openai_sdk_parse(client, verifier, hermes_model_dir, monkeypatch):  # noqa: F811
    """openai 2.x: `completion.model_dump()` of `parse()` (its `parsed` object included)."""
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Is 2 + 3 = 5?"}],
            "max_tokens": 48, "temperature": 0}
    wire = Wire()
    with openai.OpenAI(base_url=client.base_url, api_key="x", http_client=wire.client()) as c:
        completion = c.chat.completions.parse(**body, response_format=Verdict)
    assert isinstance(completion.choices[0].message.parsed, Verdict)
    verifies(completion.model_dump(), wire.requests[-1], verifier, hermes_model_dir,
             monkeypatch)


def keeper() -> tuple[list, httpx.Client]:
    """docs/node.md's `keep` hook: each call's request body and answer (the chunks, streamed)."""
    saved = []

    def keep(response: httpx.Response) -> None:
        response.read()
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            answer = [json.loads(line[6:]) for line in response.text.splitlines()
                      if line.startswith("data: {")]
        else:
            answer = response.json()
        saved.append((json.loads(response.request.content), answer))

    return saved, httpx.Client(event_hooks={"response": [keep]}, timeout=120)


def test_langchain_by_its_http_client_or_headers(node, verifier, hermes_model_dir,  # noqa: F811
                                                 monkeypatch):
    """LangChain drops `receipt_evidence` from its messages: what `keep` saved from its
    `http_client` verifies, streamed or not, and with `include_response_headers` the raw
    message names the receipt CID and bundle token, for `--cid --token --node`."""
    from langchain_openai import ChatOpenAI

    saved, http_client = keeper()
    chat = ChatOpenAI(base_url=node.base_url, api_key="x", model=MODEL_NAME, max_tokens=48,
                      temperature=0, max_retries=0, http_client=http_client,
                      include_response_headers=True)
    out = chat.with_structured_output(Verdict, method="function_calling",
                                      include_raw=True).invoke("Is 2 + 3 = 5?")
    assert isinstance(out["parsed"], Verdict)
    verifies(saved[-1][1], saved[-1][0], verifier, hermes_model_dir, monkeypatch)
    headers = out["raw"].response_metadata["headers"]
    fetched = fetch_bundle(node.base_url, headers["x-gym-receipt-cid"],
                           token=headers["x-gym-bundle-token"])
    kept = bundle_from_response(saved[-1][1], saved[-1][0])
    assert fetched["response"] == kept["response"] and fetched["request"] == kept["request"]
    checks_pass(fetched, verifier, hermes_model_dir, monkeypatch)

    def confirm(correct: bool) -> bool:
        """Confirm whether a sum is right."""
        return correct

    calls = list(chat.bind_tools([confirm], tool_choice="any").stream("Is 2 + 3 = 5?"))
    assert any(chunk.tool_call_chunks for chunk in calls)
    request, chunks = saved[-1]
    assert request["stream"] and isinstance(chunks, list)
    verifies(chunks, request, verifier, hermes_model_dir, monkeypatch)


def test_instructor_create_with_completion(node, verifier, hermes_model_dir, monkeypatch):  # noqa: F811
    """instructor's default (tools) mode: `create_with_completion` gives the completion."""
    import instructor

    wire = Wire()
    client = instructor.from_openai(openai.OpenAI(base_url=node.base_url, api_key="x",
                                                  http_client=wire.client(), max_retries=0))
    verdict, completion = client.chat.completions.create_with_completion(
        model=MODEL_NAME, response_model=Verdict, max_retries=0, max_tokens=48, temperature=0,
        messages=[{"role": "user", "content": "Is 2 + 3 = 5?"}])
    assert isinstance(verdict, Verdict)
    assert completion.choices[0].finish_reason == "tool_calls"
    verifies(completion.model_dump(), wire.requests[-1], verifier, hermes_model_dir,
             monkeypatch)


def test_litellm_tool_call(node, litellm, verifier, hermes_model_dir, monkeypatch):  # noqa: F811
    """litellm keeps the node's fields on its ModelResponse: `response.model_dump()` with the
    body it sent verifies. Its stream's chunks lose them: streamed, `keep` on the openai client
    it is given saves the events."""
    tools = [{"type": "function", "function": {"name": "Verdict", "parameters": VERDICT}}]
    body = {"messages": [{"role": "user", "content": "Is 2 + 3 = 5?"}], "tools": tools,
            "tool_choice": {"type": "function", "function": {"name": "Verdict"}},
            "max_tokens": 48, "temperature": 0}
    response = litellm.completion(model=f"openai/{MODEL_NAME}", api_base=node.base_url,
                                  api_key="x", **body)
    Verdict.model_validate_json(response.choices[0].message.tool_calls[0].function.arguments)
    verifies(response.model_dump(), {"model": MODEL_NAME, **body}, verifier, hermes_model_dir,
             monkeypatch)

    saved, http_client = keeper()
    client = openai.OpenAI(base_url=node.base_url, api_key="x", http_client=http_client)
    list(litellm.completion(model=f"openai/{MODEL_NAME}", client=client, stream=True, **body))
    request, chunks = saved[-1]
    assert request["stream"] and isinstance(chunks, list)
    verifies(chunks, request, verifier, hermes_model_dir, monkeypatch)


def recorded() -> list[tuple[str, dict]]:
    libraries = json.loads(RECORDED.read_text())["libraries"]
    return [(name, request) for name, entry in libraries.items()
            for request in entry["requests"]]


@pytest.mark.parametrize(("library", "request_body"), recorded(),
                         ids=[f"{name}-{i}" for i, (name, _) in enumerate(recorded())])
def test_a_recorded_library_request_replayed_verbatim(node, library, request_body, verifier,
                                                      hermes_model_dir, monkeypatch):  # noqa: F811
    """The body each library sent (`client_requests.json`), posted as it was; its answer saved
    as that library's users save it (docs/node.md: the JSON body, or the events) verifies."""
    if request_body.get("stream"):
        answer = streamed_events(node, "chat", request_body)
    else:
        reply = httpx.post(f"{node.base_url}/chat/completions", json=request_body, timeout=120)
        assert reply.status_code == 200, (library, reply.text)
        answer = reply.json()
    verifies(answer, request_body, verifier, hermes_model_dir, monkeypatch)
    if library == "dspy":  # its users rebuild the body from `lm.history` (docs/node.md)
        rebuilt = {"model": MODEL_NAME, "messages": request_body["messages"], "temperature": 0,
                   "max_tokens": 48}
        verifies(answer, rebuilt, verifier, hermes_model_dir, monkeypatch)
