"""Config validation and YAML loading; the generated dataset and local loaders."""

import json
from pathlib import Path

import pytest

from trainer.data import generate_problems, load_problems, write_jsonl
from trainer.tfgrpo_config import ConfigError, ModelConfig, TFGRPOConfig

REPO = Path(__file__).resolve().parents[2]


def test_shipped_demo_config_loads():
    config = TFGRPOConfig.from_yaml(REPO / "trainer/configs/tfgrpo_smollm2.yaml", output_dir="x")
    assert config.output_dir == "x" and config.epochs == 1
    assert isinstance(config.policy, ModelConfig) and config.stage is None


@pytest.mark.parametrize("bad", [
    {"group_size": 1}, {"top_p": 0}, {"epochs": 0}, {"verifier": "regex"},
    {"verifier": "python:nocolon"}, {"merge_jaccard_threshold": 0}, {"skip_std_threshold": -1},
    {"policy": {"backend": "vllm"}}, {"policy": {"backend": "openai", "model": "m"}},
])
def test_invalid_values_are_rejected(bad):
    with pytest.raises(ConfigError):
        TFGRPOConfig(**bad)


def test_yaml_with_nested_models_and_unknown_fields(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("group_size: 3\nverifier: python:m:f\ndomain: strings\nstage:\n  backend: openai\n"
                    "  base_url: http://127.0.0.1:9/v1\n  model: judge\n")
    config = TFGRPOConfig.from_yaml(path)
    assert config.group_size == 3 and config.stage.model == "judge"
    path.write_text("group_sise: 3\n")
    with pytest.raises(ConfigError, match="group_sise"):
        TFGRPOConfig.from_yaml(path)


def test_every_field_has_help():
    from dataclasses import fields

    for cls in (TFGRPOConfig, ModelConfig):
        assert all(f.metadata.get("help") for f in fields(cls))


def test_generation_is_deterministic_and_splits_are_disjoint():
    assert generate_problems(30, seed=0) == generate_problems(30, seed=0)
    train = load_problems(REPO / "trainer/data/arith_train.jsonl")
    heldout = load_problems(REPO / "trainer/data/arith_heldout.jsonl")
    assert len(train) == 100 and len(heldout) == 50
    assert train == generate_problems(100, seed=0)  # the shipped files are reproducible
    assert not {p["problem"] for p in train} & {p["problem"] for p in heldout}
    assert all(int(p["answer"]) >= 0 for p in train + heldout)


def test_loaders_for_local_files(tmp_path):
    rows = [{"problem": "1+1?", "answer": 2}, {"problem": "2+2?", "answer": "4"}]
    (tmp_path / "d.json").write_text(json.dumps(rows))
    csv = tmp_path / "d.csv"
    csv.write_text("problem,answer\n1+1?,2\n2+2?,4\n")
    expected = [{"problem": "1+1?", "answer": "2"}, {"problem": "2+2?", "answer": "4"}]
    assert load_problems(write_jsonl(rows, tmp_path / "d.jsonl")) == expected
    assert load_problems(csv) == expected
    assert load_problems(tmp_path / "d.jsonl", limit=1) == expected[:1]
    (tmp_path / "bad.jsonl").write_text('{"question": "x"}\n')
    with pytest.raises(ValueError, match="problem"):
        load_problems(tmp_path / "bad.jsonl")
