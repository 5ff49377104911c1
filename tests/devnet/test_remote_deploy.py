"""`gym deploy` to a network other than the devnet (issue "past one machine"): a second Anvil
with another chain id stands in for it. The dry run prints the addresses and the gas and sends
nothing; the real run gets the same addresses and writes a manifest that `join`'s checks
accept; a chain id other than the expected one, and a public devnet key, are refused first."""

from __future__ import annotations

import json
import re

import pytest
from eth_account import Account
from eth_utils import keccak
from web3 import Web3

from contracts import load_artifact
from contracts.devnet_accounts import ANVIL_DEV_KEYS
from contracts.gym_token import GYM
from devnet.anvil import start_anvil, stop_anvil
from devnet.deploy import Deployment, foreign_problems

pytestmark = pytest.mark.anvil
SEPOLIA = 11155111


def test_deploy_to_another_chain_with_a_dry_run_first(gym_env, tmp_path):
    chain = start_anvil(tmp_path / "sepolia", "127.0.0.1", 0, SEPOLIA)
    try:
        w3 = Web3(Web3.HTTPProvider(chain.rpc_url))
        key = "0x" + keccak(b"a deployer of our own").hex()
        deployer = Account.from_key(key).address
        w3.provider.make_request("anvil_setBalance", [deployer, hex(10**20)])
        holders = [Account.from_key(keccak(f"holder {i}".encode())).address for i in range(2)]
        manifest = tmp_path / "sepolia.json"
        env = {"GYM_RPC_URL": chain.rpc_url, "GYM_DEPLOYER_KEY": key,
               "GYM_DEPLOYMENT_FILE": str(manifest)}
        args = ["deploy", "--holder", holders[0], "--holder", holders[1]]

        wrong = gym_env.run(*args, "--expect-chain-id", "1", extra_env=env)
        assert wrong.returncode == 1 and "chain id is 11155111, not the 1 you expect" in \
            wrong.stderr, wrong.stderr
        public = gym_env.run(*args, "--expect-chain-id", str(SEPOLIA),
                             extra_env={**env, "GYM_DEPLOYER_KEY": ANVIL_DEV_KEYS[0]})
        assert public.returncode == 1 and "public devnet keys" in public.stderr

        dry = gym_env.run(*args, "--expect-chain-id", str(SEPOLIA), "--dry-run", extra_env=env,
                          timeout=300)
        assert dry.returncode == 0, dry.stderr
        assert "nothing was sent" in dry.stdout and re.search(r"[\d,]+ gas; at", dry.stdout)
        planned = dict(re.findall(r"│ (\w+)\s+│ (0x[0-9a-fA-F]{40})", dry.stdout))
        assert set(planned) == {"ExperienceLedger", "GymToken", "TimelockController",
                                "GymGovernor", "VerifierCommittee", "NodeRegistry",
                                "RewardDistributor"}
        assert w3.eth.get_transaction_count(deployer) == 0 and not manifest.exists()

        real = gym_env.run(*args, "--expect-chain-id", str(SEPOLIA), extra_env=env,
                           timeout=300)
        assert real.returncode == 0, real.stderr
        deployment = Deployment.load(manifest)
        assert {n: c.address for n, c in deployment.contracts.items()} == planned
        assert deployment.chain_id == SEPOLIA and foreign_problems(w3, deployment) == []
        token = w3.eth.contract(address=planned["GymToken"], abi=load_artifact("GymToken").abi)
        assert [token.functions.balanceOf(h).call() for h in holders] == [1000 * GYM] * 2
        assert json.loads(manifest.read_text())["governance"]["holders"] == holders
        # the treasury, approved for the distributor; the deployer kept no role in the timelock
        timelock, distributor = planned["TimelockController"], planned["RewardDistributor"]
        assert token.functions.balanceOf(timelock).call() == 1_250 * GYM
        assert token.functions.allowance(timelock, distributor).call() == 1_250 * GYM
        tl = w3.eth.contract(address=timelock, abi=load_artifact("TimelockController").abi)
        assert tl.functions.getMinDelay().call() == 60
        w3.provider.make_request("anvil_impersonateAccount", [timelock])  # as a proposal would
        w3.provider.make_request("anvil_setBalance", [timelock, hex(10**18)])
        tl.functions.grantRole(tl.functions.PROPOSER_ROLE().call(), deployer).transact(
            {"from": timelock})
        assert foreign_problems(w3, deployment) == [
            f"the deployer {deployer} still holds the timelock's PROPOSER_ROLE"]
        again = gym_env.run(*args, "--expect-chain-id", str(SEPOLIA), extra_env=env)
        assert again.returncode != 0 and "exists" in again.stderr  # no manifest overwritten
    finally:
        stop_anvil(tmp_path / "sepolia")
