"""Training-Free GRPO's prompts: the library as the policy sees it, and the stage requests.

The library is shown as `[G0]. text` lines (`format_library`); `rollout_messages` puts it in the
policy's system prompt after the config's `agent_objective`. Every stage request opens its
system prompt with a role line and then both objectives (`agent_objective`,
`learning_objective`), so a new domain needs only a config, as in youtu-agent's practice:

- `summary_messages`, stage 1: summarise one rollout, given the verifier's reasoning for it;
- `advantage_messages`, stage 2 in one step: a group's summaries to JSON operations;
- `critique_messages` and `group_update_messages`, stage 2 in two steps: a group's summaries to
  free-text experiences, then those experiences and the library to JSON operations.

The JSON answers are constrained by `trainer.tfgrpo_operations.operations_response_format`.
The algorithm is described in `trainer.tfgrpo_trainer`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from trainer.tfgrpo_config import MATH_AGENT_OBJECTIVE, TFGRPOConfig

LIBRARY_INTRO = "Experiences from earlier practice; apply those that fit this problem:"
SUMMARY_ROLE = "You review one attempt of an agent at a task."
ADVANTAGE_ROLE = "You improve a library of short, general experiences for an agent."
CRITIQUE_ROLE = "You compare several attempts of an agent at one task."
GROUP_UPDATE_ROLE = "You maintain a library of short, general experiences for an agent."
SUMMARY_TASK = (
    "In at most 80 words say: which of the listed experiences (by their [G] number) the attempt "
    "used, the key steps, where it went wrong if it did, and its outcome.")
OPERATIONS_FORMAT = (
    'Answer with ONLY a JSON object {{"operations": [...]}} holding at most {max_ops} '
    "operations, each one of\n"
    '  {{"op": "ADD", "text": "..."}}\n'
    '  {{"op": "UPDATE", "id": "G0", "text": "..."}}\n'
    '  {{"op": "DELETE", "id": "G1"}}\n'
    '  {{"op": "NONE"}}\n'
    "Every text is one general, reusable lesson of at most {max_words} words that does not "
    "mention this task's specifics. Prefer UPDATE to ADD when an experience is close, NONE when "
    "the library already says it.")
ADVANTAGE_TASK = ("Compare the successful and the failed attempts above and find what made the "
                  "difference. " + OPERATIONS_FORMAT)
CRITIQUE_TASK = (
    "Compare the successful and the failed attempts above: what did the successes do that the "
    "failures did not, and why did the failures fail? Then write at most {max_ops} general, "
    "reusable experiences (each at most {max_words} words, none about this task's specifics) "
    "under a last heading 'Experiences:', one per numbered line.")
GROUP_UPDATE_TASK = (
    "Fold the new experiences into the library: ADD one that is new, UPDATE an experience it "
    "refines, DELETE one it shows wrong, NONE when the library already covers it. "
    + OPERATIONS_FORMAT)


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
    critiques: list[str] = field(default_factory=list)  # the verifier's reasoning per rollout
    receipts: list[str | None] = field(default_factory=list)  # receipt CID per rollout, if any


# --------------------------------------------------------------------------- prompts


def format_library(library: list[Experience]) -> str:
    return "\n".join(f"[G{i}]. {e.text}" for i, e in enumerate(library)) or "(empty)"


def _system(role: str, config: TFGRPOConfig) -> str:
    return (f"{role}\n\nThe agent's objective:\n{config.agent_objective.strip()}\n\n"
            f"The learning objective:\n{config.learning_objective.strip()}")


def rollout_messages(problem: str, library: list[Experience],
                     agent_objective: str = MATH_AGENT_OBJECTIVE) -> list[dict]:
    system = agent_objective.strip()
    if library:
        system += f"\n\n{LIBRARY_INTRO}\n{format_library(library)}"
    return [{"role": "system", "content": system}, {"role": "user", "content": problem}]


def summary_messages(problem: str, response: str, reward: float, reference: str | None,
                     library: list[Experience], config: TFGRPOConfig,
                     critique: str | None = None) -> list[dict]:
    answer = f"Correct answer: {reference}" if reference is not None else "Correct answer: unknown"
    note = f"\nVerifier's reasoning: {critique.strip()}" if critique and critique.strip() else ""
    user = (f"Experiences:\n{format_library(library)}\n\nProblem: {problem}\n{answer}\n"
            f"Reward: {reward:g}{note}\n\nAttempt:\n{response}\n\n{SUMMARY_TASK}")
    return [{"role": "system", "content": _system(SUMMARY_ROLE, config)},
            {"role": "user", "content": user}]


def _group_text(group: Group, summaries: dict[int, str], config: TFGRPOConfig) -> str:
    attempts = "\n\n".join(
        f"Attempt {j + 1} ({'success' if group.rewards[j] > 0.5 else 'failure'}, "
        f"reward {group.rewards[j]:g}): {text}" for j, text in summaries.items())
    answer = group.reference if config.use_ground_truth else "unknown (rewards: majority vote)"
    return f"Problem: {group.problem['problem']}\nCorrect answer: {answer}\n\n{attempts}"


def _stage_messages(role: str, context: str, task: str, config: TFGRPOConfig) -> list[dict]:
    """A stage call: the role's system prompt, then ``context`` and the task (its limits filled
    from the config)."""
    task = task.format(max_ops=config.max_ops_per_query, max_words=config.max_experience_words)
    return [{"role": "system", "content": _system(role, config)},
            {"role": "user", "content": f"{context}\n\n{task}"}]


def advantage_messages(group: Group, summaries: dict[int, str], library: list[Experience],
                       config: TFGRPOConfig) -> list[dict]:
    context = f"Library:\n{format_library(library)}\n\n{_group_text(group, summaries, config)}"
    return _stage_messages(ADVANTAGE_ROLE, context, ADVANTAGE_TASK, config)


def critique_messages(group: Group, summaries: dict[int, str],
                      config: TFGRPOConfig) -> list[dict]:
    return _stage_messages(CRITIQUE_ROLE, _group_text(group, summaries, config), CRITIQUE_TASK,
                           config)


def critique_experiences(critique: str) -> str:
    """The experiences a critique proposes: the text after its last 'Experiences' heading, or
    the whole critique when it has none (a weak model may skip the heading)."""
    parts = re.split(r"^\W*experiences\W*$|^\W*experiences:", critique,
                     flags=re.IGNORECASE | re.MULTILINE)
    return (parts[-1] if len(parts) > 1 and parts[-1].strip() else critique).strip()


def group_update_messages(new_experiences: str, library: list[Experience],
                          config: TFGRPOConfig) -> list[dict]:
    context = f"Library:\n{format_library(library)}\n\nNew experiences:\n{new_experiences}"
    return _stage_messages(GROUP_UPDATE_ROLE, context, GROUP_UPDATE_TASK, config)
