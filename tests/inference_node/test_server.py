"""The node's OpenAI-compatible API, driven over loopback with the official `openai` SDK."""

from __future__ import annotations

import asyncio
import json
import re

import httpx
import openai
import pytest
from node_helpers import MODEL_NAME

from inference_node.serving import fingerprint

USER = [{"role": "user", "content": "the farmer buys twelve apple , how many box ?"}]


@pytest.fixture
def client(server):
    with openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0) as c:
        yield c


def chat(client, messages=USER, **kwargs):
    kwargs.setdefault("max_tokens", 12)
    kwargs.setdefault("temperature", 0)
    return client.chat.completions.create(model=MODEL_NAME, messages=messages, **kwargs)


def stream_text(stream) -> tuple[str, list]:
    chunks = list(stream)
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices), chunks


def test_models_list(client):
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL_NAME]
    assert models.data[0].object == "model"


def test_chat_non_streaming(client, server):
    reply = chat(client)
    choice = reply.choices[0]
    assert reply.object == "chat.completion" and reply.model == MODEL_NAME
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason == "length"
    assert reply.usage.completion_tokens == 12
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + 12
    assert reply.system_fingerprint == fingerprint(server.source.current())


def test_chat_streaming_matches_non_streaming(client):
    reference = chat(client).choices[0].message.content
    text, chunks = stream_text(chat(client, stream=True,
                                    stream_options={"include_usage": True}))
    assert text == reference
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-2].choices[0].finish_reason == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 12
    assert all(c.object == "chat.completion.chunk" for c in chunks)


def test_completion_non_streaming_and_streaming(client):
    kwargs = {"model": MODEL_NAME, "prompt": "seven apple and three banana is",
              "max_tokens": 10, "temperature": 0}
    reply = client.completions.create(**kwargs)
    assert reply.object == "text_completion" and reply.choices[0].text
    assert reply.usage.completion_tokens == 10
    chunks = list(client.completions.create(stream=True, **kwargs))
    assert "".join(c.choices[0].text for c in chunks) == reply.choices[0].text
    assert chunks[-1].choices[0].finish_reason == "length"


def test_seed_makes_sampling_reproducible(client):
    texts = {chat(client, temperature=1.0, seed=1234, max_tokens=16).choices[0].message.content
             for _ in range(2)}
    assert len(texts) == 1
    others = {chat(client, temperature=1.0, seed=s, max_tokens=16).choices[0].message.content
              for s in range(4)}
    assert len(others) > 1  # different seeds do sample differently


def test_max_tokens(client):
    for n in (1, 5):
        assert chat(client, max_tokens=n).usage.completion_tokens == n
    reply = chat(client, max_completion_tokens=3, max_tokens=None)
    assert reply.usage.completion_tokens == 3


def test_stop_sequence_ends_reply_before_it(client):
    full = chat(client, max_tokens=16).choices[0].message.content
    words = full.split()
    stop = words[3]
    expected = full[:full.index(stop)]
    reply = chat(client, max_tokens=16, stop=[stop, "never-generated-zzz"])
    assert reply.choices[0].message.content == expected
    assert reply.choices[0].finish_reason == "stop"
    text, chunks = stream_text(chat(client, max_tokens=16, stop=stop, stream=True))
    assert text == expected and stop not in text
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_logprobs(client):
    reply = chat(client, logprobs=True, top_logprobs=3, max_tokens=4)
    content = reply.choices[0].logprobs.content
    assert len(content) == 4
    for item in content:
        assert item.logprob <= 0 and len(item.top_logprobs) == 3
        assert item.top_logprobs[0].logprob >= item.logprob - 1e-6  # greedy took the best
    reply = client.completions.create(model=MODEL_NAME, prompt="one two", max_tokens=3,
                                      temperature=0, logprobs=2)
    lp = reply.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == 3 and len(lp.top_logprobs[0]) == 2
    assert chat(client, max_tokens=2).choices[0].logprobs is None


def test_error_shapes(client, server):
    with pytest.raises(openai.NotFoundError) as exc:
        client.chat.completions.create(model="no-such-model", messages=USER)
    assert exc.value.status_code == 404
    assert exc.value.body["code"] == "model_not_found" and exc.value.body["param"] == "model"

    with pytest.raises(openai.BadRequestError) as exc:
        chat(client, n=17)
    assert exc.value.body["param"] == "n"

    with pytest.raises(openai.BadRequestError) as exc:
        chat(client, temperature=5)
    assert exc.value.body["type"] == "invalid_request_error"
    assert exc.value.body["param"] == "temperature"

    raw = httpx.post(f"{server.base_url}/chat/completions", content=b"{not json",
                     headers={"content-type": "application/json"})
    assert raw.status_code == 400
    error = raw.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["code"] == "invalid_json"

    raw = httpx.post(f"{server.base_url}/chat/completions", json={"model": MODEL_NAME})
    assert raw.status_code == 400 and raw.json()["error"]["param"] == "messages"

    raw = httpx.get(f"{server.base_url}/nowhere")
    assert raw.status_code == 404 and "error" in raw.json()


def test_concurrent_streams_do_not_interleave(server, client):
    """Eight concurrent streams (decoded in shared batches) each get their own reference text."""
    words = ["apple", "banana", "cherry", "river", "seven", "north", "blue", "gym"]
    prompts = [[{"role": "user", "content": f"{w} {w} question number {i}"}]
               for i, w in enumerate(words)]
    references = [chat(client, messages=p, max_tokens=10).choices[0].message.content
                  for p in prompts]
    assert len(set(references)) > 4  # the prompts really differ

    async def one(aclient, messages):
        stream = await aclient.chat.completions.create(
            model=MODEL_NAME, messages=messages, max_tokens=10, temperature=0, stream=True)
        return "".join([c.choices[0].delta.content or "" async for c in stream])

    async def all_at_once():
        async with openai.AsyncOpenAI(base_url=server.base_url, api_key="x",
                                      max_retries=0) as aclient:
            return await asyncio.gather(*(one(aclient, p) for p in prompts))

    before = max(server.engine.batch_sizes)
    assert asyncio.run(all_at_once()) == references
    assert before == 1 and max(server.engine.batch_sizes) > 1  # they really shared batches


def test_health_and_metrics(client, server):
    chat(client, max_tokens=2)
    health = httpx.get(f"{server.root_url}/health").json()
    snapshot = server.source.current()
    assert health["status"] == "ok"
    assert health["library"] == {
        "version": snapshot.version, "log_id": "0x01", "size": 3, "root": "ab" * 32,
        "experiences": 3, "last_sync": pytest.approx(health["library"]["last_sync"]),
        "error": None}
    assert health["library"]["last_sync"] > 0
    text = httpx.get(f"{server.root_url}/metrics").text
    for name in ("gym_node_requests_total", "gym_node_prompt_tokens_total",
                 "gym_node_generation_tokens_total", "gym_node_request_latency_seconds_bucket",
                 "gym_node_time_to_first_token_seconds_bucket", "gym_node_queue_depth",
                 "gym_node_library_size 3.0"):
        assert name in text, name
    assert 'gym_node_requests_total{route="/v1/chat/completions",status="200"}' in text
    counts = {m.group(1): float(m.group(2)) for m in re.finditer(
        r'^gym_node_stage_seconds_count\{stage="([a-z_]+)"\} (\S+)$', text, re.MULTILINE)}
    sums = {m.group(1): float(m.group(2)) for m in re.finditer(
        r'^gym_node_stage_seconds_sum\{stage="([a-z_]+)"\} (\S+)$', text, re.MULTILINE)}
    # the node's own stages, itemized: what precedes the engine observed once per request
    # answered, its parts within its whole
    parts = ("library", "tokenize", "normalize")
    assert counts["prepare"] >= 1 and all(counts[p] == counts["prepare"] for p in parts)
    assert sum(sums[p] for p in parts) <= sums["prepare"]
    assert "commitment" in counts and "digests" in counts


def test_library_headers(server):
    body = {"model": MODEL_NAME, "messages": USER, "max_tokens": 1}
    response = httpx.post(f"{server.base_url}/chat/completions", json=body)
    assert response.headers["x-gym-library-size"] == "3"
    assert response.headers["x-gym-library-root"] == "ab" * 32
    assert json.loads(response.text)["system_fingerprint"].startswith("library-")
