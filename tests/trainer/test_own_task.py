"""A researcher's own task as docs/tfgrpo.md walks it ("Your own task"): the shipped
word-reversal data and config, `gym train tfgrpo --limit --publish`, the kept completions,
`gym eval --config --show`, and experiences anchored with the config's domain. The tiny random
model stands in for SmolLM2 (the config's `model`, and `--model` for `gym eval`), so the
answers are noise; what is checked is that every command takes the task from the config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "trainer" / "configs" / "tfgrpo_reverse.yaml"


def test_the_docs_walk_through_commands_name_the_shipped_files():
    docs = (REPO / "docs" / "tfgrpo.md").read_text()
    assert "gym train tfgrpo trainer/configs/tfgrpo_reverse.yaml --limit 4 --publish" in docs
    assert "gym eval --config trainer/configs/tfgrpo_reverse.yaml" in docs
    config = yaml.safe_load(CONFIG.read_text())
    assert config["verifier"] == "exact" and config["domain"] == "word-reversal"
    for key in ("train_path", "eval_path"):
        rows = [json.loads(line) for line in (CONFIG.parent / config[key]).read_text().splitlines()]
        assert rows and all(set(r) == {"problem", "answer"} and r["answer"].isalpha() for r in rows)


@pytest.mark.anvil
def test_own_task_trains_evaluates_and_publishes_with_its_domain(tmp_path, tiny_model_dir,
                                                                 ledger_devnet):
    config = yaml.safe_load(CONFIG.read_text())
    config.update(train_path=str(CONFIG.parent / config["train_path"]),
                  eval_path=str(CONFIG.parent / config["eval_path"]),
                  output_dir=str(tmp_path / "run"), max_new_tokens=12, stage_max_new_tokens=16)
    config["policy"]["model"] = str(tiny_model_dir)
    path = tmp_path / "tfgrpo_reverse.yaml"
    path.write_text(yaml.safe_dump(config))
    gym = ledger_devnet.gym

    trained = gym.run("train", "tfgrpo", str(path), "--limit", "4", "--publish", "alice/reverse",
                      timeout=600)
    assert trained.returncode == 0, trained.stderr
    kept = [json.loads(line) for line in (tmp_path / "run" / "completions.jsonl").read_text()
            .splitlines()]
    assert len(kept) == 4 * config["group_size"]
    assert all(r["reasoning"].startswith("extracted ") and "vs expected" in r["reasoning"]
               for r in kept if r["response"].strip())
    assert {r["reference"] for r in kept} <= {json.loads(line)["answer"] for line in
                                               Path(config["train_path"]).read_text().splitlines()}
    run = json.loads(gym.run("ledger", "show", "alice/reverse", "0", "--json").stdout)["entry"]
    assert run["type"] == "run" and run["config"]["domain"] == "word-reversal"
    # experiences (if the noise learned any) carry it too; tests/trainer/test_publish.py checks
    # that on a run that learns some
    for index in range(1, 1 + json.loads((tmp_path / "run" / "run_report.json").read_text())
                       ["operations_applied"]):
        entry = json.loads(gym.run("ledger", "show", "alice/reverse", str(index), "--json")
                           .stdout)["entry"]
        assert entry["domain"] == "word-reversal", entry

    evaluated = gym.run("eval", "--config", str(path), "--library",
                        str(tmp_path / "run" / "library.json"), "--limit", "2", "-k", "1",
                        "--seeds", "1", "--show", "2", "--output", str(tmp_path / "eval.json"),
                        "--model", str(tiny_model_dir), "--max-new-tokens", "8", timeout=600)
    assert evaluated.returncode == 0, evaluated.stderr
    results = json.loads((tmp_path / "eval.json").read_text())
    assert results["verifier"] == "exact"  # the config's, not math
    assert results["agent_objective"] == config["agent_objective"]
    assert results["problems"] == 2  # the config's eval_path: no --dataset given
    shown = [line for line in evaluated.stdout.splitlines() if "] reward " in line]
    assert len(shown) == 2 and all("extracted" in line for line in shown), evaluated.stdout
    completions = [json.loads(line) for line in
                   (tmp_path / "eval.completions.jsonl").read_text().splitlines()]
    assert len(completions) == 2 * 2  # baseline and library arms, 2 problems, k = 1
    heldout = [json.loads(line) for line in Path(config["eval_path"]).read_text().splitlines()]
    assert {c["answer"] for c in completions} == {r["answer"] for r in heldout[:2]}
