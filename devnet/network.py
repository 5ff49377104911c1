"""Bring the local network up, check it, take it down: the logic behind ``gym devnet``.

``devnet_up`` is idempotent: with a running Anvil whose chain still holds the recorded
deployment it changes nothing; when the chain lost the deployment (Anvil restarted from
scratch, another chain behind the URL) it deploys again and rewrites ``deployment.json``.
Beside the chain it runs the content service (``devnet.content_service``: `gym ipfs serve`)
unless ``GYM_IPFS_API`` names one, and records the endpoint in the manifest (``content_api``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from devnet.anvil import AnvilProcess, running_anvil, start_anvil, stop_anvil
from devnet.content_service import (
    ContentService,
    Starting,
    answers,
    launch_content_service,
    running_content_service,
    stop_content_service,
)
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
from ledger.addresses import announce_url, without_credentials


@dataclass
class DevnetUp:
    deployment: Deployment
    anvil: AnvilProcess | None  # None when GYM_RPC_URL names an external node
    started_anvil: bool  # this call started Anvil
    deployed: bool  # this call deployed the contracts
    reason: str  # why it deployed, or why it did not need to
    content: ContentService | None = None  # None when GYM_IPFS_API names the content endpoint
    started_content: bool = False  # this call started the content service
    manifest_cid: str | None = None  # the manifest, published to the content endpoint
    notes: list[str] = field(default_factory=list)  # where announced URLs came from


@dataclass
class DevnetStatus:
    rpc_url: str
    anvil: AnvilProcess | None
    deployment: Deployment | None
    problems: list[str] = field(default_factory=list)
    block_number: int | None = None
    content: ContentService | None = None  # the content service `gym devnet up` started
    content_api: str | None = None  # the content endpoint this party uses (checked)
    advice: str | None = None  # what to do about the chain's problems, for this party

    @property
    def healthy(self) -> bool:
        return not self.problems


def devnet_up(settings: GymSettings, port: int | None = None, redeploy: bool = False) -> DevnetUp:
    """Start Anvil unless it runs (or an external RPC is set), and deploy unless deployed."""
    check_build()
    if not settings.rpc_url and not (settings.announce_host or settings.rpc_public_url):
        # which address to announce, asked before anything starts (0: any port will do)
        announce_url(listen_host=settings.anvil_host, port=0, option="GYM_ANNOUNCE_HOST")
    content = _content_service(settings)  # it starts while Anvil starts and contracts deploy
    try:
        anvil, started, rpc_url = _chain(settings, port)
        deployment, deployed, reason = _deployment(settings, connect(rpc_url), rpc_url,
                                                   redeploy)
        service = content.wait() if isinstance(content, Starting) else content
    except BaseException:
        if isinstance(content, Starting):
            content.cancel()
        raise
    notes: list[str] = []
    public_rpc = _announced(settings, anvil, rpc_url, notes)
    content_api = (without_credentials(settings.ipfs_api) if settings.ipfs_api
                   else _announced_content(settings, service, notes))
    if (deployment.content_api, deployment.rpc_url) != (content_api, public_rpc):
        deployment.content_api, deployment.rpc_url = content_api, public_rpc
        deployment.save(settings.deployment_file)
    manifest_cid = _content_store(settings).add_file(
        deployment.model_dump_json(indent=2).encode(), pin=True)
    return DevnetUp(deployment, anvil, started, deployed, reason, service,
                    isinstance(content, Starting), manifest_cid, notes)


def _announced(settings: GymSettings, anvil: AnvilProcess | None, rpc_url: str,
               notes: list[str]) -> str:
    """The chain's URL for the manifest: what other hosts dial (``ledger.addresses``)."""
    if anvil is None:  # GYM_RPC_URL: the party's own setting, announced as it is
        return settings.rpc_public_url or rpc_url
    announced = announce_url(listen_host=anvil.host, port=anvil.port,
                             option="GYM_ANNOUNCE_HOST (or GYM_RPC_PUBLIC_URL)",
                             explicit=settings.rpc_public_url or settings.announce_host)
    if announced.loopback and not settings.announce_host and not settings.rpc_public_url:
        notes.append("single machine: the chain and the content service listen on loopback, "
                     "which only this host reaches; for parties on other hosts start them with "
                     "GYM_ANVIL_HOST=0.0.0.0 (docs/across-machines.md)")
    elif announced.note:
        notes.append(f"chain: {announced.note}")
    return announced.url


def _announced_content(settings: GymSettings, service: ContentService, notes: list[str]) -> str:
    announced = announce_url(listen_host=service.host, port=service.port,
                             option="GYM_ANNOUNCE_HOST (or GYM_IPFS_PUBLIC_URL)",
                             explicit=settings.ipfs_public_url or settings.announce_host)
    if announced.note and not announced.loopback:
        notes.append(f"content endpoint: {announced.note}")
    return announced.url


def _content_store(settings: GymSettings):
    from ledger.content import open_content_store

    return open_content_store(settings.ipfs_api, settings.data_dir / "ipfs")


def devnet_join(settings: GymSettings, cid: str) -> Deployment:
    """Join the deployment whose manifest another party published as ``cid``: fetched from
    the content endpoint (``GYM_IPFS_API``), checked against the chain at ``GYM_RPC_URL``
    (``deploy.foreign_problems``: its blocks, this build's code, the contracts' wiring), and
    written to ``GYM_DEPLOYMENT_FILE`` with that RPC URL. ``DevnetError`` says why not."""
    from devnet.deploy import MAX_MANIFEST_BYTES, foreign_problems
    from devnet.errors import DevnetError

    if not settings.rpc_url:
        raise DevnetError("joining a deployment needs the chain it is on: set GYM_RPC_URL")
    deployment = Deployment.from_published(
        _content_store(settings).cat(cid, max_bytes=MAX_MANIFEST_BYTES), cid)
    problems = foreign_problems(connect(settings.rpc_url), deployment)
    if problems:
        raise DevnetError(f"the chain at {settings.rpc_url} does not hold the deployment {cid}: "
                          + "; ".join(problems[:3]))
    if settings.deployment_file.exists():
        try:
            current = Deployment.load(settings.deployment_file)
        except DeploymentFileError:
            current = None
        if current is not None and current.contracts != deployment.contracts:
            raise DevnetError(f"{settings.deployment_file} holds another deployment: move it "
                              "away (or set GYM_DEPLOYMENT_FILE) to join this one")
    # the party's own settings win over the manifest's: the deployer's URLs are as the
    # deployer's host reaches them, this party's as this host does
    deployment.rpc_url = settings.rpc_url
    if settings.ipfs_api:
        deployment.content_api = without_credentials(settings.ipfs_api)
    deployment.save(settings.deployment_file)
    return deployment


def _chain(settings: GymSettings, port: int | None) -> tuple[AnvilProcess | None, bool, str]:
    """(Anvil, whether this call started it, the RPC URL): ``GYM_RPC_URL`` when set, else the
    running Anvil or a new one."""
    if settings.rpc_url:
        return None, False, settings.rpc_url
    anvil = running_anvil(settings.data_dir)
    if anvil is not None:
        return anvil, False, anvil.rpc_url
    anvil = start_anvil(settings.data_dir, settings.anvil_host,
                        settings.anvil_port if port is None else port, settings.chain_id)
    return anvil, True, anvil.rpc_url


def _deployment(settings: GymSettings, w3, rpc_url: str, redeploy: bool
                ) -> tuple[Deployment, bool, str]:
    """The recorded deployment if the chain holds it, else a new one (saved): (it, whether
    this call deployed, why)."""
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
                return existing, False, "deployment matches the chain"
            reason = problems[0]
    governance = GovernanceParams(timelock_min_delay=settings.timelock_min_delay)
    deployment = deploy_all(w3, settings.deployer_key.get_secret_value(), rpc_url, governance)
    deployment.save(settings.deployment_file)
    return deployment, True, reason


def _content_service(settings: GymSettings) -> ContentService | Starting | None:
    """The content service beside the chain: the running one, or one starting; None when
    ``GYM_IPFS_API`` names the endpoint to use instead."""
    if settings.ipfs_api:
        return None
    running = running_content_service(settings.data_dir)
    if running is not None:
        return running
    return launch_content_service(settings.data_dir, settings.anvil_host, settings.ipfs_port,
                                  settings.ipfs_authorizations)


def devnet_status(settings: GymSettings) -> DevnetStatus:
    """What runs, and whether what this party uses holds the recorded deployment: its chain
    (``GYM_RPC_URL``, else the Anvil it started, else the manifest's) and its content endpoint
    (``GYM_IPFS_API``, else the service it started, else the manifest's). Each problem names the
    URL that fails and advice that fits this party: only a party that runs the devnet itself is
    told to run `gym devnet up`.

    Raises ``DeploymentFileError`` when there is no readable deployment and
    ``RpcUnreachableError`` when the chain does not answer.
    """
    deployment = Deployment.load(settings.deployment_file)
    anvil = None if settings.rpc_url else running_anvil(settings.data_dir)
    content = running_content_service(settings.data_dir)
    deployer = _runs_the_devnet(settings)
    rpc_url = settings.rpc_url or (anvil.rpc_url if anvil else deployment.rpc_url)
    try:
        w3 = connect(rpc_url)
    except RpcUnreachableError:
        if deployer and anvil is None and not settings.rpc_url:
            raise RpcUnreachableError(
                f"the devnet is not running (nothing answers at {rpc_url}): run `gym devnet up`"
            ) from None
        where = ("GYM_RPC_URL" if settings.rpc_url
                 else f"the manifest's rpc_url in {settings.deployment_file}")
        raise RpcUnreachableError(
            f"cannot reach the EVM RPC at {rpc_url} (from {where}): check that its host is up "
            "and reachable from here, or set GYM_RPC_URL to a node of this chain") from None
    status = DevnetStatus(rpc_url, anvil, deployment, block_number=w3.eth.block_number,
                          content=content)
    status.problems = deployment_problems(w3, deployment)
    if status.problems:
        status.advice = ("run `gym devnet up` to redeploy" if deployer else
                         f"the chain at {rpc_url} does not hold the deployment in "
                         f"{settings.deployment_file}: check GYM_RPC_URL, or join the current "
                         "deployment with `gym devnet join CID`")
    content_api = settings.ipfs_api or (content.url if content else deployment.content_api)
    status.content_api = content_api
    if content_api and not answers(content_api):
        if settings.ipfs_api:
            advice = ("check GYM_IPFS_API (this party's content endpoint): is its host up and "
                      "reachable from here?")
        elif deployer:
            advice = "run `gym devnet up` to start it again"
        else:
            advice = ("set GYM_IPFS_API to a content endpoint this host reaches (the manifest's "
                      "is as the deployer reaches it)")
        status.problems.append(f"the content endpoint {content_api} does not answer (its Kubo "
                               f"RPC): {advice}")
    return status


def _runs_the_devnet(settings: GymSettings) -> bool:
    """Whether `gym devnet up` is this party's remedy: it uses no GYM_RPC_URL (so the chain is
    the Anvil that `up` starts here), or its data directory has run the devnet's Anvil or
    content service. A party that joined another's deployment is neither."""
    ran_here = ("anvil.json", "anvil.log", "ipfs-serve.json", "ipfs-serve.log")
    return not settings.rpc_url or any((settings.data_dir / name).exists() for name in ran_here)


def devnet_down(settings: GymSettings) -> tuple[AnvilProcess | None, ContentService | None]:
    """Stop the Anvil and the content service that ``gym devnet up`` started; never any
    other process. What was stopped (None: was not running)."""
    return stop_local_processes(settings.data_dir)


def stop_local_processes(data_dir: Path) -> tuple[AnvilProcess | None, ContentService | None]:
    """``devnet_down`` for the processes recorded in ``data_dir``."""
    return stop_anvil(data_dir), stop_content_service(data_dir)
