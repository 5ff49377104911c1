"""The Training-Free GRPO loop: robustness counters, consolidation, exact resumption."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from tfgrpo_fakes import EchoStage, FakePolicy, ScriptedStage

from trainer.backends import BackendError
from trainer.data import generate_problems, write_jsonl
from trainer.tfgrpo_config import ModelConfig, TFGRPOConfig
from trainer.tfgrpo_operations import (
    apply_operations,
    consolidate,
    extract_json,
    parse_operations,
)
from trainer.tfgrpo_prompts import Experience
from trainer.tfgrpo_trainer import TFGRPOTrainer


def _config(tmp_path: Path, problems: list[dict], model_dir: Path | str = "", **overrides):
    train = write_jsonl(problems, tmp_path / "train.jsonl")
    fields = {"train_path": str(train), "output_dir": str(tmp_path / "run"), "epochs": 1,
              "batch_size": len(problems), "group_size": 5, "max_new_tokens": 16,
              "stage_max_new_tokens": 24, "verifier": "math",
              "policy": ModelConfig(model=str(model_dir))}
    fields.update(overrides)
    return TFGRPOConfig(**fields)


# --------------------------------------------------------------------------- robustness


def test_each_robustness_path_is_counted_exactly(tmp_path):
    problems = generate_problems(5, seed=3)
    p = [x["problem"] for x in problems]
    overlong = " ".join(["word"] * 40)
    script = {
        p[0]: '[{"op": "ADD", "text": "Write the final answer on its own line."}, '
              '{"op": "ADD", "text": "write the final answer on its own line!"}, '
              '{"op": "UPDATE", "id": "G7", "text": "no such experience"}]',
        p[1]: f'Sure:\n```json\n[{{"op": "ADD", "text": "{overlong}"}}]\n```',
        p[2]: '[{"op": "ADD", "text": "Multiply boxes by items per box before adding."}, '
              '{"op": "ADD", "te',
        p[3]: "I would not change anything here.",
        p[4]: BackendError,
    }
    config = _config(tmp_path, problems, max_ops_per_query=3)
    trainer = TFGRPOTrainer(config, policy=FakePolicy({x["problem"]: x["answer"] for x in problems}),
                            stage=ScriptedStage(script))
    report = json.loads(trainer.train().read_text())
    counters = report["counters"]
    assert counters["unknown_id"] == 1
    assert counters["overlong_experience"] == 1
    assert counters["truncated_json"] == 1
    assert counters["malformed_json"] == 1
    assert counters["backend_error"] == 1
    assert counters["empty_answer"] == 5  # one empty rollout per query
    assert counters["merged_duplicate"] == 1
    assert counters["skipped_uniform_group"] == 0
    # stage-2 answers: p0 and p2 gave operations; p1 (overlong only) and p3 (no JSON) none;
    # p4's request failed, so it gave no answer to count
    assert (counters["answer_with_ops"], counters["answer_without_ops"]) == (2, 2)
    assert [e.text for e in trainer.library] == [
        "Write the final answer on its own line.",
        "Multiply boxes by items per box before adding."]
    assert [e.id for e in trainer.library] == ["x0.0", "x0.1"]
    step = report["steps"][0]
    # 5 queries: 25 rollouts, 20 summaries (empty answers are not summarised), 5 + 4 stage-2
    # requests (the failed batch is retried prompt by prompt; the failing one counts no call).
    assert step["calls"] == {"rollout": 25, "summary": 20, "advantage": 4}
    library = json.loads((tmp_path / "run" / "library.json").read_text())
    assert [e["prompt_id"] for e in library["experiences"]] == ["G0", "G1"]
    assert library["operations"][0] == {"op": "add", "id": "x0.0", "target": None,
                                        "text": "Write the final answer on its own line.",
                                        "step": 0, "epoch": 0}


def test_uniform_groups_are_skipped_without_stage_calls(tmp_path):
    problems = generate_problems(2, seed=4)

    class AlwaysRight(FakePolicy):
        def generate(self, prompts, n=1, *args, **kwargs):
            self.usage.calls += len(prompts) * n
            return [[f"Answer: {self.answers[q[-1]['content']]}"] * n for q in prompts]

    config = _config(tmp_path, problems)
    trainer = TFGRPOTrainer(config, policy=AlwaysRight({x["problem"]: x["answer"] for x in problems}),
                            stage=ScriptedStage({}))
    report = json.loads(trainer.train().read_text())
    assert report["counters"]["skipped_uniform_group"] == 2
    assert report["steps"][0]["calls"] == {"rollout": 10}


def test_full_loop_on_a_tiny_random_model(tmp_path, tiny_backend):
    """Garbage from a random model everywhere: the run finishes and counts what went wrong."""
    problems = generate_problems(4, seed=5)
    config = _config(tmp_path, problems, batch_size=2, group_size=3, epochs=2,
                     verifier="python:tfgrpo_fakes:length_parity", domain="math")
    trainer = TFGRPOTrainer(config, policy=tiny_backend, stage=tiny_backend)
    report_path = trainer.train()
    report = json.loads(report_path.read_text())
    counters = report["counters"]
    # every stage-2 answer is counted once, as giving operations or not
    assert counters["answer_with_ops"] + counters["answer_without_ops"] == sum(
        row["calls"].get("advantage", 0) for row in report["steps"]) > 0
    assert len(report["steps"]) == 4
    assert sorted(p.name for p in (tmp_path / "run" / "snapshots").iterdir()) == [
        f"step-{i:05d}.json" for i in range(4)]
    kept = [row for row in report["steps"] if row["groups_kept"]]
    assert kept, "length parity should give some groups mixed rewards"
    assert all(row["calls"]["summary"] > 0 and row["tokens"]["summary"]["completion_tokens"] > 0
               for row in kept)
    assert report["llm_totals"]["rollout"]["calls"] == 4 * 2 * 3


@pytest.mark.slow
def test_a_smollm2_step_with_constrained_decoding_applies_operations(tmp_path):
    """SmolLM2-135M as the stage model never wrote the JSON operations unconstrained (0 of 8);
    through the operations schema its stage-2 answers parse, and the step applies at least
    one operation. The policy is scripted so that each group has mixed rewards."""
    from trainer.backends import TransformersBackend

    problems = generate_problems(2, seed=11)
    config = _config(tmp_path, problems, group_size=4, stage_max_new_tokens=160, seed=0,
                     stage_temperature=0.3)
    stage = TransformersBackend(batch_size=8, device="cpu")
    trainer = TFGRPOTrainer(config, policy=FakePolicy({p["problem"]: p["answer"]
                                                       for p in problems}), stage=stage)
    report = json.loads(trainer.train().read_text())
    counters = report["counters"]
    assert counters["answer_with_ops"] >= 1, counters
    assert counters.get("malformed_json", 0) == 0, counters
    assert report["operations_applied"] >= 1 and report["library_size"] >= 1, report
    print("\nlearned:", json.loads((tmp_path / "run" / "library.json").read_text()))


# --------------------------------------------------------------------------- resumption


class Interrupt(Exception):
    pass


def test_resume_after_interruption_gives_the_same_library(tmp_path, tiny_backend):
    problems = generate_problems(6, seed=6)

    def config(name: str) -> TFGRPOConfig:
        return _config(tmp_path, problems, batch_size=2, group_size=3, epochs=2, seed=11,
                       verifier="python:tfgrpo_fakes:length_parity", domain="math",
                       output_dir=str(tmp_path / name))

    whole = TFGRPOTrainer(config("whole"), policy=tiny_backend, stage=EchoStage())
    whole.train()

    def stop_after_step_2(row: dict) -> None:
        if row["global_step"] == 2:
            raise Interrupt

    with pytest.raises(Interrupt):
        TFGRPOTrainer(config("cut"), policy=tiny_backend, stage=EchoStage()).train(
            on_step_end=stop_after_step_2)
    assert len(list((tmp_path / "cut" / "snapshots").iterdir())) == 3
    resumed = TFGRPOTrainer(config("cut"), policy=tiny_backend, stage=EchoStage())
    resumed.train(resume=True)

    assert resumed.library == whole.library
    assert resumed.history == whole.history
    assert len(whole.history) > 3 and {o["op"] for o in whole.history} >= {"add", "delete"}
    for i in range(6):
        a = json.loads((tmp_path / "whole" / "snapshots" / f"step-{i:05d}.json").read_text())
        b = json.loads((tmp_path / "cut" / "snapshots" / f"step-{i:05d}.json").read_text())
        assert a["library"] == b["library"] and a["applied"] == b["applied"]
    # the kept completions too: each step's once, as the uninterrupted run wrote them
    kept = (tmp_path / "cut" / "completions.jsonl").read_text()
    assert kept == (tmp_path / "whole" / "completions.jsonl").read_text()
    assert len(kept.splitlines()) == 6 * 2 * 3
    TFGRPOTrainer(config("cut"), policy=tiny_backend, stage=EchoStage()).train()  # afresh
    assert (tmp_path / "cut" / "completions.jsonl").read_text() == kept


KILL_AFTER_STEP_2 = """
import os, signal, sys
sys.path.insert(0, sys.argv[3])
import torch
torch.set_num_threads(1)
from tfgrpo_fakes import EchoStage
from trainer.backends import TransformersBackend
from trainer.tfgrpo_config import TFGRPOConfig
from trainer.tfgrpo_trainer import TFGRPOTrainer

def die(row):
    if row["global_step"] == 2:  # its snapshot is on disk; step 3 never starts
        os.kill(os.getpid(), signal.SIGKILL)

config = TFGRPOConfig.from_yaml(sys.argv[1])
policy = TransformersBackend(sys.argv[2], batch_size=16, device="cpu")
TFGRPOTrainer(config, policy=policy, stage=EchoStage()).train(on_step_end=die)
"""


def test_resume_after_a_kill_gives_the_same_library(tmp_path, tiny_backend, tiny_model_dir):
    """A process killed outright (SIGKILL, no cleanup) between steps resumes exactly."""
    import subprocess
    import sys

    import yaml

    problems = generate_problems(6, seed=6)

    def config(name: str) -> TFGRPOConfig:
        return _config(tmp_path, problems, batch_size=2, group_size=3, epochs=2, seed=11,
                       verifier="python:tfgrpo_fakes:length_parity", domain="math",
                       output_dir=str(tmp_path / name), model_dir=tiny_model_dir)

    whole = TFGRPOTrainer(config("whole"), policy=tiny_backend, stage=EchoStage())
    whole.train()
    cut = config("cut")
    (tmp_path / "cut.yaml").write_text(yaml.safe_dump(cut.to_dict()))
    proc = subprocess.run([sys.executable, "-c", KILL_AFTER_STEP_2, str(tmp_path / "cut.yaml"),
                           str(tiny_model_dir), str(Path(__file__).parent)],
                          capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert sorted(p.name for p in (tmp_path / "cut" / "snapshots").iterdir()) == [
        "step-00000.json", "step-00001.json", "step-00002.json"]
    resumed = TFGRPOTrainer(cut, policy=tiny_backend, stage=EchoStage())
    resumed.train(resume=True)
    assert resumed.library == whole.library
    assert resumed.history == whole.history


def test_resume_refuses_a_different_config(tmp_path):
    from trainer.tfgrpo_trainer import ResumeError

    problems = generate_problems(2, seed=7)
    answers = {x["problem"]: x["answer"] for x in problems}
    TFGRPOTrainer(_config(tmp_path, problems), policy=FakePolicy(answers),
                  stage=ScriptedStage({x["problem"]: "[]" for x in problems})).train()
    # a snapshot written before stage2 and the objectives existed ran with their defaults
    snapshot_path = tmp_path / "run" / "snapshots" / "step-00000.json"
    snapshot = json.loads(snapshot_path.read_text())
    for name in ("stage2", "agent_objective", "learning_objective"):
        del snapshot["config"][name]
    snapshot_path.write_text(json.dumps(snapshot))
    TFGRPOTrainer(_config(tmp_path, problems), policy=FakePolicy(answers),
                  stage=ScriptedStage({})).train(resume=True)
    other = _config(tmp_path, problems, seed=99)
    with pytest.raises(ResumeError, match="seed"):
        TFGRPOTrainer(other, policy=FakePolicy(answers), stage=ScriptedStage({})).train(resume=True)


# --------------------------------------------------------------------------- units


LIBRARY = [Experience("a", "Check units before adding."), Experience("b", "Read the question twice."),
           Experience("c", "Write the final answer last.")]


def test_consolidation_merges_near_duplicates():
    counters = Counter()
    proposals = [{"op": "add", "target": None, "text": "Check the units before adding!"},
                 {"op": "add", "target": None, "text": "Estimate the result first."},
                 {"op": "add", "target": None, "text": "estimate the result first"}]
    ops = consolidate(LIBRARY, proposals, 0.7, counters)
    assert [o["text"] for o in ops] == ["Estimate the result first."]
    assert counters["merged_duplicate"] == 2


def test_consolidation_delete_beats_update_and_first_update_wins():
    counters = Counter()
    proposals = [{"op": "update", "target": "a", "text": "Check units first."},
                 {"op": "delete", "target": "a", "text": ""},
                 {"op": "update", "target": "b", "text": "Read it twice, slowly."},
                 {"op": "update", "target": "b", "text": "Read three times."},
                 {"op": "delete", "target": "a", "text": ""}]
    ops = consolidate(LIBRARY, proposals, 0.7, counters)
    assert [(o["op"], o["target"]) for o in ops] == [("delete", "a"), ("update", "b")]
    assert counters["conflict_resolved"] == 2


def test_apply_renumbers_and_keeps_stable_ids():
    ops = [{"op": "delete", "target": "a", "text": ""},
           {"op": "update", "target": "c", "text": "Box the final answer."},
           {"op": "add", "target": None, "text": "Estimate first."}]
    library, records = apply_operations(LIBRARY, ops, epoch=1, global_step=7)
    assert [(e.id, e.text) for e in library] == [
        ("b", "Read the question twice."), ("c", "Box the final answer."), ("x7.2", "Estimate first.")]
    assert records[0] == {"op": "delete", "id": "a", "target": "a", "text": "", "step": 7, "epoch": 1}
    assert records[2]["id"] == "x7.2" and records[2]["target"] is None
    # After renumbering, G0 is "b": an operation on G0 now names b's stable id.
    config = TFGRPOConfig(train_path="x.jsonl")
    parsed = parse_operations('[{"op": "DELETE", "id": "G0"}]', library, config, Counter())
    assert parsed == [{"op": "delete", "target": "b", "text": ""}]


@pytest.mark.parametrize(("text", "value", "status"), [
    ('[{"op": "NONE"}]', [{"op": "NONE"}], "ok"),
    ('Here: ```json\n{"op": "ADD", "text": "x"}\n``` done', {"op": "ADD", "text": "x"}, "ok"),
    ('[{"op": "ADD", "text": "x"}, {"op": "DEL', [{"op": "ADD", "text": "x"}], "truncated"),
    ('[{"op": "ADD", "te', None, "malformed"),
    ("no json at all", None, "malformed"),
    ("", None, "malformed"),
])
def test_extract_json(text, value, status):
    assert extract_json(text) == (value, status)


def test_parse_operations_counts_invalid_ops():
    counters = Counter()
    config = TFGRPOConfig(train_path="x.jsonl", max_ops_per_query=1)
    text = ('[1, {"op": "MERGE"}, {"op": "ADD"}, {"op": "delete", "id": "[G2]"}, '
            '{"op": "ADD", "text": "over the limit"}]')
    assert parse_operations(text, LIBRARY, config, counters) == [
        {"op": "delete", "target": "c", "text": ""}]
    assert counters == Counter(invalid_op=3, ops_over_limit=1, answer_with_ops=1)
