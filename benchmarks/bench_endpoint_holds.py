"""A shared content endpoint under the attacks of issue 44: one real `gym ipfs serve` on
loopback, driven as the adversary drove it.

1. Finding 8, memory: a 2 GiB `block/put?allow-big-block=true` (refused at the hard block cap,
   ``--max-block-bytes``) and a 2 GiB `add` (hashed and written as it arrives), each streamed;
   the server's peak resident memory (VmHWM) against its idle memory (the baseline); `version`
   latency polled during the `add` against `version` on the idle server (the baseline).
2. Finding 7: `pin/ls` of a pinned 1.1 MB repeating-link DAG (8,000 links to one child per
   level, three levels, four `block/put`s) after 45 calls that were abandoned at 0.3 s; then
   `version` latency against idle, and the server's CPU over the next 2 s.
3. Finding 8, descriptors: 1,500 uploads that send their headers and a few bytes, then stall;
   the server's open descriptors at 1 s and after the stall timeout (``--stall-timeout``,
   10 s here to keep the run short; 30 s by default) against its idle count.

Exits 1 when the peak memory passes idle + 100 MiB, `pin/ls` takes over 10 s, or stalled
descriptors are still open after the stall timeout + 5 s.

    .venv/bin/python benchmarks/bench_endpoint_holds.py [--gib 2] [--stalled 1500]
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from ledger.multiformats import CID
from ledger.unixfs import PBLink, PBNode, encode_pbnode

REPO = Path(__file__).resolve().parents[1]
BOUNDARY = "bench-boundary"
STALL_S = 10
RSS_SLACK = 100 << 20


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def proc_status(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def multipart(pieces):
    yield (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n"
           "Content-Type: application/octet-stream\r\n\r\n").encode()
    yield from pieces
    yield f"\r\n--{BOUNDARY}--\r\n".encode()


def pieces(total: int):
    piece = random.Random(8).randbytes(1 << 20)
    for _ in range(total >> 20):
        yield piece


def post(url: str, command: str, body, timeout: float = 600, **params) -> httpx.Response:
    return httpx.post(f"{url}/api/v0/{command}", params=params, content=body, timeout=timeout,
                      headers={"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"})


def version_ms(url: str, client: httpx.Client | None = None) -> float:
    """One `version` call's latency (on ``client``'s kept-alive connection when given)."""
    started = time.perf_counter()
    (client or httpx).post(f"{url}/api/v0/version", timeout=30).raise_for_status()
    return (time.perf_counter() - started) * 1000


def idle_version_ms(url: str, n: int = 50) -> float:
    with httpx.Client() as client:
        return statistics.median(version_ms(url, client) for _ in range(n))


class Poller(threading.Thread):
    """`version` latency every 50 ms until stopped."""

    def __init__(self, url: str):
        super().__init__(daemon=True)
        self.url, self.samples, self.done = url, [], threading.Event()

    def run(self) -> None:
        with httpx.Client() as client:
            while not self.done.is_set():
                self.samples.append(version_ms(self.url, client))
                time.sleep(0.05)


def start_server(store: Path, port: int) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYM_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "content_endpoint.cli", "serve", "--port", str(port),
         "--data-dir", str(store), "--stall-timeout", str(STALL_S)],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            version_ms(f"http://127.0.0.1:{port}")
            return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("gym ipfs serve did not start")


def memory(url: str, pid: int, gib: int) -> bool:
    total = gib << 30
    idle_rss, idle_ms = proc_status(pid, "VmRSS"), idle_version_ms(url)
    started = time.monotonic()
    try:
        refused = post(url, "block/put", multipart(pieces(total)), **{"allow-big-block": "true"})
        outcome = f"HTTP {refused.status_code}"
    except httpx.TransportError as exc:
        outcome = f"closed by the server ({type(exc).__name__})"
    print(f"block/put {gib} GiB allow-big-block: {outcome} after {time.monotonic() - started:.1f} s;"
          f" peak RSS {proc_status(pid, 'VmHWM') >> 20} MiB (idle {idle_rss >> 20} MiB, "
          f"ratio {proc_status(pid, 'VmHWM') / idle_rss:.2f})")
    poller = Poller(url)
    poller.start()
    started = time.monotonic()
    added = post(url, "add", multipart(pieces(total)), **{"cid-version": "1", "pin": "false"})
    took = time.monotonic() - started
    poller.done.set()
    poller.join()
    peak = proc_status(pid, "VmHWM")
    during = statistics.median(poller.samples)
    print(f"add {gib} GiB: HTTP {added.status_code} in {took:.1f} s ({total / took / 2**20:.0f} "
          f"MiB/s); peak RSS {peak >> 20} MiB = idle {idle_rss >> 20} MiB + "
          f"{(peak - idle_rss) >> 20} MiB (ratio {peak / idle_rss:.2f}; bound idle + 100 MiB)")
    print(f"version during the add: median {during:.1f} ms, max {max(poller.samples):.1f} ms "
          f"over {len(poller.samples)} calls (idle {idle_ms:.1f} ms, ratio {during / idle_ms:.1f})")
    return added.status_code == 200 and peak - idle_rss < RSS_SLACK


def repeating_dag(url: str) -> str:
    child = post(url, "block/put", multipart([b"leaf"])).json()["Key"]
    for _ in range(3):
        block = encode_pbnode(PBNode(links=(PBLink(CID.parse(child), "", 0),) * 8000))
        child = post(url, "block/put", multipart([block]), **{"cid-codec": "dag-pb"}).json()["Key"]
    return child


def abandon(url: str) -> None:
    try:
        httpx.post(f"{url}/api/v0/pin/ls", timeout=0.3)
    except httpx.TimeoutException:
        pass


def pin_ls(url: str, pid: int) -> bool:
    idle_ms = idle_version_ms(url)
    root = repeating_dag(url)
    httpx.post(f"{url}/api/v0/pin/add", params={"arg": root}, timeout=60).raise_for_status()
    with ThreadPoolExecutor(45) as pool:
        list(pool.map(lambda _: abandon(url), range(45)))
    started = time.perf_counter()
    keys = httpx.post(f"{url}/api/v0/pin/ls", timeout=60).json()["Keys"]
    took = time.perf_counter() - started
    with httpx.Client() as client:
        after_ms = statistics.median(version_ms(url, client) for _ in range(20))
    before = cpu_seconds(pid)
    time.sleep(2)
    cpu = cpu_seconds(pid) - before
    print(f"pin/ls of the repeating DAG after 45 abandoned calls: {took * 1000:.0f} ms, "
          f"{len(keys)} pins; version {after_ms:.1f} ms (idle {idle_ms:.1f} ms, ratio "
          f"{after_ms / idle_ms:.1f}); server CPU over the next 2 s: {cpu:.2f} s")
    return took < 10


def stalled(port: int, pid: int, count: int) -> bool:
    idle = open_fds(pid)
    head = next(multipart([]))
    socks = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(b"POST /api/v0/block/put HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/"
                     b"form-data; boundary=" + BOUNDARY.encode() + b"\r\nContent-Length: "
                     + str(1 << 30).encode() + b"\r\n\r\n" + head + b"a few bytes")
        socks.append(sock)
    time.sleep(1)
    at_1s = open_fds(pid)
    time.sleep(STALL_S + 4)
    after = open_fds(pid)
    for sock in socks:
        sock.close()
    print(f"{count} stalled uploads: server descriptors idle {idle}, at 1 s {at_1s}, at "
          f"{STALL_S + 5} s {after} (stall timeout {STALL_S} s; more than --max-connections "
          "are answered 503 and closed at once)")
    return after <= idle + 5


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=int, default=2, help="size of each big upload")
    parser.add_argument("--stalled", type=int, default=1500, help="stalled uploads to open")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-endpoint-holds-") as scratch:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        proc = start_server(Path(scratch) / "store", port)
        try:
            ok = [memory(url, proc.pid, args.gib), pin_ls(url, proc.pid),
                  stalled(port, proc.pid, args.stalled)]
        finally:
            proc.terminate()
            proc.wait(30)
    print("all within bounds" if all(ok) else "OUT OF BOUNDS")
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
