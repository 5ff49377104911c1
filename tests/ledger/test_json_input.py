"""ledger.json_input: the one parser of JSON from outside (limits, I-JSON, no crash)."""

import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.json_input import JSONInputError, nesting_depth, parse_json

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=30,
)


@given(json_values)
@settings(max_examples=300, deadline=None)
def test_round_trips_what_json_loads_reads(value):
    data = json.dumps(value).encode()
    assert parse_json(data) == json.loads(data)


@given(st.binary(max_size=200))
@settings(max_examples=500, deadline=None)
def test_arbitrary_bytes_give_a_value_or_one_error(data):
    try:
        parse_json(data)
    except JSONInputError as exc:
        assert exc.reason in {"too_large", "too_deep", "invalid", "duplicate_key"}


@pytest.mark.parametrize(("depth", "fits"), [(64, True), (65, False)])
def test_depth_limit_is_exact(depth, fits):
    data = b"[" * depth + b"]" * depth
    assert nesting_depth(data, 64) == depth
    if fits:
        parse_json(data, max_depth=64)
    else:
        with pytest.raises(JSONInputError) as caught:
            parse_json(data, max_depth=64)
        assert caught.value.reason == "too_deep"


def test_brackets_inside_strings_do_not_count():
    data = json.dumps({"text": "[" * 500 + "\\\"{" * 100}).encode()
    assert parse_json(data) == json.loads(data)


@pytest.mark.parametrize(("data", "reason"), [
    (b'{"a": 1, "a": 2}', "duplicate_key"),
    (b'[{"x": {"k": 1, "k": 1}}]', "duplicate_key"),
    (b"[NaN]", "invalid"),
    (b'{"a": -Infinity}', "invalid"),
    (b"[1, 2", "invalid"),
    (b"[" * 300_000, "invalid"),
    (b"[" * 300_000 + b"]" * 300_000, "too_deep"),
    (b"\xff\xfe", "invalid"),
    (b" " * 101, "too_large"),
])
def test_refusals_name_their_rule(data, reason):
    with pytest.raises(JSONInputError) as caught:
        parse_json(data, max_bytes=100 if reason == "too_large" else 10**7, what="body")
    assert caught.value.reason == reason
    assert "body" in str(caught.value)


def test_an_integer_too_long_to_convert_is_refused_not_leaked_as_a_bare_value_error():
    with pytest.raises(JSONInputError) as caught:  # json.loads raises ValueError (int digits)
        parse_json(b'{"value": ' + b"7" * 5000 + b"}", what="body")
    assert caught.value.reason == "too_large" and "digits" in str(caught.value)


def test_a_process_with_web3_loaded_survives_deep_json():
    """The root cause: py_ecc raises the recursion limit to 100,000 on import, and CPython's
    JSON decoder then overflows the C stack (SIGSEGV) on deep input. Importing ledger puts the
    limit back, so even a plain json.loads raises RecursionError instead of crashing."""
    code = (
        "import ledger, web3, eth_account, json, sys\n"
        "assert sys.getrecursionlimit() <= 10_000, sys.getrecursionlimit()\n"
        "try:\n"
        "    json.loads('[' * 400_000 + ']' * 400_000)\n"
        "except RecursionError:\n"
        "    print('refused')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "refused"
