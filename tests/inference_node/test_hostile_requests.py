"""Hostile and malformed requests against real servers: a real `gym node serve` subprocess gets
a 200 KB nested body and a 20 MB one and keeps serving; strict request fields; seeds; the
context; metrics labels; clients that leave; streamed requests and `--max-queue`."""

from __future__ import annotations

import asyncio
import os
import random
import sys
import threading
import time
from pathlib import Path

import gym_forkserver
import httpx
import openai
import pytest
from node_helpers import (
    MODEL_NAME,
    free_port,
    make_engine,
    node_process,
    run_server,
    stop_node,
    wait_for_health,
)

from inference_node.engine import EngineError, SamplingParams
from inference_node.injection import Prompt
from inference_node.library import StaticLibrarySource

GYM = Path(sys.executable).parent / "gym"
USER = [{"role": "user", "content": "one two"}]
ERROR_FIELDS = {"message", "type", "param", "code"}


def error_of(reply: httpx.Response, status: int) -> dict:
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert set(error) == ERROR_FIELDS and isinstance(error["message"], str)
    return error


def metric(text: str, line_start: str) -> float:
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith(line_start)]
    return sum(values)


def test_gym_node_serve_survives_deep_and_huge_bodies(tiny_model_dir, tmp_path):
    """Item 5 and 7: one ~200 KB body of nested arrays killed a node (SIGSEGV in the JSON
    decoder); a 20 MB prompt stalled it for seconds. Now: 400 and 413 in OpenAI's shape, and
    the node answers the next request."""
    port = free_port()
    root = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYM_")}
    env.update(GYM_DATA_DIR=str(tmp_path / "data"), OMP_NUM_THREADS="1", COLUMNS="200")
    with node_process([str(GYM), "node", "serve", "--model", str(tiny_model_dir), "--device",
                       "cpu", "--served-model-name", MODEL_NAME, "--port", str(port)],
                      env) as proc, httpx.Client(base_url=f"{root}/v1", timeout=60) as client:
        wait_for_health(proc, port, timeout_s=90)
        json_headers = {"content-type": "application/json"}
        bodies = [b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 40_000 + b"1" + b"}" * 40_000,
                  b'{"model": "' + MODEL_NAME.encode() + b'", "messages": ' + b"[" * 100_000]
        for route in ("/chat/completions", "/completions"):
            for body in bodies:
                error = error_of(client.post(route, content=body, headers=json_headers), 400)
                assert error["type"] == "invalid_request_error"
                assert error["code"] == "invalid_json"
        assert proc.poll() is None

        health: list[float] = []
        done = threading.Event()

        def poll_health() -> None:
            while not done.is_set():
                started = time.perf_counter()
                assert httpx.get(f"{root}/health", timeout=60).status_code == 200
                health.append(time.perf_counter() - started)

        poller = threading.Thread(target=poll_health)
        poller.start()
        huge = (b'{"model": "' + MODEL_NAME.encode() + b'", "messages": [{"role": "user", '
                b'"content": "' + b"one " * 5_000_000 + b'"}]}')
        error = error_of(client.post("/chat/completions", content=huge, headers=json_headers),
                         413)
        assert error["code"] == "request_too_large"
        done.set()
        poller.join()
        print(f"/health during a 20 MB body: {len(health)} answers, slowest "
              f"{max(health) * 1000:.1f} ms")

        reply = client.post("/chat/completions",
                            json={"model": MODEL_NAME, "messages": USER, "max_tokens": 2})
        assert reply.status_code == 200, reply.text
        output = stop_node(proc)
    assert proc.returncode == 0, output


def test_gym_verify_receipt_refuses_a_deep_bundle(tmp_path):
    bundle = tmp_path / "bundle.json"
    bundle.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    result = gym_forkserver.run(GYM, ["verify", "receipt", str(bundle), "--offline"],
                                {**os.environ, "COLUMNS": "200"})
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert "nests deeper than" in result.stderr


# --------------------------------------------------------------------------- strict fields


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.base_url, timeout=120) as client:
        yield client


@pytest.mark.parametrize(("field", "value"), [
    ("stream", "yes"), ("max_tokens", "4"), ("max_tokens", 4.5), ("max_tokens", True),
    ("temperature", "0.5"), ("seed", 2**64), ("seed", -(2**63) - 1), ("seed", "7"),
    ("n", "1"), ("top_p", None), ("stop", 5)])
def test_fields_are_strict(http, field, value):
    """Item 6 and 11: OpenAI refuses a string for a number or a boolean, a fraction for an
    integer, and vLLM a seed beyond 64 bits (it failed every request batched with it)."""
    body = {"model": MODEL_NAME, "messages": USER, "max_tokens": 2, field: value}
    assert error_of(http.post("/chat/completions", json=body), 400)["param"] == field


def test_content_parts_empty_prompt_and_the_context(http):
    """Item 11: each a 400 naming the right parameter (these were 500s, a silent cap, and the
    wrong `param`); the connection stays usable."""
    part = {"model": MODEL_NAME, "messages": [
        {"role": "user", "content": [{"type": "text", "text": 5}]}]}
    refused = http.post("/chat/completions", json=part)
    assert error_of(refused, 400)["param"] == "messages.0.content"
    image = {"model": MODEL_NAME, "messages": [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}
    assert error_of(http.post("/chat/completions", json=image), 400)["param"] == \
        "messages.0.content"
    for prompt in ("", [""]):
        body = {"model": MODEL_NAME, "prompt": prompt}
        assert error_of(http.post("/completions", json=body), 400)["param"] == "prompt"

    for field in ("max_tokens", "max_completion_tokens"):
        body = {"model": MODEL_NAME, "messages": USER, field: 100_000}
        error = error_of(http.post("/chat/completions", json=body), 400)
        assert error["param"] == field and error["code"] == "context_length_exceeded"
    body = {"model": MODEL_NAME, "prompt": "one", "max_tokens": 100_000}
    assert error_of(http.post("/completions", json=body), 400)["param"] == "max_tokens"
    long = {"model": MODEL_NAME, "prompt": "one " * 5000}
    error = error_of(http.post("/completions", json=long), 400)
    assert error["param"] == "prompt" and error["code"] == "context_length_exceeded"
    long = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "one " * 5000}]}
    assert error_of(http.post("/chat/completions", json=long), 400)["param"] == "messages"

    reply = http.post("/chat/completions", json={"model": MODEL_NAME, "messages": USER,
                                                 "max_tokens": 2, "seed": 2**53})
    assert error_of(reply, 400)["param"] == "seed"  # the sampler's and the receipts' range
    reply = http.post("/chat/completions", json={"model": MODEL_NAME, "messages": USER,
                                                 "max_tokens": 2, "seed": 2**53 - 1})
    assert reply.status_code == 200, reply.text
    address = "client_addr"  # the same keep-alive connection throughout: none was reset
    assert reply.extensions["network_stream"].get_extra_info(address) == \
        refused.extensions["network_stream"].get_extra_info(address)


def test_a_prompt_that_cannot_fit_is_refused_before_it_is_tokenized(http):
    """The Purpose's 3.9 MB prompt and 2.2 MB tools list: more bytes than the context could
    hold at the tokenizer's longest token, so refused from their size alone (the message is
    the byte bound's; the tokenized check words it in tokens), while a small request sent at
    the same moment is answered."""
    import concurrent.futures

    big = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "x" * 3_900_000}]}
    def tool(n: int) -> dict:  # 64 distinct tools of 32 KB schemas: 2 MB, 17 s to validate
        properties = {f"p{n}_{i}": {"type": "string", "description": "a field of the tool"}
                      for i in range(500)}
        return {"type": "function", "function": {"name": f"f{n}", "description": "d" * 100,
                "parameters": {"type": "object", "properties": properties}}}

    tools = {"model": MODEL_NAME, "messages": USER, "tools": [tool(n) for n in range(64)],
             "tool_choice": "required"}
    small = {"model": MODEL_NAME, "messages": USER, "max_tokens": 2}
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        answers = [pool.submit(http.post, "/chat/completions", json=body)
                   for body in (big, tools, small)]
        big_answer, tools_answer, small_answer = (a.result() for a in answers)
    for answer, param in ((big_answer, "messages"), (tools_answer, "messages")):
        error = error_of(answer, 400)
        assert error["code"] == "context_length_exceeded" and error["param"] == param
        assert "bytes of text) cannot fit" in error["message"], error
    assert small_answer.status_code == 200, small_answer.text
    completion = {"model": MODEL_NAME, "prompt": "y" * 3_900_000}
    error = error_of(http.post("/completions", json=completion), 400)
    assert error["param"] == "prompt" and "cannot fit" in error["message"]


def test_a_request_that_fails_in_the_engine_fails_alone(tiny_model_dir):
    """Item 6, in the engine: a request whose generator refuses its seed, or whose tokens break
    the forward pass of the batch it was scheduled with, fails alone; the others of its batch
    are answered (the protocol refuses such seeds, and the tokenizer such ids, before here)."""
    engine = make_engine(tiny_model_dir, max_batch=8)
    prompt = Prompt(None, tuple(engine.tokenizer("one two three")["input_ids"]))
    broken = Prompt(None, (*prompt.token_ids, 10**6))  # no such token: the embedding fails

    async def scenario(bad_prompt, bad_seed):
        # The worker takes a batch under the engine's queue lock: holding it (a reentrant lock,
        # so this thread can still queue) until all four wait makes them one batch, whatever
        # the machine's load.
        with engine._wakeup:
            tasks = [asyncio.create_task(engine.generate(prompt, SamplingParams(
                max_tokens=3, seed=i))) for i in range(3)]
            tasks.append(asyncio.create_task(engine.generate(bad_prompt, SamplingParams(
                max_tokens=3, seed=bad_seed))))
            while engine.queue_depth() < len(tasks):
                await asyncio.sleep(0.001)
        return await asyncio.gather(*tasks, return_exceptions=True)

    engine.start()
    try:
        for bad_prompt, bad_seed, reason in ((prompt, 2**64, "seed"), (broken, 0, "index")):
            batches = engine.batch_sizes.copy()
            *answers, failure = asyncio.run(scenario(bad_prompt, bad_seed))
            assert engine.batch_sizes[len(answers) + 1] > batches[len(answers) + 1] or \
                engine.batch_sizes[len(answers)] > batches[len(answers)]  # scheduled together
            assert [a.completion_tokens for a in answers] == [3, 3, 3]
            assert isinstance(failure, EngineError) and reason in str(failure)
    finally:
        engine.shutdown()


# --------------------------------------------------------------------------- metrics


def test_metrics_label_routes_by_template(server, http):
    """Item 10: a GET of a random receipt id added a line to /metrics; now they share one."""
    rng = random.Random(0)
    before = httpx.get(f"{server.root_url}/metrics").text
    for _ in range(1000):
        http.get(f"/receipts/bafkrei{rng.getrandbits(160):040x}/proof")
        http.get(f"/nowhere/{rng.getrandbits(64):x}")
    after = httpx.get(f"{server.root_url}/metrics").text
    assert 'route="/v1/receipts/{cid}/proof",status="404"} 1000.0' in after
    assert 'route="(unmatched)",status="404"} 1000.0' in after
    assert len(after) - len(before) < 1000, after
    print(f"/metrics: {len(before)} bytes, {len(after)} after 2,000 random GETs")


# --------------------------------------------------------------------------- disconnects


@pytest.mark.parametrize("stream", [False, True])
def test_abandoned_requests_are_cancelled(tiny_model_dir, stream):
    """Item 8: eight requests for 3,000 tokens whose clients leave once they are running or
    queued stop decoding: none finishes (no generated token is counted), the engine is idle
    again, each is counted as 499, and the next request is answered."""
    engine = make_engine(tiny_model_dir, max_batch=8)
    with run_server(engine, StaticLibrarySource()) as server:
        serving = server.app.state.serving

        async def scenario() -> str:
            async with httpx.AsyncClient(base_url=server.base_url, timeout=300) as client, \
                    httpx.AsyncClient(base_url=server.root_url) as probe:
                # ignore_eos: the tiny model ends on its own (one of 16 replies to this
                # prompt stopped at 65 tokens): a reply that ends before its client leaves
                # is answered (200), not abandoned; this one runs to 3,000 tokens
                body = {"model": MODEL_NAME, "messages": USER, "max_tokens": 3000,
                        "ignore_eos": True, "stream": stream}

                async def ask() -> None:
                    async with client.stream("POST", "/chat/completions", json=body) as reply:
                        async for _ in reply.aiter_bytes():
                            pass

                tasks = [asyncio.create_task(ask()) for _ in range(8)]
                deadline = time.monotonic() + 120
                while engine.running() == 0 or engine.running() + serving.queue_depth() < 8:
                    assert time.monotonic() < deadline and not any(t.done() for t in tasks)
                    await asyncio.sleep(0.01)
                for task in tasks:  # the clients give up: their connections close
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                while engine.running() or serving.queue_depth():
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.05)
                started = time.perf_counter()
                reply = await client.post("/chat/completions", json={
                    "model": MODEL_NAME, "messages": USER, "max_tokens": 4, "ignore_eos": True})
                print(f"4-token request after 8 abandoned ones (stream={stream}): "
                      f"{(time.perf_counter() - started) * 1000:.0f} ms")
                assert reply.status_code == 200
                while 'status="499"} 8.0' not in (metrics := (await probe.get("/metrics")).text):
                    assert time.monotonic() < deadline, [  # how the eight were counted
                        line for line in metrics.splitlines() if "chat/completions" in line]
                    await asyncio.sleep(0.05)
                return metrics

        metrics = asyncio.run(scenario())
    assert metric(metrics, "gym_node_generation_tokens_total") == 4  # only the last request
    assert 'route="/v1/chat/completions",status="499"} 8.0' in metrics


# --------------------------------------------------------------------------- streams and queue


def test_streams_count_against_max_queue(tiny_model_dir):
    """Item 9: 32 streams at once against `max_queue=4` and `max_batch=1`: streamed requests
    are admitted like the others, so the queue never exceeds 4 and the rest get 429 (before,
    every stream was admitted and 24 queued)."""
    from inference_node.settings import NodeSettings

    engine = make_engine(tiny_model_dir, max_batch=1)
    with run_server(engine, StaticLibrarySource(), NodeSettings(max_queue=4)) as server:
        serving = server.app.state.serving

        async def scenario():
            async with openai.AsyncOpenAI(base_url=server.base_url, api_key="x",
                                          max_retries=0, timeout=300) as client:
                deepest = 0
                stop = asyncio.Event()

                async def watch_queue():
                    # every millisecond: a depth past 4 would last as long as a stream (well
                    # over that); polling without a pause held the GIL the node's engine
                    # thread needs, and made this test minutes long
                    nonlocal deepest
                    while not stop.is_set():
                        deepest = max(deepest, serving.queue_depth())
                        await asyncio.sleep(0.001)

                async def one():
                    try:
                        stream = await client.chat.completions.create(
                            model=MODEL_NAME, messages=USER, max_tokens=1000, stream=True)
                        return len([chunk async for chunk in stream])
                    except openai.RateLimitError as exc:
                        assert exc.body["code"] == "queue_full"
                        return 429

                watcher = asyncio.create_task(watch_queue())
                results = await asyncio.gather(*(one() for _ in range(32)))
                stop.set()
                await watcher
                return results, deepest

        results, deepest = asyncio.run(scenario())
    refused = results.count(429)
    print(f"32 streams, max_queue 4: {refused} refused with 429, deepest queue {deepest}")
    assert refused > 0 and deepest <= 4
    assert all(r == 429 or r > 1 for r in results)
