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


class FakePolicy:
    """Per query the rollouts cycle through: correct, wrong, empty, correct, wrong."""

    def __init__(self, answers: dict[str, str]) -> None:
        self.answers = answers
        self.usage = Usage()

    def generate(self, prompts, n=1, temperature=0.7, top_p=1.0, max_new_tokens=256, seed=0):
        out = []
        for prompt in prompts:
            gt = self.answers[prompt[-1]["content"]]
            pattern = [f"Answer: {gt}", "Answer: -1", "", f"so the answer is {gt}.", "Answer: -2"]
            out.append([pattern[j % len(pattern)] for j in range(n)])
        self.usage.calls += len(prompts) * n
        return out


class ScriptedStage:
    """Stage model: fixed summaries; stage-2 answers looked up by the problem in the prompt.

    A script value of `BackendError` makes that problem's stage-2 request fail.
    """

    def __init__(self, script: dict[str, object]) -> None:
        self.script = script
        self.usage = Usage()

    def generate(self, prompts, n=1, temperature=0.7, top_p=1.0, max_new_tokens=256, seed=0):
        out = []
        for prompt in prompts:
            system, user = prompt[0]["content"], prompt[-1]["content"]
            if system == SUMMARY_SYSTEM:
                out.append(["Used no experience; outcome as rewarded."])
                continue
            assert system == ADVANTAGE_SYSTEM
            answer = next(v for problem, v in self.script.items() if problem in user)
            if answer is BackendError:
                raise BackendError("scripted failure")
            out.append([answer])
        self.usage.calls += len(prompts) * n
        return out


class EchoStage:
    """Stage model whose operations depend on the rollouts it is shown (for resume tests)."""

    def __init__(self) -> None:
        self.usage = Usage()

    def generate(self, prompts, n=1, temperature=0.7, top_p=1.0, max_new_tokens=256, seed=0):
        out = []
        for prompt in prompts:
            system, user = prompt[0]["content"], prompt[-1]["content"]
            if system == SUMMARY_SYSTEM:
                out.append([f"attempt digest {_digest(user)}"])
                continue
            digest = _digest(user)
            ops = [f'{{"op": "ADD", "text": "lesson {digest}"}}']
            if "[G1]." in user and int(digest, 16) % 2:
                ops.append('{"op": "DELETE", "id": "G0"}')
            if "[G2]." in user and int(digest, 16) % 3 == 0:
                ops.append(f'{{"op": "UPDATE", "id": "G2", "text": "revised {digest}"}}')
            out.append(["[" + ", ".join(ops) + "]"])
        self.usage.calls += len(prompts) * n
        return out
