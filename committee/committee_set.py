"""The verifier set as the committee commits to it: ``VerifierCommittee.activeSet()``, the bytes
``SetUpdated`` carries and ``settle`` takes (docs/committee.md "The set").

Layout (big-endian): a 128-byte header, ``apk1.x ‖ apk1.y ‖ active stake ‖ active bitmap`` as
32-byte words, then one 76-byte entry per index ``0..slotCount-1``: ``pk1.x`` and ``pk1.y``
(32 bytes each) and the stake (12 bytes, a uint96); an index that is free or unbonding is all
zeros. ``setHash = keccak256(bytes)``. A challenge is judged by the set of its opening
(``ChallengeOpened.setHash``).

``decode`` treats the bytes as hostile (they come from chain logs): bounded length, whole
entries, at most 128 slots, and a header that agrees with the entries (the bitmap is the
nonzero entries, the stake their sum, apk1 on the curve), else one ``SetError``.
"""

from __future__ import annotations

from dataclasses import dataclass

from eth_utils import keccak
from py_ecc.optimized_bn128 import FQ, Z1, add, b, is_on_curve, normalize

from committee.bls import BLSError, P

HEADER = 128
ENTRY = 76
MAX_SLOTS = 128  # VerifierCommittee.MAX_VERIFIERS
MAX_SET_BYTES = HEADER + ENTRY * MAX_SLOTS
_STAKE_BYTES = 12


class SetError(BLSError):
    """Bytes that are not a committee set (a wrong length, or a header that disagrees with
    its entries)."""


@dataclass(frozen=True)
class CommitteeSet:
    """One committed set: ``pk1s[i]`` (x, y) and ``stakes[i]`` per index, zeros when not active."""

    apk1: tuple[int, int]
    active_stake: int
    active_bitmap: int
    pk1s: tuple[tuple[int, int], ...]
    stakes: tuple[int, ...]
    raw: bytes

    @property
    def set_hash(self) -> bytes:
        return keccak(self.raw)

    def active(self, index: int) -> bool:
        return 0 <= index < MAX_SLOTS and bool(self.active_bitmap >> index & 1)

    def non_signers(self, signer_bitmap: int) -> bytes:
        """The active indices outside ``signer_bitmap``, ascending, a byte each (``settle``'s
        ``nonSigners``)."""
        left = self.active_bitmap & ~signer_bitmap
        return bytes(i for i in range(MAX_SLOTS) if left >> i & 1)

    def stake_of(self, bitmap: int) -> int:
        """The stake of the active indices in ``bitmap``."""
        return sum(self.stakes[i] for i in range(len(self.stakes)) if bitmap >> i & 1)


def encode(pk1s: list[tuple[int, int]], stakes: list[int]) -> bytes:
    """The set of keys ``pk1s`` with ``stakes`` (stake 0: not active), its header computed."""
    if len(pk1s) != len(stakes) or len(pk1s) > MAX_SLOTS:
        raise SetError(f"a set has at most {MAX_SLOTS} slots, one key and stake each")
    apk = Z1
    active_stake = bitmap = 0
    entries = b""
    for i, ((x, y), stake) in enumerate(zip(pk1s, stakes, strict=True)):
        if not 0 <= stake < 2 ** (8 * _STAKE_BYTES):
            raise SetError(f"stake {stake} of slot {i} is not a uint96")
        if stake == 0:
            entries += bytes(ENTRY)
            continue
        apk = add(apk, (FQ(x), FQ(y), FQ.one()))
        active_stake += stake
        bitmap |= 1 << i
        entries += x.to_bytes(32, "big") + y.to_bytes(32, "big") + stake.to_bytes(_STAKE_BYTES, "big")
    ax, ay = (0, 0) if apk[2] == FQ.zero() else (int(c) for c in normalize(apk))
    header = b"".join(v.to_bytes(32, "big") for v in (ax, ay, active_stake, bitmap))
    return header + entries


def decode(data: bytes) -> CommitteeSet:
    """Parse and check set bytes (module docstring); ``SetError`` when they are not one."""
    if not isinstance(data, bytes | bytearray):
        raise SetError("a committee set is bytes")
    data = bytes(data)
    if not HEADER <= len(data) <= MAX_SET_BYTES or (len(data) - HEADER) % ENTRY:
        raise SetError(f"a committee set is {HEADER} + {ENTRY}·n bytes (n <= {MAX_SLOTS}), "
                       f"not {len(data)}")
    ax, ay, active_stake, bitmap = (int.from_bytes(data[i:i + 32], "big")
                                    for i in range(0, HEADER, 32))
    pk1s, stakes = [], []
    for at in range(HEADER, len(data), ENTRY):
        x = int.from_bytes(data[at:at + 32], "big")
        y = int.from_bytes(data[at + 32:at + 64], "big")
        stakes.append(int.from_bytes(data[at + 64:at + ENTRY], "big"))
        pk1s.append((x, y))
    if bitmap >> len(pk1s) or any(bool(bitmap >> i & 1) != (stakes[i] > 0)
                                  for i in range(len(pk1s))):
        raise SetError("the set's active bitmap is not its entries with a stake")
    if active_stake != sum(stakes):
        raise SetError("the set's active stake is not the sum of its stakes")
    for i, (x, y) in enumerate(pk1s):
        if stakes[i] == 0 and (x, y) != (0, 0):
            raise SetError(f"slot {i} has a key but no stake")
        if stakes[i] and not (x < P and y < P and is_on_curve((FQ(x), FQ(y), FQ.one()), b)):
            raise SetError(f"the key of slot {i} is not a point of G1")
    if (ax, ay) != (0, 0) and not (ax < P and ay < P
                                   and is_on_curve((FQ(ax), FQ(ay), FQ.one()), b)):
        raise SetError("the set's apk1 is not a point of G1")
    return CommitteeSet((ax, ay), active_stake, bitmap, tuple(pk1s), tuple(stakes), data)


__all__ = ["ENTRY", "HEADER", "MAX_SET_BYTES", "MAX_SLOTS", "CommitteeSet", "SetError",
           "decode", "encode"]
