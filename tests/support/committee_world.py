"""A VerifierCommittee with settled challenges on a deployed devnet, for the governance tests
(reversal proposals, the dashboard's Committee page): three verifiers register with BLS keys
(account 0 funds them), a node registers, a challenger bonds challenges, and the verifiers'
signed verdicts are aggregated into a settlement, as tests/committee/test_client.py does."""

from __future__ import annotations

from dataclasses import dataclass

from eth_account import Account
from eth_utils import keccak
from gym_helpers import send
from web3 import Web3

from committee import UPHELD, SecretKey, SignedVerdict, Verdict, reason_bytes
from committee.aggregator import Aggregator
from committee.client import VerifierCommittee
from contracts import load_artifact
from contracts.devnet_accounts import ANVIL_DEV_KEYS, devnet_account_key
from contracts.gym_token import GYM
from devnet.deploy import Deployment
from ledger.chain import LedgerContract

OPERATOR_KEY = ANVIL_DEV_KEYS[4]  # holds 1,000 GYM; runs the node
SIGNER_KEY = devnet_account_key(6)  # signs the node's receipts
CHALLENGER_KEY = devnet_account_key(5)
VERIFIER_KEYS = [devnet_account_key(i) for i in (7, 8, 9)]
BLS = [SecretKey.from_seed(f"gov-test-verifier-{i}") for i in range(3)]
VERIFIER_STAKE = 100 * GYM


@dataclass
class CommitteeWorld:
    w3: Web3
    deployment: Deployment
    token: object  # web3 contract
    operator: str
    address: str

    def client(self, key: str | None = None) -> VerifierCommittee:
        return VerifierCommittee(self.w3, self.address, key,
                                 from_block=self.deployment.deployment_block)

    def open(self, n: int, digest: bytes | None = None) -> tuple[int, bytes]:
        """Challenge ``n`` of a receipt the node's signer signed (``digest``, its EIP-712
        hash; by default a made-up one): (committee id, receipt hash)."""
        digest = digest or keccak(f"a disputed receipt {n}".encode())
        signature = bytes(Account.from_key(SIGNER_KEY).unsafe_sign_hash(digest).signature)
        challenge_id = self.client(CHALLENGER_KEY).open_challenge(self.operator, digest,
                                                                  signature, f"bafy{n}")
        return challenge_id, digest

    def settle(self, challenge_id: int, digest: bytes, signers=(0, 2), verdict: int = UPHELD,
               reason: str = "sampling") -> None:
        """Verifiers ``signers`` sign ``verdict``; the aggregator settles it (no finalizing)."""
        committee = self.client()
        aggregator = Aggregator(self.client(ANVIL_DEV_KEYS[0]), finalize=False,
                                report=lambda line: None)
        message = Verdict(challenge_id, digest, verdict, reason_bytes(reason) if reason else bytes(32))
        for index in signers:
            aggregator.submit(SignedVerdict.create(
                BLS[index], message, chain_id=committee.chain_id, committee=committee.address,
                verifier_index=index,
                verifier=Account.from_key(VERIFIER_KEYS[index]).address).to_bytes())
        aggregator.tick()


def register_verifiers(deployment: Deployment) -> CommitteeWorld:
    """Three registered verifiers (slots 0, 1, 2, 100 GYM each; ``VERIFIER_KEYS``, ``BLS``),
    and the challenger funded; no node."""
    w3 = Web3(Web3.HTTPProvider(deployment.rpc_url))
    token = w3.eth.contract(address=deployment.contracts["GymToken"].address,
                            abi=load_artifact("GymToken").abi)
    for key in [CHALLENGER_KEY, *VERIFIER_KEYS]:  # account 0 funds them
        send(w3, token.functions.transfer(Account.from_key(key).address, 150 * GYM),
             ANVIL_DEV_KEYS[0])
    world = CommitteeWorld(w3, deployment, token, Account.from_key(OPERATOR_KEY).address,
                           deployment.contracts["VerifierCommittee"].address)
    for key, sk in zip(VERIFIER_KEYS, BLS, strict=True):
        world.client(key).register(sk, VERIFIER_STAKE)
    return world


def more_verifiers(world: CommitteeWorld, count: int) -> list[tuple[str, SecretKey]]:
    """``count`` more registered verifiers, beyond Anvil's ten accounts: fresh keys given ETH
    by ``anvil_setBalance`` and their 100 GYM stake by accounts 1-3 in turn (up to 30 of
    them); (key, BLS key) in slot order."""
    added = []
    for i in range(count):
        key = "0x" + keccak(f"gym test verifier {i}".encode()).hex()
        sk = SecretKey.from_seed(f"gym-test-verifier-{i}")
        address = Account.from_key(key).address
        world.w3.provider.make_request("anvil_setBalance", [address, hex(10**20)])
        send(world.w3, world.token.functions.transfer(address, VERIFIER_STAKE),
             ANVIL_DEV_KEYS[1 + i % 3])
        world.client(key).register(sk, VERIFIER_STAKE)
        added.append((key, sk))
    return added


def committee_world(deployment: Deployment) -> CommitteeWorld:
    """Three registered verifiers (``register_verifiers``) and a registered node."""
    world = register_verifiers(deployment)
    w3 = world.w3
    registry = w3.eth.contract(address=deployment.contracts["NodeRegistry"].address,
                               abi=load_artifact("NodeRegistry").abi)
    ledger = LedgerContract(w3, deployment.contracts["ExperienceLedger"].address,
                            load_artifact("ExperienceLedger").abi, OPERATOR_KEY)
    log_id, _ = ledger.create_log("node receipts")
    send(w3, world.token.functions.approve(registry.address, 300 * GYM), OPERATOR_KEY)
    send(w3, registry.functions.register(Account.from_key(SIGNER_KEY).address, keccak(b"model"),
                                         "http://127.0.0.1:9", 300 * GYM, log_id), OPERATOR_KEY)
    return world
