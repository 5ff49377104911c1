"""`gym verify evaluation` per generation, with and without the full re-run, against the
evaluation's own generation time per generation, measured in the same run.

A fresh `gym devnet up` (Anvil, content service, every contract) in a temporary directory; a
library log published from ``devnet/samples/experiences.jsonl``; a registered node signing
receipts (`gym node serve --key-env ... --anchor-interval 1 --register`); a JSONL of
arithmetic problems written here. Then, in order:

1. generation: `gym eval --library-log --base-url --publish` runs the baseline and library arms
   through the node (2 arms x ``--seeds`` x ``--problems`` x ``-k`` generations) and publishes
   the evaluation. It runs as a whole `gym` process (``devnet.cli:main``) with
   ``trainer.evaluate.evaluate_arms`` wrapped in a timer: the timer is the generation phase
   (every request through the node, answers scored), the baseline of every ratio; the
   command's wall time (start-up, bundles fetched once the node anchored them, stored, the
   entry anchored) is printed beside it. The node is stopped once the entry is published.
2. verify: ``verify_evaluation`` called in this process, as `gym verify evaluation CID` calls
   it (chain, NodeRegistry, receipt domain, content endpoint; an empty local store): in-process
   calls, so no process start-up is counted. Without a re-run ``--repeat`` times after one
   untimed warm-up call (imports, first connections), the median; then with ``--sample N`` and
   the model (loaded once beforehand, its load time printed apart): the re-run cost per sampled
   generation is (that call - the median without re-run) / N.

Prints per-generation costs and two ratios against the baseline "the evaluation's own
generation time per generation, same run": verify (no re-run) per generation / generation per
generation, and re-run per sampled generation / generation per generation. No target: the
ratios depend on the model, ``--max-new-tokens`` and the cores. Exits 1 if the evaluation does
not verify.

Model: by default the tiny random Llama of the tests (``trainer.backends.tiny_random_model``,
hidden 32, byte-level BPE), built in the temporary directory; or ``--model DIR`` for a local
checkpoint such as ``trainer.backends.default_model_dir()`` (SmolLM2).

    .venv/bin/python benchmarks/bench_verify_evaluation.py [--model DIR] [--seeds 2]
        [--problems 8] [-k 2] [--max-new-tokens 32] [--sample 8] [--repeat 3]
        [--verifier math|exact]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench_node_concurrency import wait_until_answering
from fresh_devnet import fresh_devnet

from devnet.anvil import free_port
from devnet.settings import ANVIL_DEV_KEYS

GYM = Path(sys.executable).parent / "gym"
REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "devnet" / "samples" / "experiences.jsonl"
MODEL_NAME = "bench-model"
NODE_KEY = ANVIL_DEV_KEYS[1]  # a public devnet key: the node's operator
LIBRARY_LOG, EVALUATION_LOG = "bench/library", "bench/evaluations"
# `gym`, as its console script runs it, with the generation phase of `gym eval` timed: each
# call of trainer.evaluate.evaluate_arms appends its seconds to $BENCH_GENERATION_S.
TIMED_GYM = """
import os, sys, time
import trainer.evaluate as evaluate
inner = evaluate.evaluate_arms
def timed(*args, **kwargs):
    start = time.perf_counter()
    try:
        return inner(*args, **kwargs)
    finally:
        with open(os.environ["BENCH_GENERATION_S"], "a") as out:
            out.write(f"{time.perf_counter() - start}\\n")
evaluate.evaluate_arms = timed
from devnet.cli import main
sys.argv[0] = "gym"
main()
"""


def arithmetic(count: int) -> list[dict]:
    """``count`` sums and products with their answers (the `math` and `exact` verifiers')."""
    rows = []
    for i in range(count):
        a, b = 7 + 13 * i % 89, 3 + 5 * i % 17
        op, value = ("+", a + b) if i % 2 == 0 else ("*", a * b)
        rows.append({"problem": f"What is {a} {op} {b}? Give the number.", "answer": str(value)})
    return rows


def gym(env: dict[str, str], *args: str, timeout: float = 600) -> str:
    done = subprocess.run([str(GYM), *args], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"gym {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, help="local HF model dir (default: tiny random "
                                                   "Llama, built in a temporary directory)")
    parser.add_argument("--seeds", type=int, default=2, help="evaluation seeds (gym eval)")
    parser.add_argument("--problems", type=int, default=8, help="arithmetic problems")
    parser.add_argument("-k", type=int, default=2, help="samples per problem (gym eval -k)")
    parser.add_argument("--max-new-tokens", type=int, default=32, help="per generation")
    parser.add_argument("--sample", type=int, default=8,
                        help="generations re-run in full (gym verify evaluation --sample)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="timed verify calls without re-run (median)")
    parser.add_argument("--verifier", choices=("math", "exact"), default="math")
    args = parser.parse_args()
    generations = 2 * args.seeds * args.problems * args.k
    if not 0 < args.sample <= generations:
        parser.error(f"--sample must be 1..{generations} (the evaluation's generations)")

    import transformers

    transformers.utils.logging.disable_progress_bar()  # no bars between the lines printed
    transformers.utils.logging.set_verbosity_error()
    with fresh_devnet("bench-verify-evaluation-") as (workdir, deployment):
        if args.model:
            model_dir = args.model
        else:
            from trainer.backends import tiny_random_model

            model_dir = tiny_random_model(workdir / "model")
        print(f"model: {args.model or 'tiny random Llama (trainer.backends.tiny_random_model)'};"
              f" 2 arms x {args.seeds} seeds x {args.problems} problems x k={args.k} = "
              f"{generations} generations of <= {args.max_new_tokens} tokens, verifier "
              f"{args.verifier}; {os.cpu_count()} CPUs")
        base = {k: v for k, v in os.environ.items() if not k.startswith("GYM_")}
        base.update(GYM_DEPLOYMENT_FILE=str(workdir / "d.json"), COLUMNS="200", NO_COLOR="1")

        def party(name: str, **extra: str) -> dict[str, str]:
            home = workdir / name
            return {**base, "GYM_DATA_DIR": str(home), "GYM_IPFS_API": deployment.content_api,
                    "GYM_DB_URL": f"sqlite:///{home / 'index.sqlite'}", **extra}

        researcher = party("researcher")
        gym(researcher, "ledger", "create", LIBRARY_LOG)
        gym(researcher, "ledger", "append", LIBRARY_LOG, str(SAMPLES))
        gym(researcher, "ledger", "publish", LIBRARY_LOG)
        dataset = workdir / "arithmetic.jsonl"
        dataset.write_text("".join(json.dumps(r) + "\n" for r in arithmetic(args.problems)))

        cid, eval_wall, generation_s = evaluate_through_node(
            args, workdir, model_dir, party("node", GYM_NODE_KEY=NODE_KEY), researcher, dataset)
        return verify_and_report(args, deployment, workdir, model_dir, cid, generations,
                                 eval_wall, generation_s)


def evaluate_through_node(args, workdir: Path, model_dir: Path, node_env: dict[str, str],
                          researcher: dict[str, str], dataset: Path) -> tuple[str, float, float]:
    """`gym eval --publish` through a registered signing node, stopped afterwards: the
    evaluation's CID, the command's wall time and its generation phase."""
    port = free_port()
    (workdir / "node").mkdir()
    log_file = workdir / "node" / "server.log"
    with open(log_file, "wb") as log:
        node = subprocess.Popen(
            [str(GYM), "node", "serve", "--model", str(model_dir), "--device", "cpu",
             "--served-model-name", MODEL_NAME, "--port", str(port), "--key-env",
             "GYM_NODE_KEY", "--anchor-interval", "1", "--register"],
            env=node_env, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_until_answering(node, f"http://127.0.0.1:{port}", log_file)
            times = workdir / "generation_s.txt"
            start = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-c", TIMED_GYM, "eval", "--dataset", str(dataset),
                 "--verifier", args.verifier, "--library-log", LIBRARY_LOG, "--base-url",
                 f"http://127.0.0.1:{port}/v1", "--model", MODEL_NAME, "-k", str(args.k),
                 "--seeds", str(args.seeds), "--max-new-tokens", str(args.max_new_tokens),
                 "--publish", EVALUATION_LOG, "--wait", "120"],
                env={**researcher, "BENCH_GENERATION_S": str(times)}, capture_output=True,
                text=True, timeout=1800, check=False)
            eval_wall = time.perf_counter() - start
        finally:
            node.send_signal(signal.SIGINT)
            try:
                node.wait(timeout=60)
            except subprocess.TimeoutExpired:
                node.kill()
                node.wait()
    if done.returncode != 0 or "evaluation entry " not in done.stdout:
        raise RuntimeError(f"gym eval failed:\n{done.stdout}\n{done.stderr}")
    cid = done.stdout.split("evaluation entry ")[1].split(":")[0]
    generation_s = sum(float(line) for line in times.read_text().split())
    return cid, eval_wall, generation_s


def verify_and_report(args, deployment, workdir: Path, model_dir: Path, cid: str,
                      generations: int, eval_wall: float, generation_s: float) -> int:
    """``verify_evaluation`` in this process, as `gym verify evaluation` calls it; the table."""
    from web3 import Web3

    from contracts import load_artifact
    from inference_node.evaluation_check import EvaluationRefused, verify_evaluation
    from inference_node.receipts import ReceiptDomain
    from inference_node.registry import NodeRegistry
    from inference_node.verify import load_verifier_model
    from ledger.chain import LedgerContract
    from ledger.content import open_content_store

    w3 = Web3(Web3.HTTPProvider(deployment.rpc_url))
    contract = LedgerContract(w3, deployment.contracts["ExperienceLedger"].address,
                              load_artifact("ExperienceLedger").abi)
    registry = NodeRegistry(w3, deployment.contracts["NodeRegistry"].address,
                            from_block=deployment.deployment_block)
    common = {"content": open_content_store(deployment.content_api, workdir / "auditor"),
              "contract": contract, "registry": registry,
              "domain": ReceiptDomain(w3.eth.chain_id, contract.address.lower()),
              "from_block": deployment.deployment_block}

    def timed_verify(**kwargs) -> float:
        start = time.perf_counter()
        report = verify_evaluation(cid, **common, **kwargs)
        elapsed = time.perf_counter() - start
        assert report.generations == generations, (report.generations, generations)
        assert len(report.rerun) == kwargs.get("sample", 0), report.rerun
        return elapsed

    try:
        timed_verify()  # warm-up: imports, first connections
        plain = statistics.median(timed_verify() for _ in range(args.repeat))
        start = time.perf_counter()
        model, tokenizer = load_verifier_model(model_dir)
        load_s = time.perf_counter() - start
        sampled = timed_verify(sample=args.sample, sample_seed=0, model=model,
                               tokenizer=tokenizer, model_dir=model_dir)
    except EvaluationRefused as exc:
        print(f"evaluation {cid} FAILS ({exc.reason}): {exc}")
        return 1

    per_generation = generation_s / generations
    verify_per = plain / generations
    rerun_per = (sampled - plain) / args.sample
    print(f"evaluation {cid}: {generations} generations, verified from chain + endpoint")
    print("baseline: the evaluation's own generation time per generation, same run "
          "(gym eval's evaluate_arms phase through the signing node)")
    print("verify: in-process verify_evaluation calls (no process start-up); without re-run "
          f"the median of {args.repeat} after a warm-up; re-run = (with --sample "
          f"{args.sample} - without) / {args.sample}")
    rows = [
        ("gym eval --publish, whole command", eval_wall, eval_wall / generations, None),
        ("generation phase (baseline)", generation_s, per_generation, 1.0),
        ("verify, no re-run", plain, verify_per, verify_per / per_generation),
        (f"verify --sample {args.sample}", sampled, None, None),
        ("re-run, per sampled generation", sampled - plain, rerun_per,
         rerun_per / per_generation),
        ("model load for --sample (once)", load_s, None, None),
    ]
    print(f"\n{'':<36}{'total s':>10}{'ms/gen':>10}{'x baseline':>12}")
    for name, total, per, ratio in rows:
        print(f"{name:<36}{total:>10.2f}"
              f"{'' if per is None else f'{per * 1e3:.1f}':>10}"
              f"{'' if ratio is None else f'{ratio:.2f}':>12}")
    print(f"\nratio verify (no re-run) per generation / generation per generation: "
          f"{verify_per / per_generation:.2f}")
    print(f"ratio re-run per sampled generation / generation per generation: "
          f"{rerun_per / per_generation:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
