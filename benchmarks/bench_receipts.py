"""What receipts cost: a signing node vs a plain one, and verifying a receipt with the model.

Serving (baseline: the same node without a key, measured in the same run). `gym node serve`
runs twice over the same model, plain and then with a signing key (`--key-env … --offline`:
unbound receipts appended to a local receipt log), and answers the same `--requests`
non-streamed greedy chat requests one at a time. Receipt overhead = median signed latency /
median plain latency - 1; target <= `TARGET_OVERHEAD`. The breakdown repeats, in this process
and on the same model, each step the node takes per receipt (`ReceiptSigner.issue` and
`ReceiptLog.append`): the extra prefill over prompt + completion, the TOPLOC commitment, the
digests and EIP-712 signature, and the append to a SQLite receipt log + local content store.

Verifying (baseline: generating the same answer in process, `TransformersEngine.generate`).
`verify_receipt_bundle(bundle, model=…, tokenizer=…)` on each signed answer: signature, digests,
rebuilding the prompt and one prefill checked against the commitment. Target: median
verification <= `TARGET_VERIFY` of the median generation. Hashing the weights for the model
digest (`model_dir=`) is a one-off per model, printed apart.

Exits 1 when an answer or a receipt is wrong, or a target is missed. Model: as in
`bench_node_concurrency.py` (random Llama by default, `--model DIR` for e.g. SmolLM2).

    .venv/bin/python benchmarks/bench_receipts.py [--model DIR] [--requests 16] [--tokens 32]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
from bench_node_concurrency import MODEL_NAME, NODE_KEY, messages_of, node_server
from eth_account import Account
from eth_account.messages import encode_typed_data

from inference_node.engine import SamplingParams, TransformersEngine
from inference_node.injection import LibraryInjector
from inference_node.library import LibrarySnapshot
from inference_node.receipt_log import ReceiptLog
from inference_node.receipts import (
    ReceiptDomain,
    build_receipt,
    bundle_json,
    commit_activations,
    decode_hidden_states,
    library_ref,
    model_digest,
    parse_receipt,
    typed_data,
    verify_receipt_bundle,
)
from ledger.blockstore import LocalBlockStore
from ledger.logstore import LogStore

TARGET_OVERHEAD = 0.05
TARGET_VERIFY = 0.25
NO_LIBRARY = LibrarySnapshot("none", "", 0, "", ())


def serve_requests(base_url: str, requests: list[dict]) -> tuple[list[dict], list[float]]:
    """Each request once, one at a time, after one warm-up; bodies and latencies."""
    bodies, latencies = [], []
    with httpx.Client(timeout=600) as client:
        client.post(f"{base_url}/chat/completions", json=requests[0]).raise_for_status()
        for request in requests:
            started = time.perf_counter()
            reply = client.post(f"{base_url}/chat/completions", json=request)
            latencies.append(time.perf_counter() - started)
            reply.raise_for_status()
            bodies.append(reply.json())
    return bodies, latencies


def timed(fn, *args, **kwargs):
    started = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="local HF model dir (default: random Llama)")
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=32, help="greedy tokens per request")
    args = parser.parse_args()
    requests = [{"model": MODEL_NAME, "messages": messages_of(i), "temperature": 0, "seed": i,
                 "max_tokens": args.tokens} for i in range(args.requests)]

    with tempfile.TemporaryDirectory() as tmp:
        if args.model:
            model_dir = args.model
        else:
            from bench_prefix_reuse import random_model

            model_dir = random_model(Path(tmp))
        with node_server(model_dir, Path(tmp) / "plain") as base_url:
            plain, plain_t = serve_requests(base_url, requests)
        with node_server(model_dir, Path(tmp) / "signed", sign=True) as base_url:
            signed, signed_t = serve_requests(base_url, requests)

        engine = TransformersEngine.from_pretrained(model_dir, device="cpu", dtype="float32")
        injector = LibraryInjector(engine.tokenizer)
        account = Account.from_key(NODE_KEY)
        domain = ReceiptDomain()
        digest, digest_t = timed(model_digest, model_dir)
        receipt_log = ReceiptLog(LogStore(f"sqlite:///{tmp}/receipts.sqlite"),
                                 LocalBlockStore(Path(tmp) / "ipfs"), None, "bench/receipts")
        steps: dict[str, list[float]] = {"extra prefill": [], "TOPLOC commitment": [],
                                         "digests + build": [], "EIP-712 signing": [],
                                         "receipt log append": []}
        generate_t, verify_t, failures = [], [], []

        async def generate_all():
            engine.start()
            try:
                out = []
                for request in requests:
                    prompt = injector.chat(request["messages"], NO_LIBRARY).prompt
                    params = SamplingParams(max_tokens=args.tokens, temperature=0,
                                            seed=request["seed"])
                    started = time.perf_counter()
                    result = await engine.generate(prompt, params)
                    out.append((prompt.all_token_ids, result, time.perf_counter() - started))
                return out
            finally:
                engine.shutdown()

        for i, (prompt_ids, result, elapsed) in enumerate(asyncio.run(generate_all())):
            generate_t.append(elapsed)
            body, request = signed[i], requests[i]
            text = body["choices"][0]["message"]["content"]
            completion_ids = body["receipt_evidence"]["completion_token_ids"]
            if text != plain[i]["choices"][0]["message"]["content"] or text != result.text \
                    or completion_ids != result.token_ids:
                failures.append(f"request {i}: signed, plain and in-process answers differ")
            states, t = timed(decode_hidden_states, engine.model, prompt_ids, completion_ids)
            steps["extra prefill"].append(t)
            commitment, t = timed(commit_activations, states)
            steps["TOPLOC commitment"].append(t)
            receipt, t = timed(
                build_receipt, node=account.address, model_digest=digest,
                library=library_ref(NO_LIBRARY.log_id, 0, NO_LIBRARY.root), experience_ids=[],
                request_json=request, text=text, completion_token_ids=completion_ids,
                prompt_tokens=len(prompt_ids), temperature=0.0, top_p=1.0,
                max_tokens=args.tokens, seed=request["seed"], activation_commitment=commitment)
            steps["digests + build"].append(t)
            started = time.perf_counter()
            signature = account.sign_message(encode_typed_data(
                full_message=typed_data(receipt, domain))).signature
            steps["EIP-712 signing"].append(time.perf_counter() - started)
            receipt = receipt.model_copy(update={"signature": "0x" + bytes(signature).hex()})
            _, t = timed(receipt_log.append, receipt)
            steps["receipt log append"].append(t)

            served = parse_receipt(body["receipt"])
            bundle = bundle_json(served, ReceiptDomain.from_json(body["receipt_evidence"]
                                                                 ["domain"]),
                                 route="chat", request=request, text=text,
                                 completion_token_ids=completion_ids)
            checks, t = timed(verify_receipt_bundle, bundle, model=engine.model,
                              tokenizer=engine.tokenizer)
            verify_t.append(t)
            if not any(c.name == "activations" and c.passed for c in checks):
                failures.append(f"request {i}: the activation commitment was not checked")

    median = statistics.median
    overhead = median(signed_t) / median(plain_t) - 1
    verify_share = median(verify_t) / median(generate_t)
    prompt_tokens = median(len(injector.chat(r["messages"], NO_LIBRARY).prompt.all_token_ids)
                           for r in requests)
    print(f"model: {args.model or 'random Llama h256 x4 (byte-level BPE)'} on CPU; "
          f"{args.requests} requests, prompt {prompt_tokens:g} tokens (median), greedy "
          f"{args.tokens} tokens, no library")
    print(f"request latency median, plain node (baseline): {median(plain_t) * 1e3:8.2f} ms")
    print(f"request latency median, signing node:          {median(signed_t) * 1e3:8.2f} ms")
    if overhead < 0:  # signing cannot make requests faster: the machine was busy
        verdict = "NOISY: negative, rerun on a quiet machine"
        failures.append("negative receipt overhead: the timing is noise, not a result")
    else:
        verdict = "met" if overhead <= TARGET_OVERHEAD else "NOT met"
    print(f"receipt overhead: {overhead:+.1%} of request latency (target <= "
          f"{TARGET_OVERHEAD:.0%}: {verdict})")
    total = sum(median(v) for v in steps.values())
    print(f"per-receipt breakdown (median, in process; sum {total * 1e3:.2f} ms = "
          f"{total / median(plain_t):.1%} of plain latency):")
    for name, values in steps.items():
        print(f"  {name:<20} {median(values) * 1e3:8.2f} ms  {median(values) / total:6.1%}")
    print(f"generation median, in process (baseline): {median(generate_t) * 1e3:8.2f} ms")
    print(f"verification median (signature, digests, prompt, one prefill): "
          f"{median(verify_t) * 1e3:8.2f} ms")
    print(f"verification cost: {verify_share:.1%} of generation (target <= {TARGET_VERIFY:.0%}: "
          f"{'met' if verify_share <= TARGET_VERIFY else 'NOT met'}); model digest once per "
          f"model: {digest_t * 1e3:.1f} ms")
    for failure in failures[:5]:
        print(f"FAIL {failure}")
    return 1 if failures or overhead > TARGET_OVERHEAD or verify_share > TARGET_VERIFY else 0


if __name__ == "__main__":
    sys.exit(main())
