"""Audit throughput: a 100k-entry publisher log replayed from chain + local content store.

Fills a LogStore and a LocalBlockStore with 100,000 experience entries, publishes them in
two checkpoints (50k, then 100k with a consistency proof) to a fresh Anvil deployed by
``gym devnet up``, then times ``ledger.audit.audit_log``: events, calldata, batch
manifests, and per entry a verified block read, full entry validation and the leaf hash.

Target: < 10 s for 100k entries. Prints the ratio time / target and exits 1 above 1.

Usage: ``.venv/bin/python benchmarks/bench_audit.py [--entries 100000]``
"""

from __future__ import annotations

import argparse
import sys
import time

from fresh_devnet import fresh_devnet
from web3 import Web3

from contracts import load_artifact
from contracts.devnet_accounts import ANVIL_DEFAULT_KEY
from ledger import ExperienceEntry, LocalBlockStore, LogStore, Provenance, encode_entry
from ledger.audit import audit_log
from ledger.chain import LedgerContract
from ledger.publish import append_entries, ensure_chain_log, publish

TARGET_S = 10.0


def experiences(start: int, count: int) -> list[bytes]:
    return [encode_entry(ExperienceEntry(
        text=f"Rule {i}: restate the question, then check the units of the answer.",
        domain="math", op="add",
        provenance=Provenance(method="tfgrpo", base_model="SmolLM2-135M-Instruct", step=i)))
        for i in range(start, start + count)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=100_000)
    args = parser.parse_args()
    with fresh_devnet("bench-audit-") as (workdir, deployment):
        w3 = Web3(Web3.HTTPProvider(deployment.rpc_url))
        contract = LedgerContract(w3, deployment.contracts["ExperienceLedger"].address,
                                  load_artifact("ExperienceLedger").abi, ANVIL_DEFAULT_KEY)
        store = LogStore(f"sqlite:///{workdir / 'ledger.sqlite'}")
        content = LocalBlockStore(workdir / "content")
        store.create_log("bench")
        log_id = ensure_chain_log(store, contract, "bench")
        start = time.perf_counter()
        half = args.entries // 2
        for first, count in ((0, half), (half, args.entries - half)):
            append_entries(store, content, "bench", experiences(first, count))
            publish(store, content, contract, "bench")
        print(f"prepared and published {args.entries} entries in "
              f"{time.perf_counter() - start:.1f} s")

        start = time.perf_counter()
        report = audit_log(contract, content, log_id, from_block=deployment.deployment_block)
        elapsed = time.perf_counter() - start
        store.engine.dispose()
    assert report.ok and report.leaves == args.entries, report.discrepancies[:3]
    scaled = elapsed * 100_000 / args.entries
    print(f"audit of {args.entries} entries, {len(report.checkpoints)} checkpoints: "
          f"{elapsed:.2f} s ({elapsed / args.entries * 1e6:.0f} us/entry)")
    print(f"target < {TARGET_S:.0f} s per 100k entries: {scaled:.2f} s, ratio "
          f"{scaled / TARGET_S:.2f} ({'ok' if scaled < TARGET_S else 'MISSED'})")
    return 0 if scaled < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
