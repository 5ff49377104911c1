"""Training throughput of `gym train sft --num-processes 2` against one process, same run.

Both arms train the same LoRA SFT config (SmolLM2-135M-Instruct by default, alpaca rows,
`--steps` optimizer steps) through the real `gym` command, alternating arms. The two-process arm
keeps the per-process batch, so each of its steps trains twice the rows: the comparison is
training tokens per second (TRL's token count over its `train_runtime`, from run.json), and the
end-to-end wall time of the command per trained token. On the CPU each process gets
`cpu_count / N` threads, so on a 2-core machine the arms use the same cores, one with two
threads in one process, the other with one thread in each of two.

    .venv/bin/python benchmarks/bench_train_processes.py [--model DIR|tiny-random] [--runs 2]

Prints each run and the ratio of the medians (2 processes / 1 process, the baseline).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GYM = REPO / ".venv" / "bin" / "gym"


def config_text(model: str, steps: int) -> str:
    return (f"method: sft\nmodel: {json.dumps(model)}\n"
            f"dataset: {{path: {REPO / 'trainer/data/sft_arith_alpaca.jsonl'}, format: alpaca}}\n"
            "lora: {r: 8, alpha: 16, target_modules: [q_proj, k_proj, v_proj, o_proj]}\n"
            f"training: {{max_steps: {steps}, batch_size: 2, max_length: 192, seed: 0, "
            "logging_steps: 1}\n")


def one_run(config: Path, out: Path, processes: int) -> tuple[float, float]:
    """(training tokens/s, end-to-end tokens/s) of one `gym train sft` run."""
    start = time.perf_counter()
    done = subprocess.run([str(GYM), "train", "sft", str(config), "--output", str(out),
                           "--num-processes", str(processes)], capture_output=True, text=True,
                          check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"gym train sft --num-processes {processes} failed: {done.stderr.strip()}")
    metrics = json.loads((out / "run.json").read_text())["run"]["metrics"]
    tokens = metrics["num_tokens"][-1]
    return metrics["train_tokens_per_s"], tokens / wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="", help="local model dir, or tiny-random "
                                                    "(default: SmolLM2-135M-Instruct)")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--runs", type=int, default=2, help="runs per arm, alternated")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "sft.yaml"
        config.write_text(config_text(args.model, args.steps))
        results: dict[int, list[tuple[float, float]]] = {1: [], 2: []}
        for run in range(args.runs):
            for processes in (1, 2):
                train, end_to_end = one_run(config, Path(tmp) / f"run-{run}-{processes}",
                                            processes)
                results[processes].append((train, end_to_end))
                print(f"run {run} processes {processes}: training {train:.1f} tokens/s, "
                      f"end to end {end_to_end:.1f} tokens/s", flush=True)
    train = {p: statistics.median(r[0] for r in rows) for p, rows in results.items()}
    whole = {p: statistics.median(r[1] for r in rows) for p, rows in results.items()}
    print(f"training tokens/s, 2 processes / 1 process (baseline): {train[2]:.1f} / "
          f"{train[1]:.1f} = {train[2] / train[1]:.3f}")
    print(f"end-to-end tokens/s, 2 processes / 1 process (baseline): {whole[2]:.1f} / "
          f"{whole[1]:.1f} = {whole[2] / whole[1]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
