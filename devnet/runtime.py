"""The installation's wiring: the ledger and governance runtimes built from ``GymSettings``
and the deployment manifest.

This is where settings meet packages: the CLI root (``devnet/cli.py``) and the demo
(``devnet/demo.py``) call these, and hand the runtimes to the packages' commands and flows.
The deployment is read only when something first needs the chain, so commands that touch only
the database or the content store work before `gym devnet up`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import contracts
from devnet.errors import DevnetError
from ledger.runtime import ChainConfig, LedgerRuntime

if TYPE_CHECKING:
    from devnet.settings import GymSettings
    from governance.runtime import GovernanceRuntime

PUBLISHER_KEY_ENV = "GYM_PUBLISHER_KEY"


def ledger_runtime(settings: GymSettings) -> LedgerRuntime:
    """The ledger's dependencies; the deployment is read only when one needs the chain."""

    publisher_key = (settings.publisher_key.get_secret_value() if settings.publisher_key
                     else None)

    def chain_config() -> ChainConfig:
        from contracts.signing import signing_key
        from devnet.deploy import Deployment

        deployment = Deployment.load(settings.deployment_file)
        ledger_contract = deployment.contracts.get("ExperienceLedger")
        if ledger_contract is None:
            raise DevnetError(f"{settings.deployment_file} has no ExperienceLedger: run "
                              "`gym devnet up --redeploy`")
        return ChainConfig(
            rpc_url=settings.rpc_url or deployment.rpc_url,
            address=ledger_contract.address,
            abi=contracts.load_artifact("ExperienceLedger").abi,
            private_key=None,
            chain_id=deployment.chain_id,
            deployment_block=deployment.deployment_block,
            choose_key=lambda chain_id, account: signing_key(
                chain_id, PUBLISHER_KEY_ENV, publisher_key, account),
            curated_log_id=deployment.curated_log_id,
        )

    return LedgerRuntime(
        database_url=settings.database_url,
        content_dir=settings.data_dir / "ipfs",
        ipfs_api=settings.ipfs_api,
        ipfs_api_auth=settings.ipfs_api_auth.get_secret_value() if settings.ipfs_api_auth else None,
        chain_config=chain_config,
    )


def governance_runtime(settings: GymSettings, ledger_rt: LedgerRuntime) -> GovernanceRuntime:
    """The DAO's dependencies: the ledger's, plus the governor, token, timelock, registry,
    committee and reward distributor."""
    from governance.runtime import GovernanceConfig, GovernanceRuntime


    def config() -> GovernanceConfig:
        from devnet.deploy import Deployment

        deployment = Deployment.load(settings.deployment_file)
        missing = [name for name in ("GymGovernor", "GymToken", "TimelockController")
                   if name not in deployment.contracts]
        if missing or deployment.curated_log_id is None:
            lacking = ", ".join(missing) or "no curated library"
            raise DevnetError(f"{settings.deployment_file} has no DAO ({lacking}): run "
                              "`gym devnet up --redeploy`")
        return GovernanceConfig(
            governor_address=deployment.contracts["GymGovernor"].address,
            governor_abi=contracts.load_artifact("GymGovernor").abi,
            token_address=deployment.contracts["GymToken"].address,
            token_abi=contracts.load_artifact("GymToken").abi,
            timelock_address=deployment.contracts["TimelockController"].address,
            timelock_abi=contracts.load_artifact("TimelockController").abi,
            curated_log_id=deployment.curated_log_id,
            node_registry_address=(deployment.contracts["NodeRegistry"].address
                                   if "NodeRegistry" in deployment.contracts else None),
            committee_address=(deployment.contracts["VerifierCommittee"].address
                               if "VerifierCommittee" in deployment.contracts else None),
            reward_distributor_address=(deployment.contracts["RewardDistributor"].address
                                        if "RewardDistributor" in deployment.contracts else None),
        )

    return GovernanceRuntime(ledger_rt, config)


def deployed_address(settings: GymSettings, name: str) -> str:
    """The address of contract ``name`` in the deployment."""
    from devnet.deploy import Deployment

    deployment = Deployment.load(settings.deployment_file)
    if name not in deployment.contracts:
        raise DevnetError(f"{settings.deployment_file} has no {name}: run "
                          "`gym devnet up --redeploy`")
    return deployment.contracts[name].address
