"""Grammar-constrained decoding (``gym-grammar/1``): a JSON schema compiled to a token mask
for one tokenizer, shared by the node's engines, its verifier and the trainer's local backend.

The grammar: xgrammar's conversion of the schema, JSON written compactly (``", "`` and
``": "`` separators, no other whitespace: a small model cannot loop on blank space), strict
mode (no properties beyond ``properties`` unless ``additionalProperties`` allows them), the
model's end-of-sequence tokens allowed only where the JSON is complete. Two fixes over
xgrammar 0.2: a length-bounded string's characters exclude control characters, as JSON does,
and only tokens that keep the text valid UTF-8 are allowed (xgrammar checks a multi-byte
character's shape but not its ranges, so a byte-level tokenizer could spell an overlong form
or a surrogate, which decodes to U+FFFD).

A constraint's source may also be a structural tag (``structural_tag_text``): free text with
tags in it whose contents are JSON under the same rules; the node uses one for
``tool_choice: "auto"`` (``inference_node.tools``). The end-of-sequence tokens are then allowed
wherever the tag's format may end (in free text, or after a complete tag).

``Grammars`` compiles and caches; a ``TokenMask`` follows one completion (``allowed()`` before
each token, ``accept(token)`` after); ``replay`` rebuilds the masks a completion's tokens were
chosen under, which is how a verifier checks them; ``logits_processor`` applies masks in
Hugging Face ``generate``. The mask is a function of the source text, the tokenizer and the
xgrammar version (pinned in ``pyproject.toml``).
"""

from __future__ import annotations

import collections
import json
import threading
from typing import Any

from trainer.errors import TrainerError

ANY_OBJECT = {"type": "object", "additionalProperties": True}  # OpenAI's json_object


class GrammarError(TrainerError, ValueError):
    """A schema the grammar compiler refuses."""


def schema_text(schema: dict) -> str:
    """A schema's compact JSON text, keys in the order given (the order of ``properties`` is
    the order an answer writes them)."""
    return json.dumps(schema, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def response_format_schema(response_format: dict) -> str:
    """The schema text of an OpenAI ``response_format`` (json_object: any object);
    ``GrammarError`` for a type that sets no schema."""
    kind = response_format.get("type")
    if kind == "json_object":
        return schema_text(ANY_OBJECT)
    spec = response_format.get("json_schema")
    if kind == "json_schema" and isinstance(spec, dict) and isinstance(spec.get("schema"), dict):
        return schema_text(spec["schema"])
    raise GrammarError(f"response_format must be json_object or json_schema with a schema "
                       f"object, got type {kind!r}")


# xgrammar 0.2's rule for the characters of a length-bounded string lets control characters
# through, which JSON forbids unescaped; its own unbounded-string rule excludes them.
_LOOSE_CHARACTERS = r'[^\"\\\r\n]'
_JSON_CHARACTERS = r'[^\0-\x1f\"\\\r\n]'


def grammar_text(schema_json: str) -> str:
    """The EBNF grammar of a constraint's source (gym-grammar/1): a JSON schema's text, by
    xgrammar's conversion with compact separators, strict mode and string characters as JSON
    allows them; or a structural tag's (``STRUCTURAL_TAG``, ``structural_tag_text``)."""
    import xgrammar

    if schema_json.startswith(STRUCTURAL_TAG_OPENING):
        return _structural_tag_grammar(schema_json)
    try:
        grammar = xgrammar.Grammar.from_json_schema(schema_json, any_whitespace=False,
                                                    strict_mode=True)
    except (RuntimeError, ValueError) as exc:
        raise GrammarError(f"the schema cannot be compiled to a grammar: {_last_line(exc)}"
                           ) from None
    return str(grammar).replace(_LOOSE_CHARACTERS, _JSON_CHARACTERS)


# A structural tag (xgrammar's "structural_tag" format: free text, tags that begin with a fixed
# string, their contents under a grammar) is how a tool call's syntax is enforced around free
# text (``inference_node.tools.auto_grammar``). Its source, as ``structural_tag_text`` writes
# it, opens with ``STRUCTURAL_TAG_OPENING``, which no JSON schema's text can ("type" of a
# schema is a JSON type); every ``{"type": "json_schema", "json_schema": S}`` content in it is
# compiled as a JSON schema is above (compact, strict), not by xgrammar's own conversion
# (which allows any whitespace).
STRUCTURAL_TAG = "structural_tag"
STRUCTURAL_TAG_OPENING = '{"type":"structural_tag",'


def structural_tag_text(format_: dict) -> str:
    """The source text of a structural tag whose format is ``format_`` (key order kept)."""
    return schema_text({"type": STRUCTURAL_TAG, "format": format_})


def _json_contents(node: Any) -> Any:
    """``node`` with every json_schema content replaced by its gym-grammar/1 EBNF."""
    if isinstance(node, list):
        return [_json_contents(item) for item in node]
    if not isinstance(node, dict):
        return node
    if node.get("type") == "json_schema" and "json_schema" in node:
        if set(node) != {"type", "json_schema"} or not isinstance(node["json_schema"], dict):
            raise GrammarError("a structural tag's json_schema content takes only its schema")
        return {"type": "grammar", "grammar": grammar_text(schema_text(node["json_schema"]))}
    return {key: _json_contents(value) for key, value in node.items()}


def _structural_tag_grammar(source: str) -> str:
    import xgrammar

    try:
        tag = json.loads(source)
    except json.JSONDecodeError as exc:
        raise GrammarError(f"a structural tag must be JSON: {exc}") from None
    if not isinstance(tag, dict) or set(tag) != {"type", "format"}:
        raise GrammarError('a structural tag is {"type": "structural_tag", "format": …}')
    try:
        grammar = xgrammar.Grammar.from_structural_tag(json.dumps(
            {"type": STRUCTURAL_TAG, "format": _json_contents(tag["format"])}))
    except (RuntimeError, ValueError, TypeError) as exc:
        raise GrammarError(f"the structural tag cannot be compiled to a grammar: "
                           f"{_last_line(exc)}") from None
    return str(grammar).replace(_LOOSE_CHARACTERS, _JSON_CHARACTERS)


def _last_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[-1] if text else repr(exc)


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
    """Compiled grammars for one tokenizer and vocabulary (thread-safe, cached by schema text).

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
        self._cache: collections.OrderedDict[str, Any] = collections.OrderedDict()
        self._lock = threading.Lock()

    def compile(self, schema_json: str) -> Any:
        """The compiled grammar of a schema; ``GrammarError`` when xgrammar refuses it."""
        with self._lock:
            compiled = self._cache.get(schema_json)
            if compiled is not None:
                self._cache.move_to_end(schema_json)
                return compiled
        try:
            compiled = self._compiler.compile_grammar(grammar_text(schema_json))
        except (RuntimeError, ValueError) as exc:
            raise GrammarError(f"the schema cannot be compiled to a grammar: {_last_line(exc)}"
                               ) from None
        with self._lock:
            self._cache[schema_json] = compiled
            while len(self._cache) > self.CACHE:
                self._cache.popitem(last=False)
        return compiled

    def mask(self, schema_json: str) -> TokenMask:
        """A fresh mask at the start of a completion."""
        return TokenMask(self, self.xgr.GrammarMatcher(self.compile(schema_json)))


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

    def finished(self) -> bool:
        """The grammar has ended (it accepted an end-of-sequence token)."""
        return bool(self._matcher.is_terminated())

    def accept(self, token: int) -> bool:
        """Advance past ``token``; False (and no advance) when the mask forbids it."""
        token = int(token)
        if self.finished() or not 0 <= token < self._grammars.vocab_size \
                or not self._grammars.utf8_allowed[self._utf8, token]:
            return False
        if not self._matcher.accept_token(token):
            return False
        self._utf8 = int(self._grammars.utf8_after[self._utf8, token])
        return True


def replay(grammars: Grammars, schema_json: str, tokens: list[int]) -> tuple[Any, int | None]:
    """The masks a completion's tokens were chosen under (a bool tensor, one row per token) and
    the index of the first token the grammar forbids (None when all are allowed; the rows from
    there on are left all-true)."""
    import torch

    masks = torch.ones(len(tokens), grammars.vocab_size, dtype=torch.bool)
    mask = grammars.mask(schema_json)
    for i, token in enumerate(tokens):
        masks[i] = mask.allowed()
        if not 0 <= token < grammars.vocab_size or not masks[i][token] or not mask.accept(token):
            masks[i:] = True
            return masks, i
    return masks, None


def logits_processor(grammars: Grammars, schema_json: str, rows: int, prompt_length: int,
                     eos_token_id: int) -> Any:
    """A Hugging Face logits processor masking each of ``rows`` rows (left-padded, prompts
    ``prompt_length`` long) to what its grammar allows next; a row whose grammar has ended may
    only emit EOS (``generate`` keeps finished rows going)."""
    import torch
    from transformers import LogitsProcessor

    class GrammarMask(LogitsProcessor):
        def __init__(self) -> None:
            self.masks = [grammars.mask(schema_json) for _ in range(rows)]

        def __call__(self, input_ids: Any, scores: Any) -> Any:
            scores = scores.float()
            if input_ids.shape[1] > prompt_length:
                for mask, token in zip(self.masks, input_ids[:, -1].tolist(), strict=True):
                    if not mask.finished() and not mask.accept(token):
                        raise GrammarError(f"the grammar refused its own token {token}")
            for row, mask in enumerate(self.masks):
                allowed = torch.zeros(scores.shape[-1], dtype=torch.bool)
                if mask.finished():
                    allowed[eos_token_id] = True
                else:
                    allowed[:grammars.vocab_size] = mask.allowed()
                scores[row] = scores[row].masked_fill(~allowed.to(scores.device), float("-inf"))
            return scores

    return GrammarMask()
