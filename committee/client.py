"""The VerifierCommittee contract from Python: register a verifier, open, settle, finalize and
claim challenges, and read the set and the challenges (``contracts/src/IVerifierCommittee.sol``
is the reference; docs/committee.md the protocol).

Structs are decoded by the ABI's component names, not positions, so a field added to
``ChallengeInfo`` changes nothing here but the dataclass. Transactions go through
``ledger.evm.EvmConnection`` like every client of the repository: a revert surfaces as
``ContractRevertError`` naming the committee's (or the token's, or the NodeRegistry's) custom
error with its values.

A challenge is judged by the set of its opening (``ChallengeOpened.setHash``): ``opening_set``
finds those bytes in the ``SetUpdated`` event that committed them (any full node keeps logs; no
archive state is needed) and ``settle`` sends them with the non-signers and the hash hint it
derives, so a caller gives only the verdict, the signer bitmap, the aggregates and that set.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from eth_account import Account
from eth_utils import keccak, to_checksum_address
from web3 import Web3
from web3.logs import DISCARD

from committee import committee_set
from committee.bls import (
    G1Point,
    G2Point,
    SecretKey,
    g1_from_ints,
    g1_to_ints,
    g2_to_ints,
    hash_to_g1_hint,
)
from committee.committee_set import CommitteeSet
from committee.messages import Verdict, proof_of_possession
from ledger.evm import PAGE_BLOCKS, ChainError, EvmConnection


class CommitteeError(ChainError):
    """The committee cannot do what was asked (no key, not registered, no such challenge)."""


class ChallengeState(IntEnum):
    """IVerifierCommittee.Status."""

    NONE = 0
    OPEN = 1
    SETTLED = 2
    REVERSED = 3
    FINALIZED = 4
    EXPIRED = 5

    @property
    def label(self) -> str:
        return self.name.lower()


SLOT_FREE, SLOT_ACTIVE, SLOT_UNBONDING = 0, 1, 2


@dataclass(frozen=True)
class VerifierSlot:
    """Slot ``index`` of the committee (``verifierAt``)."""

    index: int
    verifier: str  # checksummed; the zero address for a free slot
    stake: int
    unbonding_ends: int
    state: int  # SLOT_FREE, SLOT_ACTIVE or SLOT_UNBONDING
    pk1: G1Point | None  # None for a free slot

    @property
    def active(self) -> bool:
        return self.state == SLOT_ACTIVE


@dataclass(frozen=True)
class CommitteeChallenge:
    """A committee challenge (``challengeOf``) with the evidence CID of its ``ChallengeOpened``
    event when that was read."""

    challenge_id: int
    status: ChallengeState
    verdict: int  # 0 until settled, then 1 (upheld) or 2 (rejected)
    settled_at: int
    signer_bitmap: int
    challenger: str
    bond: int
    operator: str
    registry_challenge_id: int
    receipt_hash: bytes
    reward_share: int
    claimed_bitmap: int
    opened_at: int = 0  # 0 on a contract that does not record it
    evidence_cid: str | None = None

    @property
    def signers(self) -> list[int]:
        return [i for i in range(self.signer_bitmap.bit_length()) if self.signer_bitmap >> i & 1]


@dataclass(frozen=True)
class OpenedChallenge:
    """A ``ChallengeOpened`` event: what a verifier needs to judge the challenge."""

    challenge_id: int
    registry_challenge_id: int
    operator: str
    challenger: str
    receipt_hash: bytes
    bond: int
    evidence_cid: str
    block_number: int
    set_hash: bytes = b""  # the set that judges it (empty: read from an older state file)


_CHALLENGE_FIELDS = {
    "status": "status", "verdict": "verdict", "settledAt": "settled_at",
    "signerBitmap": "signer_bitmap", "challenger": "challenger", "bond": "bond",
    "operator": "operator", "registryChallengeId": "registry_challenge_id",
    "receiptHash": "receipt_hash", "rewardShare": "reward_share",
    "claimedBitmap": "claimed_bitmap", "openedAt": "opened_at",
}


_EMPTY_SET_HASH = keccak(bytes(committee_set.HEADER))  # no verifier yet


def g1_arg(point: G1Point) -> tuple[int, int]:
    return g1_to_ints(point)


def g2_arg(point: G2Point) -> tuple[tuple[int, int], tuple[int, int]]:
    (x_im, x_re), (y_im, y_re) = g2_to_ints(point)
    return ((x_im, x_re), (y_im, y_re))


class VerifierCommittee:
    """VerifierCommittee at ``address``; ``private_key`` only to send transactions.

    ``abi`` defaults to the project's build; ``from_block`` is where event scans start (the
    deployment block).
    """

    def __init__(self, w3: Web3, address: str, private_key: str | None = None, *,
                 from_block: int = 0, abi: list[dict] | None = None) -> None:
        from contracts import load_artifact

        self.w3 = w3
        self.address = to_checksum_address(address)
        self.abi = abi if abi is not None else load_artifact("VerifierCommittee").abi
        self.contract = w3.eth.contract(address=self.address, abi=self.abi)
        self.account = Account.from_key(private_key) if private_key else None
        self.from_block = from_block
        self._token_abi = load_artifact("GymToken").abi
        self._registry_abi = load_artifact("NodeRegistry").abi
        self.evm = EvmConnection(w3, [self.abi, self._token_abi, self._registry_abi])
        self._chain_id: int | None = None
        self._sets: dict[bytes, CommitteeSet] = {}

    # ---------------------------------------------------------------- views

    def _call(self, fn: Any, block: Any = "latest") -> Any:
        with self.evm.rpc_errors():
            return fn.call(block_identifier=block)

    def _has(self, name: str) -> bool:
        return any(item.get("type") == "function" and item.get("name") == name
                   for item in self.abi)

    @property
    def chain_id(self) -> int:
        if self._chain_id is None:
            with self.evm.rpc_errors():
                self._chain_id = self.w3.eth.chain_id
        return self._chain_id

    def value(self, name: str) -> Any:
        """A parameterless view by name (``minVerifierStake``, ``challengeBond``,
        ``appealWindow``, ``activeStake``, ``governance``, ...)."""
        return self._call(getattr(self.contract.functions, name)())

    def min_stake(self) -> int:
        return self.value("minVerifierStake")

    def challenge_bond(self) -> int:
        return self.value("challengeBond")

    def appeal_window(self) -> int:
        return self.value("appealWindow")

    def settlement_timeout(self) -> int | None:
        """Seconds after which an unsettled challenge may expire; None when the contract has
        no timeout."""
        return self.value("settlementTimeout") if self._has("settlementTimeout") else None

    def active_stake(self, block: Any = "latest") -> int:
        return self._call(self.contract.functions.activeStake(), block)

    def token(self) -> Any:
        return self.w3.eth.contract(address=self.value("token"), abi=self._token_abi)

    def slot(self, index: int, block: Any = "latest") -> VerifierSlot:
        """Slot ``index`` as it is at ``block``."""
        info = self._struct("verifierAt", self._call(self.contract.functions.verifierAt(index),
                                                     block))
        state = info["state"]
        pk1 = None if state == SLOT_FREE else g1_from_ints(tuple(info["pk1"]),
                                                            allow_infinity=True)
        return VerifierSlot(index, to_checksum_address(info["verifier"]), info["stake"],
                            info["unbondingEnds"], state, pk1)

    def _struct(self, function: str, raw: Any) -> dict[str, Any]:
        """The struct ``function`` returned, by its ABI component names."""
        outputs = next(item for item in self.abi if item.get("name") == function
                       and item.get("type") == "function")["outputs"][0]["components"]
        return {c["name"]: value for c, value in zip(outputs, raw, strict=True)}

    def index_of(self, verifier: str) -> int | None:
        index, found = self._call(self.contract.functions.indexOf(to_checksum_address(verifier)))
        return index if found else None

    def slots(self) -> list[VerifierSlot]:
        """Every slot ever used, index 0 to ``slotCount - 1``."""
        return [self.slot(i) for i in range(self.value("slotCount"))]

    def active_set(self, block: Any = "latest") -> CommitteeSet:
        """``activeSet()``: the set as ``setHash`` commits to it now (``committee_set``)."""
        return committee_set.decode(bytes(self._call(self.contract.functions.activeSet(), block)))

    def set_by_hash(self, set_hash: bytes) -> CommitteeSet:
        """The set that hashes to ``set_hash``, from the latest ``SetUpdated`` event that
        committed it (cached: a hash names one set). ``CommitteeError`` when none did."""
        cached = self._sets.get(set_hash)
        if cached is not None:
            return cached
        if set_hash == _EMPTY_SET_HASH:  # the constructor's, which no SetUpdated logs
            return committee_set.decode(bytes(committee_set.HEADER))
        for _log, args in reversed(self._events("SetUpdated", None, None, {})):
            if bytes(args["setHash"]) != set_hash:
                continue
            found = committee_set.decode(bytes(args["set"]))
            if found.set_hash != set_hash:
                raise CommitteeError(f"the SetUpdated of 0x{set_hash.hex()} carries other bytes")
            self._sets[set_hash] = found
            return found
        raise CommitteeError(f"no SetUpdated event committed the set 0x{set_hash.hex()}")

    def opening_set(self, challenge_id: int) -> CommitteeSet:
        """The set challenge ``challenge_id`` opened with, which judges it."""
        opened = self.opened(challengeId=challenge_id)
        if not opened:
            raise CommitteeError(f"no ChallengeOpened event for committee challenge {challenge_id}")
        return self.set_by_hash(opened[0].set_hash)

    def challenge(self, challenge_id: int, *, with_evidence: bool = False) -> CommitteeChallenge:
        """Challenge ``challenge_id`` (status ``NONE`` when there is none)."""
        raw = self._struct("challengeOf",
                           self._call(self.contract.functions.challengeOf(challenge_id)))
        fields = {_CHALLENGE_FIELDS[name]: value for name, value in raw.items()
                  if name in _CHALLENGE_FIELDS}
        fields["status"] = ChallengeState(fields["status"])
        fields["receipt_hash"] = bytes(fields["receipt_hash"])
        for name in ("challenger", "operator"):
            fields[name] = to_checksum_address(fields[name])
        evidence = None
        if with_evidence and fields["status"] != ChallengeState.NONE:
            opened = self.opened(challengeId=challenge_id)
            evidence = opened[0].evidence_cid if opened else None
        return CommitteeChallenge(challenge_id, evidence_cid=evidence, **fields)

    def challenge_count(self) -> int:
        return self.value("challengeCount")

    def opened(self, from_block: int | None = None, to_block: int | None = None,
               **filters: Any) -> list[OpenedChallenge]:
        """``ChallengeOpened`` events (indexed filters: ``challengeId``,
        ``registryChallengeId``, ``operator``), oldest first."""
        return [OpenedChallenge(
            args["challengeId"], args["registryChallengeId"], to_checksum_address(args["operator"]),
            to_checksum_address(args["challenger"]), bytes(args["receiptHash"]), args["bond"],
            args["evidenceCid"], log["blockNumber"], set_hash=bytes(args["setHash"]))
            for log, args in self._events("ChallengeOpened", from_block, to_block, filters)]

    def events(self, name: str, from_block: int | None = None, to_block: int | None = None,
               **filters: Any) -> list[tuple[Any, Any]]:
        """(log, args) of every event ``name`` in the range, oldest first."""
        return self._events(name, from_block, to_block, filters)

    def head(self) -> int:
        with self.evm.rpc_errors():
            return self.w3.eth.block_number

    def _events(self, name: str, from_block: int | None, to_block: int | None,
                filters: dict[str, Any]) -> list[tuple[Any, Any]]:
        event = getattr(self.contract.events, name)
        found = []
        with self.evm.rpc_errors():
            head = self.w3.eth.block_number if to_block is None else to_block
            start = self.from_block if from_block is None else from_block
            while start <= head:
                end = min(start + PAGE_BLOCKS - 1, head)
                found += [(log, log["args"]) for log in event.get_logs(
                    from_block=start, to_block=end, argument_filters=filters or None)]
                start = end + 1
        return found

    # ---------------------------------------------------------------- transactions

    def _send(self, fn: Any) -> Any:
        if self.account is None:
            raise CommitteeError("no key to send VerifierCommittee transactions with")
        return self.evm.send(fn, self.account)

    def _approve(self, amount: int) -> None:
        self._send(self.token().functions.approve(self.address, amount))

    def register(self, sk: SecretKey, stake: int) -> int:
        """Approve ``stake`` and register the sender with BLS key ``sk`` (its proof of
        possession signed here); the slot index it got."""
        if self.account is None:
            raise CommitteeError("no key to send VerifierCommittee transactions with")
        pop = proof_of_possession(sk, self.chain_id, self.address, self.account.address)
        self._approve(stake)
        receipt = self._send(self.contract.functions.register(
            g1_arg(sk.pk1()), g2_arg(sk.pk2()), g1_arg(pop), stake))
        events = self.contract.events.VerifierRegistered().process_receipt(receipt, errors=DISCARD)
        if not events:
            raise ChainError("the register transaction emitted no VerifierRegistered event")
        return int(events[0]["args"]["index"])

    def add_stake(self, amount: int) -> None:
        self._approve(amount)
        self._send(self.contract.functions.addStake(amount))

    def deregister(self) -> None:
        self._send(self.contract.functions.deregister())

    def withdraw(self) -> None:
        self._send(self.contract.functions.withdraw())

    def open_challenge(self, operator: str, receipt_hash: bytes, signature: bytes,
                       evidence_cid: str) -> int:
        """Approve the bond and open a challenge against ``operator``'s receipt
        ``receipt_hash`` (``signature``: the node's, 65 bytes); the committee challenge id."""
        self._approve(self.challenge_bond())
        receipt = self._send(self.contract.functions.openChallenge(
            to_checksum_address(operator), receipt_hash, signature, evidence_cid))
        events = self.contract.events.ChallengeOpened().process_receipt(receipt, errors=DISCARD)
        if not events:
            raise ChainError("the challenge transaction emitted no ChallengeOpened event")
        return int(events[0]["args"]["challengeId"])

    def settle(self, verdict: Verdict, signer_bitmap: int, sigma: G1Point, apk2: G2Point,
               judging_set: CommitteeSet) -> Any:
        """Submit the aggregate ``sigma`` (under ``apk2``) of the signers in ``signer_bitmap``
        for ``verdict``; ``judging_set``: the set the challenge opened with (``opening_set``).
        The non-signers and the hash hint are derived here."""
        digest = verdict.digest(self.chain_id, self.address)
        proof = (judging_set.raw, judging_set.non_signers(signer_bitmap), g1_arg(sigma),
                 g2_arg(apk2), hash_to_g1_hint(digest))
        return self._send(self.contract.functions.settle(
            verdict.challenge_id, verdict.receipt_hash, verdict.verdict, verdict.reason,
            signer_bitmap, proof))

    def finalize(self, challenge_id: int) -> Any:
        return self._send(self.contract.functions.finalize(challenge_id))

    def claim(self, challenge_id: int, index: int) -> Any:
        return self._send(self.contract.functions.claim(challenge_id, index))

    def expire(self, challenge_id: int) -> Any:
        if not self._has("expire"):
            raise CommitteeError("this VerifierCommittee has no settlement timeout")
        return self._send(self.contract.functions.expire(challenge_id))


__all__ = ["ChallengeState", "CommitteeChallenge", "CommitteeError", "OpenedChallenge",
           "VerifierCommittee", "VerifierSlot"]
