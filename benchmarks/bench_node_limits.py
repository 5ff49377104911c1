"""What hostile or careless clients do to a node: one real `gym node serve` on loopback, the tiny
random model, and the figures the hardening issue quoted.

1. `/health` latency (polled every 10 ms) while the node receives a 20 MB body with a
   `Content-Length`, the same body chunked (no length), and a 3.8 MB body, which is under the
   limit and is tokenized; the node's resident memory after them.
2. The queue with 32 streams at once against `--max-queue 4 --max-batch 1` (the deepest
   `queue_depth` seen on /health, and how many were refused with 429).
3. `/metrics` size before and after 5,000 GETs of random receipt ids.
4. Latency of a 4-token request right after 8 non-streamed `max_tokens: 400` requests whose
   clients left once they were sent (baseline: the same request on the idle node).
5. A small 2-token request sent while the node receives a 3.9 MB prompt and a 2.2 MB `tools`
   list (issue "judges that cannot be stalled": refused from their byte size before any
   tokenizing or schema validation): its median latency over 7 rounds against the same
   request on the idle node (the baseline), and the node's memory before and after; exits 1
   when the small request is delayed by more than 100 ms or the node keeps more than 50 MiB
   (``inference_node.launch.return_large_buffers``).

Run it against any checkout (`PYTHONPATH=<checkout>`) to compare code before and after a change:

    .venv/bin/python benchmarks/bench_node_limits.py [--model DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from bench_node_concurrency import MODEL_NAME, free_port, wait_until_answering

USER = [{"role": "user", "content": "one two"}]


def start_node(model_dir: Path, workdir: Path, *extra: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "GYM_DATA_DIR": str(workdir), "OMP_NUM_THREADS": "1"}
    workdir.mkdir(parents=True, exist_ok=True)
    log = open(workdir / "server.log", "wb")  # noqa: SIM115 (lives as long as the process)
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "gym"), "node", "serve", "--model", str(model_dir),
         "--port", str(port), "--served-model-name", MODEL_NAME, "--device", "cpu",
         "--engine", "transformers", *extra], env=env, stdout=log, stderr=subprocess.STDOUT)
    root = f"http://127.0.0.1:{port}"
    wait_until_answering(process, root, workdir / "server.log")
    return process, root


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def health_while(root: str, send) -> tuple[str, list[float]]:
    """`send()` on this thread while another polls /health; its outcome and the latencies."""
    latencies: list[float] = []
    done = threading.Event()

    def poll() -> None:
        with httpx.Client(timeout=120) as client:
            while not done.is_set():
                started = time.perf_counter()
                client.get(f"{root}/health")
                latencies.append(time.perf_counter() - started)
                time.sleep(0.01)

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        outcome = send()
    finally:
        done.set()
        poller.join()
    return outcome, latencies


def big_bodies(root: str, pid: int) -> None:
    huge = json.dumps({"model": MODEL_NAME, "messages": [
        {"role": "user", "content": "one " * 5_000_000}]}).encode()
    mid = json.dumps({"model": MODEL_NAME, "messages": [
        {"role": "user", "content": "one " * 950_000}]}).encode()
    headers = {"content-type": "application/json"}

    def chunks(data: bytes):
        for i in range(0, len(data), 1 << 16):
            yield data[i:i + (1 << 16)]

    cases = {"20 MB, Content-Length": lambda: httpx.post(
                 f"{root}/v1/chat/completions", content=huge, headers=headers, timeout=300),
             "20 MB, chunked": lambda: httpx.post(
                 f"{root}/v1/chat/completions", content=chunks(huge), headers=headers,
                 timeout=300),
             "3.8 MB (under the limit)": lambda: httpx.post(
                 f"{root}/v1/chat/completions", content=mid, headers=headers, timeout=300)}
    for name, send in cases.items():
        try:
            started = time.perf_counter()
            reply, latencies = health_while(root, send)
            outcome = f"{reply.status_code} in {time.perf_counter() - started:.2f} s"
        except httpx.HTTPError as exc:
            outcome, latencies = f"{type(exc).__name__}", [float("nan")]
        print(f"{name:<26} answer {outcome:<14} /health: {len(latencies)} polls, median "
              f"{statistics.median(latencies) * 1e3:6.1f} ms, slowest "
              f"{max(latencies) * 1e3:7.1f} ms")
    print(f"node memory after them: {rss_mib(pid):.0f} MiB resident")


async def streams_against_queue(root: str) -> None:
    deepest = 0
    stop = asyncio.Event()

    async with httpx.AsyncClient(base_url=root, timeout=300) as client:
        async def watch() -> None:
            nonlocal deepest
            while not stop.is_set():
                deepest = max(deepest, (await client.get("/health")).json()["queue_depth"])
                await asyncio.sleep(0.005)

        async def one() -> int:
            body = {"model": MODEL_NAME, "messages": USER, "max_tokens": 400, "stream": True}
            async with client.stream("POST", "/v1/chat/completions", json=body) as reply:
                async for _ in reply.aiter_bytes():
                    pass
                return reply.status_code

        watcher = asyncio.create_task(watch())
        statuses = await asyncio.gather(*(one() for _ in range(32)))
        stop.set()
        await watcher
    print(f"32 streams, --max-queue 4 --max-batch 1: deepest queue {deepest}, "
          f"{statuses.count(429)} answered 429, {statuses.count(200)} streamed")


def metrics_growth(root: str) -> None:
    rng = random.Random(0)
    with httpx.Client(base_url=root) as client:
        before = len(client.get("/metrics").content)
        for _ in range(5000):
            client.get(f"/v1/receipts/bafkrei{rng.getrandbits(200):050x}/proof")
        after = len(client.get("/metrics").content)
    print(f"/metrics: {before / 1024:.1f} KiB, after 5,000 GETs of random receipt ids "
          f"{after / 1024:.1f} KiB")


async def after_abandoned(root: str) -> None:
    async with httpx.AsyncClient(base_url=f"{root}/v1", timeout=600) as client:
        async def four_tokens() -> float:
            started = time.perf_counter()
            reply = await client.post("/chat/completions", json={
                "model": MODEL_NAME, "messages": USER, "max_tokens": 4})
            reply.raise_for_status()
            return time.perf_counter() - started

        idle = min([await four_tokens() for _ in range(3)])
        body = {"model": MODEL_NAME, "messages": USER, "max_tokens": 400}
        tasks = [asyncio.create_task(client.post("/chat/completions", json=body))
                 for _ in range(8)]
        await asyncio.sleep(0.3)  # sent and admitted
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        after = await four_tokens()
    print(f"4-token request: {idle * 1e3:.0f} ms on the idle node, {after * 1e3:.0f} ms right "
          f"after 8 abandoned max_tokens=400 requests")


def beside_big_prompts(root: str, pid: int) -> bool:
    """Scenario 5; True when the small request is delayed by at most 100 ms and the node's
    memory comes back (within 50 MiB)."""
    import concurrent.futures

    def tool(n: int) -> dict:
        properties = {f"p{n}_{i}": {"type": "string", "description": "a field of the tool"}
                      for i in range(500)}
        return {"type": "function", "function": {"name": f"f{n}", "description": "d" * 100,
                "parameters": {"type": "object", "properties": properties}}}

    big = json.dumps({"model": MODEL_NAME, "messages": [{"role": "user",
                                                         "content": "x" * 3_900_000}]})
    tools = json.dumps({"model": MODEL_NAME, "messages": USER, "tools": [tool(n) for n in
                                                                         range(64)]})
    small = {"model": MODEL_NAME, "messages": USER, "max_tokens": 2}
    headers = {"content-type": "application/json"}
    with httpx.Client(base_url=f"{root}/v1", timeout=120) as client, \
            concurrent.futures.ThreadPoolExecutor(2) as pool:
        def timed() -> float:
            started = time.perf_counter()
            client.post("/chat/completions", json=small).raise_for_status()
            return time.perf_counter() - started

        def send_big(body: str) -> int:
            with httpx.Client(base_url=f"{root}/v1", timeout=120) as other:
                return other.post("/chat/completions", content=body, headers=headers).status_code

        timed()  # warm
        idle = statistics.median(timed() for _ in range(7))
        before = rss_mib(pid)
        beside, statuses = [], set()
        for _ in range(7):
            sent = [pool.submit(send_big, body) for body in (big, tools)]
            time.sleep(0.02)  # the big bodies are arriving
            beside.append(timed())
            statuses.update(f.result() for f in sent)
    now = statistics.median(beside)
    delay_ms = (now - idle) * 1e3
    kept = rss_mib(pid) - before
    print(f"2-token request: {idle * 1e3:.0f} ms on the idle node (baseline), {now * 1e3:.0f} ms "
          f"beside a 3.9 MB prompt and a 2.2 MB tools list (answered {sorted(statuses)}): "
          f"{delay_ms:+.0f} ms ({now / idle:.2f}x); node memory {before:.0f} MiB before, "
          f"{kept:+.0f} MiB after")
    return delay_ms <= 100 and kept <= 50


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="HF model dir (default: the tiny test model)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.model
        if model_dir is None:
            sys.path.insert(0, str(Path(__file__).parent.parent / "tests" / "inference_node"))
            from node_helpers import build_tiny_model

            model_dir = build_tiny_model(Path(tmp) / "model")
        process, root = start_node(model_dir, Path(tmp) / "node")
        try:
            big_bodies(root, process.pid)
            within = beside_big_prompts(root, process.pid)
            metrics_growth(root)
            asyncio.run(after_abandoned(root))
        finally:
            process.terminate()
            process.wait(60)
        process, root = start_node(model_dir, Path(tmp) / "queue", "--max-queue", "4",
                                   "--max-batch", "1")
        try:
            asyncio.run(streams_against_queue(root))
        finally:
            process.terminate()
            process.wait(60)
    if not within:
        print("FAIL: the small request was delayed by more than 100 ms, or the node kept "
              "more than 50 MiB")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
