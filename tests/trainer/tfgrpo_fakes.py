"""Scripted backends and a verifier for the trainer tests (importable as `tfgrpo_fakes`)."""

from __future__ import annotations

import hashlib

from trainer.backends import BackendError, Usage
from trainer.tfgrpo_prompts import ADVANTAGE_SYSTEM, SUMMARY_SYSTEM


def length_parity(sample: dict) -> dict:
    """A reward that garbage text also earns half of the time: the parity of its length."""
    return {"reward": float(len(sample["response"]) % 2), "reasoning": "length parity"}


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


class _ScriptedBackend:
    """A backend whose `generate` gives each prompt `self.answer(prompt, n)` and counts the
    calls in `usage`, as a real backend does."""

    def __init__(self) -> None:
        self.usage = Usage()

    def generate(self, prompts, n=1, temperature=0.7, top_p=1.0, max_new_tokens=256, seed=0):
        out = [self.answer(prompt, n) for prompt in prompts]
        self.usage.calls += len(prompts) * n
        return out

    def answer(self, prompt: list[dict], n: int) -> list[str]:
        raise NotImplementedError


class FakePolicy(_ScriptedBackend):
    """Per query the rollouts cycle through: correct, wrong, empty, correct, wrong."""

    def __init__(self, answers: dict[str, str]) -> None:
        super().__init__()
        self.answers = answers

    def answer(self, prompt, n):
        gt = self.answers[prompt[-1]["content"]]
        pattern = [f"Answer: {gt}", "Answer: -1", "", f"so the answer is {gt}.", "Answer: -2"]
        return [pattern[j % len(pattern)] for j in range(n)]


class ScriptedStage(_ScriptedBackend):
    """Stage model: fixed summaries; stage-2 answers looked up by the problem in the prompt.

    A script value of `BackendError` makes that problem's stage-2 request fail.
    """

    def __init__(self, script: dict[str, object]) -> None:
        super().__init__()
        self.script = script

    def answer(self, prompt, n):
        system, user = prompt[0]["content"], prompt[-1]["content"]
        if system == SUMMARY_SYSTEM:
            return ["Used no experience; outcome as rewarded."]
        assert system == ADVANTAGE_SYSTEM
        answer = next(v for problem, v in self.script.items() if problem in user)
        if answer is BackendError:
            raise BackendError("scripted failure")
        return [answer]


class EchoStage(_ScriptedBackend):
    """Stage model whose operations depend on the rollouts it is shown (for resume tests)."""

    def answer(self, prompt, n):
        system, user = prompt[0]["content"], prompt[-1]["content"]
        if system == SUMMARY_SYSTEM:
            return [f"attempt digest {_digest(user)}"]
        digest = _digest(user)
        ops = [f'{{"op": "ADD", "text": "lesson {digest}"}}']
        if "[G1]." in user and int(digest, 16) % 2:
            ops.append('{"op": "DELETE", "id": "G0"}')
        if "[G2]." in user and int(digest, 16) % 3 == 0:
            ops.append(f'{{"op": "UPDATE", "id": "G2", "text": "revised {digest}"}}')
        return ["[" + ", ".join(ops) + "]"]
