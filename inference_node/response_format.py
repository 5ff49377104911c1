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

The mask (``Grammars``): the schema compiled by xgrammar for the model's tokenizer, JSON written
compactly (``", "`` and ``": "`` separators, no other whitespace: a small model cannot loop on
blank space), the model's end-of-sequence tokens allowed only where the JSON is complete, and
only tokens that keep the text valid UTF-8 (a byte-level tokenizer could otherwise spell an
overlong form or a surrogate inside a string). Each
step, the sampler (``inference_node.sampling.choose``) picks among the tokens the mask allows;
a verifier replays the claimed tokens through the same grammar (``replay``) and applies the
same masks, so a token the grammar forbids fails verification with reason
``response_format``. The grammar is a function of the canonical constraint, the tokenizer and
the xgrammar version (pinned in ``pyproject.toml``).
"""

from __future__ import annotations

import collections
import json
import threading
from dataclasses import dataclass
from typing import Any

from inference_node.errors import InferenceNodeError

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
ANY_OBJECT = {"type": "object", "additionalProperties": True}  # json_object's schema


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
        size = len(json.dumps(schema, separators=(",", ":"), allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise FormatError(f"{where} is not JSON: {exc}", param) from None
    if size > MAX_SCHEMA_BYTES:
        raise FormatError(f"{where} is {size} bytes; at most {MAX_SCHEMA_BYTES}", param)
    _check_keywords(schema, where, 0, param)
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        at = "/".join(str(p) for p in exc.absolute_path)
        raise FormatError(f"{where} is not a valid JSON Schema at '{at}': {exc.message}",
                          param) from None
    return schema


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
    the request's key order (the order of ``properties`` is the order the answer writes them)."""

    schema_json: str

    @classmethod
    def of_schema(cls, schema: dict) -> Constraint:
        return cls(schema_text(schema))

    @property
    def schema(self) -> dict:
        return json.loads(self.schema_json)


def schema_text(schema: dict) -> str:
    """A schema's compact JSON text, keys in the order given."""
    return json.dumps(schema, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def constraint_of(normalized: dict) -> Constraint | None:
    """The constraint a normalized request (``inference_node.normalized_request``) sets, or
    None: the one function the node and the verifier both derive it with. A forced tool call
    (``inference_node.tools``) is decoded under its call schema."""
    from inference_node.tools import forced_call_schema

    call = forced_call_schema(normalized)
    if call is not None:
        return Constraint(call)
    fmt = normalized.get("response_format")
    if fmt is None:
        return None
    if fmt["type"] == "json_object":
        return Constraint.of_schema(ANY_OBJECT)
    schema = fmt["json_schema"]["schema"]  # the normalized form's text (order kept)
    return Constraint(schema if isinstance(schema, str) else schema_text(schema))


# --------------------------------------------------------------------------- masks


# xgrammar 0.2's rule for the characters of a length-bounded string lets control characters
# through, which JSON forbids unescaped; its own unbounded-string rule excludes them.
_LOOSE_CHARACTERS = r'[^\"\\\r\n]'
_JSON_CHARACTERS = r'[^\0-\x1f\"\\\r\n]'


def grammar_text(constraint: Constraint) -> str:
    """The EBNF grammar of ``constraint`` (gym-grammar/1): xgrammar's conversion of the
    schema, compact separators, strict mode, string characters as JSON allows them."""
    import xgrammar

    try:
        grammar = xgrammar.Grammar.from_json_schema(constraint.schema_json, any_whitespace=False,
                                                    strict_mode=True)
    except (RuntimeError, ValueError) as exc:
        message = str(exc).strip().splitlines()[-1] if str(exc).strip() else repr(exc)
        raise FormatError(f"the schema cannot be compiled to a grammar: {message}") from None
    return str(grammar).replace(_LOOSE_CHARACTERS, _JSON_CHARACTERS)


# UTF-8 (RFC 3629) as a byte automaton: the state says what the next byte must be. xgrammar
# checks a multi-byte character's shape (a lead byte, then continuation bytes) but not its
# ranges, so a byte-level tokenizer could spell an overlong form or a surrogate, which decodes
# to U+FFFD: the mask also keeps the text valid UTF-8.
_START, _CONT1, _CONT2, _CONT3, _AFTER_E0, _AFTER_ED, _AFTER_F0, _AFTER_F4 = range(8)
_UTF8_STATES = 8
_AFTER_LEAD = {_CONT1: (0x80, 0xBF, _START), _CONT2: (0x80, 0xBF, _CONT1),
               _CONT3: (0x80, 0xBF, _CONT2), _AFTER_E0: (0xA0, 0xBF, _CONT1),
               _AFTER_ED: (0x80, 0x9F, _CONT1), _AFTER_F0: (0x90, 0xBF, _CONT2),
               _AFTER_F4: (0x80, 0x8F, _CONT2)}


def _utf8_step(state: int, byte: int) -> int | None:
    """The state after ``byte``, or None when UTF-8 forbids it there."""
    if state != _START:
        low, high, then = _AFTER_LEAD[state]
        return then if low <= byte <= high else None
    if byte < 0x80:
        return _START
    if 0xC2 <= byte <= 0xDF:
        return _CONT1
    if byte == 0xE0:
        return _AFTER_E0
    if byte == 0xED:
        return _AFTER_ED
    if 0xE1 <= byte <= 0xEF:
        return _CONT2
    if byte == 0xF0:
        return _AFTER_F0
    if 0xF1 <= byte <= 0xF3:
        return _CONT3
    if byte == 0xF4:
        return _AFTER_F4
    return None


def _utf8_tables(decoded_vocab: list[bytes], vocab_size: int) -> tuple[Any, Any]:
    """Per UTF-8 state, which tokens may follow (bool [states, vocab]) and the state after
    each (int [states, vocab]). A token with no bytes (a special token) keeps the state."""
    import torch

    allowed = torch.zeros(_UTF8_STATES, vocab_size, dtype=torch.bool)
    after = torch.zeros(_UTF8_STATES, vocab_size, dtype=torch.long)
    for token, raw in enumerate(decoded_vocab[:vocab_size]):
        if raw.isascii():  # the common case: only where no character is pending
            allowed[_START, token] = True
            continue
        for start in range(_UTF8_STATES):
            state: int | None = start
            for byte in raw:
                state = _utf8_step(state, byte)
                if state is None:
                    break
            if state is not None:
                allowed[start, token] = True
                after[start, token] = state
    for token in range(len(decoded_vocab), vocab_size):  # logits beyond the tokenizer
        allowed[:, token] = False
    return allowed, after


class Grammars:
    """Compiled grammars for one tokenizer and vocabulary (thread-safe, cached by constraint).

    ``vocab_size``: the width of the model's logits (may exceed the tokenizer's length);
    ``stop_ids``: the end-of-sequence ids, allowed only where the grammar may end."""

    CACHE = 64

    def __init__(self, tokenizer: Any, vocab_size: int, stop_ids: frozenset[int] | list[int]
                 ) -> None:
        import torch
        import xgrammar

        self.xgr = xgrammar
        self.vocab_size = vocab_size
        info = xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size,
                                                       stop_token_ids=sorted(stop_ids))
        self._compiler = xgrammar.GrammarCompiler(info, cache_enabled=False)
        self.utf8_allowed, self.utf8_after = _utf8_tables(info.decoded_vocab, vocab_size)
        for special in info.special_token_ids:  # no text: allowed and neutral everywhere
            if special < vocab_size:
                self.utf8_allowed[:, special] = True
                self.utf8_after[:, special] = torch.arange(_UTF8_STATES)
        self._cache: collections.OrderedDict[Constraint, Any] = collections.OrderedDict()
        self._lock = threading.Lock()

    def compile(self, constraint: Constraint) -> Any:
        """The compiled grammar; ``FormatError`` when xgrammar refuses the schema."""
        with self._lock:
            compiled = self._cache.get(constraint)
            if compiled is not None:
                self._cache.move_to_end(constraint)
                return compiled
        try:
            compiled = self._compiler.compile_grammar(grammar_text(constraint))
        except (RuntimeError, ValueError) as exc:
            message = str(exc).strip().splitlines()[-1] if str(exc).strip() else repr(exc)
            raise FormatError(f"the schema cannot be compiled to a grammar: {message}"
                              ) from None
        with self._lock:
            self._cache[constraint] = compiled
            while len(self._cache) > self.CACHE:
                self._cache.popitem(last=False)
        return compiled

    def mask(self, constraint: Constraint) -> TokenMask:
        """A fresh mask at the start of a completion."""
        return TokenMask(self, self.xgr.GrammarMatcher(self.compile(constraint)))


class TokenMask:
    """One completion's progress through its grammar: ``allowed()`` before each token,
    ``accept(token)`` after it."""

    def __init__(self, grammars: Grammars, matcher: Any) -> None:
        import torch

        self._torch = torch
        self._grammars = grammars
        self._matcher = matcher
        self._bitmask = grammars.xgr.allocate_token_bitmask(1, grammars.vocab_size)
        self._shifts = torch.arange(32, dtype=torch.int32)
        self._utf8 = _START

    def allowed(self) -> Any:
        """A bool tensor over the vocabulary: the tokens the grammar allows next (and that
        keep the text valid UTF-8)."""
        self._matcher.fill_next_token_bitmask(self._bitmask)
        bits = (self._bitmask[0].unsqueeze(-1) >> self._shifts) & 1
        grammar = bits.flatten()[:self._grammars.vocab_size].bool()
        return grammar & self._grammars.utf8_allowed[self._utf8]

    def accept(self, token: int) -> bool:
        """Advance past ``token``; False (and no advance) when the mask forbids it."""
        token = int(token)
        if self._matcher.is_terminated() or not 0 <= token < self._grammars.vocab_size \
                or not self._grammars.utf8_allowed[self._utf8, token]:
            return False
        if not self._matcher.accept_token(token):
            return False
        self._utf8 = int(self._grammars.utf8_after[self._utf8, token])
        return True


def replay(grammars: Grammars, constraint: Constraint, tokens: list[int]) -> tuple[Any, int | None]:
    """The masks a completion's tokens were chosen under (a bool tensor, one row per token) and
    the index of the first token the grammar forbids (None when all are allowed; the rows from
    there on are left all-true)."""
    import torch

    masks = torch.ones(len(tokens), grammars.vocab_size, dtype=torch.bool)
    mask = grammars.mask(constraint)
    for i, token in enumerate(tokens):
        masks[i] = mask.allowed()
        if not 0 <= token < grammars.vocab_size or not masks[i][token] or not mask.accept(token):
            masks[i:] = True
            return masks, i
    return masks, None
