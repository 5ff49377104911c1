"""GRPO/GSPO rewards: the Training-Free GRPO verifiers (`trainer/verifiers.py`) as TRL reward
functions, so that both routes score a completion the same way.

TRL calls a reward function as `f(prompts=..., completions=..., completion_ids=..., **columns)`
and wants one float per completion; the dataset's `problem` and `answer` columns arrive as
keyword lists. A verifier takes `{"problem", "answer", "response"}` and returns
`{"reward", "reasoning"}`; `VerifierReward` adapts one to the other.
"""

from __future__ import annotations

from trainer.tfgrpo_config import ConfigError
from trainer.verifiers import load_verifier


def completion_text(completion) -> str:
    """The text of one completion: a string, or (conversational) the last message's content."""
    if isinstance(completion, str):
        return completion
    return completion[-1]["content"] if completion else ""


class VerifierReward:
    """A picklable TRL reward function over one verifier; TRL logs it as `reward_<name>`."""

    def __init__(self, name: str) -> None:
        try:
            self.verify = load_verifier(name)
        except (ValueError, ImportError) as exc:
            raise ConfigError(f"reward verifier {name!r}: {exc}") from None
        self.name = name
        self.__name__ = "reward_" + name.replace(":", "_").replace(".", "_")

    def __call__(self, prompts, completions, problem, answer, **_) -> list[float]:
        return [float(self.verify({"problem": p, "answer": str(a),
                                   "response": completion_text(c)})["reward"])
                for p, a, c in zip(problem, answer, completions, strict=True)]


def reward_functions(names: list[str]) -> list[VerifierReward]:
    return [VerifierReward(name) for name in names]
