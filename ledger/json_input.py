"""JSON from outside (HTTP bodies, entries, documents fetched from IPFS, files a user hands us),
parsed with explicit limits: one function, ``parse_json``, for every parser of untrusted input.

Why not plain ``json.loads``: CPython's decoder recurses once per nesting level and guards
itself only with the interpreter's recursion limit. ``py_ecc`` (imported through web3) raises
that limit to 100,000, so a 200 KB document of ``[[[[…`` overflows the C stack and the process
dies with SIGSEGV instead of raising. ``ledger/__init__`` restores the limit after importing
py_ecc (the root cause); ``parse_json`` also refuses deep documents *before* the decoder sees
them, so no limit set by any other library can turn input into a crash.

What it refuses, each as one ``JSONInputError`` whose ``reason`` names the rule:

- ``too_large``: more than ``max_bytes`` bytes (UTF-8), or an integer of more digits than
  CPython converts (``sys.get_int_max_str_digits()``, 4300 by default);
- ``too_deep``: arrays/objects nested deeper than ``max_depth`` (strings are skipped, so
  brackets inside them do not count);
- ``invalid``: not UTF-8, or not JSON (brackets that do not balance are found before the
  decoder runs); ``NaN``, ``Infinity`` and ``-Infinity`` are not JSON;
- ``duplicate_key``: an object with the same member name twice (I-JSON, RFC 7493 §2.3: a
  parser that keeps the last one would let two readers see two different documents).
"""

from __future__ import annotations

import json
import re
from typing import Any

from ledger.errors import LedgerError

DEFAULT_MAX_BYTES = 8 * 1024 * 1024
DEFAULT_MAX_DEPTH = 64

# A JSON string: a quote, runs of anything but a quote or backslash, each escape followed by
# another run (the unrolled form: one backtracking step per run, not per byte, so a 4 MB
# string is 20x faster to skip and never holds the GIL for long).
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKETS = bytes(range(256)).translate(None, b"[]{}")  # every byte but the four brackets


class JSONInputError(LedgerError, ValueError):
    """JSON from outside broke a limit or a rule; ``reason`` is one of ``too_large``,
    ``too_deep``, ``invalid``, ``duplicate_key``."""

    def __init__(self, message: str, *, reason: str):
        super().__init__(message)
        self.reason = reason


def nesting_depth(data: bytes, limit: int) -> int:
    """How deeply arrays and objects nest in ``data``, counting at most ``limit + 1`` levels.

    Linear in C: strings are cut out, then innermost ``[]``/``{}`` pairs are removed one level
    per pass. Raises ``JSONInputError("invalid")`` when the brackets do not balance (a
    document the decoder would have had to recurse into to find out).
    """
    skeleton = _STRING.sub(b"", data).translate(None, _BRACKETS)
    depth = 0
    while skeleton:
        if depth > limit:
            return depth
        shorter = skeleton.replace(b"[]", b"").replace(b"{}", b"")
        if len(shorter) == len(skeleton):
            raise JSONInputError("brackets do not balance", reason="invalid")
        skeleton, depth = shorter, depth + 1
    return depth


def _reject_constant(name: str) -> None:
    raise JSONInputError(f"{name} is not JSON", reason="invalid")


def _unique_members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        duplicate = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise JSONInputError(f"member {duplicate!r} appears twice in one object",
                             reason="duplicate_key")
    return obj


def parse_json(data: bytes | str, *, max_bytes: int = DEFAULT_MAX_BYTES,
               max_depth: int = DEFAULT_MAX_DEPTH, what: str = "document") -> Any:
    """The JSON value ``data`` encodes, or ``JSONInputError`` (see the module docstring).

    ``what`` names the input in messages ("request body", "entry", "proof document")."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    if len(raw) > max_bytes:
        raise JSONInputError(f"{what} is {len(raw)} bytes, the limit is {max_bytes}",
                             reason="too_large")
    try:
        depth = nesting_depth(raw, max_depth)
    except JSONInputError as exc:
        raise JSONInputError(f"{what} is not JSON: {exc}", reason=exc.reason) from None
    if depth > max_depth:
        raise JSONInputError(f"{what} nests deeper than {max_depth} levels", reason="too_deep")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JSONInputError(f"{what} is not UTF-8: {exc}", reason="invalid") from None
    try:
        return json.loads(text, parse_constant=_reject_constant,
                          object_pairs_hook=_unique_members)
    except JSONInputError as exc:
        raise JSONInputError(f"{what}: {exc}", reason=exc.reason) from None
    except (json.JSONDecodeError, RecursionError) as exc:
        raise JSONInputError(f"{what} is not JSON: {exc}", reason="invalid") from None
    except ValueError as exc:  # an integer of more digits than int() converts (sys.int_info)
        raise JSONInputError(f"{what}: {exc}", reason="too_large") from None


def complete_array_items(text: str, start: int) -> list:
    """The complete items of the JSON array that opens at ``text[start]`` (a ``[``), read
    until the first one that does not parse: what a model's array cut short by its token limit
    still holds (``[{...}, {...}, {"na`` gives the two objects)."""
    decoder, items, at = json.JSONDecoder(), [], start + 1
    while True:
        while at < len(text) and text[at] in " \t\r\n,":
            at += 1
        try:
            item, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError:
            return items
        items.append(item)
