"""Graceful shutdown of a real `gym node serve`: on SIGTERM it refuses new connections, answers
the requests in flight in full (streamed and not, each with its receipt), appends them to the
receipt log and exits 0."""

from __future__ import annotations

import json
import re
import signal
import threading
import time

import httpx
from node_helpers import (
    MODEL_NAME,
    NODE_KEY,
    free_port,
    node_env,
    node_process,
    signing_node_command,
    wait_for_health,
)

from inference_node.receipts import parse_receipt
from ledger.entries import encode_entry, entry_cid
from ledger.logstore import LogStore

LONG = 800  # tokens: long enough to be in flight when the signal comes


def stream_chat(url: str, out: dict, started: threading.Event) -> None:
    request = {"model": MODEL_NAME, "max_tokens": LONG, "temperature": 0, "stream": True,
               "messages": [{"role": "user", "content": "count seven box"}]}
    chunks = []
    with httpx.stream("POST", f"{url}/chat/completions", json=request, timeout=300) as reply:
        for line in reply.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line.removeprefix("data: ")))
                started.set()
            elif line == "data: [DONE]":
                out["done"] = True
    out["chunks"] = chunks


def plain_chat(url: str, out: dict) -> None:
    request = {"model": MODEL_NAME, "max_tokens": LONG, "temperature": 0,
               "messages": [{"role": "user", "content": "the farmer buys twelve apple"}]}
    out["reply"] = httpx.post(f"{url}/chat/completions", json=request, timeout=300)


def admitted(port: int) -> int:
    """Requests the node holds (waiting for the engine or decoding), from its /metrics."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    return int(sum(float(value) for value in re.findall(
        r"^gym_node_(?:queue_depth|requests_running) (\S+)$", text, re.MULTILINE)))


def test_sigterm_finishes_in_flight_requests_and_logs_their_receipts(tiny_model_dir, tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    with node_process(signing_node_command(tiny_model_dir, port),
                      node_env(tmp_path / "data")) as proc:
        wait_for_health(proc, port, timeout_s=90)
        streams = [({}, threading.Event()) for _ in range(2)]
        plain: dict = {}
        threads = [threading.Thread(target=stream_chat, args=(url, out, started))
                   for out, started in streams]
        threads.append(threading.Thread(target=plain_chat, args=(url, plain)))
        for thread in threads:
            thread.start()
        for _, started in streams:
            assert started.wait(60)
        deadline = time.monotonic() + 60  # the plain request too is in flight, not still connecting
        while admitted(port) < 3:
            assert time.monotonic() < deadline, "the three requests were never in flight together"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        refused = None
        try:
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)
        except httpx.TransportError as exc:
            refused = exc
        assert refused is not None, "a new connection was accepted after SIGTERM"
        for thread in threads:
            thread.join(timeout=300)
        output = proc.communicate(timeout=120)[0].decode()
    assert proc.returncode == 0, output
    assert NODE_KEY[2:] not in output

    receipts = []
    for out, _ in streams:
        assert out.get("done"), "the stream did not end with [DONE]"
        last = out["chunks"][-1]
        assert last["choices"][0]["finish_reason"] == "length"
        assert parse_receipt(last["receipt"]).tokens.completion == LONG
        receipts.append(parse_receipt(last["receipt"]))
    assert plain["reply"].status_code == 200
    body = plain["reply"].json()
    assert body["usage"]["completion_tokens"] == LONG
    receipts.append(parse_receipt(body["receipt"]))

    store = LogStore(f"sqlite:///{tmp_path / 'data' / 'ledger.sqlite'}")
    name = f"node/{receipts[0].node}/receipts"
    logged = {leaf.cid for leaf in store.leaves(name)}
    assert logged == {entry_cid(encode_entry(r)) for r in receipts}
    assert f"receipt log {name!r}: 3 receipts" in output
