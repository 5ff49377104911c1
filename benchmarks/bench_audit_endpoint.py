"""Audit at scale: a 1,000,000-entry publisher log replayed from chain + content endpoint alone.

A fresh `gym devnet up` (Anvil and its content service, `gym ipfs serve`); the publisher's
entries go into the directory that service serves and are anchored in 4 checkpoints of
250,000 (each with its batch manifest and entries DAG). The auditor then replays the log
through ``KuboStore`` pointed at the endpoint, as an auditor with nothing local does: chain
events and calldata, the manifests, and the entries a thousand per request (``dag/export`` of
each level-1 node of a batch's entries DAG), every block re-hashed, every entry validated.

Baseline, same run: the same auditor reading entries one by one (``block/get`` per entry, the
path before the entries DAG), timed over the first ``--sample`` entries and scaled to the log.

Target: the whole audit under 60 s. Prints the times, the ratio to the baseline and to the
target; exits 1 above the target.

Usage: ``.venv/bin/python benchmarks/bench_audit_endpoint.py [--entries 1000000]``
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
from ledger.entries import decode_entry
from ledger.kubo import KuboStore
from ledger.multiformats import RAW
from ledger.publish import ensure_chain_log, publish

TARGET_S = 60.0
CHECKPOINTS = 4


def entries(count: int) -> list[bytes]:
    """``count`` distinct canonical experience entries (a template's text varies; checked)."""
    template = encode_entry(ExperienceEntry(
        text="Rule #########: restate the question, then check the units of the answer.",
        domain="math", op="add",
        provenance=Provenance(method="tfgrpo", base_model="SmolLM2-135M-Instruct", step=1)))
    out = [template.replace(b"#########", b"%09d" % i) for i in range(count)]
    for data in out[:: max(1, count // 100)]:
        decode_entry(data)  # the template stays canonical
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--sample", type=int, default=20_000,
                        help="entries read one by one for the baseline")
    args = parser.parse_args()
    with fresh_devnet("bench-audit-endpoint-") as (workdir, deployment):
        w3 = Web3(Web3.HTTPProvider(deployment.rpc_url))
        contract = LedgerContract(w3, deployment.contracts["ExperienceLedger"].address,
                                  load_artifact("ExperienceLedger").abi, ANVIL_DEFAULT_KEY)
        store = LogStore(f"sqlite:///{workdir / 'publisher.sqlite'}")
        content = LocalBlockStore(workdir / "data" / "ipfs")  # what the endpoint serves
        store.create_log("bench")
        log_id = ensure_chain_log(store, contract, "bench")
        start = time.perf_counter()
        data = entries(args.entries)
        step = -(-args.entries // CHECKPOINTS)
        for first in range(0, args.entries, step):
            part = data[first:first + step]
            for entry in part:
                content.put(entry, RAW)
            store.append("bench", part)
            publish(store, content, contract, "bench")
        store.engine.dispose()
        print(f"prepared and published {args.entries} entries in {CHECKPOINTS} checkpoints in "
              f"{time.perf_counter() - start:.0f} s; endpoint {deployment.content_api}")

        endpoint = KuboStore(deployment.content_api)
        start = time.perf_counter()
        report = audit_log(contract, endpoint, log_id, from_block=deployment.deployment_block)
        elapsed = time.perf_counter() - start
        assert report.ok and report.leaves == args.entries, report.discrepancies[:3]

        sample = min(args.sample, step)
        cids = _first_cids(workdir, sample)
        start = time.perf_counter()
        for cid in cids:  # what the replay did per entry before: fetch by CID, validate
            decode_entry(endpoint.cat(cid))
        one_by_one = (time.perf_counter() - start) * args.entries / sample
    print(f"audit of {args.entries} entries from chain + endpoint, CARs of a thousand: "
          f"{elapsed:.1f} s ({elapsed / args.entries * 1e6:.0f} us/entry)")
    print(f"baseline, one block/get per entry ({sample} timed, scaled): {one_by_one:.0f} s; "
          f"ratio {elapsed / one_by_one:.2f}")
    print(f"target < {TARGET_S:.0f} s: ratio {elapsed / TARGET_S:.2f} "
          f"({'ok' if elapsed < TARGET_S else 'MISSED'})")
    return 0 if elapsed < TARGET_S else 1


def _first_cids(workdir, count: int) -> list[str]:
    store = LogStore(f"sqlite:///{workdir / 'publisher.sqlite'}")
    try:
        return [leaf.cid for leaf in store.leaves("bench", 0, count)]
    finally:
        store.engine.dispose()


if __name__ == "__main__":
    sys.exit(main())
