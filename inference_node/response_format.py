"""Structured outputs (``gym-grammar/1``): a request's ``response_format`` checked and put in
canonical form, the ``Constraint`` it sets, and the token masks that enforce it.

``response_format`` is OpenAI's: ``{"type": "text"}`` (no constraint), ``{"type":
"json_object"}`` (any JSON object) or ``{"type": "json_schema", "json_schema": {"name",
"schema", "strict", "description"}}``. Its canonical form, which the normalized request holds
(and so the receipt signs), drops ``description`` and fills ``strict`` (default false)::

    {"type": "json_schema", "json_schema": {"name": N, "schema": S, "strict": B}}

A schema may use only the keywords the grammar enforces (``SCHEMA_KEYWORDS``); any other
keyword, a schema that is not valid JSON Schema, or one past the size bounds is refused with a
``FormatError`` naming where, never silently loosened. ``strict`` changes nothing: every schema
is enforced as OpenAI's strict mode does (no properties beyond ``properties`` unless
``additionalProperties`` allows them).

The mask (``trainer.grammar``, gym-grammar/1): the schema compiled by xgrammar for the model's
tokenizer, compact JSON, valid UTF-8, end-of-sequence only where the JSON is complete. Each
step, the sampler (``inference_node.sampling.choose``) picks among the tokens the mask allows;
a verifier replays the claimed tokens through the same grammar (``replay``) and applies the
same masks, so a token the grammar forbids fails verification with reason
``response_format``. The grammar is a function of the canonical constraint, the tokenizer and
the xgrammar version (pinned in ``pyproject.toml``).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass

from inference_node.errors import InferenceNodeError
from trainer.grammar import GrammarError, Grammars, schema_text

FORMAT = "gym-grammar/1"
MAX_SCHEMA_BYTES = 32 * 1024  # canonical JSON of one schema
MAX_SCHEMA_DEPTH = 16  # nested schemas (properties, items, anyOf, …)
MAX_REPEAT = 256  # minItems / maxItems / minLength / maxLength bounds the grammar expands
MAX_NAME_CHARS = 64  # OpenAI's limit on json_schema.name

ANNOTATIONS = {"title", "description", "default", "examples", "$schema", "$id", "$comment"}
SCHEMA_KEYWORDS = ANNOTATIONS | {
    "type", "enum", "const", "anyOf",
    "properties", "required", "additionalProperties",
    "items", "prefixItems", "minItems", "maxItems",
    "minLength", "maxLength", "pattern", "format",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "$ref", "$defs", "definitions",
}
FORMATS = {"date", "time", "date-time", "email", "uuid", "ipv4", "ipv6"}


class FormatError(InferenceNodeError, ValueError):
    """A response format (or tool schema) the node cannot enforce; ``param`` names the
    request field, as OpenAI's 400 does."""

    def __init__(self, message: str, param: str = "response_format") -> None:
        super().__init__(message)
        self.param = param


# --------------------------------------------------------------------------- request side


def canonical_response_format(value: object) -> dict | None:
    """The canonical form of a request's ``response_format`` (module doc); None for none or
    ``text``. ``FormatError`` for anything else the node cannot enforce."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise FormatError("response_format must be an object")
    kind = value.get("type")
    extra = set(value) - {"type", "json_schema"}
    if extra:
        raise FormatError(f"response_format has unsupported fields {sorted(extra)}")
    if kind == "text" or kind == "json_object":
        if "json_schema" in value:
            raise FormatError(f"response_format type {kind!r} takes no json_schema")
        return None if kind == "text" else {"type": "json_object"}
    if kind != "json_schema":
        raise FormatError(f"unsupported response_format type {kind!r}: this node supports "
                          "'text', 'json_object' and 'json_schema'")
    spec = value.get("json_schema")
    if not isinstance(spec, dict):
        raise FormatError("response_format json_schema must be an object with name and schema")
    extra = set(spec) - {"name", "schema", "strict", "description"}
    if extra:
        raise FormatError(f"response_format.json_schema has unsupported fields {sorted(extra)}")
    name = spec.get("name")
    if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME_CHARS \
            or not all(c.isalnum() or c in "_-" for c in name):
        raise FormatError(f"json_schema.name must be 1 to {MAX_NAME_CHARS} letters, digits, "
                          "'_' or '-'")
    strict = spec.get("strict", False)
    if strict is None:
        strict = False
    if not isinstance(strict, bool):
        raise FormatError("json_schema.strict must be a boolean")
    if "schema" not in spec:
        raise FormatError("json_schema.schema is required")
    schema = check_schema(spec["schema"], "response_format.json_schema.schema")
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema,
                                                   "strict": strict}}


def check_schema(schema: object, where: str, param: str = "response_format") -> dict:
    """``schema`` if it is a JSON Schema the grammar enforces exactly (module doc);
    ``FormatError`` naming the first problem otherwise."""
    if not isinstance(schema, dict):
        raise FormatError(f"{where} must be a JSON object", param)
    try:
        text = json.dumps(schema, separators=(",", ":"), allow_nan=False, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise FormatError(f"{where} is not JSON: {exc}", param) from None
    if len(text) > MAX_SCHEMA_BYTES:
        raise FormatError(f"{where} is {len(text)} bytes; at most {MAX_SCHEMA_BYTES}", param)
    _check_keywords(schema, where, 0, param)
    key = hashlib.sha256(text.encode()).digest()
    with _checked_lock:
        if key in _checked:  # clients send the same tools with every request
            _checked.move_to_end(key)
            return schema
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(schema)  # ~12 µs per byte of schema
    except SchemaError as exc:
        at = "/".join(str(p) for p in exc.absolute_path)
        raise FormatError(f"{where} is not a valid JSON Schema at '{at}': {exc.message}",
                          param) from None
    with _checked_lock:
        _checked[key] = None
        while len(_checked) > MAX_CHECKED_SCHEMAS:
            _checked.popitem(last=False)
    return schema


# schemas that passed the meta-schema check, by the SHA-256 of their sorted compact JSON
MAX_CHECKED_SCHEMAS = 1024
_checked: OrderedDict[bytes, None] = OrderedDict()
_checked_lock = threading.Lock()


MAX_PATTERN_CHARS = 1000
_REPEAT = re.compile(r"\{\s*(\d+)\s*(?:,\s*(\d*)\s*)?\}")


def _check_pattern(pattern: object, where: str, param: str) -> None:
    """A regular expression whose grammar is cheap to build: bounded length and repetition
    counts (``[a-z]{1,10000}`` took 10 s to compile for SmolLM2's vocabulary)."""
    if not isinstance(pattern, str) or len(pattern) > MAX_PATTERN_CHARS:
        raise FormatError(f"{where}: pattern must be a string of at most {MAX_PATTERN_CHARS} "
                          "characters", param)
    for match in _REPEAT.finditer(pattern):
        counts = [int(n) for n in match.groups() if n]
        if any(n > MAX_REPEAT for n in counts):
            raise FormatError(f"{where}: pattern repetition {match.group(0)} is above this "
                              f"node's limit of {MAX_REPEAT}", param)


_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions")
_SUBSCHEMA_LISTS = ("anyOf", "prefixItems")
_SUBSCHEMAS = ("items", "additionalProperties")
_COUNTS = ("minItems", "maxItems", "minLength", "maxLength")


def _check_keywords(schema: object, where: str, depth: int, param: str) -> None:
    if isinstance(schema, bool):
        return
    if not isinstance(schema, dict):
        raise FormatError(f"{where} must be a schema object", param)
    if depth > MAX_SCHEMA_DEPTH:
        raise FormatError(f"{where}: schemas nest deeper than {MAX_SCHEMA_DEPTH}", param)
    for keyword, value in schema.items():
        if keyword not in SCHEMA_KEYWORDS:
            raise FormatError(f"{where}: the keyword {keyword!r} is not supported (constrained "
                              f"decoding cannot enforce it); supported: "
                              f"{', '.join(sorted(SCHEMA_KEYWORDS - ANNOTATIONS))}", param)
        if keyword in _COUNTS and isinstance(value, int) and value > MAX_REPEAT:
            raise FormatError(f"{where}: {keyword} {value} is above this node's limit of "
                              f"{MAX_REPEAT}", param)
        if keyword == "pattern":
            _check_pattern(value, where, param)
        if keyword == "format" and value not in FORMATS:
            raise FormatError(f"{where}: format {value!r} is not supported; supported: "
                              f"{', '.join(sorted(FORMATS))}", param)
        if keyword == "$ref" and (not isinstance(value, str) or not value.startswith("#")):
            raise FormatError(f"{where}: only local $ref ('#/...') are supported", param)
        if keyword in _SUBSCHEMA_MAPS and isinstance(value, dict):
            for name, sub in value.items():
                _check_keywords(sub, f"{where}.{keyword}.{name}", depth + 1, param)
        elif keyword in _SUBSCHEMA_LISTS and isinstance(value, list):
            for i, sub in enumerate(value):
                _check_keywords(sub, f"{where}.{keyword}[{i}]", depth + 1, param)
        elif keyword in _SUBSCHEMAS:
            _check_keywords(value, f"{where}.{keyword}", depth + 1, param)


# --------------------------------------------------------------------------- constraint


@dataclass(frozen=True)
class Constraint:
    """What the grammar enforces on a completion: a JSON schema, as compact JSON text in
    the request's key order (the order of ``properties`` is the order the answer writes them),
    or, for ``tool_choice: "auto"``, a structural tag's text (``trainer.grammar``; ``schema``
    is then the tag)."""

    schema_json: str

    @classmethod
    def of_schema(cls, schema: dict) -> Constraint:
        return cls(schema_text(schema))

    @property
    def schema(self) -> dict:
        return json.loads(self.schema_json)


# --------------------------------------------------------------------------- masks


def check_compiles(grammars: Grammars, constraint: Constraint) -> None:
    """``FormatError`` unless the grammar compiler takes ``constraint`` (compiled and cached)."""
    try:
        grammars.compile(constraint.schema_json)
    except GrammarError as exc:
        raise FormatError(str(exc)) from None
