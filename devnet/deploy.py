"""Deploy every contract of the project and record it in ``deployment.json``.

``deploy_all`` is the one deployment routine: each issue that adds a contract adds its
deployment and role wiring here, in dependency order. The manifest records enough to tell
later whether the chain still holds this deployment: the genesis and deployment block hashes
(an Anvil restarted from scratch has a new genesis) and the keccak256 of every contract's
runtime code as read back from the chain.

The DAO (docs/design.md "4.3 DAO") is wired so that the deployer keeps no power over it:

- ``TimelockController`` (OpenZeppelin, as is), deployed before the token: the governor is
  its only proposer and canceller in the end, anyone (``address(0)``) may execute a queued,
  ready operation. The deployer starts as its admin and its proposer with a delay of 0, for
  one batch it schedules and executes at once (the treasury's approval of the
  RewardDistributor, then ``updateDelay`` to ``timelock_min_delay``); it then revokes its
  proposer and canceller roles and renounces the admin role, leaving the timelock its own
  admin;
- ``GymToken``: fixed supply minted at construction to the devnet holders (Anvil accounts
  0..4, public keys in ``devnet.settings``), each of which then self-delegates, signing with
  its own key, so its balance counts as votes, and ``treasury_tokens`` to the timelock, the
  rewards' treasury (nobody delegates it: it never votes, but it is part of the supply a
  quorum is a fraction of);
- ``GymGovernor``: clock in seconds (the token's ERC-6372 ``mode=timestamp``), so voting delay,
  voting period and timelock delay are all durations in seconds;
- the curated library ``gym/curated``: created in the ExperienceLedger by the deployer, then
  handed to the timelock, so only an executed proposal can append to it;
- ``NodeRegistry``: inference nodes stake GymToken (at least ``node_min_stake``) and name
  their receipt log; its governance is the timelock, so only an executed proposal can slash
  a node or resolve a challenge. The minimum stake is fixed at deployment.
- ``VerifierCommittee`` (docs/committee.md): deployed before the NodeRegistry, which names it
  as its ``committee`` (allowed, besides the timelock, to resolve challenges and slash), then
  bound to that registry by the deployer (``bindRegistry``, once). Its governance is the
  timelock (appeals, the appeal window); its stakes, bond, slash amounts and settlement
  timeout (after which an unsettled challenge may expire, returning the bond:
  ``committee_settlement_timeout``) are fixed at deployment, the appeal window is short on the
  devnet (``committee_appeal_window``).
- ``RewardDistributor`` (docs/rewards.md): epoch rewards whose Merkle root the committee's
  current set attests, claimed from the treasury (the timelock, which approves it for
  ``treasury_tokens`` in the deployer's one batch); governance, which reverses roots and sets
  the budget and the appeal window, is the timelock. Epoch length is fixed at deployment.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ValidationError, field_validator

from contracts import load_artifact
from contracts.gym_token import GYM
from devnet.errors import DeploymentFileError, DevnetError, RpcUnreachableError
from devnet.settings import ANVIL_DEV_KEYS
from ledger.addresses import is_loopback, url_host
from ledger.json_input import parse_json

if TYPE_CHECKING:  # web3 and eth-account load when something talks to the chain
    from rich.console import Console
    from web3 import Web3

# 2: the DAO (token, timelock, governor) and the curated library; 3: NodeRegistry;
# 4: VerifierCommittee, and a NodeRegistry that names it (its constructor changed);
# 5: a VerifierCommittee with a settlement timeout (`expire`; its constructor changed)
# 6: a VerifierCommittee whose challenges are judged by the set of their opening (`settle`
#    takes a proof, `SetUpdated` carries the set)
# 7: the RewardDistributor, and the treasury the timelock holds for it
MANIFEST_VERSION = 7
# What an older manifest lacks, by its version (said when asking for a redeploy).
_MISSING_SINCE = {
    1: "the DAO contracts, the curated library, the NodeRegistry, the VerifierCommittee and the "
       "RewardDistributor",
    2: "the NodeRegistry, the VerifierCommittee and the RewardDistributor",
    3: "the VerifierCommittee and the RewardDistributor",
    4: "the VerifierCommittee's settlement timeout and the RewardDistributor",
    5: "the VerifierCommittee's settlement by the set of a challenge's opening and the "
       "RewardDistributor",
    6: "the RewardDistributor and its treasury",
}
CONTRACT_NAMES = ("ExperienceLedger", "TimelockController", "GymToken", "GymGovernor",
                  "VerifierCommittee", "NodeRegistry", "RewardDistributor")
CURATED_LIBRARY_NAME = "gym/curated"
MAX_MANIFEST_BYTES = 1024 * 1024  # deployment.json is ~3 KB
CURATED_LOG_KIND = 1  # IExperienceLedger.LogKind.Curated


def check_build() -> None:
    """Fail early, before anything starts, when a contract's build is missing or stale."""
    for name in CONTRACT_NAMES:
        load_artifact(name)


class DeployedContract(BaseModel):
    address: str  # checksummed address
    tx_hash: str  # creation transaction
    code_hash: str  # keccak256 of the runtime code on chain


class GovernanceParams(BaseModel):
    """The DAO's parameters. Durations are seconds (the governor's clock is timestamps).

    Devnet defaults are short so that a whole proposal lifecycle fits in a demo (clients on
    Anvil skip the waits with ``evm_increaseTime``); a public network wants hours to days.
    Voting delay, voting period, threshold and quorum can later be changed by proposal.
    """

    timelock_min_delay: int = 60  # seconds a passed proposal waits in the timelock
    voting_delay: int = 1  # seconds from proposal to snapshot; voting opens after it
    voting_period: int = 300  # seconds voting stays open
    proposal_threshold: int = GYM  # votes (token base units) needed to propose: 1 GYM
    quorum_numerator: int = 4  # percent of the supply at the snapshot needed as For + Abstain
    token_name: str = "Gym"  # also the token's EIP-712 domain name (permits, delegation)
    token_symbol: str = "GYM"
    tokens_per_holder: int = 1_000  # whole tokens (18 decimals) minted to each holder
    holders: list[str] = []  # checksummed addresses that received tokens and self-delegated
    node_min_stake: int = 100 * GYM  # GYM base units a NodeRegistry node stakes at least
    # VerifierCommittee (docs/committee.md "Contract"); amounts in GYM base units
    verifier_min_stake: int = 100 * GYM  # least stake of a verifier
    challenge_bond: int = 10 * GYM  # a challenger's bond, forfeited to the signers if rejected
    node_slash: int = 50 * GYM  # taken from a node whose challenge is finally upheld (capped)
    verifier_slash: int = 20 * GYM  # taken from each signer of a reversed settlement (capped)
    challenger_share_bps: int = 2_000  # share of the node's slashed stake paid to the challenger
    committee_appeal_window: int = 300  # seconds governance may reverse a settlement (at most 7 days)
    committee_settlement_timeout: int = 3600  # seconds until an unsettled challenge may expire
    # RewardDistributor (docs/rewards.md); the treasury is the timelock's own balance
    treasury_tokens: int = 1_250  # whole GYM minted to the timelock: 20% of the devnet's supply
    # (5 holders × 1,000 + this), 12.5 epochs of the default budget
    reward_epoch_blocks: int = 1_000  # blocks per reward epoch, from the distributor's deployment
    reward_budget: int = 100 * GYM  # GYM base units paid per epoch at most (governance: setBudget)
    # the budget's split in basis points (sum 10,000): data, compute, verification, availability
    reward_pool_bps: list[int] = [4_000, 3_000, 1_500, 1_500]
    reward_appeal_window: int = 300  # seconds governance may reverse an attested root (at most 7 days)

    @field_validator("reward_pool_bps")
    @classmethod
    def _four_pools(cls, bps: list[int]) -> list[int]:
        # the constructor refuses anything else; say so before the first transaction
        if len(bps) != 4 or min(bps) < 0 or sum(bps) != 10_000:
            raise ValueError("reward_pool_bps is four basis points (data, compute, verification, "
                             f"availability) that sum to 10,000, not {bps}")
        return bps


class Deployment(BaseModel):
    """Contents of ``deployment.json``."""

    version: int = MANIFEST_VERSION
    chain_id: int
    rpc_url: str
    deployer: str
    genesis_hash: str
    deployment_block: int
    deployment_block_hash: str
    contracts: dict[str, DeployedContract]
    created_at: str
    curated_log_id: int | None = None  # ExperienceLedger log id of the DAO's curated library
    governance: GovernanceParams | None = None  # what the DAO was deployed with
    content_api: str | None = None  # the content endpoint (Kubo RPC) the parties share

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(self.model_dump_json(indent=2) + "\n")
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> Deployment:
        try:
            text = path.read_text()
        except FileNotFoundError:
            raise DeploymentFileError(
                f"no deployment at {path}: run `gym devnet up` to start and deploy the devnet"
            ) from None
        try:
            deployment = cls.model_validate(parse_json(text, max_bytes=MAX_MANIFEST_BYTES,
                                                       max_depth=8, what=str(path)))
        except (ValueError, ValidationError) as exc:
            first = str(exc).splitlines()[0]
            raise DeploymentFileError(
                f"{path} is corrupted ({first}): run `gym devnet up --redeploy` to write it anew"
            ) from None
        if deployment.version != MANIFEST_VERSION:
            missing = _MISSING_SINCE.get(deployment.version)
            why = f" (it predates {missing})" if missing else ""
            raise DeploymentFileError(
                f"{path} has manifest version {deployment.version}, this gym reads "
                f"{MANIFEST_VERSION}{why}: run `gym devnet up --redeploy`"
            )
        return deployment

    @classmethod
    def from_published(cls, data: bytes, cid: str) -> Deployment:
        """A manifest another party published (`gym devnet join CID`): parsed with the same
        bounds; ``DeploymentFileError`` naming the CID when it is not one this gym reads."""
        try:
            deployment = cls.model_validate(parse_json(data, max_bytes=MAX_MANIFEST_BYTES,
                                                       max_depth=8, what=cid))
        except (ValueError, ValidationError) as exc:
            raise DeploymentFileError(f"{cid} is not a deployment manifest "
                                      f"({str(exc).splitlines()[0]})") from None
        if deployment.version != MANIFEST_VERSION:
            raise DeploymentFileError(f"{cid} is a version {deployment.version} manifest, this "
                                      f"gym reads {MANIFEST_VERSION}")
        return deployment


def connect(rpc_url: str, timeout: float = 10.0) -> Web3:
    """A web3 client for ``rpc_url`` that has been checked to answer."""
    from web3 import Web3
    from web3.exceptions import Web3Exception

    w3 = Web3(Web3.HTTPProvider(rpc_url, request_kwargs={"timeout": timeout}))
    try:
        w3.eth.get_block_number()
    except (OSError, Web3Exception, ValueError) as exc:
        reason = (str(exc) or type(exc).__name__).splitlines()[0]
        raise RpcUnreachableError(
            f"cannot reach the EVM RPC at {rpc_url} ({reason}): start the devnet with "
            "`gym devnet up`, or set GYM_RPC_URL to a running node"
        ) from None
    return w3


class Deployer:
    """Signs and sends the deployment transactions (from the deployer, or a devnet holder
    acting for itself) through ``ledger.evm``, waiting for each receipt."""

    def __init__(self, w3: Web3, private_key: str):
        from eth_account import Account

        from ledger.evm import EvmConnection

        self.w3 = w3
        self.account = Account.from_key(private_key)
        self.chain_id = w3.eth.chain_id
        self.evm = EvmConnection(w3, [load_artifact(name).abi for name in CONTRACT_NAMES],
                                 receipt_timeout=60)
        self.spent: list[tuple[str, int]] = []  # (what, gas used) per transaction sent

    def deploy(self, name: str, *args) -> DeployedContract:
        from eth_utils import keccak

        artifact = load_artifact(name)
        factory = self.w3.eth.contract(abi=artifact.abi, bytecode=artifact.bytecode)
        receipt = self.send(factory.constructor(*args), what=f"deploy {name}")
        address = receipt["contractAddress"]
        code = self.w3.eth.get_code(address)
        return DeployedContract(
            address=address, tx_hash=receipt["transactionHash"].to_0x_hex(),
            code_hash="0x" + keccak(code).hex(),
        )

    def contract(self, deployed: DeployedContract, name: str):
        """A web3 handle on a contract deployed here."""
        return self.w3.eth.contract(address=deployed.address, abi=load_artifact(name).abi)

    def send(self, call, key: str | None = None, what: str = ""):
        """Build, sign and send a contract call or constructor; returns the receipt.

        Signs with the deployer's key, or with ``key`` (a devnet holder acting for itself).
        """
        from eth_account import Account

        from ledger.evm import ChainError

        account = self.account if key is None else Account.from_key(key)
        try:
            receipt = self.evm.send(call, account)
        except ChainError as exc:
            raise DevnetError(f"a deployment transaction failed: {exc}") from None
        name = what or getattr(call, "fn_name", "transaction")
        self.spent.append((name, int(receipt["gasUsed"])))
        return receipt


def deploy_all(
    w3: Web3,
    private_key: str,
    rpc_url: str,
    governance: GovernanceParams,
    holder_keys: tuple[str, ...] = ANVIL_DEV_KEYS,
    holders: tuple[str, ...] | None = None,
    deployer: Deployer | None = None,
) -> Deployment:
    """Deploy every contract in dependency order, wire the DAO, return the manifest (not saved).

    ``holder_keys`` are the accounts that receive tokens and self-delegate; each needs ether
    for one transaction. Or ``holders``: the addresses that receive tokens, which delegate
    later themselves (`gym gov delegate`; a deployment to a public network, `gym deploy`).
    ``deployer``: the ``Deployer`` to send with (its ``spent`` lists the gas of each
    transaction).
    """
    from eth_account import Account

    from ledger.evm import ZERO_ADDRESS

    delegate = holders is None
    if holders is None:
        holders = tuple(Account.from_key(key).address for key in holder_keys)
    governance = governance.model_copy(update={"holders": list(holders)})
    deployer = deployer or Deployer(w3, private_key)

    contracts = {"ExperienceLedger": deployer.deploy("ExperienceLedger")}
    # The timelock before the token, which mints the treasury to it. The deployer proposes
    # (delay 0) only for the one batch below, and admins it only until then.
    contracts["TimelockController"] = deployer.deploy(
        "TimelockController", 0, [deployer.account.address], [ZERO_ADDRESS], deployer.account.address
    )
    timelock = deployer.contract(contracts["TimelockController"], "TimelockController")
    amount = governance.tokens_per_holder * GYM
    treasury = governance.treasury_tokens * GYM
    contracts["GymToken"] = deployer.deploy(
        "GymToken", governance.token_name, governance.token_symbol, [*holders, timelock.address],
        [amount] * len(holders) + [treasury],
    )
    # Delegate first: a proposer's votes are read one clock tick (second) before `propose`, so
    # the more blocks between delegation and the end of the deployment, the sooner the holders
    # can propose.
    token = deployer.contract(contracts["GymToken"], "GymToken")
    for key, holder in zip(holder_keys, holders, strict=True) if delegate else ():
        deployer.send(token.functions.delegate(holder), key=key)
    contracts["GymGovernor"] = deployer.deploy(
        "GymGovernor", contracts["GymToken"].address, timelock.address,
        governance.voting_delay, governance.voting_period, governance.proposal_threshold,
        governance.quorum_numerator,
    )
    governor = contracts["GymGovernor"].address
    proposer_role = timelock.functions.PROPOSER_ROLE().call()
    canceller_role = timelock.functions.CANCELLER_ROLE().call()
    for role in (proposer_role, canceller_role):
        deployer.send(timelock.functions.grantRole(role, governor))

    ledger = deployer.contract(contracts["ExperienceLedger"], "ExperienceLedger")
    receipt = deployer.send(ledger.functions.createLog(CURATED_LIBRARY_NAME, CURATED_LOG_KIND))
    curated_log_id = ledger.events.LogCreated().process_receipt(receipt)[0]["args"]["logId"]
    deployer.send(ledger.functions.transferLogOwnership(curated_log_id, timelock.address))

    # The committee first: the registry names it, then the committee binds that registry.
    contracts["VerifierCommittee"] = deployer.deploy(
        "VerifierCommittee", contracts["GymToken"].address, timelock.address,
        governance.verifier_min_stake, governance.challenge_bond, governance.node_slash,
        governance.verifier_slash, governance.challenger_share_bps, governance.committee_appeal_window,
        governance.committee_settlement_timeout,
    )
    contracts["NodeRegistry"] = deployer.deploy(
        "NodeRegistry", contracts["GymToken"].address, timelock.address,
        contracts["ExperienceLedger"].address, governance.node_min_stake,
        contracts["VerifierCommittee"].address,
    )
    committee = deployer.contract(contracts["VerifierCommittee"], "VerifierCommittee")
    deployer.send(committee.functions.bindRegistry(contracts["NodeRegistry"].address))

    contracts["RewardDistributor"] = deployer.deploy(
        "RewardDistributor", contracts["GymToken"].address, committee.address, timelock.address,
        timelock.address, governance.reward_epoch_blocks, governance.reward_appeal_window,
        governance.reward_budget, governance.reward_pool_bps,
    )
    # One batch through the timelock, scheduled and executed at once (delay 0): the treasury
    # approves the distributor, then the timelock takes its real delay. Then the deployer
    # gives up every role it holds there; the governor remains the only proposer.
    predecessor = salt = bytes(32)  # none; the only batch the deployer schedules
    batch = (
        [token.address, timelock.address], [0, 0],
        [token.encode_abi("approve", args=[contracts["RewardDistributor"].address, treasury]),
         timelock.encode_abi("updateDelay", args=[governance.timelock_min_delay])],
        predecessor, salt,
    )
    deployer.send(timelock.functions.scheduleBatch(*batch, 0))
    deployer.send(timelock.functions.executeBatch(*batch))
    for role in (proposer_role, canceller_role):
        deployer.send(timelock.functions.revokeRole(role, deployer.account.address))
    admin_role = timelock.functions.DEFAULT_ADMIN_ROLE().call()
    deployer.send(timelock.functions.renounceRole(admin_role, deployer.account.address))

    last_block = w3.eth.get_block("latest")
    return Deployment(
        chain_id=deployer.chain_id,
        rpc_url=rpc_url,
        deployer=deployer.account.address,
        genesis_hash=w3.eth.get_block(0)["hash"].to_0x_hex(),
        deployment_block=last_block["number"],
        deployment_block_hash=last_block["hash"].to_0x_hex(),
        contracts=contracts,
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        curated_log_id=curated_log_id,
        governance=governance,
    )


def deployment_problems(w3: Web3, deployment: Deployment) -> list[str]:
    """Why the chain behind ``w3`` does not hold ``deployment``; empty when it does."""
    from eth_utils import keccak

    problems = []
    if (chain_id := w3.eth.chain_id) != deployment.chain_id:
        problems.append(f"chain id is {chain_id}, the deployment was made on {deployment.chain_id}")
        return problems
    if w3.eth.get_block(0)["hash"].to_0x_hex() != deployment.genesis_hash:
        problems.append("the chain was restarted from scratch (its genesis block differs)")
        return problems
    head = w3.eth.block_number
    if head < deployment.deployment_block:
        problems.append(f"the chain is at block {head}, before the deployment block "
                        f"{deployment.deployment_block}")
        return problems
    block_hash = w3.eth.get_block(deployment.deployment_block)["hash"].to_0x_hex()
    if block_hash != deployment.deployment_block_hash:
        problems.append(f"block {deployment.deployment_block} differs from the deployment's")
    for name, contract in deployment.contracts.items():
        code_hash = "0x" + keccak(w3.eth.get_code(contract.address)).hex()
        if code_hash != contract.code_hash:
            problems.append(f"{name} at {contract.address} does not hold the deployed code")
    return problems


def foreign_problems(w3: Web3, deployment: Deployment) -> list[str]:
    """Why a manifest from someone else (`gym devnet join`) does not describe this project's
    contracts wired as ``deploy_all`` wires them; empty when it does. Beyond
    ``deployment_problems`` (its chain, blocks and code hashes): every contract's runtime code
    is this build's (whatever its immutables hold), the governor, the committee, the registry
    and the reward distributor name the manifest's token, timelock, ledger and each other (the
    distributor's treasury is the timelock), the deployer kept no role in the timelock and the
    timelock's delay is not the 0 it was deployed with (its deployment's last batch ran; the
    DAO may have changed the delay since), and the curated library is a curated log the
    timelock owns."""
    problems = deployment_problems(w3, deployment)
    if problems:
        return problems
    if set(deployment.contracts) != set(CONTRACT_NAMES):
        return [f"the manifest names {sorted(deployment.contracts)}, not {sorted(CONTRACT_NAMES)}"]
    address = {name: c.address.lower() for name, c in deployment.contracts.items()}
    for name in CONTRACT_NAMES:
        if not load_artifact(name).is_runtime_code(bytes(w3.eth.get_code(
                deployment.contracts[name].address))):
            problems.append(f"{name} at {deployment.contracts[name].address} is not this "
                            "build's contract")
    if problems:
        return problems

    def named(contract: str, getter: str, expected: str) -> None:
        c = w3.eth.contract(address=deployment.contracts[contract].address,
                            abi=load_artifact(contract).abi)
        found = str(getattr(c.functions, getter)().call()).lower()
        if found != address[expected]:
            problems.append(f"{contract}.{getter}() is {found}, not the manifest's {expected} "
                            f"{address[expected]}")

    for contract, getter, expected in (
            ("GymGovernor", "token", "GymToken"), ("GymGovernor", "timelock", "TimelockController"),
            ("VerifierCommittee", "token", "GymToken"),
            ("VerifierCommittee", "governance", "TimelockController"),
            ("VerifierCommittee", "registry", "NodeRegistry"),
            ("NodeRegistry", "stakeToken", "GymToken"),
            ("NodeRegistry", "governance", "TimelockController"),
            ("NodeRegistry", "committee", "VerifierCommittee"),
            ("NodeRegistry", "ledger", "ExperienceLedger"),
            ("RewardDistributor", "token", "GymToken"),
            ("RewardDistributor", "committee", "VerifierCommittee"),
            ("RewardDistributor", "governance", "TimelockController"),
            ("RewardDistributor", "treasury", "TimelockController")):
        named(contract, getter, expected)
    timelock = w3.eth.contract(address=deployment.contracts["TimelockController"].address,
                               abi=load_artifact("TimelockController").abi)
    for role in ("DEFAULT_ADMIN_ROLE", "PROPOSER_ROLE", "CANCELLER_ROLE"):
        if timelock.functions.hasRole(getattr(timelock.functions, role)().call(),
                                      deployment.deployer).call():
            problems.append(f"the deployer {deployment.deployer} still holds the timelock's "
                            f"{role}")
    expected_delay = deployment.governance.timelock_min_delay if deployment.governance else None
    if expected_delay and timelock.functions.getMinDelay().call() == 0:
        problems.append(f"the timelock's delay is 0, not the manifest's {expected_delay} s: its "
                        "deployment did not finish")
    if deployment.curated_log_id is None:
        problems.append("the manifest names no curated library")
    else:
        ledger = w3.eth.contract(address=deployment.contracts["ExperienceLedger"].address,
                                 abi=load_artifact("ExperienceLedger").abi)
        owner, kind, *_ = ledger.functions.logInfo(deployment.curated_log_id).call()
        if owner.lower() != address["TimelockController"] or kind != CURATED_LOG_KIND:
            problems.append(f"log {deployment.curated_log_id} is not a curated library owned "
                            "by the manifest's timelock")
    return problems


def deployment_json(deployment: Deployment, rpc_url: str) -> dict:
    """The deployment as `gym devnet up|status --json` print it."""
    return {"chain_id": deployment.chain_id, "rpc_url": rpc_url,
            "content_api": deployment.content_api,
            "deployment_block": deployment.deployment_block,
            "curated_log_id": deployment.curated_log_id,
            "contracts": {name: c.address for name, c in deployment.contracts.items()}}


def print_deployment(console: Console, deployment: Deployment, rpc_url: str) -> None:
    """The deployment as `gym devnet up|status` and `gym demo` show it: a table of contracts,
    then the RPC URL, the content endpoint and the deployment block."""
    from rich.table import Table

    from ledger.tables import print_table

    table = Table("contract", "address", title=f"deployment on chain {deployment.chain_id}")
    for name, contract in deployment.contracts.items():
        table.add_row(name, contract.address)
    print_table(table, console)
    console.print(f"RPC: {rpc_url}  deployment block: {deployment.deployment_block}")
    if deployment.content_api:
        elsewhere = ("" if is_loopback(url_host(deployment.content_api))
                     else f"   parties elsewhere: GYM_IPFS_API={deployment.content_api}")
        console.print(f"content (Kubo RPC, gateway /ipfs/): {deployment.content_api}{elsewhere}",
                      soft_wrap=True)
