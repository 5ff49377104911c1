"""Dataset formats of gradient training: local JSON/JSONL rows converted to what TRL expects.

| format | a row | becomes (tokenizer with a chat template) |
|---|---|---|
| alpaca | `instruction`, `input`?, `output`, `system`? | prompt/completion messages (SFT loss on the answer) |
| sharegpt | `conversations: [{from, value}]`, `system`? | `messages` (SFT loss on the whole chat) |
| preference | `prompt`, `chosen`, `rejected`, `system`? | prompt/chosen/rejected messages (DPO, ORPO) |
| kto | `prompt`, `completion`, `label` (true/false), `system`? | prompt/completion messages + `label` (KTO) |
| prompt | `problem`, `answer` | prompt messages + `problem`, `answer` columns (GRPO/GSPO rewards) |

ShareGPT roles: `system`, `human`/`user`, `gpt`/`assistant`. Without a chat template (a base
model's tokenizer) alpaca, preference and prompt rows become plain-text prompt/completion rows
(an Alpaca-style `### Instruction / ### Response` layout); sharegpt needs a template. A kto
`label` must be a JSON boolean (`"yes"` or 1 is refused, not guessed).

A file is either JSONL (one object a line, blank lines skipped) or a JSON array of objects. Every
bad row raises `DatasetFormatError` naming the file, the line (JSONL) or row index (JSON array)
and the field: `data.jsonl:7: field 'output': missing`. Extra fields are ignored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ledger.json_input import parse_json
from trainer._json import DATASET_BYTES, LINE_BYTES
from trainer.errors import TrainerError

Row = dict[str, Any]
SHAREGPT_ROLES = {"system": "system", "human": "user", "user": "user", "gpt": "assistant",
                  "assistant": "assistant"}


class DatasetFormatError(TrainerError, ValueError):
    """A dataset file or one of its rows does not have the declared format."""


def read_rows(path: str | Path) -> list[tuple[str, Row]]:
    """`(where, row)` pairs of a JSONL or JSON-array file; `where` is `file:line` or
    `file[index]`, for error messages."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DatasetFormatError(f"{path}: no such dataset file") from None
    except UnicodeDecodeError as exc:
        raise DatasetFormatError(f"{path}: not UTF-8 text ({exc.reason})") from None
    rows: list[tuple[str, Any]] = []
    if text.lstrip().startswith("["):
        try:
            data = parse_json(text, max_bytes=DATASET_BYTES, what=str(path))
        except ValueError as exc:
            raise DatasetFormatError(f"{path}: not valid JSON ({exc})") from None
        rows = [(f"{path}[{i}]", row) for i, row in enumerate(data)]
    else:
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                rows.append((f"{path}:{number}",
                             parse_json(line, max_bytes=LINE_BYTES, what="row")))
            except ValueError as exc:
                raise DatasetFormatError(f"{path}:{number}: not valid JSON ({exc})") from None
    for where, row in rows:
        if not isinstance(row, dict):
            raise DatasetFormatError(f"{where}: a row must be a JSON object, got "
                                     f"{type(row).__name__}")
    if not rows:
        raise DatasetFormatError(f"{path}: no rows")
    return rows


def _text(row: Row, where: str, field: str, *, required: bool = True,
          allow_number: bool = False) -> str | None:
    value = row.get(field)
    if value is None:
        if required:
            raise DatasetFormatError(f"{where}: field {field!r}: missing")
        return None
    if allow_number and isinstance(value, int | float) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise DatasetFormatError(f"{where}: field {field!r}: must be a string, got "
                                 f"{type(value).__name__}")
    if required and not value.strip():
        raise DatasetFormatError(f"{where}: field {field!r}: is empty")
    return value


def _system(row: Row, where: str, default: str | None) -> list[dict[str, str]]:
    system = _text(row, where, "system", required=False) or default
    return [{"role": "system", "content": system}] if system else []


def _plain_prompt(system: list[dict[str, str]], instruction: str) -> str:
    head = f"{system[0]['content']}\n\n" if system else ""
    return f"{head}### Instruction:\n{instruction}\n\n### Response:\n"


def alpaca(row: Row, where: str, chat: bool, system_prompt: str | None) -> Row:
    instruction = _text(row, where, "instruction")
    extra = _text(row, where, "input", required=False)
    output = _text(row, where, "output")
    user = f"{instruction}\n\n{extra}" if extra and extra.strip() else instruction
    system = _system(row, where, system_prompt)
    if not chat:
        return {"prompt": _plain_prompt(system, user), "completion": output}
    return {"prompt": [*system, {"role": "user", "content": user}],
            "completion": [{"role": "assistant", "content": output}]}


def sharegpt(row: Row, where: str, chat: bool, system_prompt: str | None) -> Row:
    if not chat:
        raise DatasetFormatError(f"{where}: sharegpt rows need a tokenizer with a chat template")
    turns = row.get("conversations")
    if turns is None:
        raise DatasetFormatError(f"{where}: field 'conversations': missing")
    if not isinstance(turns, list) or not turns:
        raise DatasetFormatError(f"{where}: field 'conversations': must be a non-empty list")
    messages = _system(row, where, None)
    for i, turn in enumerate(turns):
        field = f"conversations[{i}]"
        if not isinstance(turn, dict):
            raise DatasetFormatError(f"{where}: field {field!r}: must be an object")
        role = turn.get("from")
        if role not in SHAREGPT_ROLES:
            raise DatasetFormatError(f"{where}: field '{field}.from': {role!r} is not one of "
                                     f"{sorted(SHAREGPT_ROLES)}")
        value = turn.get("value")
        if not isinstance(value, str) or not value.strip():
            raise DatasetFormatError(f"{where}: field '{field}.value': must be a non-empty "
                                     "string")
        if SHAREGPT_ROLES[role] == "system" and i > 0:
            raise DatasetFormatError(f"{where}: field '{field}.from': a system turn must come "
                                     "first")
        messages.append({"role": SHAREGPT_ROLES[role], "content": value})
    if not any(m["role"] == "assistant" for m in messages):
        raise DatasetFormatError(f"{where}: field 'conversations': has no gpt/assistant turn")
    return {"messages": messages}


def preference(row: Row, where: str, chat: bool, system_prompt: str | None) -> Row:
    prompt, chosen, rejected = (_text(row, where, f) for f in ("prompt", "chosen", "rejected"))
    if chosen == rejected:
        raise DatasetFormatError(f"{where}: field 'rejected': equals 'chosen'")
    system = _system(row, where, system_prompt)
    if not chat:
        return {"prompt": _plain_prompt(system, prompt), "chosen": chosen, "rejected": rejected}
    return {"prompt": [*system, {"role": "user", "content": prompt}],
            "chosen": [{"role": "assistant", "content": chosen}],
            "rejected": [{"role": "assistant", "content": rejected}]}


def kto(row: Row, where: str, chat: bool, system_prompt: str | None) -> Row:
    """KTO's unpaired rows: a prompt, one completion and whether it is desirable."""
    prompt_text, completion = _text(row, where, "prompt"), _text(row, where, "completion")
    label = row.get("label")
    if not isinstance(label, bool):
        raise DatasetFormatError(f"{where}: field 'label': must be true (desirable) or false, "
                                 f"got {label!r}")
    system = _system(row, where, system_prompt)
    if not chat:
        return {"prompt": _plain_prompt(system, prompt_text), "completion": completion,
                "label": label}
    return {"prompt": [*system, {"role": "user", "content": prompt_text}],
            "completion": [{"role": "assistant", "content": completion}], "label": label}


def prompt(row: Row, where: str, chat: bool, system_prompt: str | None) -> Row:
    problem = _text(row, where, "problem")
    answer = _text(row, where, "answer", allow_number=True)
    system = _system(row, where, system_prompt)
    if not chat:
        return {"prompt": _plain_prompt(system, problem), "problem": problem, "answer": answer}
    return {"prompt": [*system, {"role": "user", "content": problem}], "problem": problem,
            "answer": answer}


CONVERTERS = {"alpaca": alpaca, "sharegpt": sharegpt, "preference": preference, "kto": kto,
              "prompt": prompt}


def load_dataset_rows(path: str | Path, format: str, *, chat: bool,
                      system_prompt: str | None = None, limit: int = 0) -> list[Row]:
    """The rows of `path` in `format`, converted for TRL (see the module docstring)."""
    convert = CONVERTERS[format]
    rows = read_rows(path)
    if limit:
        rows = rows[:limit]
    return [convert(row, where, chat, system_prompt) for where, row in rows]
