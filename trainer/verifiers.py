"""Reward functions: `verify(sample) -> {"reward": float, "reasoning": str}`.

A sample is a dict with `problem`, `answer` (the ground truth, as a string) and `response` (the
model's completion). `load_verifier(name)` returns one of:

- `math`: math-verify parses the ground truth and the response and checks equivalence
  ("1/2" == "0.5", "\\frac{1}{2}" == "0.5", "\\boxed{12}" == "12");
- `exact`: the response's final answer (`extract_answer`: the last `\\boxed{}`, else the last
  `Answer: …` line, else the last "the answer is …", else the last bold or quoted phrase of the
  last line, else, for a numeric ground truth, the last number, else the last line),
  normalised (case, spaces, quotes, bold, `$`, `\\boxed{}`, trailing punctuation, thousands
  separators), equals the normalised ground truth; its reasoning says what it extracted, and
  how;
- `python:module:function`: any importable callable with the same signature;
- `llm-judge`: a backend is asked whether the response reaches the ground truth.

`final_answer(text)` extracts the answer a response commits to; the trainer also uses it for
majority-vote self-discrimination when no ground truth is used.
"""

from __future__ import annotations

import importlib
import logging
import re
from collections.abc import Callable
from typing import TypedDict

from trainer.errors import TrainerError


class Verdict(TypedDict):
    reward: float
    reasoning: str


Verifier = Callable[[dict], Verdict]

# math-verify warns on every call that its signal-based timeouts are off; they are off on
# purpose (signals only work in the main thread) and the inputs here are short.
logging.getLogger("math_verify").setLevel(logging.ERROR)

_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
# "Answer: X", "answer is X", "the final answer is: X", "answer = X" (the rest of its line)
_ANSWER = re.compile(r"answer\s*(?:is\s*[:=]?|[:=])\s*(.+)", re.IGNORECASE)
_ANSWER_LINE = re.compile(r"^\W*(?:final\s+)?answer\W*\s*[:=]\s*(.+)$", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?")
_EMPHASIS = re.compile(r"\*\*(.+?)\*\*|__(.+?)__|\"(.+?)\"|“(.+?)”|`(.+?)`|'(.+?)'(?!\w)")
_WRAPPERS = "\"'`*_“”‘’"
_SENTENCE_END = re.compile(r"[.!?](?:\s|$)")
MAX_ANSWER_WORDS = 12  # a longer "last line" is prose, not an answer


def normalise(text: str) -> str:
    """Lower-case, unbox, strip quotes, bold, `$`, trailing punctuation, thousands separators
    and spaces."""
    text = text.strip().lower()
    boxed = _BOXED.findall(text)
    if boxed:
        text = boxed[-1]
    text = text.replace("$", "").replace("\\!", "")
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)
    for _ in range(3):  # "**'tac'**." peels to tac
        text = re.sub(r"\s+", " ", text).strip().rstrip(".!;:,").strip().strip(_WRAPPERS).strip()
    return text


def _answer_tail(text: str) -> tuple[str, str] | None:
    """What follows the last answer marker, up to the end of its sentence or line, and which
    marker it was."""
    lines = [line for line in text.splitlines() if line.strip()]
    for line in reversed(lines):  # an `Answer: X` line wins over prose
        match = _ANSWER_LINE.match(line)
        if match:
            return match.group(1), "answer line"
    matches = _ANSWER.findall(text)
    if not matches:
        return None
    tail = matches[-1].strip()
    end = _SENTENCE_END.search(tail)
    return (tail[:end.start()] if end else tail), "answer phrase"


def extract_answer(text: str, *, numeric: bool = False) -> tuple[str, str]:
    """(the normalised answer a response commits to, how it was found): see the module
    docstring; ``numeric`` prefers the first number of an answer phrase and falls back to the
    last number of the text."""
    boxed = _BOXED.findall(text)
    if boxed:
        return normalise(boxed[-1]), "boxed"
    found = _answer_tail(text)
    if found is not None:
        tail, how = found
        number = _NUMBER.search(tail) if numeric else None
        return normalise(number.group(0) if number else tail), how
    lines = [line for line in text.splitlines() if line.strip()]
    if lines:
        emphasised = [next(g for g in m.groups() if g) for m in _EMPHASIS.finditer(lines[-1])]
        if emphasised:
            return normalise(emphasised[-1]), "emphasis in the last line"
    numbers = _NUMBER.findall(text)
    if numeric and numbers:
        return normalise(numbers[-1]), "last number"
    if lines and len(lines[-1].split()) <= MAX_ANSWER_WORDS:
        return normalise(lines[-1]), "last line"
    return "", "nothing that reads as an answer"


def final_answer(text: str) -> str:
    """The answer a response commits to, for numeric tasks (math, majority votes): the last
    `\\boxed{}`, else the first number after the last answer marker (or the phrase there), else
    the last number, else the last line."""
    answer, how = extract_answer(text, numeric=True)
    if how == "nothing that reads as an answer":
        return normalise(text.splitlines()[-1] if text.strip() else "")
    return answer


def exact_match(sample: dict) -> Verdict:
    want = normalise(str(sample["answer"]))
    got, how = extract_answer(sample["response"], numeric=bool(_NUMBER.fullmatch(want)))
    ok = got == want or normalise(sample["response"]) == want
    return {"reward": float(ok), "reasoning": f"extracted {got!r} ({how}) vs expected {want!r}"}


def math_verify(sample: dict) -> Verdict:
    from math_verify import parse, verify

    gold = parse(str(sample["answer"]), parsing_timeout=None)
    # Prefer the committed answer; fall back to whatever math-verify finds in the whole text.
    candidates = [final_answer(sample["response"]), sample["response"]]
    for candidate in candidates:
        predicted = parse(candidate, parsing_timeout=None)
        if predicted and verify(gold, predicted, timeout_seconds=None):
            return {"reward": 1.0, "reasoning": f"{predicted[-1]} is equivalent to {gold[-1:]}"}
    return {"reward": 0.0, "reasoning": f"{candidates[0]!r} is not equivalent to {sample['answer']!r}"}


class LLMJudge:
    """Asks a backend whether a response reaches the ground truth; reward 1 iff it says CORRECT."""

    def __init__(self, backend, max_new_tokens: int = 64) -> None:
        self.backend = backend
        self.max_new_tokens = max_new_tokens

    def __call__(self, sample: dict) -> Verdict:
        prompt = [
            {"role": "system", "content": "You grade answers. Reply with CORRECT or INCORRECT, "
                                          "then one sentence of reasoning."},
            {"role": "user", "content": f"Problem: {sample['problem']}\nReference answer: "
                                        f"{sample['answer']}\nResponse: {sample['response']}"}]
        text = self.backend.generate([prompt], n=1, temperature=0.0,
                                     max_new_tokens=self.max_new_tokens, seed=0)[0][0]
        head = text.strip().upper()
        return {"reward": float(head.startswith("CORRECT")), "reasoning": text.strip()}


class VerifierError(TrainerError, ValueError):
    """A verifier name that names no verifier (or a python: verifier that cannot be imported)."""


def load_verifier(name: str, judge_backend=None) -> Verifier:
    """The verifier called `name` (see the module docstring)."""
    if name == "math":
        return math_verify
    if name == "exact":
        return exact_match
    if name == "llm-judge":
        if judge_backend is None:
            raise VerifierError("the llm-judge verifier needs a backend")
        return LLMJudge(judge_backend)
    if name.startswith("python:") and name.count(":") == 2:
        _, module_name, function_name = name.split(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise VerifierError(f"verifier {name!r}: cannot import {module_name} ({exc})") \
                from None
        function = getattr(module, function_name, None)
        if not callable(function):
            raise VerifierError(f"verifier {name!r}: {module_name}.{function_name} is not a "
                                "callable")
        return function
    raise VerifierError(f"unknown verifier {name!r}: math, exact, llm-judge or "
                        "python:module:function")
