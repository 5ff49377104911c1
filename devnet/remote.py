"""`gym deploy`: every contract to an EVM network other than the devnet (docs/across-machines.md
"Another chain").

Differences from `gym devnet up` (``devnet.network``), all on purpose:

- the RPC must report the chain id the operator expects (``--expect-chain-id``), and may not
  be the devnet's; nothing is sent otherwise;
- the deployer's key is the operator's own (an environment variable or an encrypted keystore),
  never one of Anvil's public devnet keys;
- the tokens go to the ``holders`` given (addresses); they delegate later themselves
  (`gym gov delegate`), since their keys are not the deployer's;
- a dry run (``plan_deployment``) runs the very same deployment on a local Anvil fork of the
  network, so the addresses it prints are the ones a real run gets (they follow from the
  deployer's nonce) and the gas is what each transaction used; nothing reaches the network.

The manifest written is the same as the devnet's (``devnet.deploy.Deployment``), and is
published to the content endpoint for other parties to join (`gym devnet join CID`).
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from contracts.devnet_accounts import ANVIL_DEV_KEYS, DEVNET_CHAIN_ID
from devnet.anvil import start_anvil, stop_anvil
from devnet.deploy import Deployer, Deployment, GovernanceParams, connect, deploy_all
from devnet.errors import DevnetError

FORK_BALANCE_WEI = 10**24  # what the deployer holds on the fork, so a plan runs whatever it has


@dataclass(frozen=True)
class DeployPlan:
    """What a deployment will do: the addresses, the gas of each transaction, and what the
    deployer holds and the gas costs at the network's price now."""

    chain_id: int
    deployer: str
    addresses: dict[str, str]
    spent: list[tuple[str, int]]  # (transaction, gas used)
    gas_price_wei: int
    balance_wei: int

    @property
    def total_gas(self) -> int:
        return sum(gas for _, gas in self.spent)

    @property
    def cost_wei(self) -> int:
        return self.total_gas * self.gas_price_wei


def check_target(w3, expect_chain_id: int, key: str) -> None:
    """Refuse, before anything is sent, a chain other than the one expected, the devnet, and
    a public devnet key."""
    chain_id = w3.eth.chain_id
    if chain_id != expect_chain_id:
        raise DevnetError(f"the RPC's chain id is {chain_id}, not the {expect_chain_id} you "
                          "expect (--expect-chain-id): nothing was sent")
    if chain_id == DEVNET_CHAIN_ID:
        raise DevnetError(f"chain {chain_id} is the devnet: deploy there with `gym devnet up`")
    if key.lower().removeprefix("0x") in {k.lower().removeprefix("0x") for k in ANVIL_DEV_KEYS}:
        raise DevnetError(f"the deployer key is one of Anvil's public devnet keys, which anyone "
                          f"can spend from on chain {chain_id}: use a key of your own "
                          "(--key-env or --keystore)")


def plan_deployment(rpc_url: str, key: str, governance: GovernanceParams,
                    holders: tuple[str, ...]) -> DeployPlan:
    """The deployment run on a local Anvil fork of ``rpc_url`` (nothing reaches the network):
    its addresses and the gas of each transaction."""
    from eth_account import Account

    real = connect(rpc_url)
    deployer_address = Account.from_key(key).address
    workdir = Path(tempfile.mkdtemp(prefix="gym-deploy-fork-"))
    try:
        fork = start_anvil(workdir, "127.0.0.1", 0, real.eth.chain_id, fork_url=rpc_url)
        w3 = connect(fork.rpc_url)
        w3.provider.make_request("anvil_setBalance", [deployer_address, hex(FORK_BALANCE_WEI)])
        deployer = Deployer(w3, key)
        deployment = deploy_all(w3, key, rpc_url, governance, holders=holders,
                                deployer=deployer)
    finally:
        stop_anvil(workdir)
        shutil.rmtree(workdir, ignore_errors=True)
    return DeployPlan(real.eth.chain_id, deployer_address,
                      {name: c.address for name, c in deployment.contracts.items()},
                      deployer.spent, real.eth.gas_price, real.eth.get_balance(deployer_address))


def deploy_remote(rpc_url: str, key: str, governance: GovernanceParams,
                  holders: tuple[str, ...]) -> Deployment:
    """Deploy every contract to ``rpc_url`` (checked with ``check_target`` first); the
    manifest, not saved."""
    return deploy_all(connect(rpc_url), key, rpc_url, governance, holders=holders)


__all__ = ["DeployPlan", "check_target", "deploy_remote", "plan_deployment"]
