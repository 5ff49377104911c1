"""Volunteer training on this machine: `gym train sft --swarm` with 2 peers against 1 process,
and the bytes an averaging round moves against the adapter's size, per compression.

Every arm runs the real `gym` command on the same LoRA SFT config (SmolLM2-135M-Instruct by
default). The baseline is one plain process training `--steps` local steps. The swarm arm
starts 2 peers on loopback (`--min-peers 2`, a target batch of `--target` samples) for
`--rounds` collaborative steps, once per compression (none, float16, 8bit), and once with
DiLoCo-style local steps (`--local-steps H`, uncompressed: parameters averaged, no gradients):

- samples per second: the samples the peers processed together over the longest peer's
  training time (TRL's `train_runtime`, from run.json), against the baseline's samples over its
  training time; and the samples the collaborative steps stood for (rounds x target) over the
  same time, the run's useful throughput;
- bytes per round: what went over the loopback interface while the peers trained
  (/proc/net/dev, both peers, DHT and matchmaking included), over the collaborative steps,
  against the adapter's weights file.

    .venv/bin/python benchmarks/bench_swarm.py [--model DIR|tiny-random] [--rounds 3]
        [--local-steps 4]

Prints each run and the ratios (swarm / 1 process, the baseline; bytes per round / adapter).

The robust round (docs/swarm.md "Hostile peers": an all-gather with signed commitments, an
echo, the boundary and CenteredClip) against hivemind's plain butterfly all-reduce, the
baseline, in the same run: ``--peers`` averagers on loopback, each holding a LoRA adapter's
worth of float32 (``--floats``, SmolLM2's r-8 adapter by default) plus Adam's two moments, as
the state averager does, for ``--averaging-rounds`` rounds each; seconds per round (from the
trigger to the result, matchmaking excluded) and loopback bytes per round.

    .venv/bin/python benchmarks/bench_swarm.py --averaging-only [--peers 3]

The work checks (docs/swarm.md "Work checks") against the local step itself, the baseline,
on the same trainer: a local step (forward and backward of the local batch, clipping), the
claim every step makes (the gradient sketch and the parameters' digest), and one check (the
re-computed step and its sketch), each the median of ``--work-steps`` repetitions.

    .venv/bin/python benchmarks/bench_swarm.py --work-only [--model tiny-random]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GYM = REPO / ".venv" / "bin" / "gym"
# two of Anvil's public dev keys: the peers sign contribution records, no chain is needed
KEYS = ("0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
        "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a")


def config_text(model: str) -> str:
    return (f"method: sft\nmodel: {json.dumps(model)}\n"
            f"dataset: {{path: {REPO / 'trainer/data/sft_arith_alpaca.jsonl'}, format: alpaca}}\n"
            "lora: {r: 8, alpha: 16, target_modules: [q_proj, k_proj, v_proj, o_proj]}\n"
            "training: {batch_size: 2, max_length: 192, seed: 0, logging_steps: 1}\n")


def loopback_bytes() -> int:
    for line in Path("/proc/net/dev").read_text().splitlines():
        name, _, counters = line.partition(":")
        if name.strip() == "lo":
            return int(counters.split()[0])  # received: on loopback, what was sent
    raise SystemExit("no loopback interface in /proc/net/dev")


def metrics(run_dir: Path) -> dict:
    return json.loads((run_dir / "run.json").read_text())["run"]


def baseline(config: Path, out: Path, steps: int) -> float:
    """Samples per second of one plain process."""
    done = subprocess.run([str(GYM), "train", "sft", str(config), "--output", str(out),
                           "--max-steps", str(steps)], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        sys.exit(f"gym train sft failed: {done.stderr.strip()}")
    run = metrics(out)
    return steps * 2 / run["metrics"]["train_runtime_s"]


def swarm(config: Path, out: Path, rounds: int, target: int, compression: str,
          local_steps: int = 0) -> dict:
    """Two peers on loopback: samples/s processed and useful, bytes per round, adapter size."""
    common = ["train", "sft", str(config), "--swarm", f"bench-{compression}-{local_steps}",
              "--max-steps", str(rounds), "--target-batch-size", str(target), "--min-peers",
              "2", "--host-maddrs", "/ip4/127.0.0.1/tcp/0", "--compression", compression,
              "--matchmaking-time", "2", "--local-steps", str(local_steps)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    first = subprocess.Popen([str(GYM), *common, "--output", str(out / "a")],
                             env={**env, "GYM_PUBLISHER_KEY": KEYS[0]},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    maddr = None
    for line in first.stdout:
        if line.startswith("swarm peer: "):
            maddr = line.split()[2]
            break
    if maddr is None:
        sys.exit(f"the first peer printed no address: {first.stderr.read().strip()}")
    before = loopback_bytes()
    second = subprocess.run([str(GYM), *common, "--output", str(out / "b"), "--initial-peers",
                             maddr], env={**env, "GYM_PUBLISHER_KEY": KEYS[1]},
                            capture_output=True, text=True, check=False)
    first.communicate()
    moved = loopback_bytes() - before
    if first.returncode or second.returncode:
        sys.exit(f"a peer failed: {second.stderr.strip()}")
    runs = [metrics(out / name) for name in ("a", "b")]
    seconds = max(r["metrics"]["train_runtime_s"] for r in runs)
    processed = sum(r["hardware"]["swarm"]["local"]["samples"] for r in runs)
    adapter = (out / "a" / "adapter" / "adapter_model.safetensors").stat().st_size
    return {"processed": processed / seconds, "useful": rounds * target / seconds,
            "bytes_per_round": moved / rounds, "adapter_bytes": adapter}


def averaging_rounds(robust: bool, floats: int, peers: int, rounds: int) -> dict:
    """Seconds and loopback bytes per averaging round of ``peers`` averagers on loopback."""
    import hivemind
    import torch
    from hivemind.p2p import P2P
    from hivemind.proto import crypto_pb2

    sys.path.insert(0, str(REPO))
    from trainer.swarm.gather import GymRound, RobustAveraging

    kind = type("BenchRobustAverager", (RobustAveraging, hivemind.DecentralizedAverager), {}) \
        if robust else hivemind.DecentralizedAverager
    with tempfile.TemporaryDirectory() as tmp:
        dhts, averagers = [], []
        try:
            for i in range(peers):
                identity = Path(tmp) / f"id{i}.key"
                P2P.generate_identity(str(identity))
                initial = [str(m) for m in dhts[0].get_visible_maddrs()] if dhts else []
                dhts.append(hivemind.DHT(start=True, identity_path=str(identity),
                                         initial_peers=initial,
                                         host_maddrs=["/ip4/127.0.0.1/tcp/0"]))
                tensors = [torch.randn(floats) * 0.01 for _ in range(3)]  # params, 2 moments
                extra = {"gym": GymRound(
                    run="bench", averager="state", evidence_dir=Path(tmp) / f"ev{i}",
                    identity=crypto_pb2.PrivateKey.FromString(identity.read_bytes()).data)} \
                    if robust else {}
                averagers.append(kind(tensors, dht=dhts[-1], prefix="bench", start=True,
                                      target_group_size=peers, min_matchmaking_time=2.0,
                                      request_timeout=1.0, **extra))
            time.sleep(1.0)
            seconds, moved = [], 0
            for _ in range(rounds):
                controls = [a.step(wait=False, require_trigger=True, timeout=60)
                            for a in averagers]
                while not all(c.stage.name == "AWAITING_TRIGGER" for c in controls):
                    time.sleep(0.01)  # matchmaking done: the group waits for its trigger
                before, start = loopback_bytes(), time.perf_counter()
                for control in controls:
                    control.allow_allreduce()
                for control in controls:
                    control.result()
                seconds.append(time.perf_counter() - start)
                moved += loopback_bytes() - before
        finally:
            for averager in averagers:
                averager.shutdown()
            for dht in dhts:
                dht.shutdown()
    return {"seconds": sorted(seconds)[len(seconds) // 2], "bytes": moved / rounds}


def compare_averaging(floats: int, peers: int, rounds: int) -> None:
    plain = averaging_rounds(False, floats, peers, rounds)
    robust = averaging_rounds(True, floats, peers, rounds)
    size = 3 * floats * 4
    print(f"averaging rounds, {peers} peers on loopback, {size / 1e6:.2f} MB of state each "
          f"(median of {rounds}):")
    for name, arm in (("hivemind all-reduce (baseline)", plain), ("robust all-gather", robust)):
        print(f"  {name}: {arm['seconds']:.3f} s per round, {arm['bytes'] / 1e6:.2f} MB per "
              f"round on loopback ({arm['bytes'] / size:.2f} x one peer's state)")
    print(f"  robust / baseline: time {robust['seconds'] / plain['seconds']:.2f}, bytes "
          f"{robust['bytes'] / plain['bytes']:.2f}", flush=True)


def work_checks(model: str, repetitions: int) -> None:
    """Seconds of a local step, of a claim, and of a check, on one trainer."""
    import statistics

    import torch

    sys.path.insert(0, str(REPO))
    from trainer.gradient.config import load_config
    from trainer.gradient.train import build_trainer, resolve_base_model
    from trainer.swarm.gather import parameters_digest
    from trainer.swarm.work import AssignedRows, recompute, rows_of_step, sketch

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sft.yaml"
        path.write_text(config_text(model))
        config = load_config(path, method="sft", output_dir=str(Path(tmp) / "run"))
        run_dir = Path(tmp) / "run"
        run_dir.mkdir()
        trainer = build_trainer(config, resolve_base_model(config, run_dir), run_dir)
        rows_total = len(trainer.train_dataset)
        trainer._get_train_sampler = lambda *_a, **_k: AssignedRows(rows_total, 0, "bench")
        params = [p for p in trainer.model.parameters() if p.requires_grad]
        batch = config.training.batch_size * config.training.grad_accumulation
        step_s, claim_s, check_s = [], [], []
        for k in range(repetitions):
            rows = rows_of_step(rows_total, 0, "bench", k, batch)
            start = time.perf_counter()
            gradients = recompute(trainer, rows, config.training.batch_size)  # = a local step
            step_s.append(time.perf_counter() - start)
            start = time.perf_counter()
            sketch(gradients, "bench", "bench", k)
            parameters_digest(params)
            claim_s.append(time.perf_counter() - start)
            start = time.perf_counter()
            sketch(recompute(trainer, rows, config.training.batch_size), "bench", "bench", k)
            check_s.append(time.perf_counter() - start)
        step, claim, check = (statistics.median(x) for x in (step_s, claim_s, check_s))
        size = sum(p.numel() for p in params)
        print(f"work checks, {model or 'SmolLM2-135M-Instruct'} ({size:,} trainable "
              f"parameters, local batch {batch}, {torch.get_num_threads()} threads, median of "
              f"{repetitions}):")
        print(f"  local step (baseline) {step:.3f} s; claim per step {claim:.4f} s "
              f"({claim / step:.3f} x); one check {check:.3f} s ({check / step:.2f} x)",
              flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="", help="local model dir, or tiny-random "
                                                    "(default: SmolLM2-135M-Instruct)")
    parser.add_argument("--rounds", type=int, default=3, help="collaborative steps per arm")
    parser.add_argument("--target", type=int, default=16, help="samples per collaborative step")
    parser.add_argument("--local-steps", type=int, default=4, help="H of the local-steps arm")
    parser.add_argument("--averaging-only", action="store_true",
                        help="only the robust round against hivemind's all-reduce")
    parser.add_argument("--peers", type=int, default=3, help="averagers of the round arms")
    parser.add_argument("--floats", type=int, default=921_600,
                        help="floats of one adapter (SmolLM2-135M, r 8, q/k/v/o: 3.7 MB)")
    parser.add_argument("--averaging-rounds", type=int, default=5)
    parser.add_argument("--work-only", action="store_true",
                        help="only the work checks against the local step")
    parser.add_argument("--work-steps", type=int, default=5)
    args = parser.parse_args()
    if not args.averaging_only:
        work_checks(args.model, args.work_steps)
    if args.work_only:
        return 0
    compare_averaging(args.floats, args.peers, args.averaging_rounds)
    if args.averaging_only:
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "sft.yaml"
        config.write_text(config_text(args.model))
        steps = args.rounds * args.target // 2  # the same samples as the swarm's rounds
        start = time.perf_counter()
        base = baseline(config, Path(tmp) / "one", steps)
        print(f"1 process: {steps} steps, {base:.2f} samples/s "
              f"({time.perf_counter() - start:.0f} s)", flush=True)
        arms = [(c, 0) for c in ("none", "float16", "8bit")] + [("none", args.local_steps)]
        for compression, local_steps in arms:
            out = Path(tmp) / f"{compression}-{local_steps}"
            out.mkdir()
            result = swarm(config, out, args.rounds, args.target, compression, local_steps)
            name = compression + (f", --local-steps {local_steps}" if local_steps else "")
            print(f"2 peers, {name}: processed {result['processed']:.2f} samples/s, "
                  f"useful {result['useful']:.2f} samples/s; "
                  f"{result['bytes_per_round'] / 1e6:.2f} MB per round on loopback, adapter "
                  f"{result['adapter_bytes'] / 1e6:.2f} MB", flush=True)
            print(f"  samples/s, 2 peers / 1 process (baseline): processed "
                  f"{result['processed'] / base:.3f}, useful {result['useful'] / base:.3f}")
            print(f"  bytes per round / adapter size: "
                  f"{result['bytes_per_round'] / result['adapter_bytes']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
