"""Helpers shared by the test folders (importable as `gym_helpers`; tests/conftest.py puts
this folder on the path): an independent IPFS CID, a signed transaction on a devnet, and a
running `gym dashboard`."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
from eth_account import Account
from web3 import Web3

from devnet.anvil import free_port
from ledger.evm import padded_gas

GYM = Path(sys.executable).parent / "gym"


def kubo_cid(data: bytes) -> str:
    """What `ipfs add --cid-version=1` (raw leaves) gives, computed by aleph-cid (Rust),
    independent of ledger.unixfs."""
    import aleph_cid

    hasher = aleph_cid.CidHasher.for_ipfs_v1_raw_leaves()
    hasher.update(data)
    return hasher.finalize()


def send(w3: Web3, call, key: str):
    """Sign `call` (a contract function call) with `key`, send it, and return its receipt,
    after checking that it succeeded. Gas is padded as ``ledger.evm`` pads it: GymToken's
    clock is the timestamp, so a bare estimate can go stale before the block is mined."""
    account = Account.from_key(key)
    tx = call.build_transaction({"from": account.address, "chainId": w3.eth.chain_id,
                                 "nonce": w3.eth.get_transaction_count(account.address)})
    tx["gas"] = padded_gas(tx["gas"], w3.eth.get_block("latest")["gasLimit"])
    tx_hash = w3.eth.send_raw_transaction(account.sign_transaction(tx).raw_transaction)
    receipt = w3.eth.wait_for_transaction_receipt(tx_hash)
    assert receipt["status"] == 1
    return receipt


@contextlib.contextmanager
def gym_dashboard(env: dict[str, str], stdout, output: Callable[[subprocess.Popen], str],
                  *args: str) -> Iterator[tuple[subprocess.Popen, str]]:
    """`gym dashboard [ARGS]` on a free loopback port, its output to `stdout`, once it answers
    /health (the test fails with `output(process)` if it exits first); yields the process and
    its base URL, and stops it when the block ends."""
    port = free_port()
    proc = subprocess.Popen([str(GYM), "dashboard", "--port", str(port), *args], env=env,
                            stdout=stdout, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, output(proc)
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            assert time.monotonic() < deadline, "gym dashboard did not answer /health"
            time.sleep(0.2)
        yield proc, base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
