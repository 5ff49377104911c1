"""Evaluations: the figures an ``evaluation`` entry reports, and its receipt table
(docs/design.md "3.1 Entries", ``evaluation``).

Figures. For one arm and one seed, ``rewards[problem][sample]`` holds the verifier's reward of
each of the k samples of each problem, in [0, 1]. Mean@k is the mean over problems of the mean
over samples; Pass@k the mean over problems of ``pass_at_k(n, c, k)``, c counting the samples
whose reward is >= 1 (with n = k samples, 1 when one passed, else 0). These are the
definitions of ``trainer/evaluate.py``, and ``statistics.fmean`` makes them exact functions
of the rewards: a verifier recomputes the entry's floats bit for bit.

Receipt table. The RFC 8785 canonical JSON of::

    {"type": "evaluation-receipts", "v": 1, "arms": {<arm>: [<receipt bundle CID>, ...]}}

each arm's list in (seed, problem, sample) order, seeds in the entry's order, so a position
names one generation (``generation_index``). A bundle CID names, on the content endpoint, the
generation's receipt bundle (``inference_node.receipts.bundle_json``: the signed receipt, the
normalized request, the answer's text and token ids, and its receipt-log inclusion proof), what
``gym verify receipt BUNDLE`` reads. Stored like a batch manifest (``add_file``: one raw block
up to 256 KiB, else a UnixFS file) and named by the entry's ``receipts.table``.
``decode_receipt_table`` checks the format (``ReceiptTableError``): canonical bytes, exactly
those keys, arm names as in entries, content CIDs, no CID twice in the whole table, at most
``MAX_EVALUATION_GENERATIONS``. ``check_receipt_table`` checks it against its entry
(``ReceiptTableMismatchError``): the same arms, each with seeds x problems x k CIDs.

>>> from ledger.entries import entry_cid
>>> seed_figures([[1.0, 0.0], [0.0, 0.0]], k=2)
(0.25, 0.5)
>>> table = ReceiptTable({"baseline": [entry_cid(b"r0")], "library": [entry_cid(b"r1")]})
>>> decode_receipt_table(encode_receipt_table(table)) == table
True
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from math import comb

from ledger.canonical_json import canonical_bytes
from ledger.entries import (
    ARM_NAME_PATTERN,
    MAX_EVALUATION_ARMS,
    MAX_EVALUATION_GENERATIONS,
    EvaluationEntry,
    is_content_cid,
)
from ledger.errors import EntryError, LedgerError, VerificationError
from ledger.json_input import JSONInputError, parse_json

RECEIPT_TABLE_TYPE = "evaluation-receipts"
RECEIPT_TABLE_VERSION = 1
# ~62 bytes a receipt CID: MAX_EVALUATION_GENERATIONS of them are ~12.4 MB.
MAX_RECEIPT_TABLE_BYTES = 16 * 1024 * 1024
_ARM_NAME = re.compile(ARM_NAME_PATTERN)


class ReceiptTableError(LedgerError, ValueError):
    """Bytes are not a valid receipt table."""


class ReceiptTableMismatchError(VerificationError):
    """A valid receipt table does not have the arms or counts of the entry that names it."""


# --- figures ----------------------------------------------------------------------------------


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that k of n samples, c of them correct, include a correct one (Chen et al.'s
    unbiased estimator 1 - C(n-c, k) / C(n, k))."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    return 1.0 if n - c < k else 1.0 - comb(n - c, k) / comb(n, k)


def mean_at_k(rewards: Sequence[Sequence[float]]) -> float:
    """Mean reward over each problem's samples, averaged over problems."""
    return statistics.fmean(statistics.fmean(r) for r in rewards)


def pass_rate(rewards: Sequence[Sequence[float]], k: int) -> float:
    """Pass@k over problems, a sample counting as correct when its reward is >= 1."""
    return statistics.fmean(pass_at_k(len(r), sum(x >= 1.0 for x in r), k) for r in rewards)


def seed_figures(rewards: Sequence[Sequence[float]], k: int) -> tuple[float, float]:
    """``(mean_at_k, pass_at_k)`` of one arm and seed from ``rewards[problem][sample]``, what
    the entry's ``arms.<arm>.per_seed[i]`` must hold. Requires k rewards per problem."""
    if not rewards or any(len(r) != k for r in rewards):
        raise ValueError(f"need k = {k} rewards for each of at least one problem")
    return mean_at_k(rewards), pass_rate(rewards, k)


# --- generations ------------------------------------------------------------------------------


def generation_index(entry: EvaluationEntry, arm: str, seed: int, problem: int,
                     sample: int) -> int:
    """Position in the receipt table's list for ``arm`` of the generation of sample ``sample``
    of problem ``problem`` (0-based, in the dataset's order) under ``seed``. ``EntryError``
    naming the field for an arm, seed, problem or sample the entry does not have."""
    seeds, problems, k = entry.sampling.seeds, entry.task.problems, entry.sampling.k
    if arm not in entry.arms:
        raise EntryError(f"no arm {arm!r}", field="arms")
    if seed not in seeds:
        raise EntryError(f"no seed {seed!r}", field="sampling.seeds")
    if type(problem) is not int or not 0 <= problem < problems:
        raise EntryError(f"problem {problem!r} is not below {problems}", field="task.problems")
    if type(sample) is not int or not 0 <= sample < k:
        raise EntryError(f"sample {sample!r} is not below {k}", field="sampling.k")
    return (seeds.index(seed) * problems + problem) * k + sample


def generations_per_arm(entry: EvaluationEntry) -> int:
    """seeds x problems x k: how many generations, hence receipts, each arm has."""
    return len(entry.sampling.seeds) * entry.task.problems * entry.sampling.k


# --- receipt table ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ReceiptTable:
    arms: Mapping[str, Sequence[str]]  # arm -> receipt bundle CIDs, (seed, problem, sample) order

    def __post_init__(self) -> None:
        object.__setattr__(self, "arms", {arm: tuple(c) for arm, c in self.arms.items()})


def _check(table: ReceiptTable) -> None:
    if not 1 <= len(table.arms) <= MAX_EVALUATION_ARMS:
        raise ReceiptTableError(f"arms: 1 to {MAX_EVALUATION_ARMS} arms, got {len(table.arms)}")
    total = sum(len(cids) for cids in table.arms.values())
    if total > MAX_EVALUATION_GENERATIONS:
        raise ReceiptTableError(
            f"arms: {total} receipts, the limit is {MAX_EVALUATION_GENERATIONS}")
    seen: set[str] = set()
    for arm, cids in table.arms.items():
        if not isinstance(arm, str) or not _ARM_NAME.match(arm):
            raise ReceiptTableError(f"arms: {arm!r} is not an arm name ({ARM_NAME_PATTERN})")
        for position, cid in enumerate(cids):
            where = f"arms.{arm}[{position}]"
            if not is_content_cid(cid):
                raise ReceiptTableError(f"{where}: {cid!r} is not a content CID "
                                        "(raw or dag-pb sha2-256 CIDv1 in lowercase base32)")
            if cid in seen:
                raise ReceiptTableError(f"{where}: bundle {cid} is listed twice")
            seen.add(cid)


def encode_receipt_table(table: ReceiptTable) -> bytes:
    """Canonical RFC 8785 bytes of ``table``; ``ReceiptTableError`` if it breaks a rule."""
    _check(table)
    return canonical_bytes({"type": RECEIPT_TABLE_TYPE, "v": RECEIPT_TABLE_VERSION,
                            "arms": {arm: list(cids) for arm, cids in table.arms.items()}})


def decode_receipt_table(data: bytes) -> ReceiptTable:
    """The receipt table ``data`` encodes; ``ReceiptTableError`` for anything else."""
    try:
        obj = parse_json(data, max_bytes=MAX_RECEIPT_TABLE_BYTES, max_depth=3,
                         what="receipt table")
    except JSONInputError as exc:
        raise ReceiptTableError(f"not UTF-8 JSON: {exc}") from None
    if not isinstance(obj, dict) or set(obj) != {"type", "v", "arms"}:
        raise ReceiptTableError("a receipt table is an object of exactly type, v and arms")
    if obj["type"] != RECEIPT_TABLE_TYPE or type(obj["v"]) is not int \
            or obj["v"] != RECEIPT_TABLE_VERSION:
        raise ReceiptTableError(f"not a {RECEIPT_TABLE_TYPE!r} v{RECEIPT_TABLE_VERSION} document")
    arms = obj["arms"]
    if not isinstance(arms, dict) or not all(isinstance(c, list) for c in arms.values()):
        raise ReceiptTableError("arms: an object of arm -> list of receipt CIDs")
    table = ReceiptTable(arms)
    if encode_receipt_table(table) != data:  # checks the rules too
        raise ReceiptTableError("bytes are not the canonical RFC 8785 encoding of the table")
    return table


def check_receipt_table(table: ReceiptTable, entry: EvaluationEntry) -> None:
    """``ReceiptTableMismatchError`` unless ``table`` lists, for each of ``entry``'s arms and
    only those, one receipt per generation (``generations_per_arm``)."""
    if entry.receipts == "none":
        raise ReceiptTableMismatchError("the entry is a local run: it names no receipt table",
                                        expected=None, computed=sorted(table.arms))
    if set(table.arms) != set(entry.arms):
        raise ReceiptTableMismatchError("the table's arms are not the entry's",
                                        expected=sorted(entry.arms), computed=sorted(table.arms))
    expected = generations_per_arm(entry)
    for arm, cids in table.arms.items():
        if len(cids) != expected:
            raise ReceiptTableMismatchError(
                f"arm {arm!r}: {len(cids)} receipts, the entry has seeds x problems x k = "
                f"{expected} generations", expected=expected, computed=len(cids))


# --- effect -----------------------------------------------------------------------------------

METRICS = ("mean_at_k", "pass_at_k")


@dataclass(frozen=True)
class Effect:
    """An arm against the entry's baseline on one metric: per seed, the arm's figure minus the
    baseline's under the same seed, and the mean and spread (population standard deviation,
    min, max) of those differences across seeds.

    ``verdict``: ``"helps"`` when the mean difference is positive and beyond its spread
    (mean > std), ``"hurts"`` when it is negative beyond its spread, else ``"no clear
    effect"``: what a voter reads first, and what ``gym demo``'s voters vote by."""

    arm: str
    baseline: str
    metric: str  # "mean_at_k" or "pass_at_k"
    seeds: tuple[int, ...]
    arm_figures: tuple[float, ...]
    baseline_figures: tuple[float, ...]
    differences: tuple[float, ...]
    mean: float
    std: float
    min: float
    max: float

    @property
    def verdict(self) -> str:
        if self.mean > 0 and self.mean > self.std:
            return "helps"
        if self.mean < 0 and -self.mean > self.std:
            return "hurts"
        return "no clear effect"

    def summary(self, k: int) -> str:
        """One line: ``library vs baseline, Mean@4: +0.250 ± 0.050 (3 seeds: +0.2 … +0.3):
        helps``."""
        name = self.metric.replace("_at_k", f"@{k}").replace("mean", "Mean").replace(
            "pass", "Pass")
        seeds = len(self.seeds)
        return (f"{self.arm} vs {self.baseline}, {name}: {self.mean:+.3f} ± {self.std:.3f} "
                f"({seeds} seed{'s' if seeds != 1 else ''}: {self.min:+.3f} … {self.max:+.3f})"
                f": {self.verdict}")


def subject_arm(entry: EvaluationEntry) -> str:
    """The arm that measures the entry's subject: ``library`` or ``adapter`` when the entry
    has that arm, else its first arm other than the baseline."""
    preferred = "library" if entry.subject.kind == "library" else "adapter"
    if preferred in entry.arms and preferred != entry.baseline:
        return preferred
    return next(arm for arm in entry.arms if arm != entry.baseline)


def effect(entry: EvaluationEntry, arm: str | None = None, metric: str = "mean_at_k"
           ) -> Effect:
    """``arm`` (default ``subject_arm``) against the baseline on ``metric``."""
    arm = subject_arm(entry) if arm is None else arm
    if arm not in entry.arms or metric not in METRICS:
        raise EntryError(f"no arm {arm!r} or metric {metric!r}", field="arms")
    ours = tuple(getattr(f, metric) for f in entry.arms[arm].per_seed)
    theirs = tuple(getattr(f, metric) for f in entry.arms[entry.baseline].per_seed)
    diffs = tuple(a - b for a, b in zip(ours, theirs, strict=True))
    return Effect(arm, entry.baseline, metric, tuple(entry.sampling.seeds), ours, theirs, diffs,
                  statistics.fmean(diffs), statistics.pstdev(diffs), min(diffs), max(diffs))
