"""Training-Free GRPO's prompts: the library as the policy sees it, and the stage-1/2 requests.

The library is shown as `[G0]. text` lines (`format_library`); `rollout_messages` puts it in the
policy's system prompt, `summary_messages` asks the stage model to summarise one rollout (stage
1), `advantage_messages` asks it for JSON operations on the library from a group's summaries
(stage 2). The algorithm is described in `trainer.tfgrpo_trainer`.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainer.tfgrpo_config import TFGRPOConfig

ROLLOUT_SYSTEM = ("You are a careful math solver. Solve the problem step by step, then finish "
                  "with a last line of the form 'Answer: <number>'.")
LIBRARY_INTRO = "Experiences from earlier practice; apply those that fit this problem:"
SUMMARY_SYSTEM = (
    "You review one attempt at a math problem. In at most 80 words say: which of the listed "
    "experiences (by their [G] number) the attempt used, the key steps, where it went wrong if it "
    "did, and its outcome.")
ADVANTAGE_SYSTEM = ("You improve a library of short, general experiences for solving math "
                    "word problems. You answer with JSON only.")
ADVANTAGE_TASK = (
    "Compare the successful and the failed attempts above and find what made the difference. "
    "Answer with ONLY a JSON array of at most {max_ops} operations on the library, each one of\n"
    '  {{"op": "ADD", "text": "..."}}\n'
    '  {{"op": "UPDATE", "id": "G0", "text": "..."}}\n'
    '  {{"op": "DELETE", "id": "G1"}}\n'
    '  {{"op": "NONE"}}\n'
    "Every text is one general, reusable lesson of at most {max_words} words that does not "
    "mention this problem's numbers. Prefer UPDATE to ADD when an experience is close. Example:\n"
    '[{{"op": "ADD", "text": "Decide whether each step adds, subtracts or multiplies before '
    'computing."}}]')


@dataclass
class Experience:
    id: str  # stable id, given when added; survives renumbering
    text: str


@dataclass
class Group:
    query: int  # position of the query in the step's batch
    problem: dict
    outputs: list[str]
    rewards: list[float]
    reference: str | None  # ground truth, or the majority answer in self-discrimination


# --------------------------------------------------------------------------- prompts


def format_library(library: list[Experience]) -> str:
    return "\n".join(f"[G{i}]. {e.text}" for i, e in enumerate(library)) or "(empty)"


def rollout_messages(problem: str, library: list[Experience]) -> list[dict]:
    system = ROLLOUT_SYSTEM
    if library:
        system += f"\n\n{LIBRARY_INTRO}\n{format_library(library)}"
    return [{"role": "system", "content": system}, {"role": "user", "content": problem}]


def summary_messages(problem: str, response: str, reward: float, reference: str | None,
                     library: list[Experience]) -> list[dict]:
    answer = f"Correct answer: {reference}" if reference is not None else "Correct answer: unknown"
    user = (f"Experiences:\n{format_library(library)}\n\nProblem: {problem}\n{answer}\n"
            f"Reward: {reward:g}\n\nAttempt:\n{response}")
    return [{"role": "system", "content": SUMMARY_SYSTEM}, {"role": "user", "content": user}]


def advantage_messages(group: Group, summaries: dict[int, str], library: list[Experience],
                       config: TFGRPOConfig) -> list[dict]:
    attempts = "\n\n".join(
        f"Attempt {j + 1} ({'success' if group.rewards[j] > 0.5 else 'failure'}, "
        f"reward {group.rewards[j]:g}): {text}" for j, text in summaries.items())
    answer = group.reference if config.use_ground_truth else "unknown (rewards: majority vote)"
    task = ADVANTAGE_TASK.format(max_ops=config.max_ops_per_query,
                                 max_words=config.max_experience_words)
    user = (f"Library:\n{format_library(library)}\n\nProblem: {group.problem['problem']}\n"
            f"Correct answer: {answer}\n\n{attempts}\n\n{task}")
    return [{"role": "system", "content": ADVANTAGE_SYSTEM}, {"role": "user", "content": user}]
