"""vLLM's guided decoding on the node: ``guided_choice``, ``guided_regex``, ``guided_json`` and
their newer spelling ``structured_outputs`` ({"choice"}, {"regex"}, {"json"}), enforced by the
same grammar machinery as ``response_format`` and signed the same way.

Canonical forms, which the normalized request holds (``inference_node.normalized_request``):

- ``guided_choice``: the list of strings the answer must be exactly one of (1 to
  ``MAX_CHOICES``, each 1 to ``MAX_CHOICE_CHARS`` characters, no repeats, order kept);
- ``guided_regex``: the pattern the whole answer must match (at most ``MAX_REGEX_CHARS``
  characters, counted repetitions ``{n}``/``{n,m}`` at most ``MAX_REPEAT``, so a pattern cannot
  make the grammar compiler's work explode);
- ``guided_json`` (and ``structured_outputs.json``) become a ``json_schema`` response format, the
  node's own way to ask for a schema, so the two spellings are one request.

A request sets at most one constraint: a response format, a guided form, or a tool choice that
decodes under a grammar. ``guided_grammar`` (EBNF) and the rest of vLLM's forms stay refused
(``inference_node.protocol.VLLM_EXTRAS``). ``constraint_source`` gives the grammar source the
node and the verifier both decode and replay under: an xgrammar structural tag, ``or`` of
``const_string`` for a choice, ``regex`` for a pattern (``trainer.grammar``).
"""

from __future__ import annotations

import json
import re

from inference_node.response_format import FormatError
from trainer.grammar import structural_tag_text

MAX_CHOICES = 64
MAX_CHOICE_CHARS = 256
MAX_REGEX_CHARS = 256
MAX_REPEAT = 64
_COUNTED = re.compile(r"(?<!\\)\{(\d*)(?:,(\d*))?\}")


def canonical_choice(value: object) -> list[str]:
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_CHOICES:
        raise FormatError(f"guided_choice must be a list of 1 to {MAX_CHOICES} strings",
                          "guided_choice")
    for item in value:
        if not isinstance(item, str) or not 1 <= len(item) <= MAX_CHOICE_CHARS:
            raise FormatError(f"each guided_choice is a string of 1 to {MAX_CHOICE_CHARS} "
                              "characters", "guided_choice")
    if len(set(value)) != len(value):
        raise FormatError("guided_choice lists a choice twice", "guided_choice")
    return list(value)


def canonical_regex(value: object) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_REGEX_CHARS:
        raise FormatError(f"guided_regex must be a pattern of 1 to {MAX_REGEX_CHARS} characters",
                          "guided_regex")
    for low, high in _COUNTED.findall(value):
        if any(n and int(n) > MAX_REPEAT for n in (low, high)):
            raise FormatError(f"guided_regex repeats at most {MAX_REPEAT} times per {{n,m}}",
                              "guided_regex")
    try:
        re.compile(value)
    except re.error as exc:
        raise FormatError(f"guided_regex is not a regular expression: {exc}",
                          "guided_regex") from None
    return value


def guided_json_format(schema: object) -> dict:
    """``guided_json``'s schema as the ``response_format`` that asks for it."""
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError:
            raise FormatError("guided_json must be a JSON schema (an object, or its JSON text)",
                              "guided_json") from None
    return {"type": "json_schema", "json_schema": {"name": "guided_json", "schema": schema,
                                                   "strict": True}}


def from_structured_outputs(value: object) -> tuple[str, object]:
    """vLLM's ``structured_outputs`` as (the guided field it means, its value)."""
    forms = {"choice": "guided_choice", "regex": "guided_regex", "json": "guided_json"}
    if not isinstance(value, dict) or len(value) != 1 or next(iter(value)) not in forms:
        raise FormatError("structured_outputs must be one of {\"choice\": [...]}, "
                          "{\"regex\": \"...\"}, {\"json\": schema} on this node",
                          "structured_outputs")
    (key, inner), = value.items()
    return forms[key], inner


def constraint_source(normalized: dict) -> str | None:
    """The grammar source of a normalized request's guided form, or None."""
    if "guided_choice" in normalized:
        elements = [{"type": "const_string", "value": c} for c in normalized["guided_choice"]]
        return structural_tag_text(elements[0] if len(elements) == 1 else
                                   {"type": "or", "elements": elements})
    if "guided_regex" in normalized:
        return structural_tag_text({"type": "regex", "pattern": normalized["guided_regex"]})
    return None
