"""Stage 2 through a JSON schema, the two-step option, objectives in every prompt, the judge's
reasoning in stage 1, and rollout receipts carried to the operations they taught."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import jsonschema
import pytest
from gym_helpers import kubo_cid
from tfgrpo_fakes import FakePolicy, ReceiptPolicy, ScriptedStage

from trainer.data import generate_problems, write_jsonl
from trainer.tfgrpo_config import ConfigError, TFGRPOConfig
from trainer.tfgrpo_operations import (
    operations_response_format,
    operations_schema,
    parse_operations,
)
from trainer.tfgrpo_prompts import (
    ADVANTAGE_ROLE,
    CRITIQUE_ROLE,
    GROUP_UPDATE_ROLE,
    SUMMARY_ROLE,
    Experience,
)
from trainer.tfgrpo_trainer import TFGRPOTrainer

LIBRARY = [Experience("a", "Check units before adding."), Experience("b", "Read twice.")]
ADD = '{"op": "ADD", "text": "Name each quantity before combining them."}'


def _config(tmp_path: Path, problems: list[dict], **overrides) -> TFGRPOConfig:
    fields = {"train_path": str(write_jsonl(problems, tmp_path / "train.jsonl")),
              "output_dir": str(tmp_path / "run"), "epochs": 1, "batch_size": len(problems),
              "group_size": 5, "verifier": "math"}
    return TFGRPOConfig(**{**fields, **overrides})


def _run(tmp_path, script_answer=None, policy=None, **overrides):
    problems = generate_problems(2, seed=3)
    answers = {p["problem"]: p["answer"] for p in problems}
    stage = ScriptedStage({p["problem"]: script_answer or f'{{"operations": [{ADD}]}}'
                           for p in problems})
    trainer = TFGRPOTrainer(_config(tmp_path, problems, **overrides),
                            policy=policy(answers) if policy else FakePolicy(answers), stage=stage)
    report = json.loads(trainer.train().read_text())
    return trainer, stage, report


# --------------------------------------------------------------------------- the schema


def test_schema_is_strict_and_sized_from_the_config():
    config = TFGRPOConfig(train_path="x.jsonl", max_ops_per_query=2, max_experience_words=5)
    schema = operations_schema(len(LIBRARY), config)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["required"] == ["operations"] and schema["additionalProperties"] is False
    items = schema["properties"]["operations"]
    assert items["maxItems"] == 2
    variants = {v["properties"]["op"]["enum"][0]: v for v in items["items"]["anyOf"]}
    assert sorted(variants) == ["ADD", "DELETE", "NONE", "UPDATE"]
    for v in variants.values():  # OpenAI strict mode: every property required, nothing else
        assert v["required"] == list(v["properties"]) and v["additionalProperties"] is False
    assert variants["UPDATE"]["properties"]["id"]["enum"] == ["G0", "G1"]
    check = jsonschema.Draft202012Validator(schema).is_valid
    lesson = "Check each step twice."
    assert check({"operations": [{"op": "UPDATE", "id": "G1", "text": lesson}, {"op": "NONE"}]})
    # a lesson is a sentence of 4 to 5 words (max_experience_words), not filler
    for filler in ("x", "...", "check each step twice.", "Check one two three four five six."):
        assert not check({"operations": [{"op": "ADD", "text": filler}]}), filler
    assert not check({"operations": [{"op": "DELETE", "id": "G2"}]})  # no such experience
    assert not check({"operations": [{"op": "NONE"}] * 3})  # over max_ops_per_query
    assert not check([{"op": "NONE"}])  # the root is an object
    assert not check({"operations": [{"op": "ADD", "text": lesson, "id": "G0"}]})
    wrapped = operations_response_format(0, config)
    assert wrapped["type"] == "json_schema" and wrapped["json_schema"]["strict"] is True
    empty = {v["properties"]["op"]["enum"][0]
             for v in wrapped["json_schema"]["schema"]["properties"]["operations"]["items"]["anyOf"]}
    assert empty == {"ADD", "NONE"}  # nothing to update or delete in an empty library


@pytest.mark.parametrize("text", [
    '{"operations": [{"op": "DELETE", "id": "G1"}, {"op": "NONE"}]}',
    '[{"op": "DELETE", "id": "G1"}, {"op": "NONE"}]',
])
def test_parser_takes_the_schema_object_and_the_old_bare_array(text):
    counters = Counter()
    config = TFGRPOConfig(train_path="x.jsonl")
    assert parse_operations(text, LIBRARY, config, counters) == [
        {"op": "delete", "target": "b", "text": ""}]
    assert counters == Counter(answer_with_ops=1)


def test_a_none_only_answer_counts_as_without_operations():
    counters = Counter()
    parse_operations('{"operations": [{"op": "NONE"}]}', LIBRARY,
                     TFGRPOConfig(train_path="x.jsonl"), counters)
    assert counters == Counter(answer_without_ops=1)


# --------------------------------------------------------------------------- stage 2 modes


def test_one_step_stage2_passes_the_schema_and_learns(tmp_path):
    trainer, stage, report = _run(tmp_path)
    summaries, advantage = stage.response_formats
    assert summaries is None  # free text: no schema
    assert advantage == operations_response_format(0, trainer.config)
    assert [e.text for e in trainer.library] == ["Name each quantity before combining them."]
    assert report["counters"]["answer_with_ops"] == 2  # the second ADD merged as a duplicate
    assert report["steps"][0]["calls"] == {"rollout": 10, "summary": 8, "advantage": 2}


def test_two_step_stage2_critiques_then_group_updates(tmp_path):
    trainer, stage, report = _run(tmp_path, stage2="two_step")
    assert stage.response_formats == [None, None, operations_response_format(0, trainer.config)]
    critiques = [p for p in stage.prompts if p[0]["content"].startswith(CRITIQUE_ROLE)]
    updates = [p for p in stage.prompts if p[0]["content"].startswith(GROUP_UPDATE_ROLE)]
    assert len(critiques) == len(updates) == 2
    # step B sees the experiences step A wrote (after its 'Experiences:' heading) and the library
    assert all(u[-1]["content"].split("New experiences:\n")[1].startswith("1. lesson for ")
               for u in updates)
    assert all("Library:\n(empty)" in u[-1]["content"] for u in updates)
    assert report["steps"][0]["calls"] == {"rollout": 10, "summary": 8, "advantage": 2,
                                           "group_update": 2}
    assert [e.text for e in trainer.library] == ["Name each quantity before combining them."]


def test_stage2_mode_is_validated(tmp_path):
    with pytest.raises(ConfigError, match="stage2"):
        _config(tmp_path, generate_problems(1, seed=1), stage2="three_step")


# --------------------------------------------------------------------------- objectives


def test_objectives_reach_the_rollout_and_every_stage_prompt(tmp_path):
    agent, learning = "You sort words; end with 'Answer: <word>'.", "Habits for sorting words."
    policy_prompts = []

    class Recording(FakePolicy):
        def answer(self, prompt, n):
            policy_prompts.append(prompt)
            return super().answer(prompt, n)

    for mode in ("one_step", "two_step"):
        _, stage, _ = _run(tmp_path / mode, policy=Recording, agent_objective=agent,
                           learning_objective=learning, stage2=mode)
        roles = {p[0]["content"].split("\n")[0] for p in stage.prompts}
        assert roles == ({SUMMARY_ROLE, ADVANTAGE_ROLE} if mode == "one_step" else
                         {SUMMARY_ROLE, CRITIQUE_ROLE, GROUP_UPDATE_ROLE})
        assert all(agent in p[0]["content"] and learning in p[0]["content"]
                   for p in stage.prompts)
    assert all(p[0]["content"] == agent for p in policy_prompts)  # empty library: nothing else


def test_the_words_config_carries_its_objectives():
    config = TFGRPOConfig.from_yaml("trainer/configs/tfgrpo_words.yaml")
    assert config.verifier == "exact" and "word" in config.agent_objective.lower()
    assert config.learning_objective != TFGRPOConfig.learning_objective
    from trainer.data import load_problems

    problems = load_problems(config.train_path)
    assert problems and all(p["answer"].isalpha() for p in problems)


# --------------------------------------------------------------------------- judge critique


def test_the_judges_reasoning_reaches_the_summary_prompt(tmp_path):
    _, stage, _ = _run(tmp_path, verifier="llm-judge", domain="math")
    summaries = [p[-1]["content"] for p in stage.prompts
                 if p[0]["content"].startswith(SUMMARY_ROLE)]
    assert len(summaries) == 8  # 4 non-empty rollouts per query
    wrong = [s for s in summaries if "Reward: 0" in s]
    right = [s for s in summaries if "Reward: 1" in s]
    assert len(wrong) == len(right) == 4
    assert all("Verifier's reasoning: INCORRECT, judged '-" in s for s in wrong)
    assert all("Verifier's reasoning: CORRECT, the response ends with" in s for s in right)


# --------------------------------------------------------------------------- receipts


def _cid(query: str, j: int) -> str:
    return kubo_cid(f"receipt {query} {j}".encode())


def test_rollout_receipts_reach_the_step_record_and_the_operations(tmp_path):
    _, _, report = _run(tmp_path, policy=lambda a: ReceiptPolicy(a, _cid))
    row = report["steps"][0]
    problems = [g["problem"] for g in map(json.loads, (tmp_path / "train.jsonl").open())]
    assert row["rollout_receipts"] == [
        [None if j % 3 == 2 else _cid(q, j) for j in range(5)] for q in problems]
    (add,) = json.loads((tmp_path / "run" / "library.json").read_text())["operations"]
    # the surviving ADD came from the first query's group: its four receipted rollouts
    assert add["receipts"] == [_cid(problems[0], j) for j in (0, 1, 3, 4)]


def test_without_receipts_nothing_is_recorded(tmp_path):
    _, _, report = _run(tmp_path)
    assert "rollout_receipts" not in report["steps"][0]
    (add,) = json.loads((tmp_path / "run" / "library.json").read_text())["operations"]
    assert "receipts" not in add
