"""Persisted log throughput and cold proof latency: ``ledger.LogStore`` vs pymerkle 7.

Baseline: ``pymerkle.SqliteTree`` (GPL; used here only as a measuring stick, never imported
by the project's code), run in the same process on the same entries and the same disk.

- append: 100k entries, in batches of 10k, persisted to SQLite, each store in a fresh file.
  Both run ``--repeats`` times, alternating which goes first; the ratio is of the medians, and
  the per-repeat ratios are printed as the spread (the machine may be shared). Each store runs
  with its own SQLite settings: ``LogStore`` WAL + synchronous=NORMAL + wal_autocheckpoint=4000
  (every commit atomic, the WAL fsynced at checkpoints, one every ~16 MiB), pymerkle its defaults (rollback journal, synchronous=FULL: an
  fsync per commit). Target: ratio >= 2.
- cold proofs: a fresh store (new engine, no cached state) on a 1,000,000-leaf log; mean
  latency of inclusion and consistency proofs at random indices/sizes. Target: < 1 ms each.

Usage: ``.venv/bin/python benchmarks/bench_logstore.py [--leaves 1000000] [--repeats 5]``;
exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import random
import statistics
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


def append_pymerkle(path: Path, data: list[bytes], batch: int) -> float:
    tree = SqliteTree(str(path))
    start = time.perf_counter()
    for i in range(0, len(data), batch):
        tree.append_entries(data[i:i + batch])
    elapsed = time.perf_counter() - start
    tree.close()
    return elapsed


def append_ours(path: Path, data: list[bytes], batch: int) -> float:
    store = LogStore(f"sqlite:///{path}")
    store.create_log("bench")
    start = time.perf_counter()
    for i in range(0, len(data), batch):
        store.append("bench", data[i:i + batch])
    elapsed = time.perf_counter() - start
    store.engine.dispose()
    return elapsed


def bench_append(workdir: Path, n: int, batch: int, repeats: int) -> tuple[list[float], list[float]]:
    """Seconds per run of each store, ``repeats`` runs each, alternating which goes first."""
    data = entries(n)
    ours, baseline = [], []
    for run in range(repeats):
        order = [(baseline, append_pymerkle), (ours, append_ours)]
        for times, append in order if run % 2 == 0 else reversed(order):
            times.append(append(workdir / f"{append.__name__}-{run}.db", data, batch))
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
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        ours, baseline = bench_append(workdir, args.append, 10_000, args.repeats)
        ratio = statistics.median(baseline) / statistics.median(ours)
        failed |= ratio < 2
        spread = ", ".join(f"{b / o:.2f}" for o, b in zip(ours, baseline))
        print(f"append-{args.append // 1000}k-sqlite: ours {args.append / statistics.median(ours):,.0f} "
              f"entries/s, pymerkle.SqliteTree {args.append / statistics.median(baseline):,.0f} "
              f"entries/s (medians of {args.repeats}), ratio {ratio:.2f} (target >= 2); "
              f"per run {spread}")
        print("  sqlite settings: LogStore WAL + synchronous=NORMAL + wal_autocheckpoint=4000 (its "
              "defaults); pymerkle "
              "rollback journal + synchronous=FULL (sqlite3 defaults)")
        incl, cons, pm = bench_cold_proofs(workdir, args.leaves, args.samples)
        failed |= incl >= 1e-3 or cons >= 1e-3
        print(f"cold-proof-{args.leaves // 1000}k: inclusion {incl * 1e3:.3f} ms, consistency "
              f"{cons * 1e3:.3f} ms (target < 1 ms each); pymerkle cold inclusion at 100k "
              f"{pm * 1e3:.1f} ms, ratio {pm / incl:.0f}x")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
