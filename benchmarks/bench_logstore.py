"""Persisted log throughput and cold proof latency: ``ledger.LogStore`` vs pymerkle 7.

Baseline: ``pymerkle.SqliteTree`` (GPL; used here only as a measuring stick, never imported
by the project's code), run in the same process on the same entries and the same disk.

- append: 100k entries, in batches of 10k, persisted to SQLite. Target: ratio >= 2.
- cold proofs: a fresh store (new engine, no cached state) on a 1,000,000-leaf log; mean
  latency of inclusion and consistency proofs at random indices/sizes. Target: < 1 ms each.

Usage: ``.venv/bin/python benchmarks/bench_logstore.py [--leaves 1000000]``; exits 1 when a
target is missed.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

from pymerkle import SqliteTree

from ledger import rfc9162
from ledger.logstore import LogStore


def entries(n: int, offset: int = 0) -> list[bytes]:
    return [b'{"type":"experience","v":1,"text":"learned rule number %d, stated in a sentence"}'
            % i for i in range(offset, offset + n)]


def bench_append(workdir: Path, n: int, batch: int) -> tuple[float, float]:
    data = entries(n)
    tree = SqliteTree(str(workdir / "pymerkle.db"))
    start = time.perf_counter()
    for i in range(0, n, batch):
        tree.append_entries(data[i:i + batch])
    baseline = time.perf_counter() - start
    tree.close()

    store = LogStore(f"sqlite:///{workdir / 'gym.sqlite'}")
    store.create_log("bench")
    start = time.perf_counter()
    for i in range(0, n, batch):
        store.append("bench", data[i:i + batch])
    ours = time.perf_counter() - start
    store.engine.dispose()
    return ours, baseline


def bench_cold_proofs(workdir: Path, n: int, samples: int) -> tuple[float, float, float]:
    url = f"sqlite:///{workdir / 'big.sqlite'}"
    store = LogStore(url)
    store.create_log("big")
    for i in range(0, n, 100_000):
        store.append("big", entries(min(100_000, n - i), i))
    store.engine.dispose()

    rng = random.Random(7)
    cold = LogStore(url)  # a fresh engine: nothing cached in the process
    root = cold.root("big")
    incl = cons = 0.0
    for _ in range(samples):
        index = rng.randrange(n)
        start = time.perf_counter()
        proof = cold.inclusion_proof("big", index)
        incl += time.perf_counter() - start
        rfc9162.verify_inclusion(rfc9162.leaf_hash(entries(1, index)[0]), index, n, proof, root)
        old = rng.randrange(1, n)
        start = time.perf_counter()
        cold.consistency_proof("big", old)
        cons += time.perf_counter() - start

    # pymerkle cold proof on a smaller tree (building 1M in it takes minutes): it rehashes
    # leaves per proof, so its cost grows with n; reported for scale, not for the ratio.
    tree = SqliteTree(str(workdir / "pymerkle-proofs.db"))
    tree.append_entries(entries(100_000))
    start = time.perf_counter()
    tree.prove_inclusion(rng.randrange(100_000) + 1, 100_000)
    baseline = time.perf_counter() - start
    tree.close()
    return incl / samples, cons / samples, baseline


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--append", type=int, default=100_000)
    parser.add_argument("--leaves", type=int, default=1_000_000)
    parser.add_argument("--samples", type=int, default=200)
    args = parser.parse_args()
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        ours, baseline = bench_append(workdir, args.append, 10_000)
        ratio = baseline / ours
        failed |= ratio < 2
        print(f"append-{args.append // 1000}k-sqlite: ours {args.append / ours:,.0f} entries/s, "
              f"pymerkle.SqliteTree {args.append / baseline:,.0f} entries/s, "
              f"ratio {ratio:.2f} (target >= 2)")
        incl, cons, pm = bench_cold_proofs(workdir, args.leaves, args.samples)
        failed |= incl >= 1e-3 or cons >= 1e-3
        print(f"cold-proof-{args.leaves // 1000}k: inclusion {incl * 1e3:.3f} ms, consistency "
              f"{cons * 1e3:.3f} ms (target < 1 ms each); pymerkle cold inclusion at 100k "
              f"{pm * 1e3:.1f} ms, ratio {pm / incl:.0f}x")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
