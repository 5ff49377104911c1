"""The fast canonical JSON path writes exactly what the rfc8785 package writes, or defers to it."""

from __future__ import annotations

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.canonical_json import _plain, canonical_bytes

scalars = (st.none() | st.booleans() | st.text() | st.floats(allow_nan=False)
           | st.integers(min_value=-(2**60), max_value=2**60)
           | st.sampled_from(["\ud800", "\x00\x1f\x7f\"\\", "\u2028", "😀", "\ue000"]))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=4) | st.sampled_from(["😀", "\ue000", "a"]),
                                        inner, max_size=4), max_leaves=20)


def reference(value):
    try:
        return rfc8785.dumps(value)
    except Exception as exc:  # noqa: BLE001 - the same failure is expected of both
        return type(exc)


def ours(value):
    try:
        return canonical_bytes(value)
    except Exception as exc:  # noqa: BLE001
        return type(exc)


@settings(max_examples=400)
@given(values)
def test_the_same_bytes_as_the_reference_for_any_json_value(value):
    assert ours(value) == reference(value)


@pytest.mark.parametrize("value, plain", [
    ({"a": [1, "x", None, True]}, True),
    ({"a": 1.5}, False),  # ES6 number form differs from repr for some floats: reference path
    ({"é": 1}, False),  # member order by UTF-16 code units: reference path
    ({"a": 2**53}, False),  # outside RFC 8785's integers: the reference refuses it
    ({"a": 2**53 - 1}, True),
    ([{"b": {"c": "ü😀"}}], True),  # non-ASCII strings are written as themselves by both
])
def test_which_values_take_the_fast_path(value, plain):
    assert _plain(value) is plain
    assert ours(value) == reference(value)
