"""The RewardDistributor contract from Python (``contracts/src/IRewardDistributor.sol`` is the
reference, docs/rewards.md the protocol): read epochs and their roots, attest a root with the
committee's aggregate, reverse one (governance), claim.

The digest a verifier signs for an epoch's root is the contract's ``rewardDigest``, computed
here as well (``reward_digest``) so that a verifier signs without a call; transactions go
through ``ledger.evm.EvmConnection`` like every client here, reverts as one line naming the
contract's custom error.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from eth_abi import encode as abi_encode
from eth_account import Account
from eth_utils import keccak, to_checksum_address
from web3 import Web3

from committee.bls import G1Point, G2Point, hash_to_g1_hint
from committee.client import g1_arg, g2_arg
from committee.committee_set import CommitteeSet
from ledger.evm import ChainError, EvmConnection

REWARD_TYPEHASH = keccak(b"GymRewardRoot(uint256 chainId,address distributor,uint256 epoch,"
                         b"bytes32 root,uint256 total,bytes32 tableCid)")


class EpochStatus(IntEnum):
    NONE = 0
    ATTESTED = 1
    REVERSED = 2


@dataclass(frozen=True)
class EpochRoot:
    """An epoch's standing root (``epochInfo``)."""

    epoch: int
    status: EpochStatus
    root: bytes
    total: int
    claimed: int
    attested_at: int
    final_at: int
    table_cid: str


def reward_digest(chain_id: int, distributor: str, epoch: int, root: bytes, total: int,
                  table_cid: str) -> bytes:
    """What each verifier signs for ``root`` of ``epoch`` (the contract's ``rewardDigest``)."""
    return keccak(abi_encode(
        ["bytes32", "uint256", "address", "uint256", "bytes32", "uint256", "bytes32"],
        [REWARD_TYPEHASH, chain_id, to_checksum_address(distributor), epoch, root, total,
         keccak(table_cid.encode())]))


class RewardDistributor:
    """RewardDistributor at ``address``; ``private_key`` only to send transactions."""

    def __init__(self, w3: Web3, address: str, private_key: str | None = None, *,
                 abi: list[dict] | None = None) -> None:
        from contracts import load_artifact

        self.w3 = w3
        self.address = to_checksum_address(address)
        self.abi = abi if abi is not None else load_artifact("RewardDistributor").abi
        self.contract = w3.eth.contract(address=self.address, abi=self.abi)
        self.account = Account.from_key(private_key) if private_key else None
        self.evm = EvmConnection(w3, [self.abi, load_artifact("GymToken").abi,
                                      load_artifact("VerifierCommittee").abi])
        self._chain_id: int | None = None

    def _call(self, fn: Any, block: Any = "latest") -> Any:
        with self.evm.rpc_errors():
            return fn.call(block_identifier=block)

    @property
    def chain_id(self) -> int:
        if self._chain_id is None:
            with self.evm.rpc_errors():
                self._chain_id = self.w3.eth.chain_id
        return self._chain_id

    def head(self) -> int:
        with self.evm.rpc_errors():
            return self.w3.eth.block_number

    def value(self, name: str) -> Any:
        return self._call(getattr(self.contract.functions, name)())

    def epoch_bounds(self, epoch: int) -> tuple[int, int]:
        first, last = self._call(self.contract.functions.epochBounds(epoch))
        return int(first), int(last)

    def epoch_of(self, block: int) -> int:
        return int(self._call(self.contract.functions.epochOf(block)))

    def current_epoch(self) -> int:
        return int(self._call(self.contract.functions.currentEpoch()))

    def budget_of(self, epoch: int) -> tuple[int, tuple[int, int, int, int]]:
        budget, bps = self._call(self.contract.functions.budgetOf(epoch))
        return int(budget), tuple(int(b) for b in bps)

    def epoch_root(self, epoch: int) -> EpochRoot:
        info = self._call(self.contract.functions.epochInfo(epoch))
        outputs = next(item for item in self.abi if item.get("name") == "epochInfo"
                       and item.get("type") == "function")["outputs"][0]["components"]
        raw = {c["name"]: value for c, value in zip(outputs, info, strict=True)}
        return EpochRoot(epoch, EpochStatus(raw["status"]), bytes(raw["root"]), int(raw["total"]),
                         int(raw["claimed"]), int(raw["attestedAt"]), int(raw["finalAt"]),
                         raw["tableCid"])

    def is_claimed(self, epoch: int, account: str) -> bool:
        return bool(self._call(self.contract.functions.isClaimed(
            epoch, to_checksum_address(account))))

    def digest(self, epoch: int, root: bytes, total: int, table_cid: str) -> bytes:
        return reward_digest(self.chain_id, self.address, epoch, root, total, table_cid)

    def timestamp(self) -> int:
        with self.evm.rpc_errors():
            return int(self.w3.eth.get_block("latest")["timestamp"])

    # ---------------------------------------------------------------- transactions

    def _send(self, fn: Any) -> Any:
        if self.account is None:
            raise ChainError("no key to send RewardDistributor transactions with")
        return self.evm.send(fn, self.account)

    def attest(self, epoch: int, root: bytes, total: int, table_cid: str, signer_bitmap: int,
               sigma: G1Point, apk2: G2Point, active_set: CommitteeSet) -> Any:
        """Post ``root`` with the aggregate ``sigma`` (under ``apk2``) of the signers in
        ``signer_bitmap`` of ``active_set`` (the committee's current set); the non-signers and
        the hash hint are derived here."""
        digest = self.digest(epoch, root, total, table_cid)
        proof = (active_set.raw, active_set.non_signers(signer_bitmap), g1_arg(sigma),
                 g2_arg(apk2), hash_to_g1_hint(digest))
        return self._send(self.contract.functions.attest(epoch, root, total, table_cid,
                                                         signer_bitmap, proof))

    def reverse(self, epoch: int) -> Any:
        return self._send(self.contract.functions.reverse(epoch))

    def claim(self, epoch: int, account: str, amount: int, proof: list[bytes]) -> Any:
        return self._send(self.contract.functions.claim(epoch, to_checksum_address(account),
                                                        amount, proof))


__all__ = ["REWARD_TYPEHASH", "EpochRoot", "EpochStatus", "RewardDistributor", "reward_digest"]
