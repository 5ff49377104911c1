"""committee.committee_set: the set bytes the contract commits to (docs/committee.md "The set"),
checked against the contract's own activeSet() on Anvil elsewhere (test_client); here the
layout written out by hand, the round trip and hostile bytes."""

from __future__ import annotations

import pytest
from eth_utils import keccak
from hypothesis import given, settings
from hypothesis import strategies as st
from py_ecc.optimized_bn128 import G1, add, multiply, normalize

from committee.committee_set import (
    ENTRY,
    HEADER,
    MAX_SET_BYTES,
    MAX_SLOTS,
    SetError,
    decode,
    encode,
)


def _pk(k: int) -> tuple[int, int]:
    x, y = normalize(multiply(G1, k))
    return int(x), int(y)


def _word(v: int) -> bytes:
    return v.to_bytes(32, "big")


def test_the_layout_written_out():
    pks = [_pk(3), (0, 0), _pk(5)]
    stakes = [7, 0, 2**96 - 1]
    raw = encode(pks, stakes)
    ax, ay = (int(c) for c in normalize(add(multiply(G1, 3), multiply(G1, 5))))
    expected = (_word(ax) + _word(ay) + _word(7 + 2**96 - 1) + _word(0b101)
                + _word(pks[0][0]) + _word(pks[0][1]) + (7).to_bytes(12, "big")
                + bytes(ENTRY)
                + _word(pks[2][0]) + _word(pks[2][1]) + (2**96 - 1).to_bytes(12, "big"))
    assert raw == expected and len(raw) == HEADER + 3 * ENTRY
    s = decode(raw)
    assert s.apk1 == (ax, ay) and s.active_stake == 7 + 2**96 - 1 and s.active_bitmap == 0b101
    assert s.pk1s == tuple(pks) and s.stakes == tuple(stakes) and s.set_hash == keccak(raw)
    assert s.non_signers(0b001) == bytes([2]) and s.non_signers(0b111) == b""
    assert s.non_signers(0) == bytes([0, 2]) and s.stake_of(0b100) == 2**96 - 1
    assert [s.active(i) for i in (-1, 0, 1, 2, 3, 200)] == [False, True, False, True, False, False]


def test_the_empty_set_is_the_constructors():
    assert encode([], []) == bytes(HEADER)
    assert decode(bytes(HEADER)).active_bitmap == 0


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=3), min_size=1, max_size=12))
def test_round_trip(choices):
    pks = [_pk(i + 2) if c else (0, 0) for i, c in enumerate(choices)]
    stakes = [c * 10**18 for c in choices]
    s = decode(encode(pks, stakes))
    assert s.stakes == tuple(stakes) and s.active_stake == sum(stakes)
    assert s.active_bitmap == sum(1 << i for i, c in enumerate(choices) if c)


def _flip(raw: bytes, at: int, value: bytes) -> bytes:
    return raw[:at] + value + raw[at + len(value):]


@pytest.mark.parametrize("mutate", [
    lambda r: r[:-1],                                   # not whole entries
    lambda r: r[:HEADER - 1],                           # no header
    lambda r: r + bytes(ENTRY * MAX_SLOTS),             # over 128 slots
    lambda r: _flip(r, 0x40, _word(1)),                 # active stake is not the sum
    lambda r: _flip(r, 0x60, _word(0b111)),             # bitmap names an empty slot
    lambda r: _flip(r, 0x60, _word(0b1001)),            # bitmap past the entries
    lambda r: _flip(r, HEADER + ENTRY + 64, (1).to_bytes(12, "big")),  # stake, no key
    lambda r: _flip(r, HEADER, _word(1)),               # a key off the curve
    lambda r: _flip(r, 0, _word(1)),                    # apk1 off the curve
    lambda r: "not bytes",
], ids=["partial", "short", "long", "stake", "bitmap", "bitmap-past", "keyless", "key", "apk",
        "type"])
def test_hostile_bytes_are_one_set_error(mutate):
    raw = encode([_pk(3), (0, 0), _pk(5)], [7, 0, 9])
    with pytest.raises(SetError):
        decode(mutate(raw))


def test_bounds():
    assert MAX_SET_BYTES == HEADER + ENTRY * MAX_SLOTS
    with pytest.raises(SetError):
        encode([_pk(2)], [2**96])
    with pytest.raises(SetError):
        encode([_pk(2)] * (MAX_SLOTS + 1), [1] * (MAX_SLOTS + 1))


def test_the_empty_set_needs_no_log():
    """A challenge opened before any verifier registered names the constructor's empty set,
    which no SetUpdated carries: the client knows it without reading the chain."""
    from web3 import Web3

    from committee.client import VerifierCommittee

    client = VerifierCommittee(Web3(), "0x" + "00" * 20)  # no provider: any RPC would fail
    empty = client.set_by_hash(keccak(bytes(HEADER)))
    assert empty.active_bitmap == 0 and empty.active_stake == 0 and empty.pk1s == ()
