"""The NodeRegistry contract from Python: register a node, read nodes and challenges, open one.

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
(``gym gov propose-slash``, whose client reads nodes and challenges through this one). A
receipt takes one open bond-free challenge at a time (the committee's may stand beside it) and
none once one of its challenges is upheld, and is slashed once; ``challenge`` says which
challenge holds it when it is refused.

This is the repository's only client of the NodeRegistry. It lives with the nodes it
registers, and the governance package imports it (``inference_node`` imports nothing of
``governance``), rather than in ``contracts``, whose build-output loader depends on nothing of
ours and would then depend on ``ledger.evm``. Transactions go through ``ledger.evm``: reverts
surface as ``ledger.evm.ContractRevertError`` naming the contract's custom error and its
values (the token's too, for ``approve``); transport failures as ``ChainError``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from eth_account import Account
from eth_utils import to_checksum_address
from web3 import Web3

from inference_node.errors import InferenceNodeError
from ledger.evm import PAGE_BLOCKS, ChainError, ContractRevertError, EvmConnection


class RegistryError(InferenceNodeError, ChainError):
    """The registry cannot do what was asked (not registered, unbonding, another receipt log)."""


@dataclass(frozen=True)
class RegisteredNode:
    """A node as ``nodeOf`` returns it, with its operator and ``isActive``; ``registered_at``
    is 0 when the operator has no node (never registered, or withdrawn)."""

    operator: str  # checksummed
    signer: str  # checksummed
    registered_at: int  # unix time
    unbonding_ends: int  # 0 while bonded
    model_digest: str  # "sha256:<hex>", as receipts write it
    stake: int  # GYM base units
    receipt_log_id: int
    endpoint: str
    active: bool

    @property
    def exists(self) -> bool:
        return self.registered_at != 0


class ChallengeStatus(IntEnum):
    """INodeRegistry.ChallengeStatus."""

    NONE = 0
    OPEN = 1
    UPHELD = 2
    DISMISSED = 3

    @property
    def label(self) -> str:
        return self.name.capitalize()


@dataclass(frozen=True)
class ChallengeInfo:
    """INodeRegistry.Challenge ``challenge_id``, with the evidence CID from its event."""

    challenge_id: int
    operator: str
    challenger: str
    opened_at: int
    status: ChallengeStatus
    receipt_hash: bytes
    evidence_cid: str | None = None


def _digest_bytes(model_digest: str) -> bytes:
    body = model_digest.removeprefix("sha256:").removeprefix("0x")
    if len(body) != 64:
        raise RegistryError(f"not a sha256 model digest: {model_digest!r}")
    return bytes.fromhex(body)


class NodeRegistry:
    """NodeRegistry at ``address``; ``private_key`` (the operator's) only to send transactions.

    ``abi`` defaults to the project's build of ``NodeRegistry``; ``from_block`` is where event
    scans start (the deployment block).
    """

    def __init__(self, w3: Web3, address: str, private_key: str | None = None, *,
                 from_block: int = 0, abi: list[dict] | None = None) -> None:
        from contracts import load_artifact

        self.w3 = w3
        self.address = to_checksum_address(address)
        abi = abi if abi is not None else load_artifact("NodeRegistry").abi
        self.contract = w3.eth.contract(address=self.address, abi=abi)
        self.account = Account.from_key(private_key) if private_key else None
        self.from_block = from_block
        self._token_abi = load_artifact("GymToken").abi
        self.evm = EvmConnection(w3, [abi, self._token_abi])

    # ---------------------------------------------------------------- views

    def _call(self, fn: Any) -> Any:
        with self.evm.rpc_errors():
            return fn.call()

    def min_stake(self) -> int:
        return self._call(self.contract.functions.minStake())

    def governance(self) -> str:
        """The address that may slash and resolve challenges (the DAO timelock)."""
        return to_checksum_address(self._call(self.contract.functions.governance()))

    def operator_of_signer(self, signer: str) -> str | None:
        operator = self._call(self.contract.functions.operatorOfSigner(
            to_checksum_address(signer)))
        return None if int(operator, 16) == 0 else to_checksum_address(operator)

    def is_active(self, operator: str) -> bool:
        return self._call(self.contract.functions.isActive(to_checksum_address(operator)))

    def node_record(self, operator: str) -> RegisteredNode:
        """``operator``'s record as the contract holds it: all zeros when it has no node."""
        operator = to_checksum_address(operator)
        (signer, registered_at, unbonding_ends, digest, stake, log_id, endpoint
         ) = self._call(self.contract.functions.nodeOf(operator))
        active = registered_at != 0 and self.is_active(operator)
        return RegisteredNode(operator, to_checksum_address(signer), registered_at,
                              unbonding_ends, "sha256:" + bytes(digest).hex(), stake, log_id,
                              endpoint, active)

    def node_of(self, operator: str) -> RegisteredNode | None:
        """``operator``'s node; None when it has none (never registered, or withdrawn)."""
        node = self.node_record(operator)
        return node if node.exists else None

    def nodes(self) -> list[RegisteredNode]:
        """Every node registered now, in order of first registration (from the events)."""
        operators: dict[str, None] = {}
        for args in self._events(self.contract.events.NodeRegistered):
            operators.setdefault(to_checksum_address(args["operator"]))
        found = (self.node_of(operator) for operator in operators)
        return [node for node in found if node is not None]

    def registered(self, to_block: int | None = None) -> list[Any]:
        """The arguments of every ``NodeRegistered`` event up to ``to_block``, oldest first."""
        return self._events(self.contract.events.NodeRegistered, to_block=to_block)

    def challenge_of(self, challenge_id: int) -> ChallengeInfo:
        """Challenge ``challenge_id`` (status ``NONE`` when it does not exist)."""
        c = self._call(self.contract.functions.challengeOf(challenge_id))
        evidence = (self.challenge_evidence(challengeId=challenge_id).get(challenge_id)
                    if c[3] else None)
        return ChallengeInfo(challenge_id, to_checksum_address(c[0]), to_checksum_address(c[1]),
                             c[2], ChallengeStatus(c[3]), bytes(c[4]), evidence)

    def slashed_for(self, operator: str, receipt_hash: bytes) -> int:
        """The challenge for which ``operator``'s receipt ``receipt_hash`` was slashed; 0 when
        it was not (a receipt is slashed at most once: ``NodeRegistry.receiptRecord``)."""
        record = self._call(self.contract.functions.receiptRecord(
            to_checksum_address(operator), receipt_hash))
        return int(record[2])

    def challenges_against(self, operator: str) -> list[ChallengeInfo]:
        """Every challenge opened against ``operator``, oldest first, with its status now."""
        opened = self.challenge_evidence(operator=to_checksum_address(operator))
        return [self.challenge_of(challenge_id) for challenge_id in sorted(opened)]

    def upheld_receipts(self, to_block: int | None = None) -> dict[str, set[bytes]]:
        """Operator -> the hashes of its receipts that a challenge resolved as upheld by block
        ``to_block`` (``ChallengeResolved``: a committee's settlement finalized, after its
        appeal window and any reversal, or governance's ruling): receipts proven not to
        verify."""
        upheld = {args["challengeId"] for args in self._events(
            self.contract.events.ChallengeResolved, to_block=to_block) if args["upheld"]}
        found: dict[str, set[bytes]] = {}
        if upheld:
            for args in self._events(self.contract.events.ChallengeOpened, to_block=to_block):
                if args["challengeId"] in upheld:
                    found.setdefault(to_checksum_address(args["operator"]), set()).add(
                        bytes(args["receiptHash"]))
        return found

    def challenge_evidence(self, **filters: Any) -> dict[int, str]:
        """Challenge id -> evidence CID of the ``ChallengeOpened`` events matching ``filters``
        (indexed arguments: ``challengeId``, ``operator``, ``challenger``)."""
        return {args["challengeId"]: args["evidenceCid"]
                for args in self._events(self.contract.events.ChallengeOpened, filters)}

    def _events(self, event: Any, filters: dict[str, Any] | None = None, *,
                to_block: int | None = None) -> list[Any]:
        """The arguments of every ``event`` from ``from_block`` to ``to_block`` (the head),
        in chain order, read ``PAGE_BLOCKS`` blocks at a time."""
        found = []
        with self.evm.rpc_errors():
            head = self.w3.eth.block_number if to_block is None else to_block
            start = self.from_block
            while start <= head:
                end = min(start + PAGE_BLOCKS - 1, head)
                found += [log["args"] for log in event.get_logs(
                    from_block=start, to_block=end, argument_filters=filters)]
                start = end + 1
        return found

    # ---------------------------------------------------------------- transactions

    def _send(self, fn: Any) -> Any:
        """Sign and send ``fn`` from the operator's key; its receipt (status 1)."""
        if self.account is None:
            raise RegistryError("no key to send NodeRegistry transactions with")
        return self.evm.send(fn, self.account)

    def _approve(self, amount: int) -> None:
        token = self.w3.eth.contract(address=self._call(self.contract.functions.stakeToken()),
                                     abi=self._token_abi)
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
        try:
            receipt = self._send(self.contract.functions.challenge(
                to_checksum_address(operator), receipt_hash, signature, evidence_cid))
        except ContractRevertError as exc:
            raise _explain_challenge_refusal(exc) from None
        events = self.contract.events.ChallengeOpened().process_receipt(receipt)
        if not events:
            raise ChainError("the challenge transaction emitted no ChallengeOpened event")
        return int(events[0]["args"]["challengeId"])


def _explain_challenge_refusal(exc: ContractRevertError) -> ContractRevertError:
    """``exc`` with what it means to whoever ran `gym node challenge`, for the refusals that
    name the challenge holding the receipt (INodeRegistry: one open challenge per receipt, none
    once upheld)."""
    v = exc.values
    if exc.name == "NodeRegistryReceiptChallengeOpen":
        return exc.with_hint(
            f"the receipt is already under challenge #{v['challengeId']}, still open (one open "
            f"challenge per receipt): governance judges it (`gym gov propose-slash "
            f"{v['operator']} --challenge {v['challengeId']}`); unless it is the committee's, a "
            "bonded committee challenge (`gym verifier challenge`) may still judge the receipt")
    if exc.name == "NodeRegistryReceiptUpheld":
        return exc.with_hint(f"challenge #{v['challengeId']} of the receipt was upheld: it is "
                             "judged and takes no new challenge")
    return exc


__all__ = ["ChallengeInfo", "ChallengeStatus", "NodeRegistry", "RegisteredNode", "RegistryError"]
