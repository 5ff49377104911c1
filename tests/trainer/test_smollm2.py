"""One real Training-Free GRPO epoch with SmolLM2-135M-Instruct on CPU (slow; no quality check)."""

import json

import pytest

from trainer.data import generate_problems, write_jsonl
from trainer.tfgrpo_config import TFGRPOConfig
from trainer.tfgrpo_trainer import TFGRPOTrainer

pytestmark = pytest.mark.slow


def test_one_epoch_end_to_end(tmp_path):
    write_jsonl(generate_problems(3, seed=2), tmp_path / "train.jsonl")
    config = TFGRPOConfig(train_path=str(tmp_path / "train.jsonl"), epochs=1, batch_size=2,
                          group_size=3, max_new_tokens=64, stage_max_new_tokens=64,
                          output_dir=str(tmp_path / "run"))
    report = json.loads(TFGRPOTrainer(config).train().read_text())
    assert len(report["steps"]) == 2
    assert len(list((tmp_path / "run" / "snapshots").iterdir())) == 2
    assert report["llm_totals"]["rollout"]["calls"] == 3 * 3
    assert (tmp_path / "run" / "library.json").is_file()
