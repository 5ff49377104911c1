"""What committee members sign: the proof-of-possession and verdict digests, the ``Verdict``
and the ``SignedVerdict`` a verifier sends to the aggregator.

Spec: docs/committee.md "Messages". Both digests are ``keccak256(abi.encode(TYPEHASH, ...))``
with ``TYPEHASH = keccak256(<type string>)``, bound to the chain id and the committee contract:

- ``pop_digest``: ``GymVerifierPoP(uint256 chainId,address committee,address verifier,uint256
  pkX,uint256 pkY)``; ``proof_of_possession`` signs it, ``verify_pop`` checks it with the
  one-key pairing check (``apk1 = pk1``, ``apk2 = pk2``), as ``register`` does on chain.
- ``verdict_digest``: ``GymVerdict(uint256 chainId,address committee,uint256 challengeId,
  bytes32 receiptHash,uint8 verdict,bytes32 reason)``; ``verdict`` 1 = upheld, 2 = rejected;
  ``reason`` the name of the first failing check as ASCII, left-aligned, zero-padded to 32
  bytes, and zero for a rejected challenge (``reason_bytes`` / ``reason_text``).

JSON forms (integers that are ids as JSON numbers, hashes and points as ``0x``-hex)::

    Verdict:       {"challenge_id": 7, "receipt_hash": "0x<64>", "verdict": 1,
                    "reason": "0x<64>"}
    SignedVerdict: {"type": "gym-signed-verdict", "v": 1, "verdict": {Verdict},
                    "verifier_index": 3, "verifier": "0x<40>",
                    "sigma": [x, y], "pk2": [[x_im, x_re], [y_im, y_re]]}

``decode_signed_verdict`` parses at most ``MAX_SIGNED_VERDICT_BYTES`` through
``ledger.json_input.parse_json``; every refusal is a ``BLSError``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from eth_abi import encode as abi_encode
from eth_utils import keccak, to_checksum_address

from committee.bls import (
    BLSError,
    G1Point,
    G2Point,
    SecretKey,
    g1_from_json,
    g1_to_ints,
    g1_to_json,
    g2_from_json,
    g2_to_json,
    sign,
    verify,
)
from ledger.json_input import JSONInputError, parse_json

POP_TYPE = ("GymVerifierPoP(uint256 chainId,address committee,address verifier,uint256 pkX,"
            "uint256 pkY)")
VERDICT_TYPE = ("GymVerdict(uint256 chainId,address committee,uint256 challengeId,"
                "bytes32 receiptHash,uint8 verdict,bytes32 reason)")
POP_TYPEHASH = keccak(text=POP_TYPE)
VERDICT_TYPEHASH = keccak(text=VERDICT_TYPE)

UPHELD = 1  # the receipt fails verification: the node is slashed
REJECTED = 2  # the receipt verifies: the challenger's bond is forfeited

SIGNED_VERDICT_TYPE = "gym-signed-verdict"
MAX_SIGNED_VERDICT_BYTES = 4096  # one is ~700 bytes
_UINT256 = 2**256
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{40}")
_BYTES32 = re.compile(r"0x[0-9a-fA-F]{64}")
_REASON = re.compile(rb"[\x21-\x7e]{1,32}")  # printable ASCII without space


def _uint256(value: Any, what: str) -> int:
    if type(value) is not int or not 0 <= value < _UINT256:
        raise BLSError(f"{what}: expected a uint256, got {value!r:.80}")
    return value


def _address(value: Any, what: str) -> str:
    if not isinstance(value, str) or not _ADDRESS.fullmatch(value):
        raise BLSError(f"{what}: expected a 20-byte 0x-hex address, got {value!r:.80}")
    return to_checksum_address(value)


def _bytes32(value: Any, what: str) -> bytes:
    """32 bytes, from bytes or ``0x`` + 64 hex digits."""
    if isinstance(value, bytes) and len(value) == 32:
        return value
    if isinstance(value, str) and _BYTES32.fullmatch(value):
        return bytes.fromhex(value[2:])
    raise BLSError(f"{what}: expected 32 bytes (0x + 64 hex digits), got {value!r:.80}")


# --------------------------------------------------------------------------- digests


def pop_digest(chain_id: int, committee: str, verifier: str, pk1: G1Point) -> bytes:
    """The proof-of-possession digest of ``verifier``'s key ``pk1`` for this deployment."""
    pk_x, pk_y = g1_to_ints(pk1)
    return keccak(abi_encode(
        ["bytes32", "uint256", "address", "address", "uint256", "uint256"],
        [POP_TYPEHASH, _uint256(chain_id, "chain id"), _address(committee, "committee"),
         _address(verifier, "verifier"), pk_x, pk_y]))


def verdict_digest(chain_id: int, committee: str, challenge_id: int, receipt_hash: bytes | str,
                   verdict: int, reason: bytes | str) -> bytes:
    """The digest every committee member signs for a verdict on one challenge."""
    return keccak(abi_encode(
        ["bytes32", "uint256", "address", "uint256", "bytes32", "uint8", "bytes32"],
        [VERDICT_TYPEHASH, _uint256(chain_id, "chain id"), _address(committee, "committee"),
         _uint256(challenge_id, "challenge id"), _bytes32(receipt_hash, "receipt hash"),
         verdict, _bytes32(reason, "reason")]))


def proof_of_possession(sk: SecretKey, chain_id: int, committee: str, verifier: str) -> G1Point:
    """``sk``'s signature on its own ``pop_digest``: what ``register`` requires with the keys."""
    return sign(sk, pop_digest(chain_id, committee, verifier, sk.pk1()))


def verify_pop(sigma: G1Point, pk1: G1Point, pk2: G2Point, chain_id: int, committee: str,
               verifier: str) -> bool:
    """Whether ``sigma`` proves possession of the key ``(pk1, pk2)`` for ``verifier`` on this
    deployment (and ``pk2`` is ``pk1``'s twin). A rogue key ``x·G − pk_victim`` has no known
    secret, so no proof of possession."""
    return verify(sigma, pk1, pk2, pop_digest(chain_id, committee, verifier, pk1))


# --------------------------------------------------------------------------- verdicts


def reason_bytes(name: str) -> bytes:
    """A check's name (``"sampling"``) as the 32-byte ``reason``: ASCII, left-aligned, zeros."""
    raw = name.encode() if isinstance(name, str) and name.isascii() else b""
    if not _REASON.fullmatch(raw):
        raise BLSError(f"a reason is 1 to 32 printable ASCII characters, not {name!r:.80}")
    return raw.ljust(32, b"\0")


def reason_text(reason: bytes) -> str:
    """The name in a 32-byte ``reason`` (``""`` for zero); ``BLSError`` if it is not one."""
    if not isinstance(reason, bytes) or len(reason) != 32:
        raise BLSError(f"a reason is 32 bytes, not {reason!r:.80}")
    name = reason.rstrip(b"\0")
    if name and not _REASON.fullmatch(name):
        raise BLSError(f"a reason is printable ASCII, left-aligned and zero-padded: "
                       f"{reason.hex()}")
    return name.decode("ascii")


@dataclass(frozen=True)
class Verdict:
    """A verifier's judgement of one challenge (docs/committee.md "Messages")."""

    challenge_id: int  # the challenge's id in the committee contract
    receipt_hash: bytes  # 32 bytes: the challenged receipt's hash, as the challenge names it
    verdict: int  # UPHELD (1) or REJECTED (2)
    reason: bytes = bytes(32)  # the first failing check's name (reason_bytes); zero if rejected

    def __post_init__(self) -> None:
        _uint256(self.challenge_id, "challenge id")
        _bytes32(self.receipt_hash, "receipt hash")
        if type(self.verdict) is not int or self.verdict not in (UPHELD, REJECTED):
            raise BLSError(f"verdict is 1 (upheld) or 2 (rejected), not {self.verdict!r:.80}")
        text = reason_text(self.reason)
        if (self.verdict == UPHELD) != bool(text):
            raise BLSError("an upheld verdict names the failing check as its reason; a rejected "
                           f"one has reason zero (verdict {self.verdict}, reason {text!r})")

    def digest(self, chain_id: int, committee: str) -> bytes:
        return verdict_digest(chain_id, committee, self.challenge_id, self.receipt_hash,
                              self.verdict, self.reason)

    def to_json(self) -> dict[str, Any]:
        return {"challenge_id": self.challenge_id, "receipt_hash": "0x" + self.receipt_hash.hex(),
                "verdict": self.verdict, "reason": "0x" + self.reason.hex()}

    @classmethod
    def from_json(cls, obj: Any) -> Verdict:
        keys = {"challenge_id", "receipt_hash", "verdict", "reason"}
        if not isinstance(obj, dict) or set(obj) != keys:
            raise BLSError(f"a verdict is an object with exactly {sorted(keys)}")
        return cls(obj["challenge_id"], _bytes32(obj["receipt_hash"], "receipt hash"),
                   obj["verdict"], _bytes32(obj["reason"], "reason"))


@dataclass(frozen=True)
class SignedVerdict:
    """One verifier's signature on a verdict, as it travels to the aggregator. ``pk2`` comes
    with it (the contract keeps only ``pk1``); ``verify`` binds it to the registered ``pk1``."""

    verdict: Verdict
    verifier_index: int  # the verifier's index in the committee (the contract's operator list)
    verifier: str  # the verifier's address, checksummed
    sigma: G1Point  # sign(sk, verdict.digest(chain_id, committee))
    pk2: G2Point

    @classmethod
    def create(cls, sk: SecretKey, verdict: Verdict, *, chain_id: int, committee: str,
               verifier_index: int, verifier: str) -> SignedVerdict:
        return cls(verdict, verifier_index, _address(verifier, "verifier"),
                   sign(sk, verdict.digest(chain_id, committee)), sk.pk2())

    def verify(self, pk1: G1Point, *, chain_id: int, committee: str) -> bool:
        """Whether this is the signature of the key registered as ``pk1``."""
        return verify(self.sigma, pk1, self.pk2, self.verdict.digest(chain_id, committee))

    def to_json(self) -> dict[str, Any]:
        return {"type": SIGNED_VERDICT_TYPE, "v": 1, "verdict": self.verdict.to_json(),
                "verifier_index": self.verifier_index, "verifier": self.verifier,
                "sigma": g1_to_json(self.sigma), "pk2": g2_to_json(self.pk2)}

    def to_bytes(self) -> bytes:
        return json.dumps(self.to_json(), separators=(",", ":")).encode()


def decode_signed_verdict(data: bytes | str) -> SignedVerdict:
    """A ``SignedVerdict`` from at most ``MAX_SIGNED_VERDICT_BYTES`` of JSON; ``BLSError`` for
    anything else (points are checked on the curve and, for ``pk2``, in the subgroup; the
    signature is not verified here: that needs the registered ``pk1``)."""
    try:
        obj = parse_json(data, max_bytes=MAX_SIGNED_VERDICT_BYTES, max_depth=8,
                         what="signed verdict")
    except JSONInputError as exc:
        raise BLSError(str(exc)) from None
    keys = {"type", "v", "verdict", "verifier_index", "verifier", "sigma", "pk2"}
    if (not isinstance(obj, dict) or set(obj) != keys or obj["type"] != SIGNED_VERDICT_TYPE
            or obj["v"] != 1 or type(obj["v"]) is not int):
        raise BLSError(f"not a {SIGNED_VERDICT_TYPE} v1 object with exactly {sorted(keys)}")
    index = obj["verifier_index"]
    if type(index) is not int or not 0 <= index < 2**32:
        raise BLSError(f"verifier index: expected a small non-negative integer, got {index!r:.80}")
    return SignedVerdict(Verdict.from_json(obj["verdict"]), index,
                         _address(obj["verifier"], "verifier"),
                         g1_from_json(obj["sigma"], what="sigma"),
                         g2_from_json(obj["pk2"], what="pk2"))

