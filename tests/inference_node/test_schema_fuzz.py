"""Schema fuzz of the OpenAI routes (hypothesis; schemathesis is not installed): any request body,
well-formed or not, gets a valid answer or an OpenAI-shaped error with a 4xx status, never a 500,
and the server stays up. Bodies are drawn from strategies built on the request models in
`inference_node.protocol`: each field takes a value of its own type, an edge value or any JSON
(edge numbers: 2**63, 2**64, -0.0, 1e308, the smallest float; strings of 16,000 to 300,000 characters;
arrays and objects nested up to 120 levels), plus unknown fields, non-object bodies, bodies
nested 100,000 levels deep, duplicate members and bytes that are not JSON or not UTF-8.

The node runs the tiny model with a 96-token context, a 64 KiB body limit (so huge values meet
the 413 path) and signs receipts, so every accepted request decodes at most a few dozen tokens
and the receipt path (seed range, activations) is fuzzed too. Every error must be OpenAI's
`{"error": {message, type, param, code}}` with a 4xx status.
"""

from __future__ import annotations

import collections
import json

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from node_helpers import (
    DOMAIN,
    MODEL_NAME,
    NODE_KEY,
    SNAPSHOT,
    build_tiny_model,
    make_engine,
    run_server,
)

from inference_node.library import StaticLibrarySource
from inference_node.protocol import MAX_STOP_SEQUENCES, ChatMessage
from inference_node.receipts import ReceiptSigner, model_digest
from inference_node.settings import NodeSettings

MAX_BODY = 64 * 1024

FUZZ = settings(max_examples=120, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])

edge_numbers = st.sampled_from([2**63 - 1, 2**63, -(2**63) - 1, 2**64, 2**53, -0.0, 1e308,
                                -1e308, 5e-324, 0.5, 1.0, 0, -1])
huge_strings = st.sampled_from([16_000, 70_000, 300_000]).map(lambda n: "one " * (n // 4))


def nested(depth: int, leaf, as_object: bool):
    for _ in range(depth):
        leaf = {"a": leaf} if as_object else [leaf]
    return leaf


deep_values = st.builds(nested, st.integers(20, 120), st.just(1), st.booleans())
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | edge_numbers
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=12) | huge_strings | deep_values
words = st.text(alphabet=st.sampled_from(list("abc xyz.,?!\n[]é🙂\x00")), max_size=40)


# Per field of the request models: values of its own type within the documented ranges, and
# edge values just outside them (or of a neighbouring type).
roles = st.sampled_from(list(ChatMessage.model_fields["role"].annotation.__args__))
content_parts = st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": words}),
                         max_size=3)
COMMON = {
    "model": (st.just(MODEL_NAME), words),
    "max_tokens": (st.integers(1, 40), st.integers(-2, 0) | st.integers(2**31, 2**64)
                   | edge_numbers | st.sampled_from(["4", 4.0, True])),
    "temperature": (st.floats(0, 2), st.sampled_from([-0.1, 2.5, 1e308])),
    "top_p": (st.floats(0.01, 1), st.sampled_from([0, -1, 1.5])),
    "seed": (st.integers(0, 2**53 - 1), st.integers(-2**64, 2**64) | edge_numbers),
    "stop": (words | st.lists(words, max_size=MAX_STOP_SEQUENCES),
             st.lists(words, min_size=MAX_STOP_SEQUENCES + 1) | st.just("")),
    "stream": (st.booleans(), st.sampled_from(["yes", 2])),
    "stream_options": (st.fixed_dictionaries({}, optional={"include_usage": st.booleans()}),
                       st.just({"include_usage": "maybe"})),
    "n": (st.just(1), st.integers(-1, 0) | st.integers(17, 40)),
    "user": (words, st.integers()),
}
CHAT = {
    **COMMON,
    "messages": (st.lists(st.fixed_dictionaries({"role": roles}, optional={
        "content": words | content_parts, "name": words}), min_size=1, max_size=3),
                 st.just([]) | st.lists(st.fixed_dictionaries({
                     "role": st.sampled_from(["tool", "function", ""]),
                     "content": st.lists(st.fixed_dictionaries({
                         "type": st.just("image_url"), "url": words}), min_size=1)}),
                     min_size=1, max_size=2)),
    "logprobs": (st.booleans(), st.just("true")),
    "top_logprobs": (st.integers(0, 20), st.integers(-1, 0) | st.integers(21, 100)),
    "max_completion_tokens": (st.integers(1, 40), st.integers(-2, 0)),
}
COMPLETION = {
    **COMMON,
    "prompt": (words | st.lists(words, min_size=1, max_size=1),
               st.lists(words, max_size=3) | st.lists(st.integers(0, 9), min_size=1)),
    "logprobs": (st.integers(0, 5), st.integers(-1, 0) | st.integers(6, 50)),
    "echo": (st.booleans(), st.just(None)),
}


def request_bodies(fields: dict, required: tuple[str, ...]):
    """Well-formed bodies (the required fields and any optional ones, each of its own type),
    and each of them mutated: a field set to an edge value or to any JSON, a required field
    dropped, an unknown field added."""
    valid = st.fixed_dictionaries({k: fields[k][0] for k in required},
                                  optional={k: v[0] for k, v in fields.items()
                                            if k not in required})

    def mutate(body: dict, key: str, how: int, value) -> dict:
        body = dict(body)
        if how == 0:
            body[key] = value
        elif how == 1:
            body.pop(key, None)
        else:
            body["unknown_" + key] = value
        return body

    def mutated(body: dict):
        keys = st.sampled_from(sorted(fields))
        return st.one_of(
            st.builds(mutate, st.just(body), keys, st.just(0), json_values),
            st.builds(mutate, st.just(body), keys, st.integers(0, 2), huge_strings | deep_values),
            keys.flatmap(lambda k: fields[k][1].map(lambda v: mutate(body, k, 0, v))),
            st.builds(mutate, st.just(body), keys, st.integers(1, 2), json_values))

    return st.one_of(valid, valid.flatmap(mutated))


bodies = {"chat/completions": request_bodies(CHAT, ("model", "messages")),
          "completions": request_bodies(COMPLETION, ("model", "prompt"))}


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    model_dir = build_tiny_model(tmp_path_factory.mktemp("short") / "model", max_positions=96)
    engine = make_engine(model_dir)
    signer = ReceiptSigner(NODE_KEY, DOMAIN, engine.model, model_digest(model_dir))
    with run_server(engine, StaticLibrarySource(SNAPSHOT), NodeSettings(max_body_bytes=MAX_BODY),
                    receipts=signer) as running, \
            httpx.Client(base_url=running.base_url, timeout=120) as client:
        yield client


SEEN: collections.Counter[int] = collections.Counter()  # statuses answered, to show coverage


def check_answer(reply: httpx.Response, body) -> None:
    SEEN[reply.status_code] += 1
    assert reply.status_code < 500, (str(body)[:500], reply.status_code, reply.text[:500])
    if reply.status_code != 200:
        assert 400 <= reply.status_code < 500
        error = reply.json()["error"]
        assert isinstance(error["message"], str) and isinstance(error["type"], str)
        assert set(error) == {"message", "type", "param", "code"}
        return
    if reply.headers["content-type"].startswith("text/event-stream"):
        events = [line.removeprefix("data: ") for line in reply.text.splitlines()
                  if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        chunks = [json.loads(event) for event in events[:-1]]
        assert all("error" not in chunk for chunk in chunks), chunks
        assert "receipt" in chunks[-1]
    else:
        answer = reply.json()
        assert answer["choices"] and "receipt" in answer


@pytest.mark.parametrize("route", sorted(bodies))
def test_fuzzed_bodies_never_500(node, route):
    @FUZZ
    @given(body=bodies[route])
    @example(body={"model": MODEL_NAME, "padding": "one " * (MAX_BODY // 4)})  # just too large
    def run(body):
        check_answer(node.post(f"/{route}", json=body), body)

    run()
    assert node.get("/models").status_code == 200  # still up
    assert {200, 400, 413} <= set(SEEN), SEEN  # answers, refusals, and bodies too large


deep_raw = st.builds(lambda n, obj: (b'{"a":' * n + b"1" + b"}" * n) if obj
                     else b"[" * n + b"]" * n, st.integers(1, 100_000), st.booleans())
unbalanced = st.builds(lambda n, tail: b"[" * n + tail, st.integers(1, 100_000),
                       st.sampled_from([b"", b"]", b"}", b'"]']))
duplicates = st.builds(lambda key: json.dumps({"model": MODEL_NAME, "prompt": "a"})[:-1].encode()
                       + f', "{key}": 1, "{key}": 2}}'.encode(), st.sampled_from(["seed", "n", "x"]))


@FUZZ
@given(body=json_values.map(lambda value: json.dumps(value).encode())
       | st.binary(max_size=40) | deep_raw | unbalanced | duplicates)
def test_bodies_that_are_not_requests(node, body):
    for route in bodies:
        reply = node.post(f"/{route}", content=body, headers={"content-type": "application/json"})
        check_answer(reply, body[:200])


def test_tiny_temperature_is_sampled_safely(node):
    """Found by the fuzz: logits / 2e-212 overflowed to inf, softmax gave NaN and the whole
    batch failed with a 500. Such temperatures now decode greedily (as vLLM's do)."""
    for temperature in (2.378414617760143e-212, 1e-6, 2e-5):
        reply = node.post("/chat/completions", json={
            "model": MODEL_NAME, "messages": [{"role": "user", "content": "one two"}],
            "temperature": temperature, "max_tokens": 4})
        assert reply.status_code == 200, reply.text
