"""Training-Free GRPO's library updates: stage-2 answers constrained, parsed; stage 3 applied.

`operations_schema` is the JSON Schema of a stage-2 answer, `{"operations": [...]}` (an object
at the root, as OpenAI's strict mode wants), each item one of ADD {op, text}, UPDATE {op, id,
text}, DELETE {op, id}, NONE {op}; ids are enumerated from the current library, so a library
with no experiences allows only ADD and NONE. `operations_response_format` wraps it in OpenAI's
`response_format` shape, which the backends enforce (grammar-constrained decoding locally).
`parse_operations` turns one stage-2 answer, that object or a bare array, into proposals
`{op, target, text}`, salvaging truncated JSON and counting whatever it drops; `consolidate` reduces a batch's proposals to a
conflict-free list (near-duplicate ADDs merged by Jaccard similarity, DELETE beats UPDATE, the
first UPDATE wins); `apply_operations` applies them and gives each applied operation its
publishable record. The algorithm is described in `trainer.tfgrpo_trainer`.
"""

from __future__ import annotations

import json
import logging
import re
from collections import Counter

from ledger.json_input import complete_array_items
from trainer.tfgrpo_config import TFGRPOConfig
from trainer.tfgrpo_prompts import Experience

log = logging.getLogger(__name__)

CHARS_PER_WORD = 10  # the schema's maxLength per allowed word; the word count is checked after


# --------------------------------------------------------------------------- schema


def lesson_pattern(max_words: int) -> str:
    """An experience's text as a sentence: a capitalised word, then 3 to ``max_words`` - 1
    more (letters, digits, arithmetic), ending in a period. Without it a small model fills
    the field with "..." and the step "learns" nothing a reader can use."""
    word = f"[A-Za-z0-9'+*/=()%-]{{1,{CHARS_PER_WORD}}}"
    return f"^[A-Z][a-z]{{0,{CHARS_PER_WORD}}}(,? {word}){{3,{max(3, max_words - 1)}}}[.]$"


def operations_schema(library_size: int, config: TFGRPOConfig) -> dict:
    """JSON Schema of one stage-2 answer for a library of `library_size` experiences."""
    def op(name: str, **properties: dict) -> dict:
        properties = {"op": {"type": "string", "enum": [name]}, **properties}
        return {"type": "object", "properties": properties, "required": list(properties),
                "additionalProperties": False}

    text = {"type": "string", "pattern": lesson_pattern(config.max_experience_words)}
    variants = [op("ADD", text=text)]
    if library_size:
        ident = {"type": "string", "enum": [f"G{i}" for i in range(library_size)]}
        variants += [op("UPDATE", id=ident, text=text), op("DELETE", id=ident)]
    variants.append(op("NONE"))
    return {"type": "object",
            "properties": {"operations": {"type": "array", "items": {"anyOf": variants},
                                          "maxItems": config.max_ops_per_query}},
            "required": ["operations"], "additionalProperties": False}


def operations_response_format(library_size: int, config: TFGRPOConfig) -> dict:
    """`operations_schema` as an OpenAI `response_format` (strict json_schema)."""
    return {"type": "json_schema",
            "json_schema": {"name": "library_operations", "strict": True,
                            "schema": operations_schema(library_size, config)}}


# --------------------------------------------------------------------------- parsing


def extract_json(text: str) -> tuple[object | None, str]:
    """The first JSON value in `text`, tolerating prose and code fences around it.

    Returns (value, "ok"), or (complete elements, "truncated") for an array cut off mid-way, or
    (None, "malformed") when nothing parses.
    """
    decoder = json.JSONDecoder()
    for start, char in enumerate(text):
        if char not in "[{":
            continue
        try:
            return decoder.raw_decode(text, start)[0], "ok"
        except json.JSONDecodeError:
            pass
        if char == "[":
            salvaged = complete_array_items(text, start)
            if salvaged:
                return salvaged, "truncated"
    return None, "malformed"


def _resolve_id(raw: object, library: list[Experience]) -> str | None:
    """The stable id behind a prompt id ("G3", "[G3]", "3" or 3), or None."""
    match = re.fullmatch(r"\[?G?(\d+)\]?\.?", str(raw).strip(), re.IGNORECASE)
    if match and int(match.group(1)) < len(library):
        return library[int(match.group(1))].id
    return None


def parse_operations(text: str, library: list[Experience], config: TFGRPOConfig,
                     counters: Counter) -> list[dict]:
    """Valid proposals `{op, target, text}` from one stage-2 answer; everything else counted.

    The answer is `{"operations": [...]}`, a bare array, or one bare operation. Each answer also
    counts once as `answer_with_ops` (it yielded a valid ADD/UPDATE/DELETE) or
    `answer_without_ops` (it did not: NONE only, empty, or nothing valid).
    """
    proposals = _parse_operations(text, library, config, counters)
    counters["answer_with_ops" if proposals else "answer_without_ops"] += 1
    return proposals


def _parse_operations(text: str, library: list[Experience], config: TFGRPOConfig,
                      counters: Counter) -> list[dict]:
    value, status = extract_json(text)
    if status == "malformed":
        counters["malformed_json"] += 1
        log.info("stage 2: no JSON in %r", text[:120])
        return []
    if status == "truncated":
        counters["truncated_json"] += 1
    if isinstance(value, dict):
        value = value.get("operations", [value])
    if not isinstance(value, list):
        counters["invalid_op"] += 1
        return []
    proposals: list[dict] = []
    for item in value:
        if not isinstance(item, dict):
            counters["invalid_op"] += 1
            continue
        op = str(item.get("op") or item.get("operation") or "").strip().lower()
        if op == "none":
            continue
        text_value = item.get("text", item.get("content"))
        text_value = " ".join(text_value.split()) if isinstance(text_value, str) else ""
        if op not in ("add", "update", "delete") or (op != "delete" and not text_value):
            counters["invalid_op"] += 1
            continue
        target = None
        if op != "add":
            target = _resolve_id(item.get("id"), library)
            if target is None:
                counters["unknown_id"] += 1
                continue
        if op != "delete" and len(text_value.split()) > config.max_experience_words:
            counters["overlong_experience"] += 1
            continue
        if len(proposals) == config.max_ops_per_query:
            counters["ops_over_limit"] += 1
            continue
        proposals.append({"op": op, "target": target, "text": text_value if op != "delete" else ""})
    return proposals


# --------------------------------------------------------------------------- stage 3


def jaccard(a: str, b: str) -> float:
    """Jaccard similarity of the lower-cased word sets (punctuation ignored)."""
    sa, sb = set(re.findall(r"[a-z0-9]+", a.lower())), set(re.findall(r"[a-z0-9]+", b.lower()))
    return len(sa & sb) / len(sa | sb) if sa | sb else 1.0


def consolidate(library: list[Experience], proposals: list[dict], threshold: float,
                counters: Counter) -> list[dict]:
    """The batch's proposals reduced to a conflict-free list of operations, in a fixed order.

    DELETE beats UPDATE of the same target; the first UPDATE of a target wins; an ADD whose text
    near-duplicates a surviving experience or an earlier ADD is dropped. Deletes and updates come
    first (in proposal order), then adds.
    """
    deleted = {p["target"] for p in proposals if p["op"] == "delete"}
    kept: list[dict] = []
    seen: set[tuple[str, str]] = set()  # (op, target) already kept
    for p in proposals:
        if p["op"] == "delete" and ("delete", p["target"]) not in seen:
            kept.append(p)
        elif p["op"] == "update":
            if p["target"] in deleted or ("update", p["target"]) in seen:
                counters["conflict_resolved"] += 1
            else:
                kept.append(p)
        seen.add((p["op"], p["target"]))
    updates = {p["target"]: p["text"] for p in kept if p["op"] == "update"}
    texts = [updates.get(e.id, e.text) for e in library if e.id not in deleted]
    for p in proposals:
        if p["op"] != "add":
            continue
        if any(jaccard(p["text"], t) >= threshold for t in texts):
            counters["merged_duplicate"] += 1
            continue
        texts.append(p["text"])
        kept.append(p)
    return kept


def apply_operations(library: list[Experience], operations: list[dict], epoch: int,
                     global_step: int) -> tuple[list[Experience], list[dict]]:
    """The new library (renumbered by position) and one publishable record per operation:
    `{op, id, target, text, step, epoch}`, plus `receipts` when the proposal carried any."""
    updates = {o["target"]: o["text"] for o in operations if o["op"] == "update"}
    deleted = {o["target"] for o in operations if o["op"] == "delete"}
    new_library = [Experience(e.id, updates.get(e.id, e.text)) for e in library
                   if e.id not in deleted]
    records = []
    for k, o in enumerate(operations):
        experience_id = o["target"]
        if o["op"] == "add":
            experience_id = f"x{global_step}.{k}"
            new_library.append(Experience(experience_id, o["text"]))
        record = {"op": o["op"], "id": experience_id, "target": o["target"],
                  "text": o["text"], "step": global_step, "epoch": epoch}
        if o.get("receipts"):  # the receipt CIDs of the rollouts the operation came from
            record["receipts"] = o["receipts"]
        records.append(record)
    return new_library, records
