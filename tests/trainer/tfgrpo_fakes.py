"""Scripted backends and a verifier for the trainer tests (importable as `tfgrpo_fakes`)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from trainer.backends import BackendError, Usage
from trainer.tfgrpo_prompts import (
    ADVANTAGE_ROLE,
    CRITIQUE_ROLE,
    GROUP_UPDATE_ROLE,
    SUMMARY_ROLE,
)
from trainer.verifiers import final_answer


def length_parity(sample: dict) -> dict:
    """A reward that garbage text also earns half of the time: the parity of its length."""
    return {"reward": float(len(sample["response"]) % 2), "reasoning": "length parity"}


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


class _ScriptedBackend:
    """A backend whose `generate` gives each prompt `self.answer(prompt, n)`, counts the calls
    in `usage` as a real backend does, and records every prompt (`prompts`) and each call's
    `response_format` (`response_formats`, one per call, None when not passed)."""

    def __init__(self) -> None:
        self.usage = Usage()
        self.response_formats: list[dict | None] = []
        self.prompts: list[list[dict]] = []  # every prompt, in order

    def generate(self, prompts, n=1, temperature=0.7, top_p=1.0, max_new_tokens=256, seed=0,
                 response_format=None):
        self.response_formats.append(response_format)
        self.prompts += prompts
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


class ReceiptPolicy(FakePolicy):
    """FakePolicy that, like a node-backed backend, leaves a receipt CID per completion in
    `last_receipts` (None for every third rollout: a server that gave none)."""

    def __init__(self, answers: dict[str, str], cid: Callable[[str, int], str]) -> None:
        super().__init__(answers)
        self.cid = cid  # (query text, rollout) -> CID
        self.last_receipts = None

    def generate(self, prompts, n=1, *args, **kwargs):
        out = super().generate(prompts, n, *args, **kwargs)
        self.last_receipts = [[None if j % 3 == 2 else self.cid(p[-1]["content"], j)
                               for j in range(n)] for p in prompts]
        return out


class ScriptedStage(_ScriptedBackend):
    """Stage model: fixed summaries; stage-2 answers looked up by the problem in the prompt.

    A script value of `BackendError` makes that problem's stage-2 request fail.
    """

    def __init__(self, script: dict[str, object]) -> None:
        super().__init__()
        self.script = script

    def answer(self, prompt, n):
        system, user = prompt[0]["content"], prompt[-1]["content"]
        if system.startswith(SUMMARY_ROLE):
            return ["Used no experience; outcome as rewarded."]
        if system.startswith(JUDGE_SYSTEM):
            return [judge(user)]
        if system.startswith(CRITIQUE_ROLE):  # two_step, step A: the critique names the problem
            problem = next(p for p in self.script if p in user)
            return [f"The failures misread it.\nExperiences:\n1. lesson for {problem}"]
        assert system.startswith((ADVANTAGE_ROLE, GROUP_UPDATE_ROLE))
        answer = next(v for problem, v in self.script.items() if problem in user)
        if answer is BackendError:
            raise BackendError("scripted failure")
        return [answer]


JUDGE_SYSTEM = "You grade answers."  # how trainer.verifiers.LLMJudge's prompt opens


def judge(user: str) -> str:
    """A judge's verdict on an LLMJudge prompt: CORRECT iff the final answer is the reference."""
    fields = dict(line.split(": ", 1) for line in user.splitlines() if ": " in line)
    got = final_answer(user.split("Response: ", 1)[1])
    if got == fields["Reference answer"]:
        return f"CORRECT, the response ends with {got}."
    return f"INCORRECT, judged {got!r} against {fields['Reference answer']}."


class EchoStage(_ScriptedBackend):
    """Stage model whose operations depend on the rollouts it is shown (for resume tests)."""

    def answer(self, prompt, n):
        system, user = prompt[0]["content"], prompt[-1]["content"]
        if system.startswith(SUMMARY_ROLE):
            return [f"attempt digest {_digest(user)}"]
        digest = _digest(user)
        ops = [f'{{"op": "ADD", "text": "lesson {digest}"}}']
        if "[G1]." in user and int(digest, 16) % 2:
            ops.append('{"op": "DELETE", "id": "G0"}')
        if "[G2]." in user and int(digest, 16) % 3 == 0:
            ops.append(f'{{"op": "UPDATE", "id": "G2", "text": "revised {digest}"}}')
        return ["[" + ", ".join(ops) + "]"]
