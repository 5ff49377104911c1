"""Deploy every contract of the project and record it in ``deployment.json``.

``deploy_all`` is the one deployment routine: each issue that adds a contract adds its
deployment and role wiring here, in dependency order. The manifest records enough to tell
later whether the chain still holds this deployment: the genesis and deployment block hashes
(an Anvil restarted from scratch has a new genesis) and the keccak256 of every contract's
runtime code as read back from the chain.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from eth_account import Account
from eth_utils import keccak
from pydantic import BaseModel, ValidationError
from web3 import Web3
from web3.exceptions import Web3Exception

from contracts import load_artifact
from devnet.errors import DeploymentFileError, DevnetError, RpcUnreachableError

MANIFEST_VERSION = 1
CONTRACT_NAMES = ("ExperienceLedger",)  # everything deploy_all deploys


def check_build() -> None:
    """Fail early, before anything starts, when a contract's build is missing or stale."""
    for name in CONTRACT_NAMES:
        load_artifact(name)


class DeployedContract(BaseModel):
    address: str  # checksummed address
    tx_hash: str  # creation transaction
    code_hash: str  # keccak256 of the runtime code on chain


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
            deployment = cls.model_validate(json.loads(text))
        except (ValueError, ValidationError) as exc:
            first = str(exc).splitlines()[0]
            raise DeploymentFileError(
                f"{path} is corrupted ({first}): run `gym devnet up --redeploy` to write it anew"
            ) from None
        if deployment.version != MANIFEST_VERSION:
            raise DeploymentFileError(
                f"{path} has manifest version {deployment.version}, this gym reads "
                f"{MANIFEST_VERSION}: run `gym devnet up --redeploy`"
            )
        return deployment


def connect(rpc_url: str, timeout: float = 10.0) -> Web3:
    """A web3 client for ``rpc_url`` that has been checked to answer."""
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
    """Signs and sends the deployment transactions from one key, waiting for each receipt."""

    def __init__(self, w3: Web3, private_key: str):
        self.w3 = w3
        self.account = Account.from_key(private_key)
        self.chain_id = w3.eth.chain_id

    def deploy(self, name: str, *args) -> DeployedContract:
        artifact = load_artifact(name)
        factory = self.w3.eth.contract(abi=artifact.abi, bytecode=artifact.bytecode)
        receipt = self.send(factory.constructor(*args))
        address = receipt["contractAddress"]
        code = self.w3.eth.get_code(address)
        return DeployedContract(
            address=address, tx_hash=receipt["transactionHash"].to_0x_hex(),
            code_hash="0x" + keccak(code).hex(),
        )

    def send(self, call):
        """Build, sign and send a contract call or constructor; returns the receipt."""
        tx = call.build_transaction({
            "from": self.account.address,
            "nonce": self.w3.eth.get_transaction_count(self.account.address, "pending"),
            "chainId": self.chain_id,
        })
        signed = self.account.sign_transaction(tx)
        tx_hash = self.w3.eth.send_raw_transaction(signed.raw_transaction)
        receipt = self.w3.eth.wait_for_transaction_receipt(tx_hash, timeout=60)
        if receipt["status"] != 1:
            raise DevnetError(f"transaction {tx_hash.to_0x_hex()} reverted during deployment")
        return receipt


def deploy_all(w3: Web3, private_key: str, rpc_url: str) -> Deployment:
    """Deploy every contract in dependency order and return the manifest (not yet saved)."""
    deployer = Deployer(w3, private_key)
    contracts = {"ExperienceLedger": deployer.deploy("ExperienceLedger")}
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
    )


def deployment_problems(w3: Web3, deployment: Deployment) -> list[str]:
    """Why the chain behind ``w3`` does not hold ``deployment``; empty when it does."""
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
