"""The DAO's wiring: the ledger runtime plus the governor, token, timelock, NodeRegistry,
VerifierCommittee and RewardDistributor of a deployment, and who signs.

``GovernanceRuntime.client(account=None)`` returns a ``GovernanceClient`` that signs, when it
first sends, with Anvil's public dev account ``account`` on the devnet (chain id 31337), else
``GYM_VOTER_KEY``, else on the devnet Anvil's account 0 (``contracts.signing``). The CLI root builds the runtime from the deployment (``devnet/runtime.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from governance.errors import GovernanceError
from ledger.runtime import LedgerRuntime

if TYPE_CHECKING:  # web3 loads when a command first needs the chain
    from governance.client import GovernanceClient


class GovernanceSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GYM_", extra="ignore")

    voter_key: SecretStr | None = None  # GYM_VOTER_KEY: signs votes, proposals, delegations
    node_registry: str | None = None  # GYM_NODE_REGISTRY: overrides the deployment's registry


@dataclass(frozen=True)
class GovernanceConfig:
    """Where the DAO lives (read from the deployment)."""

    governor_address: str
    governor_abi: list[dict]
    token_address: str
    token_abi: list[dict]
    timelock_address: str
    timelock_abi: list[dict]
    curated_log_id: int
    node_registry_address: str | None = None  # NodeRegistry governed by the timelock
    committee_address: str | None = None  # VerifierCommittee governed by the timelock
    reward_distributor_address: str | None = None  # RewardDistributor governed by the timelock


@dataclass
class GovernanceRuntime:
    ledger: LedgerRuntime
    config: Callable[[], GovernanceConfig]  # reads the deployment when called

    def client(self, account: int | None = None) -> GovernanceClient:
        from governance.client import GovernanceClient

        ledger_contract = self.ledger.contract
        config = self.config()
        w3 = ledger_contract.w3
        registry = GovernanceSettings().node_registry or config.node_registry_address
        return GovernanceClient(
            w3, config.governor_address, config.governor_abi, config.token_address,
            config.token_abi, ledger_contract, config.timelock_address, config.timelock_abi,
            curated_log_id=config.curated_log_id,
            key_source=lambda: voter_key(w3.eth.chain_id, account),
            from_block=self.ledger.chain.deployment_block, node_registry_address=registry,
            committee_address=config.committee_address,
            reward_distributor_address=config.reward_distributor_address)


VOTER_KEY_ENV = "GYM_VOTER_KEY"


def voter_key(chain_id: int, account: int | None) -> str:
    """The key that signs, by ``contracts.signing.signing_key``'s rule: ``--account N`` (devnet
    only), else GYM_VOTER_KEY, else on the devnet Anvil's account 0 (said on stderr)."""
    from contracts.signing import signing_key

    key = GovernanceSettings().voter_key
    return signing_key(chain_id, VOTER_KEY_ENV, key.get_secret_value() if key else None, account)


def runtime_of(ctx: Any) -> GovernanceRuntime:
    """The ``GovernanceRuntime`` a command finds in ``ctx.obj`` (a click/typer context)."""
    if not isinstance(ctx.obj, GovernanceRuntime):
        raise GovernanceError("the gov commands need a GovernanceRuntime in ctx.obj (run them "
                              "via gym)")
    return ctx.obj
