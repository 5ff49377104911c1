"""Problems for Training-Free GRPO: a generated arithmetic set and loaders for local files.

`generate_problems(n, seed)` writes arithmetic word problems with known integer answers, from
one operation ("Tom has 5 marbles and gets 3 more...") to several ("A farmer has 12 apples,
buys 3 boxes of 7 apples each, then gives away 5..."), the same list for the same seed. `write_splits()` produced the shipped `trainer/data/arith_train.jsonl`
(100 problems, seed 0) and `trainer/data/arith_heldout.jsonl` (50 problems, seed 1, none shared
with train):

    python -m trainer.data trainer/data

`load_problems(path)` reads JSONL/JSON directly and any other local format `datasets` knows
(csv, parquet, ...) through `datasets`; rows need `problem` and `answer`. Nothing is downloaded.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Callable
from pathlib import Path

from ledger.json_input import parse_json
from trainer._json import LINE_BYTES
from trainer.errors import TrainerError

Problem = dict[str, str]  # {"problem": ..., "answer": ...}


def _farmer(r: random.Random) -> tuple[str, int]:
    a, b, c = r.randint(5, 40), r.randint(2, 6), r.randint(3, 12)
    d = r.randint(1, a + b * c - 1)
    return ((f"A farmer has {a} apples. She buys {b} boxes with {c} apples each, then gives away "
            f"{d} apples. How many apples does she have now?"), a + b * c - d)


def _library(r: random.Random) -> tuple[str, int]:
    a, b, c = r.randint(50, 300), r.randint(2, 5), r.randint(10, 40)
    d, e = r.randint(10, a), r.randint(1, 9)
    e = min(e, d)
    return ((f"A library has {a} books. It receives {b} shipments of {c} books, lends out {d} "
            f"books, and {e} of the lent books are returned. How many books are in the library?"),
            a + b * c - d + e)


def _shopping(r: random.Random) -> tuple[str, int]:
    b, c = r.randint(2, 8), r.randint(2, 9)
    a, d = b * c + r.randint(0, 50), r.randint(5, 30)
    return ((f"Sam has {a} dollars. He buys {b} pens that cost {c} dollars each, then earns {d} "
            f"dollars mowing a lawn. How many dollars does Sam have?"), a - b * c + d)


def _bakery(r: random.Random) -> tuple[str, int]:
    bags, per_bag = r.randint(2, 8), r.randint(2, 9)
    trays, sold = r.randint(2, 6), r.randint(1, 20)
    per_tray = -(-(bags * per_bag + sold) // trays)  # enough cookies, then fix the sales
    sold = trays * per_tray - bags * per_bag
    return ((f"A baker bakes {trays} trays of {per_tray} cookies, sells {sold} cookies, and packs "
            f"the rest equally into {bags} bags. How many cookies are in each bag?"), per_bag)


def _train(r: random.Random) -> tuple[str, int]:
    a, b = r.randint(3, 12), r.randint(20, 60)
    c = r.randint(1, a * b // 2)
    d = r.randint(1, a * b - c)
    return ((f"A train has {a} cars with {b} seats each. {c} seats are taken, and then {d} more "
            f"passengers board. How many seats are still free?"), a * b - c - d)


def _cyclist(r: random.Random) -> tuple[str, int]:
    a, b, c, d = r.randint(8, 25), r.randint(1, 4), r.randint(5, 20), r.randint(1, 3)
    return ((f"A cyclist rides at {a} km per hour for {b} hours, then at {c} km per hour for {d} "
            f"hours. How many kilometres does she ride in total?"), a * b + c * d)


def _garden(r: random.Random) -> tuple[str, int]:
    rows, per_row, dead = r.randint(3, 12), r.randint(4, 15), r.randint(1, 10)
    return ((f"A gardener plants {rows} rows of {per_row} tulips. {dead} tulips do not grow, and "
            f"each remaining tulip gives 2 flowers. How many flowers are there?"),
            2 * (rows * per_row - dead))


def _buy_more(r: random.Random) -> tuple[str, int]:
    name, a, b = r.choice(("Tom", "Mia", "Ravi", "Lena")), r.randint(2, 30), r.randint(2, 30)
    return f"{name} has {a} marbles and gets {b} more marbles. How many marbles now?", a + b


def _boxes(r: random.Random) -> tuple[str, int]:
    a, b = r.randint(2, 12), r.randint(2, 10)
    return f"A box holds {a} eggs. How many eggs are in {b} boxes?", a * b


def _give_away(r: random.Random) -> tuple[str, int]:
    a = r.randint(10, 60)
    b, c = r.randint(1, a // 2), r.randint(1, 9)
    return ((f"Anna has {a} stickers. She gives away {b} stickers and then finds {c} more. "
            f"How many stickers does she have?"), a - b + c)


# Easy (one or two operations) and multi-step templates alternate, so that a small model gets
# some rollouts right: Training-Free GRPO learns only from groups with mixed rewards.
TEMPLATES: tuple[Callable[[random.Random], tuple[str, int]], ...] = (
    _buy_more, _farmer, _boxes, _library, _give_away, _shopping, _bakery, _train, _cyclist,
    _garden)


def generate_problems(n: int, seed: int, exclude: set[str] = frozenset()) -> list[Problem]:
    """`n` distinct problems (none in `exclude`), a pure function of (n, seed, exclude)."""
    r = random.Random(seed)
    seen, problems = set(exclude), []
    while len(problems) < n:
        text, answer = TEMPLATES[len(problems) % len(TEMPLATES)](r)
        if text not in seen and answer >= 0:
            seen.add(text)
            problems.append({"problem": text, "answer": str(answer)})
    return problems


def write_jsonl(problems: list[Problem], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(p, ensure_ascii=False) + "\n" for p in problems))
    return path


def write_splits(directory: str | Path, n_train: int = 100, n_heldout: int = 50) -> None:
    """Write the shipped train (seed 0) and held-out (seed 1) splits; they share no problem."""
    train = generate_problems(n_train, seed=0)
    heldout = generate_problems(n_heldout, seed=1, exclude={p["problem"] for p in train})
    write_jsonl(train, Path(directory) / "arith_train.jsonl")
    write_jsonl(heldout, Path(directory) / "arith_heldout.jsonl")


class DatasetError(TrainerError, ValueError):
    """A problems file is missing, unreadable, or has a row without `problem` and `answer`."""


def load_problems(path: str | Path, limit: int = 0) -> list[Problem]:
    """Rows with `problem` and `answer` (as strings) from a local JSONL/JSON/CSV/parquet file.

    Every problem with the file is a `DatasetError` naming the file (and the line)."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path}: no such dataset file")
    if path.suffix == ".jsonl":
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise DatasetError(f"{path}: cannot read the dataset ({exc})") from None
        rows = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append(parse_json(line, max_bytes=LINE_BYTES, what=f"{path}:{number}"))
            except ValueError as exc:
                raise DatasetError(f"{path}:{number}: not valid JSON ({exc})") from None
    else:
        import datasets

        kind = {".json": "json", ".csv": "csv", ".parquet": "parquet"}.get(path.suffix)
        if kind is None:
            raise DatasetError(f"{path}: unsupported extension (jsonl, json, csv, parquet)")
        try:
            rows = list(datasets.load_dataset(kind, data_files=str(path), split="train"))
        except Exception as exc:  # noqa: BLE001 - any reader failure is the file's problem
            raise DatasetError(f"{path}: cannot read the dataset "
                               f"({' '.join(str(exc).split())})") from None
    problems = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or "problem" not in row or "answer" not in row:
            raise DatasetError(f"{path}: row {i + 1} lacks a `problem` or `answer` field")
        problems.append({"problem": str(row["problem"]), "answer": str(row["answer"])})
    if not problems:
        raise DatasetError(f"{path}: no problems")
    return problems[:limit] if limit else problems

if __name__ == "__main__":
    write_splits(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "data")
