"""429 on a full queue, 500 on engine failure, degraded health: with stub engines, not a model.

The stubs are only for behaviour a real model cannot be made to show on cue (a queue that stays
full, an engine that fails); everything else is tested against the tiny real model.
"""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import openai
import pytest
from node_helpers import LIBRARY, MODEL_NAME, run_server

from inference_node.engine import Engine, EngineError, GenerationDelta
from inference_node.library import StaticLibrarySource
from inference_node.settings import NodeSettings

USER = [{"role": "user", "content": "one two"}]


class GatedSlowStubEngine(Engine):
    """Runs one request at a time and holds it until `gate` is set; the rest wait in a queue."""

    model_name = MODEL_NAME
    max_model_len = 4096

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.waiting = 0
        self.gate: asyncio.Event | None = None
        self.lock: asyncio.Lock | None = None

    def queue_depth(self) -> int:
        return self.waiting

    async def stream(self, prompt, params):
        if self.lock is None:
            self.lock, self.gate = asyncio.Lock(), asyncio.Event()
        self.waiting += 1
        async with self.lock:
            self.waiting -= 1
            await self.gate.wait()
            yield GenerationDelta("ok", [1], None, "stop", len(prompt), 1)


class FailingStubEngine(Engine):
    """An engine whose every request fails, after one token when streaming."""

    model_name = MODEL_NAME
    max_model_len = 4096

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def queue_depth(self) -> int:
        return 0

    async def stream(self, prompt, params):
        yield GenerationDelta("partial", [1], None, None, len(prompt), 1)
        raise EngineError("device on fire")


class BuggyStubEngine(FailingStubEngine):
    """An engine with a bug: it raises something that is not an `EngineError`."""

    async def stream(self, prompt, params):
        raise KeyError("a bug")
        yield  # an async generator


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def test_full_queue_answers_429(tokenizer):
    engine = GatedSlowStubEngine(tokenizer)
    with run_server(engine, StaticLibrarySource(), NodeSettings(max_queue=2)) as server:
        async def scenario():
            async with openai.AsyncOpenAI(base_url=server.base_url, api_key="x",
                                          max_retries=0) as client:
                def ask():
                    return client.chat.completions.create(model=MODEL_NAME, messages=USER)

                admitted = [asyncio.create_task(ask()) for _ in range(3)]  # 1 running, 2 waiting
                deadline = time.monotonic() + 10
                while engine.queue_depth() < 2:
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.01)
                with pytest.raises(openai.RateLimitError) as exc:
                    await ask()
                assert exc.value.status_code == 429
                assert exc.value.body["code"] == "queue_full"
                async with httpx.AsyncClient() as http:
                    metrics = (await http.get(f"{server.root_url}/metrics")).text
                assert "gym_node_queue_depth 2.0" in metrics
                engine.gate.set()
                replies = await asyncio.gather(*admitted)
                return [r.choices[0].message.content for r in replies]

        assert asyncio.run(scenario()) == ["ok"] * 3


def test_engine_failure_is_500_or_stream_error(tokenizer):
    with run_server(FailingStubEngine(tokenizer), StaticLibrarySource()) as server, \
            openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0) as client:
        with pytest.raises(openai.InternalServerError) as exc:
            client.chat.completions.create(model=MODEL_NAME, messages=USER)
        assert exc.value.status_code == 500
        assert exc.value.body["type"] == "server_error"
        assert "device on fire" in exc.value.body["message"]

        body = {"model": MODEL_NAME, "messages": USER, "stream": True}
        response = httpx.post(f"{server.base_url}/chat/completions", json=body)
        events = [line[len("data: "):] for line in response.text.splitlines() if line]
        assert events[-1] == "[DONE]"
        assert json.loads(events[-2])["error"]["message"] == "engine failure: device on fire" \
            or "device on fire" in json.loads(events[-2])["error"]["message"]


def test_health_degraded_when_library_fails_verification(tokenizer, tmp_path):
    path = tmp_path / "library.json"
    path.write_text(json.dumps(LIBRARY))
    source = StaticLibrarySource.from_file(path)
    good = source.current()
    with run_server(FailingStubEngine(tokenizer), source) as server:
        assert httpx.get(f"{server.root_url}/health").json()["status"] == "ok"
        path.write_text('{"experiences": "not a list"}')
        source.reload()
        health = httpx.get(f"{server.root_url}/health").json()
        assert health["status"] == "degraded"
        assert "library file" in health["library"]["error"]
        assert health["library"]["version"] == good.version  # still serving the last good one
        assert source.current() is good


def test_unhandled_error_is_500_counted_and_keeps_the_connection(tokenizer):
    """A bug answers OpenAI's 500 on the same keep-alive connection (Starlette's own handler
    re-raised, and uvicorn dropped the connection), and /metrics counts it."""
    with run_server(BuggyStubEngine(tokenizer), StaticLibrarySource()) as server, \
            httpx.Client(base_url=server.base_url) as client:
        body = {"model": MODEL_NAME, "messages": USER}
        ports = []
        for _ in range(2):
            reply = client.post("/chat/completions", json=body)
            assert reply.status_code == 500
            assert reply.json()["error"] == {"message": "internal error: KeyError",
                                             "type": "server_error", "param": None,
                                             "code": None}
            ports.append(reply.extensions["network_stream"].get_extra_info("client_addr"))
        assert ports[0] == ports[1]  # one connection for both
        metrics = httpx.get(f"{server.root_url}/metrics").text
    assert 'gym_node_requests_total{route="/v1/chat/completions",status="500"} 2.0' in metrics
