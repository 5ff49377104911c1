"""BLS signatures over BN254 for the verifier committee: keys, hash to G1, sign, aggregate,
verify, and the wire encoding of points.

Spec: docs/committee.md "Keys and signatures". Curve arithmetic is py_ecc's
``optimized_bn128`` (Jacobian coordinates; infinity is ``z = 0``); the contract does the same
with the EVM precompiles 0x06-0x08, and both read ``tests/vectors/bls_committee.json``.

- Keys: ``sk`` in ``[1, r-1]``; ``pk1 = sk·G1``, ``pk2 = sk·G2``. ``SecretKey.generate()``
  draws from ``secrets``; ``SecretKey.from_seed(seed)`` is ``keccak256(seed) mod r`` (rehashed
  in the ~2^-254 case that it is 0), for tests and vectors only.
- ``hash_to_g1(digest)``: EigenLayer's ``BN254.hashToG1`` try-and-increment, bit for bit;
  ``hash_to_g1_hint(digest)`` the square roots that let ``settle`` check that point with no
  modexp (``hash_to_g1_hinted`` is that check).
- ``sign``: ``σ = sk·H(m)``. Aggregation adds points.
- ``verify(σ, apk1, apk2, m)``: with ``γ = gamma(m, σ, apk1, apk2)``, the one two-pair check
  ``e(σ + γ·apk1, −G2) · e(H(m) + γ·G1, apk2) = 1`` (two Miller loops, one final
  exponentiation). It proves ``e(σ, G2) = e(H(m), apk2)`` and ``e(apk1, G2) = e(G1, apk2)``
  at once: ``γ`` is fixed by all the inputs, so a forger cannot pick points whose errors in
  the two equations cancel. An aggregate key at infinity is refused (it would "verify" ``σ``
  at infinity on any message).

Wire encoding (EIP-197 order): G1 ``[x, y]``; G2 ``[[x_im, x_re], [y_im, y_re]]`` (py_ecc's
``FQ2.coeffs`` are ``(re, im)``); infinity is all zeros. In JSON every coordinate is a
``0x``-hex string (``to_json`` writes 64 digits). Decoding refuses wrong shapes, coordinates
``>= p``, points off the curve, G2 points outside the order-``r`` subgroup, and infinity unless
asked for, each as one ``BLSError``.

Rogue keys: aggregation alone is forgeable (register ``x·G − pk_victim``); the committee
requires a proof of possession at registration (``committee.messages.proof_of_possession``).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from eth_utils import keccak
from py_ecc.optimized_bn128 import (
    FQ,
    FQ2,
    FQ12,
    G1,
    G2,
    Z1,
    Z2,
    add,
    b,
    b2,
    curve_order,
    field_modulus,
    final_exponentiate,
    is_inf,
    is_on_curve,
    multiply,
    neg,
    normalize,
    pairing,
)

from ledger.errors import VerificationError

P = field_modulus  # base field modulus p
R = curve_order  # group order r
_SQRT_EXPONENT = (P + 1) // 4  # p = 3 mod 4, so beta^((p+1)/4) is a square root when one exists

# Jacobian points as py_ecc keeps them: (x, y, z) with affine (x/z², y/z³); z = 0 at infinity.
G1Point = tuple[FQ, FQ, FQ]
G2Point = tuple[FQ2, FQ2, FQ2]

_HEX = re.compile(r"0x[0-9a-fA-F]{1,64}")


class BLSError(VerificationError):
    """A key, point, signature or committee message is malformed or out of its domain
    (hostile input lands here, never as a bare ``ValueError`` or ``TypeError``)."""


# --------------------------------------------------------------------------- keys


@dataclass(frozen=True, repr=False)
class SecretKey:
    """A BLS secret key, an integer in ``[1, r-1]``; its repr does not show it."""

    value: int

    def __post_init__(self) -> None:
        if type(self.value) is not int or not 0 < self.value < R:
            raise BLSError("a secret key is an integer in [1, r-1]")

    def __repr__(self) -> str:
        return f"SecretKey(pk1={g1_to_json(self.pk1())})"

    @classmethod
    def generate(cls) -> SecretKey:
        return cls(secrets.randbelow(R - 1) + 1)

    @classmethod
    def from_seed(cls, seed: bytes | str) -> SecretKey:
        """``int(keccak256(seed)) mod r``, rehashing while it is 0. Deterministic: for tests
        and vectors, never for a key that guards stake."""
        digest = keccak(seed.encode() if isinstance(seed, str) else bytes(seed))
        while int.from_bytes(digest, "big") % R == 0:
            digest = keccak(digest)
        return cls(int.from_bytes(digest, "big") % R)

    def pk1(self) -> G1Point:
        return multiply(G1, self.value)

    def pk2(self) -> G2Point:
        return multiply(G2, self.value)


# --------------------------------------------------------------------------- hash, sign, verify


def hash_to_g1(digest: bytes) -> G1Point:
    """EigenLayer's ``BN254.hashToG1``: ``x = uint256(digest) mod p``; while ``x³ + 3`` is not a
    square, ``x += 1``; ``y = (x³ + 3)^((p+1)/4)`` as the exponentiation gives it (no sign
    choice). Not constant time, which public messages do not need."""
    if not isinstance(digest, bytes) or len(digest) != 32:
        raise BLSError(f"a message digest is 32 bytes, not {digest!r:.80}")
    hint = hash_to_g1_hint(digest)  # the candidates' roots; the last is the point's y
    x = (int.from_bytes(digest, "big") + len(hint) - 1) % P
    return (FQ(x), FQ(hint[-1]), FQ.one())


def hash_to_g1_hint(digest: bytes) -> list[int]:
    """What the contract's ``settle`` takes in place of square roots taken on chain
    (``BN254.hashToG1Hinted``, docs/committee.md "Hash to G1"): one word per try-and-increment
    candidate ``x_j`` up to the one ``hash_to_g1`` takes. A skipped candidate gets ``z`` with
    ``z² = −β_j`` (its ``β_j = x_j³ + 3`` then has no root: ``−1`` has none since ``p ≡ 3 mod
    4``); the last gets ``hash_to_g1``'s ``y``."""
    if not isinstance(digest, bytes) or len(digest) != 32:
        raise BLSError(f"a message digest is 32 bytes, not {digest!r:.80}")
    x = int.from_bytes(digest, "big") % P
    hint = []
    while True:
        beta = (x * x * x + 3) % P
        y = pow(beta, _SQRT_EXPONENT, P)
        if y * y % P == beta:
            return [*hint, y]
        hint.append(pow(P - beta, _SQRT_EXPONENT, P))
        x = (x + 1) % P


def hash_to_g1_hinted(digest: bytes, hint: Sequence[int]) -> tuple[int, int] | None:
    """The contract's check of a hint (``BN254.hashToG1Hinted``): the affine H(digest) it
    proves, or None. Either root of the last candidate is accepted, as on chain."""
    x = int.from_bytes(digest, "big") % P
    for position, word in enumerate(hint):
        if type(word) is not int or not 0 <= word < 2**256:
            return None
        beta = (x * x * x + 3) % P
        if position == len(hint) - 1:
            return (x, word) if word < P and word * word % P == beta else None
        if word * word % P != (P - beta) % P:
            return None
        x = (x + 1) % P
    return None


def sign(sk: SecretKey, digest: bytes) -> G1Point:
    """``σ = sk·H(digest)``."""
    return multiply(hash_to_g1(digest), sk.value)


def aggregate_signatures(sigmas: Iterable[G1Point]) -> G1Point:
    return _sum(sigmas, Z1)


def aggregate_pk1(pks: Iterable[G1Point]) -> G1Point:
    return _sum(pks, Z1)


def aggregate_pk2(pks: Iterable[G2Point]) -> G2Point:
    return _sum(pks, Z2)


def _sum(points: Iterable[Any], zero: Any) -> Any:
    total = zero
    for point in points:
        total = add(total, point)
    return total


def gamma(digest: bytes, sigma: G1Point, apk1: G1Point, apk2: G2Point) -> int:
    """``keccak256(m ‖ apk1.x ‖ apk1.y ‖ apk2.x_im ‖ apk2.x_re ‖ apk2.y_im ‖ apk2.y_re ‖ σ.x ‖
    σ.y) mod r``, 32-byte words (``abi.encodePacked``)."""
    (ax, ay), ((bxi, bxr), (byi, byr)) = g1_to_ints(apk1), g2_to_ints(apk2)
    sx, sy = g1_to_ints(sigma)
    words = b"".join(v.to_bytes(32, "big") for v in (ax, ay, bxi, bxr, byi, byr, sx, sy))
    return int.from_bytes(keccak(digest + words), "big") % R


def verify(sigma: G1Point, apk1: G1Point, apk2: G2Point, digest: bytes) -> bool:
    """Whether ``sigma`` is the signature on ``digest`` of the keys summed in ``apk1`` and
    ``apk2`` *and* ``apk2`` is ``apk1``'s G2 twin (module docstring). The points are assumed
    decoded (on the curve, in the subgroup); an aggregate key at infinity never verifies."""
    if is_inf(apk1) or is_inf(apk2):
        return False
    g = gamma(digest, sigma, apk1, apk2)
    left = add(sigma, multiply(apk1, g))
    right = add(hash_to_g1(digest), multiply(G1, g))
    f = pairing(neg(G2), left, final_exponentiate=False) * pairing(apk2, right,
                                                                   final_exponentiate=False)
    return final_exponentiate(f) == FQ12.one()


# --------------------------------------------------------------------------- encoding


def g1_to_ints(point: G1Point) -> tuple[int, int]:
    """``(x, y)``; ``(0, 0)`` at infinity (as the precompiles)."""
    if is_inf(point):
        return (0, 0)
    x, y = normalize(point)
    return (x.n, y.n)


def g2_to_ints(point: G2Point) -> tuple[tuple[int, int], tuple[int, int]]:
    """``((x_im, x_re), (y_im, y_re))``, EIP-197 order; zeros at infinity."""
    if is_inf(point):
        return ((0, 0), (0, 0))
    x, y = normalize(point)
    return ((int(x.coeffs[1]), int(x.coeffs[0])), (int(y.coeffs[1]), int(y.coeffs[0])))


def _coordinate(value: Any, what: str) -> int:
    if type(value) is not int or not 0 <= value < P:
        raise BLSError(f"{what}: a coordinate is an integer in [0, p), not {value!r:.80}")
    return value


def _pair(value: Any, what: str) -> Sequence[Any]:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise BLSError(f"{what}: expected a pair, got {value!r:.80}")
    return value


def g1_from_ints(xy: Any, *, allow_infinity: bool = False, what: str = "G1 point") -> G1Point:
    """A G1 point from ``[x, y]`` (``BLSError`` if off the curve, out of range, or at infinity
    without ``allow_infinity``). G1 has cofactor 1: on the curve is in the group."""
    x, y = (_coordinate(c, what) for c in _pair(xy, what))
    if x == 0 and y == 0:
        if not allow_infinity:
            raise BLSError(f"{what}: the point at infinity is not allowed here")
        return Z1
    point = (FQ(x), FQ(y), FQ.one())
    if not is_on_curve(point, b):
        raise BLSError(f"{what}: ({x:#x}, {y:#x}) is not on BN254")
    return point


def g2_from_ints(coords: Any, *, allow_infinity: bool = False,
                 what: str = "G2 point") -> G2Point:
    """A G2 point from ``[[x_im, x_re], [y_im, y_re]]`` (``BLSError`` if off the twist, out of
    range, outside the order-``r`` subgroup, or at infinity without ``allow_infinity``)."""
    (x_im, x_re), (y_im, y_re) = ((_coordinate(c, what) for c in _pair(half, what))
                                  for half in _pair(coords, what))
    if x_im == x_re == y_im == y_re == 0:
        if not allow_infinity:
            raise BLSError(f"{what}: the point at infinity is not allowed here")
        return Z2
    point = (FQ2([x_re, x_im]), FQ2([y_re, y_im]), FQ2.one())
    if not is_on_curve(point, b2):
        raise BLSError(f"{what}: not on the BN254 twist")
    if not is_inf(multiply(point, R)):
        raise BLSError(f"{what}: not in the order-r subgroup of the twist")
    return point


def int_to_hex(value: int) -> str:
    """A 256-bit integer as ``0x`` + 64 lowercase hex digits."""
    return f"0x{value:064x}"


def hex_to_int(value: Any, what: str = "integer") -> int:
    """``0x`` + 1 to 64 hex digits as an integer; ``BLSError`` for anything else."""
    if not isinstance(value, str) or not _HEX.fullmatch(value):
        raise BLSError(f"{what}: expected 0x-hex of at most 32 bytes, got {value!r:.80}")
    return int(value, 16)


def g1_to_json(point: G1Point) -> list[str]:
    return [int_to_hex(c) for c in g1_to_ints(point)]


def g2_to_json(point: G2Point) -> list[list[str]]:
    return [[int_to_hex(c) for c in half] for half in g2_to_ints(point)]


def g1_from_json(obj: Any, *, allow_infinity: bool = False, what: str = "G1 point") -> G1Point:
    ints = [hex_to_int(c, what) for c in _pair(obj, what)]
    return g1_from_ints(ints, allow_infinity=allow_infinity, what=what)


def g2_from_json(obj: Any, *, allow_infinity: bool = False, what: str = "G2 point") -> G2Point:
    ints = [[hex_to_int(c, what) for c in _pair(half, what)] for half in _pair(obj, what)]
    return g2_from_ints(ints, allow_infinity=allow_infinity, what=what)
