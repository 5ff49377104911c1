"""CLI start-up: how long `gym` takes to answer, against the bare interpreter it runs on.

Times, as whole processes, ``gym --help``, ``gym ledger --help`` and ``gym devnet status``
with no devnet (it exits 1 after reading the missing deployment), each against
``python -c pass`` on the same interpreter, interleaved in the same run (baseline, then each
command, repeated), and prints the median of each and its difference from the baseline.
Then lists which of the heavy libraries each command imported (``-X importtime``).

Target: ``gym --help`` within 0.5 s of the bare interpreter, and none of web3, py_ecc,
eth-account, SQLAlchemy, torch, transformers, vLLM, TRL or PEFT imported by a help.
Exits 1 when the target is missed.

Usage: ``.venv/bin/python benchmarks/bench_cli_startup.py [--repeat 10]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GYM = str(Path(sys.executable).parent / "gym")
TARGET_S = 0.5
HEAVY = ("web3", "py_ecc", "eth_account", "sqlalchemy", "alembic", "torch", "transformers",
         "vllm", "trl", "peft")
COMMANDS = {
    "gym --help": [GYM, "--help"],
    "gym ledger --help": [GYM, "ledger", "--help"],
    "gym devnet status (no devnet)": [GYM, "devnet", "status"],
}
BASELINE = ("python -c pass", [sys.executable, "-c", "pass"])


def wall(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=False)
    return time.perf_counter() - start


def heavy_imports(argv: list[str], env: dict[str, str]) -> list[str]:
    proc = subprocess.run(argv, env={**env, "PYTHONPROFILEIMPORTTIME": "1"},
                          capture_output=True, text=True, check=False)
    names = {line.rsplit("|", 1)[1].strip().split(".")[0]
             for line in proc.stderr.splitlines() if line.startswith("import time:")}
    return sorted(names & set(HEAVY))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10, help="runs of each (median)")
    args = parser.parse_args()
    data_dir = tempfile.mkdtemp(prefix="bench-cli-")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYM_")}
    env.update(GYM_DATA_DIR=data_dir, GYM_DEPLOYMENT_FILE=str(Path(data_dir) / "none.json"))

    runs: dict[str, list[float]] = {name: [] for name in (BASELINE[0], *COMMANDS)}
    for argv in (BASELINE[1], *COMMANDS.values()):  # warm the page cache and .pyc files
        wall(argv, env)
    for _ in range(args.repeat):
        runs[BASELINE[0]].append(wall(BASELINE[1], env))
        for name, argv in COMMANDS.items():
            runs[name].append(wall(argv, env))

    base = statistics.median(runs[BASELINE[0]])
    print(f"cli start-up, median of {args.repeat} (interleaved), {sys.executable}:")
    print(f"  {BASELINE[0]:<32} {base * 1000:7.0f} ms")
    ok = True
    for name, argv in COMMANDS.items():
        median = statistics.median(runs[name])
        heavy = heavy_imports(argv, env)
        print(f"  {name:<32} {median * 1000:7.0f} ms  (+{(median - base) * 1000:.0f} ms over "
              f"the interpreter; heavy imports: {', '.join(heavy) or 'none'})")
        if "--help" in argv:  # no help loads the chain or ML stack
            ok &= not heavy
    help_delta = statistics.median(runs["gym --help"]) - base
    ok &= help_delta <= TARGET_S
    print(f"gym --help - interpreter = {help_delta:.3f} s; target {TARGET_S} s: "
          f"ratio {help_delta / TARGET_S:.2f} ({'met' if ok else 'MISSED'})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
