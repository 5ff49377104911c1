"""The bundled gradient-training datasets, generated from `trainer/data/arith_train.jsonl`.

Each arithmetic problem of the Training-Free GRPO set (see `trainer/data.py`) gets a worked
solution, written from the numbers in its text in the order its template uses them and checked
against the problem's answer. From those:

- `sft_arith_alpaca.jsonl`: alpaca rows, instruction + the problem as `input`, the worked
  solution as `output` (48 rows);
- `sft_arith_sharegpt.jsonl`: sharegpt conversations, every third one with a follow-up turn
  that re-checks the answer (16 rows);
- `dpo_arith_pairs.jsonl`: preference pairs, the worked solution as `chosen` and the same steps
  with a slip in the last one as `rejected` (48 rows);
- `kto_arith.jsonl`: the same pairs unpaired for KTO, each as a desirable row (`label: true`,
  the worked solution) and an undesirable one (`label: false`, the slip) (96 rows);
- `grpo_arith_easy.jsonl`: the one- and two-step problems (marbles, eggs, stickers) as
  problem/answer rows (24): SmolLM2-135M solves some of them, and GRPO learns only from groups
  whose rewards differ.

    python -m trainer.gradient.sample_data trainer/data   # rewrites the five files, identical
"""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path

from ledger.json_input import parse_json
from trainer._json import LINE_BYTES

INSTRUCTION = "Solve the word problem step by step. End with 'Answer: <number>'."
SYSTEM = "You solve arithmetic word problems. Show each step, then write 'Answer: <number>'."


def _steps(problem: str) -> list[tuple[str, int]]:
    """`(step text, value)` pairs solving `problem`; the last value is the answer."""
    n = [int(x) for x in re.findall(r"\d+", problem)]
    if "marbles" in problem:
        a, b = n
        return [(f"{a} + {b} = {a + b} marbles.", a + b)]
    if "farmer" in problem:
        a, b, c, d = n
        return [(f"The boxes hold {b} x {c} = {b * c} apples.", b * c),
                (f"With the {a} she had: {a} + {b * c} = {a + b * c}.", a + b * c),
                (f"After giving away {d}: {a + b * c} - {d} = {a + b * c - d}.", a + b * c - d)]
    if "eggs" in problem:
        a, b = n
        return [(f"{b} boxes of {a} eggs: {b} x {a} = {a * b} eggs.", a * b)]
    if "library" in problem:
        a, b, c, d, e = n
        t = a + b * c
        return [(f"The shipments bring {b} x {c} = {b * c} books.", b * c),
                (f"{a} + {b * c} = {t} books.", t),
                (f"Lending {d}: {t} - {d} = {t - d}.", t - d),
                (f"{e} come back: {t - d} + {e} = {t - d + e}.", t - d + e)]
    if "stickers" in problem:
        a, b, c = n
        return [(f"{a} - {b} = {a - b} stickers.", a - b),
                (f"Finding {c} more: {a - b} + {c} = {a - b + c}.", a - b + c)]
    if "pens" in problem:
        a, b, c, d = n
        return [(f"The pens cost {b} x {c} = {b * c} dollars.", b * c),
                (f"{a} - {b * c} = {a - b * c} dollars left.", a - b * c),
                (f"Earning {d}: {a - b * c} + {d} = {a - b * c + d}.", a - b * c + d)]
    if "baker" in problem:
        trays, per_tray, sold, bags = n
        total = trays * per_tray
        return [(f"{trays} x {per_tray} = {total} cookies.", total),
                (f"After selling {sold}: {total} - {sold} = {total - sold}.", total - sold),
                (f"Into {bags} bags: {total - sold} / {bags} = {(total - sold) // bags}.",
                 (total - sold) // bags)]
    if "train" in problem:
        a, b, c, d = n
        seats = a * b
        return [(f"{a} x {b} = {seats} seats.", seats),
                (f"{seats} - {c} = {seats - c} free after the first {c}.", seats - c),
                (f"{seats - c} - {d} = {seats - c - d} free.", seats - c - d)]
    if "cyclist" in problem:
        a, b, c, d = n
        return [(f"First part: {a} x {b} = {a * b} km.", a * b),
                (f"Second part: {c} x {d} = {c * d} km.", c * d),
                (f"Total: {a * b} + {c * d} = {a * b + c * d} km.", a * b + c * d)]
    if "tulips" in problem:
        rows, per_row, dead, _two = n
        grown = rows * per_row - dead
        return [(f"{rows} x {per_row} = {rows * per_row} tulips.", rows * per_row),
                (f"{rows * per_row} - {dead} = {grown} grow.", grown),
                (f"{grown} x 2 = {2 * grown} flowers.", 2 * grown)]
    raise ValueError(f"no worked solution for: {problem}")


def worked_solution(problem: str, answer: str) -> str:
    steps = _steps(problem)
    if str(steps[-1][1]) != answer:
        raise ValueError(f"worked solution gives {steps[-1][1]}, expected {answer}: {problem}")
    return " ".join(text for text, _ in steps) + f" Answer: {answer}"


def slipped_solution(problem: str, rng: random.Random) -> str:
    """The same steps with an arithmetic slip in the last one (a wrong final answer)."""
    steps = _steps(problem)
    text, value = steps[-1]
    wrong = value + rng.choice((-10, -2, -1, 1, 2, 10))
    head, _, tail = text.rpartition(f"= {value}")
    return " ".join([t for t, _ in steps[:-1]] + [f"{head}= {wrong}{tail}"]) + \
        f" Answer: {wrong}"


def _jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def write_sample_data(directory: str | Path, source: str | Path | None = None) -> list[Path]:
    """Write the five files under `directory` from `source` (default arith_train.jsonl)."""
    directory = Path(directory)
    source = Path(source) if source else Path(__file__).parents[1] / "data" / "arith_train.jsonl"
    problems = [parse_json(line, max_bytes=LINE_BYTES, what=str(source))
                for line in source.read_text().splitlines() if line.strip()]
    alpaca = [{"instruction": INSTRUCTION, "input": p["problem"],
               "output": worked_solution(p["problem"], p["answer"])} for p in problems[:48]]
    sharegpt = []
    for i, p in enumerate(problems[48:64]):
        turns = [{"from": "human", "value": p["problem"]},
                 {"from": "gpt", "value": worked_solution(p["problem"], p["answer"])}]
        if i % 3 == 2:
            turns += [{"from": "human", "value": "Check the last step again."},
                      {"from": "gpt", "value": f"{_steps(p['problem'])[-1][0]} "
                                               f"It holds. Answer: {p['answer']}"}]
        sharegpt.append({"system": SYSTEM, "conversations": turns})
    rng = random.Random(0)
    pairs = [{"prompt": p["problem"], "chosen": worked_solution(p["problem"], p["answer"]),
              "rejected": slipped_solution(p["problem"], rng)} for p in problems[:48]]
    unpaired = [{"prompt": pair["prompt"], "completion": pair[side], "label": side == "chosen"}
                for pair in pairs for side in ("chosen", "rejected")]
    easy = [p for p in problems if len(_steps(p["problem"])) == 1 or "stickers" in p["problem"]]
    written = []
    for name, rows in (("sft_arith_alpaca.jsonl", alpaca), ("sft_arith_sharegpt.jsonl", sharegpt),
                       ("dpo_arith_pairs.jsonl", pairs), ("kto_arith.jsonl", unpaired),
                       ("grpo_arith_easy.jsonl", easy[:24])):
        path = directory / name
        path.write_text(_jsonl(rows), encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":
    for written in write_sample_data(sys.argv[1] if len(sys.argv) > 1 else "trainer/data"):
        print(written)
