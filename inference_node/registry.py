"""The NodeRegistry contract from Python: register a node, read nodes, open challenges.

``contracts/src/INodeRegistry.sol`` is the reference. A node's *operator* is the address that
sends ``register``: it stakes GYM (approve, then ``register`` pulls it), owns the receipt log it
names (a Publisher log of the ExperienceLedger), and names the key that signs its receipts. In
``gym node serve --register`` one key is all three: it signs the receipts, anchors the receipt
log and stakes, so a verifier goes from a receipt's ``node`` to the operator with
``operatorOfSigner``. ``ensure_registered`` registers the operator's node, or updates its
signer, model digest and endpoint and tops up its stake when it is already registered (the
receipt log cannot change while registered: the contract keeps the first one).

A node is *active* (``isActive``) while it is bonded and stakes at least ``minStake``:
``deregister`` starts unbonding, and a slash can leave the stake below the minimum. Challenges
(``challenge``) need no bond and change nothing on chain by themselves; governance judges them
(``gym gov propose-slash``). Reverts surface as ``ledger.chain.ContractRevertError`` naming the
contract's custom error and its values; transport failures as ``ChainError``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from eth_abi import decode as abi_decode
from eth_abi.exceptions import DecodingError
from eth_account import Account
from eth_utils import function_abi_to_4byte_selector, to_checksum_address
from web3 import Web3
from web3.exceptions import ContractLogicError, Web3Exception

from ledger.chain import ChainError, ContractRevertError

ZERO_ADDRESS = "0x" + "00" * 20
TOKEN = 10**18  # GYM base units per token
PAGE_BLOCKS = 10_000  # eth_getLogs range per call (many RPCs cap it)
RECEIPT_TIMEOUT_S = 120


class RegistryError(ChainError):
    """The registry cannot do what was asked (not registered, unbonding, another receipt log)."""


@dataclass(frozen=True)
class RegisteredNode:
    """A node as ``nodeOf`` returns it, with its operator and ``isActive``."""

    operator: str  # checksummed
    signer: str  # checksummed
    registered_at: int  # unix time
    unbonding_ends: int  # 0 while bonded
    model_digest: str  # "sha256:<hex>", as receipts write it
    stake: int  # GYM base units
    receipt_log_id: int
    endpoint: str
    active: bool


def gym_amount(tokens: str | float) -> int:
    """Whole (or decimal) GYM as base units: ``gym_amount("100.5") == 100.5 * 10**18``."""
    from decimal import Decimal, InvalidOperation

    try:
        value = Decimal(str(tokens)) * TOKEN
    except InvalidOperation:
        raise RegistryError(f"not an amount of GYM: {tokens!r}") from None
    if value < 0 or value != value.to_integral_value():
        raise RegistryError(f"not an amount of GYM (at most 18 decimals, not negative): "
                            f"{tokens!r}")
    return int(value)


def format_gym(amount: int) -> str:
    whole, fraction = divmod(amount, TOKEN)
    return f"{whole}" + (f".{fraction:018d}".rstrip("0") if fraction else "")


def _digest_bytes(model_digest: str) -> bytes:
    body = model_digest.removeprefix("sha256:").removeprefix("0x")
    if len(body) != 64:
        raise RegistryError(f"not a sha256 model digest: {model_digest!r}")
    return bytes.fromhex(body)


class NodeRegistry:
    """NodeRegistry at ``address``; ``private_key`` (the operator's) only to send transactions."""

    def __init__(self, w3: Web3, address: str, private_key: str | None = None, *,
                 from_block: int = 0) -> None:
        from contracts import load_artifact

        self.w3 = w3
        self.address = to_checksum_address(address)
        abi = load_artifact("NodeRegistry").abi
        self.contract = w3.eth.contract(address=self.address, abi=abi)
        self.account = Account.from_key(private_key) if private_key else None
        self.from_block = from_block
        self._errors = {function_abi_to_4byte_selector(item): item
                        for item in abi if item["type"] == "error"}

    def _revert(self, exc: ContractLogicError) -> ChainError:
        """The custom error (``NodeRegistry…`` with its values) that ``exc`` carries."""
        data = exc.data if isinstance(exc.data, str) else ""
        raw = bytes.fromhex(data.removeprefix("0x")) if data.startswith("0x") else b""
        item = self._errors.get(raw[:4])
        if item is None:
            return ChainError(f"the NodeRegistry reverted: {exc.message or exc}")
        try:
            values = abi_decode([i["type"] for i in item["inputs"]], raw[4:])
        except DecodingError:
            return ChainError(f"the NodeRegistry reverted with malformed {item['name']} data")
        return ContractRevertError(item["name"], {
            i["name"]: (to_checksum_address(v) if i["type"] == "address"
                        else "0x" + v.hex() if isinstance(v, bytes) else v)
            for i, v in zip(item["inputs"], values, strict=True)})

    # ---------------------------------------------------------------- views

    def _call(self, fn: Any) -> Any:
        try:
            return fn.call()
        except ContractLogicError as exc:
            raise self._revert(exc) from None
        except (OSError, Web3Exception, ValueError) as exc:
            raise ChainError(f"NodeRegistry call failed ({str(exc).splitlines()[0]}): is the "
                             "devnet up? run `gym devnet up`") from None

    def min_stake(self) -> int:
        return self._call(self.contract.functions.minStake())

    def operator_of_signer(self, signer: str) -> str | None:
        operator = self._call(self.contract.functions.operatorOfSigner(
            to_checksum_address(signer)))
        return None if int(operator, 16) == 0 else to_checksum_address(operator)

    def is_active(self, operator: str) -> bool:
        return self._call(self.contract.functions.isActive(to_checksum_address(operator)))

    def node_of(self, operator: str) -> RegisteredNode | None:
        """``operator``'s node; None when it has none (never registered, or withdrawn)."""
        operator = to_checksum_address(operator)
        (signer, registered_at, unbonding_ends, digest, stake, log_id, endpoint
         ) = self._call(self.contract.functions.nodeOf(operator))
        if registered_at == 0:
            return None
        return RegisteredNode(operator, to_checksum_address(signer), registered_at,
                              unbonding_ends, "sha256:" + bytes(digest).hex(), stake, log_id,
                              endpoint, self.is_active(operator))

    def nodes(self) -> list[RegisteredNode]:
        """Every node registered now, in order of first registration (from the events)."""
        event = self.contract.events.NodeRegistered
        operators: dict[str, None] = {}
        head = self._call_head()
        start = self.from_block
        while start <= head:
            end = min(start + PAGE_BLOCKS - 1, head)
            try:
                for log in event.get_logs(from_block=start, to_block=end):
                    operators.setdefault(to_checksum_address(log["args"]["operator"]))
            except (OSError, Web3Exception, ValueError) as exc:
                raise ChainError(f"reading NodeRegistered events failed: {exc}") from None
            start = end + 1
        found = (self.node_of(operator) for operator in operators)
        return [node for node in found if node is not None]

    def _call_head(self) -> int:
        try:
            return self.w3.eth.block_number
        except (OSError, Web3Exception, ValueError) as exc:
            raise ChainError(f"EVM RPC unreachable ({exc}): is the devnet up?") from None

    # ---------------------------------------------------------------- transactions

    def _send(self, fn: Any) -> Any:
        """Sign and send ``fn`` from the operator's key; its receipt (status 1)."""
        if self.account is None:
            raise RegistryError("no key to send NodeRegistry transactions with")
        sender = self.account.address
        try:
            tx = fn.build_transaction({  # estimates gas: a revert surfaces here
                "from": sender, "chainId": self.w3.eth.chain_id,
                "nonce": self.w3.eth.get_transaction_count(sender, "pending")})
            signed = self.account.sign_transaction(tx)
            tx_hash = self.w3.eth.send_raw_transaction(signed.raw_transaction)
            receipt = self.w3.eth.wait_for_transaction_receipt(tx_hash, timeout=RECEIPT_TIMEOUT_S)
        except ContractLogicError as exc:
            raise self._revert(exc) from None
        except (OSError, Web3Exception, ValueError) as exc:
            raise ChainError(f"NodeRegistry transaction failed ({str(exc).splitlines()[0]})"
                             ) from None
        if receipt["status"] != 1:
            raise ChainError(f"transaction {tx_hash.to_0x_hex()} reverted")
        return receipt

    def _approve(self, amount: int) -> None:
        from contracts import load_artifact

        token = self.w3.eth.contract(address=self._call(self.contract.functions.stakeToken()),
                                     abi=load_artifact("GymToken").abi)
        self._send(token.functions.approve(self.address, amount))

    def register(self, *, signer: str, model_digest: str, endpoint: str, stake: int,
                 receipt_log_id: int) -> None:
        """Approve ``stake`` and register the operator's node."""
        self._approve(stake)
        self._send(self.contract.functions.register(
            to_checksum_address(signer), _digest_bytes(model_digest), endpoint, stake,
            receipt_log_id))

    def update(self, *, signer: str, model_digest: str, endpoint: str) -> None:
        self._send(self.contract.functions.update(to_checksum_address(signer),
                                                  _digest_bytes(model_digest), endpoint))

    def add_stake(self, amount: int) -> None:
        self._approve(amount)
        self._send(self.contract.functions.addStake(amount))

    def deregister(self) -> None:
        self._send(self.contract.functions.deregister())

    def ensure_registered(self, *, signer: str, model_digest: str, endpoint: str, stake: int,
                          receipt_log_id: int) -> tuple[str, RegisteredNode]:
        """Register the operator's node, or bring its record up to these values; what was
        done ("registered", "updated" or "unchanged") and the node as it is now."""
        if self.account is None:
            raise RegistryError("no key to send NodeRegistry transactions with")
        operator = self.account.address
        node = self.node_of(operator)
        if node is None:
            self.register(signer=signer, model_digest=model_digest, endpoint=endpoint,
                          stake=stake, receipt_log_id=receipt_log_id)
            action = "registered"
        else:
            if node.unbonding_ends:
                raise RegistryError(f"node {operator} deregistered and is unbonding until "
                                    f"{node.unbonding_ends}: withdraw, then register again")
            if node.receipt_log_id != receipt_log_id:
                raise RegistryError(f"node {operator} is registered with receipt log "
                                    f"{node.receipt_log_id}, not {receipt_log_id}: serve with "
                                    "that receipt log (--receipt-log)")
            action = "unchanged"
            if (node.signer.lower(), node.model_digest, node.endpoint) != (
                    signer.lower(), model_digest, endpoint):
                self.update(signer=signer, model_digest=model_digest, endpoint=endpoint)
                action = "updated"
            if stake > node.stake:
                self.add_stake(stake - node.stake)
                action = "updated"
        return action, self.node_of(operator)

    def challenge(self, operator: str, receipt_hash: bytes, signature: bytes,
                  evidence_cid: str) -> int:
        """Open a challenge against ``operator``'s receipt ``receipt_hash`` (its EIP-712 digest),
        ``signature`` being the node's signature over it (65 bytes r || s || v: the contract
        refuses a receipt no signer of the node signed); its id (``ChallengeOpened``)."""
        receipt = self._send(self.contract.functions.challenge(
            to_checksum_address(operator), receipt_hash, signature, evidence_cid))
        events = self.contract.events.ChallengeOpened().process_receipt(receipt)
        if not events:
            raise ChainError("the challenge transaction emitted no ChallengeOpened event")
        return int(events[0]["args"]["challengeId"])


__all__ = ["NodeRegistry", "RegisteredNode", "RegistryError", "format_gym", "gym_amount"]
