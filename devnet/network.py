"""Bring the local network up, check it, take it down: the logic behind ``gym devnet``.

``devnet_up`` is idempotent: with a running Anvil whose chain still holds the recorded
deployment it changes nothing; when the chain lost the deployment (Anvil restarted from
scratch, another chain behind the URL) it deploys again and rewrites ``deployment.json``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from devnet.anvil import AnvilProcess, running_anvil, start_anvil, stop_anvil
from devnet.deploy import (
    Deployment,
    GovernanceParams,
    check_build,
    connect,
    deploy_all,
    deployment_problems,
)
from devnet.errors import DeploymentFileError, RpcUnreachableError
from devnet.settings import GymSettings


@dataclass
class DevnetUp:
    deployment: Deployment
    anvil: AnvilProcess | None  # None when GYM_RPC_URL names an external node
    started_anvil: bool  # this call started Anvil
    deployed: bool  # this call deployed the contracts
    reason: str  # why it deployed, or why it did not need to


@dataclass
class DevnetStatus:
    rpc_url: str
    anvil: AnvilProcess | None
    deployment: Deployment | None
    problems: list[str] = field(default_factory=list)
    block_number: int | None = None

    @property
    def healthy(self) -> bool:
        return not self.problems


def devnet_up(settings: GymSettings, port: int | None = None, redeploy: bool = False) -> DevnetUp:
    """Start Anvil unless it runs (or an external RPC is set), and deploy unless deployed."""
    check_build()
    anvil, started = None, False
    if settings.rpc_url:
        rpc_url = settings.rpc_url
    else:
        anvil = running_anvil(settings.data_dir)
        if anvil is None:
            anvil = start_anvil(
                settings.data_dir, settings.anvil_host,
                settings.anvil_port if port is None else port, settings.chain_id,
            )
            started = True
        rpc_url = anvil.rpc_url
    w3 = connect(rpc_url)

    reason = "redeploy requested" if redeploy else ""
    if not redeploy:
        try:
            existing = Deployment.load(settings.deployment_file)
        except DeploymentFileError:
            exists = settings.deployment_file.exists()
            reason = "deployment.json was unreadable" if exists else "no deployment yet"
        else:
            problems = deployment_problems(w3, existing)
            if not problems:
                return DevnetUp(existing, anvil, started, False, "deployment matches the chain")
            reason = problems[0]
    governance = GovernanceParams(timelock_min_delay=settings.timelock_min_delay)
    deployment = deploy_all(w3, settings.deployer_key.get_secret_value(), rpc_url, governance)
    deployment.save(settings.deployment_file)
    return DevnetUp(deployment, anvil, started, True, reason)


def devnet_status(settings: GymSettings) -> DevnetStatus:
    """What runs and whether the chain holds the recorded deployment.

    Raises ``DeploymentFileError`` when there is no readable deployment and
    ``RpcUnreachableError`` when the chain does not answer.
    """
    deployment = Deployment.load(settings.deployment_file)
    anvil = None if settings.rpc_url else running_anvil(settings.data_dir)
    rpc_url = settings.rpc_url or (anvil.rpc_url if anvil else deployment.rpc_url)
    try:
        w3 = connect(rpc_url)
    except RpcUnreachableError:
        if anvil is None and not settings.rpc_url:
            raise RpcUnreachableError(
                f"the devnet is not running (nothing answers at {rpc_url}): run `gym devnet up`"
            ) from None
        raise
    status = DevnetStatus(rpc_url, anvil, deployment, block_number=w3.eth.block_number)
    status.problems = deployment_problems(w3, deployment)
    return status


def devnet_down(settings: GymSettings) -> AnvilProcess | None:
    """Stop the Anvil that ``gym devnet up`` started; never any other process."""
    return stop_anvil(settings.data_dir)
