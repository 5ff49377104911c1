"""Reward functions: `verify(sample) -> {"reward": float, "reasoning": str}`.

A sample is a dict with `problem`, `answer` (the ground truth, as a string) and `response` (the
model's completion). `load_verifier(name)` returns one of:

- `math`: math-verify parses the ground truth and the response and checks equivalence
  ("1/2" == "0.5", "\\frac{1}{2}" == "0.5", "\\boxed{12}" == "12");
- `exact`: the response's final answer, normalised (case, spaces, `$`, `\\boxed{}`, trailing
  punctuation, thousands separators), equals the normalised ground truth;
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
_ANSWER = re.compile(r"answer\s*(?:is|:|=)\s*(.+)", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?")


def normalise(text: str) -> str:
    """Lower-case, unbox, strip `$`, trailing punctuation, thousands separators and spaces."""
    text = text.strip().lower()
    boxed = _BOXED.findall(text)
    if boxed:
        text = boxed[-1]
    text = text.replace("$", "").replace("\\!", "")
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text)
    text = re.sub(r"\s+", " ", text).strip().rstrip(".!;:").strip()
    return text


def final_answer(text: str) -> str:
    """The answer a response commits to: last `\\boxed{}`, else after 'answer:', else last number."""
    boxed = _BOXED.findall(text)
    if boxed:
        return normalise(boxed[-1])
    matches = _ANSWER.findall(text)
    if matches:
        tail = matches[-1].strip()
        number = _NUMBER.search(tail)
        return normalise(number.group(0) if number else tail.splitlines()[0])
    numbers = _NUMBER.findall(text)
    return normalise(numbers[-1]) if numbers else normalise(text.splitlines()[-1] if text else "")


def exact_match(sample: dict) -> Verdict:
    got, want = final_answer(sample["response"]), normalise(str(sample["answer"]))
    ok = got == want or normalise(sample["response"]) == want
    return {"reward": float(ok), "reasoning": f"final answer {got!r} vs expected {want!r}"}


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
