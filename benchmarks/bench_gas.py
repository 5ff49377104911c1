"""Gas of ExperienceLedger at scale: anchor at ~1M leaves, verifyInclusion at depth 20, and
appendLeaves per leaf, measured on a fresh Anvil deployed by ``gym devnet up``.

Execution gas (docs/design.md "4.4 Gas") is total gas minus the intrinsic 21,000 and the
calldata cost of EIP-2028 (4 gas per zero byte, 16 per non-zero byte). Under EIP-7623
(Prague) a transaction pays at least the calldata floor, 21,000 + 10 per token (zero bytes
+ 4 x non-zero bytes); when the floor is what was charged the execution gas cannot be read
off the receipt: for the verifyInclusion view it is then summed from the opcodes of a
``debug_traceCall`` instead, and the table says so.

- anchor: a LogStore filled with 2^20 small entries; anchor size 1, then size 2^20 with the
  real RFC 9162 consistency proof from size 1. Target: < 60,000 execution gas.
- verifyInclusion: eth_estimateGas of a call with a depth-20 audit path (a leaf of the
  2^20 tree). Target: < 15,000 execution gas.
- appendLeaves: a curated log, batches of 1, 10 and 100 leaves; execution gas per leaf.

Usage: ``.venv/bin/python benchmarks/bench_gas.py [--leaves 1048576]``; exits 1 when a
target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from web3 import Web3

from contracts import load_artifact
from contracts.devnet_accounts import ANVIL_DEFAULT_KEY
from ledger.chain import LedgerContract, LogKind
from ledger.logstore import LogStore
from ledger.multiformats import raw_cid
from ledger.rfc9162 import leaf_hash

GYM = Path(sys.executable).parent / "gym"
TARGETS = {"anchor": 60_000, "verifyInclusion": 15_000}


def calldata_gas(data: bytes) -> tuple[int, int]:
    """(EIP-2028 calldata gas, EIP-7623 floor of the whole transaction)."""
    zeros = data.count(0)
    tokens = zeros + 4 * (len(data) - zeros)
    return 4 * tokens, 21_000 + 10 * tokens


def execution(total: int, data: bytes) -> tuple[int | None, str]:
    standard, floor = calldata_gas(data)
    if total == floor:
        return None, "EIP-7623 floor charged"
    return total - 21_000 - standard, ""


def traced_execution(w3: Web3, to: str, data: bytes) -> int:
    """EVM execution gas of a call (opcodes only), from ``debug_traceCall``'s struct logs."""
    trace = w3.provider.make_request("debug_traceCall", [
        {"to": to, "data": "0x" + data.hex()}, "latest", {"disableStorage": True}])
    steps = trace["result"]["structLogs"]
    return steps[0]["gas"] - steps[-1]["gas"] + steps[-1]["gasCost"]


def entries(n: int, offset: int = 0) -> list[bytes]:
    return [b'{"type":"experience","v":1,"text":"learned rule number %d"}' % i
            for i in range(offset, offset + n)]


def devnet(workdir: Path) -> tuple[dict, dict]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYM_")}
    env.update(GYM_DATA_DIR=str(workdir / "data"), GYM_DEPLOYMENT_FILE=str(workdir / "d.json"),
               GYM_ANVIL_PORT="0", GYM_IPFS_PORT="0")
    subprocess.run([str(GYM), "devnet", "up"], env=env, check=True, capture_output=True)
    return json.loads((workdir / "d.json").read_text()), env


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--leaves", type=int, default=1 << 20)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-gas-"))
    manifest, env = devnet(workdir)
    try:
        w3 = Web3(Web3.HTTPProvider(manifest["rpc_url"]))
        address = manifest["contracts"]["ExperienceLedger"]["address"]
        ledger = LedgerContract(w3, address, load_artifact("ExperienceLedger").abi, ANVIL_DEFAULT_KEY)
        rows = []

        start = time.perf_counter()
        store = LogStore(f"sqlite:///{workdir / 'bench.sqlite'}")
        store.create_log("bench")
        for i in range(0, args.leaves, 100_000):
            store.append("bench", entries(min(100_000, args.leaves - i), i))
        print(f"filled a log of {args.leaves} leaves in {time.perf_counter() - start:.1f} s")
        log_id, _ = ledger.create_log("bench")
        batch = raw_cid(b"bench batch manifest")  # the contract only records it
        ledger.anchor(log_id, 1, store.root("bench", 1), batch, [])
        proof = store.consistency_proof("bench", 1, args.leaves)
        tx = ledger.anchor(log_id, args.leaves, store.root("bench", args.leaves), batch, proof)
        data = bytes(w3.eth.get_transaction(tx.tx_hash)["input"])
        rows.append(("anchor", f"size 1 -> {args.leaves}, proof of {len(proof)}",
                     tx.gas_used, *execution(tx.gas_used, data)))

        index = args.leaves // 3
        path = store.inclusion_proof("bench", index, args.leaves)
        leaf = leaf_hash(entries(1, index)[0])
        call = ledger.contract.functions.verifyInclusion(leaf, index, args.leaves, path,
                                                         store.root("bench", args.leaves))
        assert call.call()
        total = call.estimate_gas()
        data = bytes.fromhex(call._encode_transaction_data()[2:])
        exec_gas, note = execution(total, data)
        if exec_gas is None:  # floor-bound: sum the opcodes' gas from a trace instead
            exec_gas, note = traced_execution(w3, ledger.address, data), "(traced; floor charged)"
        rows.append(("verifyInclusion", f"depth {len(path)}", total, exec_gas, note))

        curated, _ = ledger.create_log("bench-library", LogKind.CURATED)
        offset = 0
        for n in (1, 10, 100):
            batch_entries = entries(n, 10_000_000 + offset)
            offset += n
            tx = ledger.append_leaves(curated, [leaf_hash(e) for e in batch_entries],
                                      [raw_cid(e) for e in batch_entries])
            data = bytes(w3.eth.get_transaction(tx.tx_hash)["input"])
            exec_gas, note = execution(tx.gas_used, data)
            per_leaf = None if exec_gas is None else exec_gas // n
            rows.append((f"appendLeaves x{n}", "execution gas per leaf: "
                         + ("-" if per_leaf is None else f"{per_leaf:,}"),
                         tx.gas_used, exec_gas, note))
        store.engine.dispose()
    finally:
        subprocess.run([str(GYM), "devnet", "down"], env=env, check=False, capture_output=True)
        shutil.rmtree(workdir, ignore_errors=True)

    missed = False
    print(f"{'call':<18} {'what':<34} {'total gas':>10} {'execution':>10}  target")
    for name, what, total, exec_gas, note in rows:
        target = TARGETS.get(name)
        verdict = ""
        if target is not None and exec_gas is not None:
            verdict = f"< {target:,}: ratio {exec_gas / target:.2f} " + (
                "ok" if exec_gas < target else "MISSED")
            missed |= exec_gas >= target
        exec_text = "-" if exec_gas is None else f"{exec_gas:,}"
        print(f"{name:<18} {what:<34} {total:>10,} {exec_text:>10}  {verdict} {note}".rstrip())
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
