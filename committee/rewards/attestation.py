"""What a verifier signs for an epoch's reward table, `gym-signed-root/1`, and the aggregate
of a quorum of them that ``attest`` takes (docs/rewards.md "Attestation").

A verifier signs only a table it computed itself: ``RootClaim`` names the epoch, the root,
the total and the CID of the table's bytes, and ``SignedRoot`` carries the verifier's BLS
signature of the RewardDistributor's ``rewardDigest`` of it (``distributor.reward_digest``).
``verified`` keeps the signatures that verify under the keys of the committee's current set
(each from the slot's holder); ``quorum`` sums one claim's once its signers hold two thirds of
the set's active stake, as ``attest`` requires (``aggregate``: both).

JSON::

    {"type": "gym-signed-root", "v": 1, "epoch": 3, "root": "0x<64>", "total": "<decimal>",
     "table_cid": "bafk...", "verifier_index": 2, "verifier": "0x<40>",
     "sigma": [x, y], "pk2": [[x_im, x_re], [y_im, y_re]]}
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from eth_utils import to_checksum_address

from committee.bls import (
    BLSError,
    G1Point,
    G2Point,
    SecretKey,
    aggregate_pk2,
    aggregate_signatures,
    g1_from_ints,
    g1_from_json,
    g1_to_json,
    g2_from_json,
    g2_to_json,
    sign,
    verify,
)
from committee.committee_set import CommitteeSet
from committee.rewards.distributor import reward_digest
from ledger.json_input import JSONInputError, parse_json

SIGNED_ROOT_TYPE = "gym-signed-root"
MAX_SIGNED_ROOT_BYTES = 4096
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{40}")
_BYTES32 = re.compile(r"0x[0-9a-fA-F]{64}")
_CID = re.compile(r"[A-Za-z0-9]{8,128}")


@dataclass(frozen=True)
class RootClaim:
    """Epoch ``epoch``'s table: its Merkle ``root``, its ``total`` and the CID of its bytes."""

    epoch: int
    root: bytes
    total: int
    table_cid: str

    def digest(self, chain_id: int, distributor: str) -> bytes:
        return reward_digest(chain_id, distributor, self.epoch, self.root, self.total,
                             self.table_cid)


@dataclass(frozen=True)
class SignedRoot:
    """One verifier's signature on a ``RootClaim``; ``pk2`` travels with it and ``verify``
    binds it to the registered ``pk1``."""

    claim: RootClaim
    verifier_index: int
    verifier: str
    sigma: G1Point
    pk2: G2Point

    @classmethod
    def create(cls, sk: SecretKey, claim: RootClaim, *, chain_id: int, distributor: str,
               verifier_index: int, verifier: str) -> SignedRoot:
        return cls(claim, verifier_index, to_checksum_address(verifier),
                   sign(sk, claim.digest(chain_id, distributor)), sk.pk2())

    def verify(self, pk1: G1Point, *, chain_id: int, distributor: str) -> bool:
        return verify(self.sigma, pk1, self.pk2, self.claim.digest(chain_id, distributor))

    def to_json(self) -> dict[str, Any]:
        return {"type": SIGNED_ROOT_TYPE, "v": 1, "epoch": self.claim.epoch,
                "root": "0x" + self.claim.root.hex(), "total": str(self.claim.total),
                "table_cid": self.claim.table_cid, "verifier_index": self.verifier_index,
                "verifier": self.verifier, "sigma": g1_to_json(self.sigma),
                "pk2": g2_to_json(self.pk2)}

    def to_bytes(self) -> bytes:
        return json.dumps(self.to_json(), separators=(",", ":")).encode()


def decode_signed_root(data: bytes | str) -> SignedRoot:
    """A ``SignedRoot`` from at most ``MAX_SIGNED_ROOT_BYTES`` of JSON; ``BLSError`` for
    anything else (points checked on the curve and, for ``pk2``, in the subgroup; the
    signature itself needs the registered key: ``aggregate``)."""
    try:
        obj = parse_json(data, max_bytes=MAX_SIGNED_ROOT_BYTES, max_depth=6, what="signed root")
    except JSONInputError as exc:
        raise BLSError(str(exc)) from None
    keys = {"type", "v", "epoch", "root", "total", "table_cid", "verifier_index", "verifier",
            "sigma", "pk2"}
    if not isinstance(obj, dict) or set(obj) != keys or obj["type"] != SIGNED_ROOT_TYPE \
            or type(obj["v"]) is not int or obj["v"] != 1:
        raise BLSError(f"not a {SIGNED_ROOT_TYPE} v1 object with exactly {sorted(keys)}")
    epoch, index, total = obj["epoch"], obj["verifier_index"], obj["total"]
    if type(epoch) is not int or not 0 <= epoch < 2**64:
        raise BLSError(f"epoch: expected a non-negative integer, got {epoch!r:.60}")
    if type(index) is not int or not 0 <= index < 256:
        raise BLSError(f"verifier index: expected 0..255, got {index!r:.60}")
    if not isinstance(total, str) or not total.isdigit() or len(total) > 78 \
            or int(total) >= 2**256:
        raise BLSError(f"total: expected a uint256 as a decimal string, got {total!r:.60}")
    if not isinstance(obj["root"], str) or not _BYTES32.fullmatch(obj["root"]):
        raise BLSError("root: expected 0x and 64 hex digits")
    if not isinstance(obj["table_cid"], str) or not _CID.fullmatch(obj["table_cid"]):
        raise BLSError("table_cid: expected a CID")
    if not isinstance(obj["verifier"], str) or not _ADDRESS.fullmatch(obj["verifier"]):
        raise BLSError("verifier: expected an address")
    claim = RootClaim(epoch, bytes.fromhex(obj["root"][2:]), int(total), obj["table_cid"])
    return SignedRoot(claim, index, to_checksum_address(obj["verifier"]),
                      g1_from_json(obj["sigma"]), g2_from_json(obj["pk2"]))


@dataclass(frozen=True)
class Aggregate:
    """A quorum's aggregate for one claim, ready for ``RewardDistributor.attest``."""

    claim: RootClaim
    signer_bitmap: int
    sigma: G1Point
    apk2: G2Point
    signer_stake: int
    active_stake: int


def verified(signed: Iterable[SignedRoot], active_set: CommitteeSet, holders: dict[int, str],
             *, chain_id: int, distributor: str) -> tuple[list[SignedRoot], list[str]]:
    """The signatures of active slots held by their named verifier that verify under the
    slot's key (one pairing check each), and why each other one was refused. ``holders``:
    slot index -> the verifier holding it now."""
    kept: list[SignedRoot] = []
    refused: list[str] = []
    for s in signed:
        index = s.verifier_index
        if not active_set.active(index) or holders.get(index, "").lower() != s.verifier.lower():
            refused.append(f"slot {index} is no active verifier held by {s.verifier}")
        elif not s.verify(g1_from_ints(active_set.pk1s[index]), chain_id=chain_id,
                          distributor=distributor):
            refused.append(f"the signature of slot {index} does not verify under its key")
        else:
            kept.append(s)
    return kept, refused


def quorum(signed: Iterable[SignedRoot], active_set: CommitteeSet) -> Aggregate | None:
    """The first claim whose signers (already ``verified``, active in ``active_set``) hold two
    thirds of its active stake, summed; None without one. No pairing runs here."""
    by_claim: dict[RootClaim, dict[int, SignedRoot]] = {}
    for s in signed:
        if active_set.active(s.verifier_index):
            by_claim.setdefault(s.claim, {})[s.verifier_index] = s
    for claim, members in by_claim.items():
        bitmap = sum(1 << i for i in members)
        stake = active_set.stake_of(bitmap)
        if active_set.active_stake and 3 * stake >= 2 * active_set.active_stake:
            ordered = [members[i] for i in sorted(members)]
            return Aggregate(claim, bitmap, aggregate_signatures(s.sigma for s in ordered),
                             aggregate_pk2(s.pk2 for s in ordered), stake,
                             active_set.active_stake)
    return None


def aggregate(signed: Iterable[SignedRoot], active_set: CommitteeSet,
              holders: dict[int, str], *, chain_id: int, distributor: str
              ) -> tuple[Aggregate | None, list[str]]:
    """``quorum`` of the ``verified`` ones, and why each refused signature was refused."""
    kept, refused = verified(signed, active_set, holders, chain_id=chain_id,
                             distributor=distributor)
    return quorum(kept, active_set), refused


__all__ = [
    "SIGNED_ROOT_TYPE",
    "Aggregate",
    "RootClaim",
    "SignedRoot",
    "aggregate",
    "decode_signed_root",
    "quorum",
    "verified",
]
