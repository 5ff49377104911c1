"""``LogStore`` on PostgreSQL against SQLite, same run, same machine (issue "past one machine").

A throwaway PostgreSQL cluster is started for the run (tests/support/postgres_cluster.py:
Debian's postgresql, fsync off as in the tests) beside a SQLite file in a temporary directory.
On each database, in alternating order, ``--repeats`` times:

- append: ``--entries`` (100k) entries in batches of ``--batch`` (1,000), each batch one
  transaction, as `gym ledger append` and the node's receipt log write;
- proofs: ``--proofs`` (2,000) inclusion proofs and as many consistency proofs at random
  indices and sizes of that log, from a fresh engine.

Prints entries per second and proofs per second on each, and the ratios PostgreSQL / SQLite
(the baseline). No target: PostgreSQL is there for several writers on several machines, and
this says what it costs. ``.venv/bin/python benchmarks/bench_logstore_postgres.py``
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "support"))  # the tests' throwaway cluster

import sqlalchemy
from postgres_cluster import postgres_cluster

from ledger.logstore import LogStore


def entries(n: int) -> list[bytes]:
    return [b'{"type":"experience","v":1,"text":"learned rule number %d, stated in a sentence"}'
            % i for i in range(n)]


def run_once(url: str, data: list[bytes], batch: int, proofs: int, seed: int
             ) -> tuple[float, float]:
    """(entries per second appended, proofs per second) on a fresh database at ``url``."""
    store = LogStore(url)
    store.create_log("bench")
    start = time.perf_counter()
    for i in range(0, len(data), batch):
        store.append("bench", data[i:i + batch])
    appended = len(data) / (time.perf_counter() - start)
    store.engine.dispose()
    fresh = LogStore(url)
    rng = random.Random(seed)
    n = len(data)
    start = time.perf_counter()
    for _ in range(proofs):
        fresh.inclusion_proof("bench", rng.randrange(n))
        fresh.consistency_proof("bench", rng.randrange(1, n), n)
    proved = 2 * proofs / (time.perf_counter() - start)
    fresh.engine.dispose()
    return appended, proved


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--proofs", type=int, default=2_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    data = entries(args.entries)
    results: dict[str, list[tuple[float, float]]] = {"sqlite": [], "postgres": []}
    with tempfile.TemporaryDirectory() as tmp, postgres_cluster() as server:
        admin = sqlalchemy.create_engine(server, isolation_level="AUTOCOMMIT")
        for repeat in range(args.repeats):
            order = ("sqlite", "postgres") if repeat % 2 == 0 else ("postgres", "sqlite")
            for backend in order:
                if backend == "sqlite":
                    url = f"sqlite:///{Path(tmp) / f'r{repeat}.sqlite'}"
                else:
                    name = f"bench_{uuid.uuid4().hex[:10]}"
                    with admin.connect() as conn:
                        conn.execute(sqlalchemy.text(f"CREATE DATABASE {name}"))
                    url = server.rsplit("/", 1)[0] + "/" + name
                results[backend].append(run_once(url, data, args.batch, args.proofs, repeat))
        admin.dispose()
    median = {b: (statistics.median(r[0] for r in rs), statistics.median(r[1] for r in rs))
              for b, rs in results.items()}
    for backend, (appended, proved) in median.items():
        print(f"{backend:<8} append {appended:,.0f} entries/s   proofs {proved:,.0f} /s")
    ratio_append = median["postgres"][0] / median["sqlite"][0]
    ratio_proofs = median["postgres"][1] / median["sqlite"][1]
    print(f"postgres / sqlite: append {ratio_append:.2f}, proofs {ratio_proofs:.2f} "
          f"(medians of {args.repeats}; {args.entries:,} entries in batches of {args.batch:,})")
    print(json.dumps({"sqlite": median["sqlite"], "postgres": median["postgres"],
                      "append_ratio": round(ratio_append, 3),
                      "proof_ratio": round(ratio_proofs, 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
