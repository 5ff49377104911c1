"""`gym train sft` through the real `gym` command, on the tiny random model."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from peft import PeftConfig

REPO = Path(__file__).resolve().parents[2]


def test_gym_train_sft_writes_adapter_and_manifest(gym_env, tmp_path):
    config = tmp_path / "sft.yaml"
    config.write_text(
        "method: sft\nmodel: tiny-random\n"
        f"dataset: {{path: {REPO / 'trainer/data/sft_arith_sharegpt.jsonl'}, format: sharegpt}}\n"
        "lora: {r: 4, alpha: 8, rslora: true}\n"
        "training: {max_steps: 50, batch_size: 2, max_length: 512, seed: 5}\n"
        f"output_dir: {tmp_path / 'ignored'}\n")
    out = tmp_path / "run"
    result = gym_env.run("train", "sft", str(config), "--output", str(out), "--max-steps", "2",
                         timeout=300)
    assert result.returncode == 0, result.stderr
    assert "sft steps" in result.stdout and "final_train_loss" in result.stdout
    assert not (tmp_path / "ignored").exists()
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["run"]["metrics"]["train_steps"] == 2
    assert manifest["run"]["config"]["training"]["max_steps"] == 2
    assert PeftConfig.from_pretrained(out / "adapter").use_rslora is True

    again = gym_env.run("train", "dpo", str(config), "--output", str(tmp_path / "dpo"))
    assert again.returncode == 1
    assert again.stderr.startswith("error:") and "for method 'sft', not 'dpo'" in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1


@pytest.mark.anvil
def test_gym_train_sft_publish_appends_run_and_adapter(ledger_devnet, tmp_path):
    config = tmp_path / "sft.yaml"
    config.write_text(
        "model: tiny-random\n"
        f"dataset: {{path: {REPO / 'trainer/data/sft_arith_alpaca.jsonl'}, format: alpaca}}\n"
        "lora: {r: 4, alpha: 8}\ntraining: {max_steps: 1, batch_size: 2, max_length: 512}\n")
    gym = ledger_devnet.gym
    result = gym.run("train", "sft", str(config), "--output", str(tmp_path / "run"),
                     "--publish", "alice/sft", timeout=300)
    assert result.returncode == 0, result.stderr
    adapter_cid = re.search(r"^adapter entry (bafkrei[a-z2-7]+) \(leaf 1\)$", result.stdout,
                            re.MULTILINE).group(1)
    assert re.search(r"^run entry +bafkrei[a-z2-7]+ \(leaf 0\)$", result.stdout, re.MULTILINE)
    assert "anchored at size 2" in result.stdout
    assert (f"next: gym adapter fetch {adapter_cid} fetched/ --log alice/sft --index 1"
            in result.stdout.splitlines())
    shown = gym.run("ledger", "show", "alice/sft", "1", "--json")
    assert shown.returncode == 0, shown.stderr
    leaf = json.loads(shown.stdout)
    manifest = json.loads((tmp_path / "run" / "run.json").read_text())
    assert leaf["anchored_at_size"] == 2 and leaf["entry"]["type"] == "adapter"
    assert leaf["entry"]["base_model"] == manifest["base_model"]
    assert leaf["entry"]["config"] == manifest["adapter"]["config"]
    # The printed next step, as printed (fetched/ put under tmp_path): it fetches the adapter.
    command = next(line for line in result.stdout.splitlines() if line.startswith("next: gym "))
    args = command.removeprefix("next: gym ").split()
    args[args.index("fetched/")] = str(tmp_path / "fetched")
    fetched = gym.run(*args)
    assert fetched.returncode == 0, fetched.stderr
    assert (tmp_path / "fetched" / "adapter_model.safetensors").is_file()
