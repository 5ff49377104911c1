"""Dashboard restart on a chain holding many governance events (issue "past one machine").

On a fresh `gym devnet up`, ``--proposals`` (1,000) proposals are made and each gets a vote
from four of the devnet's holders: 5,000 governance events (sent with automine off, many per
block). Then, in the same run:

- baseline ("from block 0"): a ``GovernorIndexer`` without a database reads every event from
  the deployment block, as the dashboard did at every start before the index was durable;
- now ("resume"): the same indexer over the database (``ledger.event_index``, SQLite in a
  temporary directory), filled once, is built again and synced, as a restarted dashboard is:
  it loads its records and reads only the blocks after its last one.

Prints both times and the ratio; exits 1 if the resume takes 2 s or more or the two indexes
differ. ``.venv/bin/python benchmarks/bench_dashboard_resume.py [--proposals 1000]``
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from eth_account import Account
from fresh_devnet import fresh_devnet
from web3 import Web3

from contracts import load_artifact
from devnet.deploy import Deployment
from devnet.settings import ANVIL_DEV_KEYS
from governance.dashboard.indexer import GovernorIndexer
from ledger.event_index import EventIndexStore
from ledger.logstore import LogStore

TARGET_S = 2.0


def send_all(w3: Web3, calls: list[tuple[str, object, int]]) -> None:
    """Send ``(key, contract call, gas)`` unmined, then mine until every one is in a block."""
    nonces: dict[str, int] = {}
    chain_id = w3.eth.chain_id
    for key, call, gas in calls:
        account = Account.from_key(key)
        nonce = nonces.setdefault(account.address, w3.eth.get_transaction_count(account.address))
        nonces[account.address] = nonce + 1
        tx = call.build_transaction({"from": account.address, "nonce": nonce, "gas": gas,
                                     "chainId": chain_id, "maxFeePerGas": 10**10,
                                     "maxPriorityFeePerGas": 1})
        w3.eth.send_raw_transaction(account.sign_transaction(tx).raw_transaction)
    while any(w3.eth.get_transaction_count(a) < n for a, n in nonces.items()):
        w3.provider.make_request("evm_mine", [])


def make_events(w3: Web3, deployment: Deployment, proposals: int) -> int:
    governor = w3.eth.contract(address=deployment.contracts["GymGovernor"].address,
                               abi=load_artifact("GymGovernor").abi)
    w3.provider.make_request("evm_setAutomine", [False])
    try:
        target, calldata = governor.address, governor.encode_abi("setVotingDelay", [1])
        created = [(ANVIL_DEV_KEYS[0], governor.functions.propose(
            [target], [0], [calldata], f"bench proposal {i}"), 600_000) for i in range(proposals)]
        send_all(w3, created)
        w3.provider.make_request("evm_increaseTime", [3])
        w3.provider.make_request("evm_mine", [])
        ids = [governor.functions.hashProposal([target], [0], [calldata], Web3.keccak(
            text=f"bench proposal {i}")).call() for i in range(proposals)]
        votes = [(ANVIL_DEV_KEYS[voter], governor.functions.castVote(pid, 1), 200_000)
                 for pid in ids for voter in (1, 2, 3, 4)]
        send_all(w3, votes)
    finally:
        w3.provider.make_request("evm_setAutomine", [True])
    return len(created) + len(votes)


def indexer(w3: Web3, deployment: Deployment, durable: EventIndexStore | None
            ) -> GovernorIndexer:
    governor = w3.eth.contract(address=deployment.contracts["GymGovernor"].address,
                               abi=load_artifact("GymGovernor").abi)
    return GovernorIndexer(w3, governor, deployment.contracts["ExperienceLedger"].address,
                           load_artifact("ExperienceLedger").abi, deployment.curated_log_id,
                           from_block=deployment.deployment_block, durable=durable)


def summary(index: GovernorIndexer) -> list[tuple[int, int]]:
    return [(p.proposal_id, p.votes_for) for p in index.proposals()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--proposals", type=int, default=1000)
    args = parser.parse_args()
    with fresh_devnet("bench-dashboard-") as (workdir, deployment):
        w3 = Web3(Web3.HTTPProvider(deployment.rpc_url))
        start = time.perf_counter()
        events = make_events(w3, deployment, args.proposals)
        print(f"made {events} governance events in {time.perf_counter() - start:.1f} s")

        start = time.perf_counter()
        scratch = indexer(w3, deployment, None)
        scratch.sync()
        from_zero = time.perf_counter() - start

        store = LogStore(f"sqlite:///{workdir / 'index.sqlite'}")
        source = f"bench:{deployment.contracts['GymGovernor'].address}"
        indexer(w3, deployment, EventIndexStore(store.engine, source)).sync()  # filled once
        start = time.perf_counter()
        resumed = indexer(w3, deployment, EventIndexStore(store.engine, source))
        resumed.sync()
        resume = time.perf_counter() - start
        same = summary(resumed) == summary(scratch) and len(summary(scratch)) == args.proposals
        store.engine.dispose()
    print(json.dumps({"events": events, "from_block_0_s": round(from_zero, 2),
                      "resume_s": round(resume, 3), "ratio": round(resume / from_zero, 3)}))
    print(f"dashboard index over {events} events: from block 0 {from_zero:.2f} s, resumed "
          f"from the database {resume:.3f} s ({from_zero / resume:.0f}x faster)")
    if not same:
        print("FAIL: the resumed index differs from the one read from block 0")
        return 1
    if resume >= TARGET_S:
        print(f"FAIL: resuming took {resume:.2f} s, the target is under {TARGET_S:g} s")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
