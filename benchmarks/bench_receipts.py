"""What receipts cost: a signing node vs a plain one, and verifying a receipt with the model.

Serving (baseline: the same node without a key, measured in the same run). `gym node serve`
runs three times over the same model at once: plain, plain again (the control), and with a
signing key (`--key-env … --offline`: unbound v2 receipts appended to a local receipt log),
each with one torch thread. All three answer the same `--requests` non-streamed chat requests,
alternately greedy (temperature 0) and sampled (temperature 0.7, top-p 0.9), each with seed i,
one at a time, in rounds rotating the order (so that load from other processes falls on all
alike, and none answers twice in a row with its weights still cached). Receipt overhead = the
median over requests of signed latency / plain latency (each pair run back to back), minus 1;
target <= `TARGET_OVERHEAD`. The control's ratio to the plain
node measures what the timing itself can tell apart: on a shared machine two identical nodes
differ by more than the target when they share the CPUs with the client (13.7% once on this
2-core machine), so on two or more CPUs the nodes are pinned to the last one and this process
(the client, then the in-process steps) to the others, which brought the control to about 2%.
A control beyond the target makes the run NOISY, not a result.

The breakdown repeats, in this process and on the same model, each step the node takes per
receipt: capturing the decode positions' hidden states while generating (generation with
`capture_activations` minus without), the TOPLOC commitment, the digests and v2 receipt entry
(normalized request, `finish_reason`), the EIP-712 signature, and handing the receipt to the
receipt log (written ahead to its file and fsync'd, then queued); the append itself (SQLite +
local content store) runs in a background thread, in batches, and is shown apart.

The in-process generation keys the verifiable sampler (gym-sampler/1) as the node does: seed i
and the digest of the normalized request (`normalized_request.from_client_request`), so its
answers are token-identical to the nodes'; an answer where signed, plain and in-process differ
fails the run.

Verifying (baseline: generating the same answer in process, `TransformersEngine.generate`).
`verify_receipt_bundle(bundle, model=…, tokenizer=…)` on each signed v2 answer, right after
generating it: signature, normalized request and digests, rebuilding the prompt, one prefill
(model body + LM head on the answer positions) checked against the TOPLOC commitment, the
termination check and the sampling check (every token re-derived from the prefill's logits).
Target: the median over requests of full verification / generation <= `TARGET_VERIFY`; the
medians for greedy and sampled requests are printed apart. The breakdown times each of those
steps on its own (the LM head on the answer positions apart from the prefill, `check_completion`
apart from both), and the near-ties the sampling checks counted are printed (positions where a
token other than the sampler's choice was within the float tolerance). Hashing the weights for
the model digest (`model_dir=`) is a one-off per model, printed apart.

The node signs through libsecp256k1 directly when `coincurve` is importable (~0.02 ms) and
through eth-account otherwise; verifiers recover with eth-keys, which runs libsecp256k1 under
coincurve (~0.1 ms) and pure Python without it (~2.5 ms a signature, ~5 ms a recovery); the
backend in use is printed.

Exits 1 when an answer or a receipt is wrong (a receipt that fails verification included), or a
target is missed. Model: as in `bench_node_concurrency.py` (random Llama by default,
`--model DIR` for e.g. SmolLM2).

    .venv/bin/python benchmarks/bench_receipts.py [--model DIR] [--requests 32] [--tokens 32]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import torch
from bench_node_concurrency import MODEL_NAME, NODE_KEY, messages_of, node_server
from eth_account import Account
from eth_keys.backends import get_backend

from inference_node.activations import commit_activations, prefill, verify_activations
from inference_node.engine import SamplingParams
from inference_node.errors import ReceiptError
from inference_node.generation_checks import check_termination, eos_token_ids
from inference_node.injection import LibraryInjector
from inference_node.library import LibrarySnapshot
from inference_node.normalized_request import check_normalized, from_client_request, request_key
from inference_node.receipt_log import ReceiptLog
from inference_node.receipts import (
    ReceiptDomain,
    ReceiptSigner,
    build_receipt,
    bundle_json,
    library_ref,
    model_digest,
    parse_receipt,
    receipt_hash,
    request_digest,
    response_digest,
    verify_receipt_signature,
)
from inference_node.sampling import check_completion
from inference_node.transformers_engine import TransformersEngine
from inference_node.verify import verify_receipt_bundle
from ledger.blockstore import LocalBlockStore
from ledger.logstore import LogStore

TARGET_OVERHEAD = 0.05
TARGET_VERIFY = 0.25
SAMPLED = {"temperature": 0.7, "top_p": 0.9}  # odd requests; even ones are greedy
NO_LIBRARY = LibrarySnapshot("none", "", 0, "", ())


def serve_alternating(urls: dict[str, str], requests: list[dict]
                      ) -> dict[str, tuple[list[dict], list[float]]]:
    """Each request once per node, one at a time, after one warm-up each; per node the bodies
    and latencies. Round i rotates the order by i, so that every node follows every other
    equally often and (with three nodes) none answers two requests back to back: a node that
    does finds the tiny model's weights still in the CPU cache, and is faster for it."""
    out: dict[str, tuple[list[dict], list[float]]] = {name: ([], []) for name in urls}
    names = list(urls)
    with httpx.Client(timeout=600) as client:
        for name in names:
            client.post(f"{urls[name]}/chat/completions", json=requests[0]).raise_for_status()
        for i, request in enumerate(requests):
            for name in names[i % len(names):] + names[:i % len(names)]:
                started = time.perf_counter()
                reply = client.post(f"{urls[name]}/chat/completions", json=request)
                elapsed = time.perf_counter() - started
                reply.raise_for_status()
                out[name][0].append(reply.json())
                out[name][1].append(elapsed)
    return out


def timed(fn, *args, **kwargs):
    started = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="local HF model dir (default: random Llama)")
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=32, help="max_tokens per request")
    args = parser.parse_args()
    torch.set_num_threads(1)  # as the nodes: the in-process baseline runs like them
    requests = [{"model": MODEL_NAME, "messages": messages_of(i),
                 **(SAMPLED if i % 2 else {"temperature": 0, "top_p": 1.0}), "seed": i,
                 "max_tokens": args.tokens} for i in range(args.requests)]
    # what the node signs and keys its sampler with (the limit fits the context here)
    normalized = [from_client_request("chat", r, max_tokens=args.tokens, seed=r["seed"])
                  for r in requests]

    with tempfile.TemporaryDirectory() as tmp:
        if args.model:
            model_dir = args.model
        else:
            from bench_prefix_reuse import random_model

            model_dir = random_model(Path(tmp))
        cpus = sorted(os.sched_getaffinity(0))
        node_cpus = {cpus[-1]} if len(cpus) > 1 else None
        if node_cpus:
            os.sched_setaffinity(0, set(cpus[:-1]))
        with node_server(model_dir, Path(tmp) / "plain", threads=1, cpus=node_cpus) as plain_url, \
                node_server(model_dir, Path(tmp) / "control", threads=1,
                            cpus=node_cpus) as control_url, \
                node_server(model_dir, Path(tmp) / "signed", sign=True, threads=1,
                            cpus=node_cpus) as signed_url:
            served = serve_alternating({"plain": plain_url, "control": control_url,
                                        "signed": signed_url}, requests)
        (plain, plain_t), (signed, signed_t) = served["plain"], served["signed"]
        control_t = served["control"][1]

        engine = TransformersEngine.from_pretrained(model_dir, device="cpu", dtype="float32")
        injector = LibraryInjector(engine.tokenizer)
        account = Account.from_key(NODE_KEY)
        domain = ReceiptDomain()
        digest, digest_t = timed(model_digest, model_dir)
        signer = ReceiptSigner(NODE_KEY, domain, None, digest)  # signs as the node does
        receipt_log = ReceiptLog(LogStore(f"sqlite:///{tmp}/receipts.sqlite"),
                                 LocalBlockStore(Path(tmp) / "ipfs"), None, "bench/receipts",
                                 wal_path=Path(tmp) / "receipts.wal")
        steps: dict[str, list[float]] = {"activation capture": [], "TOPLOC commitment": [],
                                         "digests + build": [], "EIP-712 signing": [],
                                         "write-ahead + submit": []}
        append_t: list[float] = []
        verify_steps: dict[str, list[float]] = {"signature recovery": [],
                                                "request + digests": [],
                                                "prefill (body + head)": [],
                                                "  of it, LM head": [],
                                                "TOPLOC check": [],
                                                "termination check": [],
                                                "sampling check": []}
        eos = eos_token_ids(engine.model, engine.tokenizer)
        generate_t, verify_t, failures = [], [], []
        near_ties = tokens_checked = 0
        finishes: dict[str, int] = {}

        def receipt_steps(i: int, prompt_ids: list[int], result, elapsed: float, captured,
                          captured_t: float) -> None:
            """In process, right after generating request i: each receipt step, then
            verifying the node's receipt of the same answer."""
            nonlocal near_ties, tokens_checked
            generate_t.append(elapsed)
            steps["activation capture"].append(max(0.0, captured_t - elapsed))
            body, request = signed[i], requests[i]
            text = body["choices"][0]["message"]["content"]
            completion_ids = body["receipt_evidence"]["completion_token_ids"]
            if text != plain[i]["choices"][0]["message"]["content"] or text != result.text \
                    or completion_ids != result.token_ids or captured.token_ids != result.token_ids:
                failures.append(f"request {i}: signed, plain and in-process answers differ")
            finishes[result.finish_reason] = finishes.get(result.finish_reason, 0) + 1
            commitment, t = timed(commit_activations, captured.activations)
            steps["TOPLOC commitment"].append(t)
            receipt, t = timed(
                build_receipt, node=account.address, model_digest=digest,
                library=library_ref(NO_LIBRARY.log_id, 0, NO_LIBRARY.root), experience_ids=[],
                request_json=normalized[i], text=text, completion_token_ids=completion_ids,
                prompt_tokens=len(prompt_ids), temperature=request["temperature"],
                top_p=request["top_p"], max_tokens=args.tokens, seed=request["seed"],
                activation_commitment=commitment, finish_reason=result.finish_reason)
            steps["digests + build"].append(t)
            started = time.perf_counter()
            signature = signer.sign_digest(receipt_hash(receipt, domain))
            steps["EIP-712 signing"].append(time.perf_counter() - started)
            receipt = receipt.model_copy(update={"signature": "0x" + signature.hex()})
            _, t = timed(receipt_log.submit, receipt)
            steps["write-ahead + submit"].append(t)
            _, t = timed(receipt_log.flush_appends)
            append_t.append(t)

            served_receipt = parse_receipt(body["receipt"])
            if served_receipt.v != 2 or served_receipt.finish_reason != result.finish_reason \
                    or served_receipt.request_digest != receipt.request_digest:
                failures.append(f"request {i}: the node's receipt is not the v2 receipt of this "
                                "normalized request and ending")
            bundle = bundle_json(served_receipt, ReceiptDomain.from_json(
                body["receipt_evidence"]["domain"]), route="chat", request=request, text=text,
                completion_token_ids=completion_ids)
            try:
                checks, t = timed(verify_receipt_bundle, bundle, model=engine.model,
                                  tokenizer=engine.tokenizer)
            except ReceiptError as exc:  # an honest receipt that fails: the run fails
                failures.append(f"request {i}: the receipt fails verification: {exc}")
                return
            verify_t.append((t, elapsed, request["temperature"] == 0))
            passed = {c.name for c in checks if c.passed}
            if not {"activations", "termination", "sampling"} <= passed:
                failures.append(f"request {i}: not every check with the model ran")
            near_ties_i = next(c.near_ties for c in checks if c.name == "sampling")
            near_ties += near_ties_i or 0
            tokens_checked += len(completion_ids)

            # the same steps one by one, as verify_receipt_bundle runs them
            _, t = timed(verify_receipt_signature, served_receipt, domain)
            verify_steps["signature recovery"].append(t)
            started = time.perf_counter()
            request_digest(check_normalized(bundle["request"]))
            response_digest(text, completion_ids)
            verify_steps["request + digests"].append(time.perf_counter() - started)
            (states, logits), t = timed(prefill, engine.model, prompt_ids, completion_ids)
            verify_steps["prefill (body + head)"].append(t)
            hidden = torch.stack(states).float()  # the head's input, as in the prefill
            with torch.inference_mode():
                _, t = timed(lambda: engine.model.get_output_embeddings()(hidden).float())
            verify_steps["  of it, LM head"].append(t)
            _, t = timed(verify_activations, states, served_receipt.activation_commitment)
            verify_steps["TOPLOC check"].append(t)
            _, t = timed(check_termination, completion_ids, text, result.finish_reason,
                         max_tokens=args.tokens, stop=[], eos=eos, tokenizer=engine.tokenizer)
            verify_steps["termination check"].append(t)
            sampling, t = timed(check_completion, logits, completion_ids,
                                temperature=request["temperature"], top_p=request["top_p"],
                                seed=request["seed"], request_key=request_key(normalized[i]))
            verify_steps["sampling check"].append(t)
            if not sampling.ok or sampling.near_ties != near_ties_i:
                failures.append(f"request {i}: check_completion disagrees with the verifier")

        async def measure_all():
            engine.start()
            try:
                for i, request in enumerate(requests):
                    prompt = injector.chat(request["messages"], NO_LIBRARY).prompt
                    runs = {}
                    for capture in (False, True, False, True):  # interleaved, best of two
                        params = SamplingParams(max_tokens=args.tokens,
                                                temperature=request["temperature"],
                                                top_p=request["top_p"], seed=request["seed"],
                                                request_key=request_key(normalized[i]),
                                                capture_activations=capture)
                        started = time.perf_counter()
                        result = await engine.generate(prompt, params)
                        elapsed = time.perf_counter() - started
                        if capture not in runs or elapsed < runs[capture][1]:
                            runs[capture] = (result, elapsed)
                    receipt_steps(i, prompt.all_token_ids, *runs[False], *runs[True])
            finally:
                engine.shutdown()

        asyncio.run(measure_all())

    median = statistics.median
    # Each signed request ran right beside its plain twin: the median of the pairs' ratios is
    # what load from other processes disturbs least.
    overhead = median(s / p for s, p in zip(signed_t, plain_t, strict=True)) - 1
    control = median(c / p for c, p in zip(control_t, plain_t, strict=True)) - 1
    verify_share = median(v / g for v, g, _ in verify_t) if verify_t else float("inf")
    share_of = {kind: [v / g for v, g, greedy in verify_t if greedy == (kind == "greedy")]
                for kind in ("greedy", "sampled")}
    prompt_tokens = median(len(injector.chat(r["messages"], NO_LIBRARY).prompt.all_token_ids)
                           for r in requests)
    print(f"model: {args.model or 'random Llama h256 x4 (byte-level BPE)'} on CPU, 1 thread; "
          f"{args.requests} requests (greedy and temperature {SAMPLED['temperature']} top-p "
          f"{SAMPLED['top_p']} alternately), prompt {prompt_tokens:g} tokens (median), "
          f"max_tokens {args.tokens} (finish_reason {finishes}), no library; receipts v2; "
          f"ECDSA backend {type(get_backend()).__name__}")
    print(f"request latency median, plain node (baseline): {median(plain_t) * 1e3:8.2f} ms")
    print(f"request latency median, control node (plain): {median(control_t) * 1e3:8.2f} ms")
    print(f"request latency median, signing node:          {median(signed_t) * 1e3:8.2f} ms")
    print(f"nodes pinned to CPU {sorted(node_cpus)}, client to {sorted(os.sched_getaffinity(0))}"
          if node_cpus else "one CPU: nodes and client share it")
    print(f"control, plain vs plain (median of the paired ratios): {control:+.1%}")
    if abs(control) > TARGET_OVERHEAD or overhead < -TARGET_OVERHEAD:
        verdict = "NOISY: two identical nodes differ by more than the target; rerun"
        failures.append("the control node's spread exceeds the target: the timing is noise")
    else:
        verdict = "met" if overhead <= TARGET_OVERHEAD else "NOT met"
    print(f"receipt overhead (median of the paired ratios): {overhead:+.1%} of request "
          f"latency (target <= {TARGET_OVERHEAD:.0%}: {verdict}); ratio of the medians "
          f"{median(signed_t) / median(plain_t) - 1:+.1%}")
    total = sum(median(v) for v in steps.values())
    print(f"per-receipt steps on the request path (median, in process; sum {total * 1e3:.2f} ms "
          f"= {total / median(plain_t):.1%} of plain latency):")
    for name, values in steps.items():
        print(f"  {name:<22} {median(values) * 1e3:8.2f} ms")
    print(f"  off the path: receipt log append (background thread) {median(append_t) * 1e3:.2f}"
          " ms")
    print(f"generation median, in process (baseline): {median(generate_t) * 1e3:8.2f} ms")
    if verify_t:
        print(f"verification median (signature, digests, prompt, one prefill, TOPLOC, "
              f"termination, sampling): {median(v for v, _, _ in verify_t) * 1e3:8.2f} ms")
    for name, values in verify_steps.items():
        if values:
            print(f"  {name:<22} {median(values) * 1e3:8.2f} ms")
    print(f"near-ties counted by the sampling checks: {near_ties} in {tokens_checked} tokens "
          f"of {len(verify_t)} verified receipts")
    print(f"verification cost incl. the sampling check (median of the paired ratios): "
          f"{verify_share:.1%} of generation (target <= {TARGET_VERIFY:.0%}: "
          f"{'met' if verify_share <= TARGET_VERIFY else 'NOT met'}); greedy "
          + ", sampled ".join(f"{median(v):.1%}" if v else "-" for v in share_of.values())
          + f"; model digest once per model: {digest_t * 1e3:.1f} ms")
    for failure in failures[:5]:
        print(f"FAIL {failure}")
    return 1 if failures or overhead > TARGET_OVERHEAD or verify_share > TARGET_VERIFY else 0


if __name__ == "__main__":
    sys.exit(main())
