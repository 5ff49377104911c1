"""32 concurrent streaming clients against a real node: latency, TTFT, throughput, no interleaving.

Starts the real server (`gym node serve`, uvicorn, in a subprocess on a free loopback port; its
log index and content store in a temporary `GYM_DATA_DIR`) and drives it with the official
`openai` SDK (`AsyncOpenAI`). Each client has its own prompt and seed and decodes greedily.

1. references: every request once, non-streamed, one at a time;
2. baseline: the same requests streamed, one at a time (sequential);
3. concurrent: the same requests streamed by `--clients` clients at once (the engine batches
   up to `--max-batch` of them).

Checks: no request fails, and every streamed text equals that client's own non-streamed
reference (a token from another request in a stream would show up here). Prints p50/p99
end-to-end latency and time to first token, total completion tokens/s, and the concurrent
throughput as a ratio of the sequential baseline measured in the same run. Exits 1 on any error
or mismatch; the ratio has no target (it depends on cores and batch size).

Model: by default the random Llama of `bench_prefix_reuse.py` (hidden 256, 4 layers, byte-level
tokenizer; noise, but noise that depends on the prompt), built in a temporary directory; or
`--model DIR` for a local checkpoint such as `trainer.backends.default_model_dir()` (SmolLM2).

    .venv/bin/python benchmarks/bench_node_concurrency.py [--model DIR] [--clients 32]
                                                           [--tokens 32] [--max-batch 8]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
from openai import AsyncOpenAI, OpenAIError

from devnet.anvil import free_port
from devnet.settings import ANVIL_DEV_KEYS

MODEL_NAME = "bench-model"
NODE_KEY_ENV = "GYM_BENCH_NODE_KEY"
NODE_KEY = ANVIL_DEV_KEYS[1]  # a public devnet key
QUESTIONS = ["A farmer has 12 apples and buys 3 boxes of 7. How many apples?",
             "What is 17 times 3?", "Check: is 91 a prime number?",
             "A train covers 120 km in 1.5 hours. What is its speed?"]


def wait_until_answering(process: subprocess.Popen, root: str, log_file: Path,
                         timeout_s: float = 300) -> None:
    """Return once the node at `root` answers /health; RuntimeError with the tail of its log
    if its `process` exits first or `timeout_s` pass."""
    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the node did not start:\n"
                               + log_file.read_text(errors="replace")[-3000:])
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{root}/health", timeout=2).status_code == 200:
                return
        time.sleep(0.2)


@contextlib.contextmanager
def node_server(model_dir: Path, workdir: Path, *, max_batch: int = 8, device: str = "cpu",
                sign: bool = False, threads: int | None = None,
                cpus: set[int] | None = None) -> Iterator[str]:
    """`gym node serve` over `model_dir` until the block ends; yields its base URL (…/v1).
    With `sign`, it signs unbound receipts (`--offline`) into a local receipt log; `cpus` pins
    the node process to those CPUs."""
    port = free_port()
    env = {**os.environ, "GYM_DATA_DIR": str(workdir), NODE_KEY_ENV: NODE_KEY}
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    command = [str(Path(sys.executable).parent / "gym"), "node", "serve", "--model",
               str(model_dir), "--port", str(port), "--max-batch", str(max_batch),
               "--max-queue", "1024", "--served-model-name", MODEL_NAME, "--device", device]
    if sign:
        command += ["--key-env", NODE_KEY_ENV, "--offline"]
    workdir.mkdir(parents=True, exist_ok=True)
    log = open(workdir / "server.log", "wb")  # noqa: SIM115 (closed below, after the process)
    pin = None if cpus is None else (lambda: os.sched_setaffinity(0, cpus))
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT,
                               preexec_fn=pin)  # noqa: PLW1509 (affinity only, no locks)
    root = f"http://127.0.0.1:{port}"
    try:
        wait_until_answering(process, root, workdir / "server.log")
        yield f"{root}/v1"
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def messages_of(i: int) -> list[dict]:
    return [{"role": "user", "content": f"{QUESTIONS[i % len(QUESTIONS)]} (client {i})"}]


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (with 32 samples p99 is the slowest request)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


@dataclass
class Streamed:
    text: str
    latency: float  # request sent -> stream ended
    ttft: float  # request sent -> first chunk with content


async def reference(client: AsyncOpenAI, i: int, tokens: int) -> tuple[str, int]:
    reply = await client.chat.completions.create(model=MODEL_NAME, messages=messages_of(i),
                                                 temperature=0, seed=i, max_tokens=tokens)
    return reply.choices[0].message.content, reply.usage.completion_tokens


async def streamed(client: AsyncOpenAI, i: int, tokens: int) -> Streamed:
    started = time.perf_counter()
    ttft, parts = None, []
    stream = await client.chat.completions.create(model=MODEL_NAME, messages=messages_of(i),
                                                  temperature=0, seed=i, max_tokens=tokens,
                                                  stream=True)
    async for chunk in stream:
        content = chunk.choices[0].delta.content if chunk.choices else None
        if content:
            if ttft is None:
                ttft = time.perf_counter() - started
            parts.append(content)
    latency = time.perf_counter() - started
    return Streamed("".join(parts), latency, latency if ttft is None else ttft)


def report(name: str, runs: list[Streamed], wall: float, tokens: int) -> float:
    latencies, ttfts = [r.latency for r in runs], [r.ttft for r in runs]
    rate = tokens / wall
    print(f"{name}: {len(runs)} requests in {wall:.2f} s; latency p50 "
          f"{percentile(latencies, 50) * 1e3:.0f} ms p99 {percentile(latencies, 99) * 1e3:.0f} ms; "
          f"TTFT p50 {percentile(ttfts, 50) * 1e3:.0f} ms p99 {percentile(ttfts, 99) * 1e3:.0f} ms;"
          f" {rate:.1f} tokens/s")
    return rate


def mismatches(runs: list[Streamed | BaseException], refs: list[str]) -> tuple[int, int]:
    errors = [r for r in runs if isinstance(r, BaseException)]
    for error in errors[:3]:
        print(f"  error: {type(error).__name__}: {error}")
    wrong = [i for i, r in enumerate(runs) if not isinstance(r, BaseException)
             and r.text != refs[i]]
    for i in wrong[:3]:
        print(f"  client {i}: streamed {runs[i].text!r} != reference {refs[i]!r}")
    return len(errors), len(wrong)


async def bench(base_url: str, clients: int, tokens: int) -> int:
    client = AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=600)
    await reference(client, 0, tokens)  # warm-up
    refs, total = [], 0
    for i in range(clients):
        text, count = await reference(client, i, tokens)
        refs.append(text)
        total += count
    print(f"references: {clients} non-streamed requests, {total} completion tokens, "
          f"{len(set(refs))} distinct texts")

    started, sequential = time.perf_counter(), []
    for i in range(clients):
        try:
            sequential.append(await streamed(client, i, tokens))
        except OpenAIError as exc:  # counted and reported below
            sequential.append(exc)
    sequential_wall = time.perf_counter() - started

    started = time.perf_counter()
    concurrent = await asyncio.gather(*(streamed(client, i, tokens) for i in range(clients)),
                                      return_exceptions=True)
    concurrent_wall = time.perf_counter() - started
    await client.close()

    failed = 0
    for name, runs, wall in (("sequential (baseline)", sequential, sequential_wall),
                             (f"concurrent ({clients} clients)", concurrent, concurrent_wall)):
        errors, wrong = mismatches(runs, refs)
        failed += errors + wrong
        ok = [r for r in runs if not isinstance(r, BaseException)]
        if ok:
            rate = report(name, ok, wall, total)
            if name.startswith("sequential"):
                baseline_rate = rate
            else:
                print(f"throughput ratio concurrent / sequential: {rate / baseline_rate:.2f}x")
        print(f"  {name}: {errors} errors, {wrong} streamed texts differ from their reference")
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="local HF model dir (default: random Llama)")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=32, help="greedy tokens per request")
    parser.add_argument("--max-batch", type=int, default=8, help="the node's --max-batch")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        if args.model:
            model_dir = args.model
        else:
            from bench_prefix_reuse import random_model

            model_dir = random_model(Path(tmp))
        print(f"model: {args.model or 'random Llama h256 x4 (byte-level BPE)'}; node "
              f"--max-batch {args.max_batch} --device {args.device}; {args.clients} clients, "
              f"greedy {args.tokens} tokens each; {os.cpu_count()} CPUs")
        with node_server(model_dir, Path(tmp) / "node", max_batch=args.max_batch,
                         device=args.device) as base_url:
            return asyncio.run(bench(base_url, args.clients, args.tokens))


if __name__ == "__main__":
    sys.exit(main())
