"""`gym eval --adapter`: the adapter arm runs the tuned model (PEFT directory or merged model,
same completions), beside the base on the same questions and seeds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_adapters_support import make_adapter_run

from trainer.adapters.merge import merge_adapter
from trainer.backends import BackendError, TransformersBackend, adapter_backend
from trainer.tfgrpo_prompts import rollout_messages


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, tiny_model_dir) -> Path:
    return make_adapter_run(tmp_path_factory.mktemp("adapter-run") / "run", tiny_model_dir,
                            rank=8, steps=8)


def test_adapter_backend_runs_the_tuned_model(run_dir, tmp_path):
    prompts = [rollout_messages(f"What is {i} + {i}?", []) for i in range(3)]
    base = TransformersBackend(run_dir / "base", device="cpu")
    tuned = adapter_backend(run_dir / "adapter", run_dir / "base", device="cpu")
    merge_adapter(run_dir / "adapter", run_dir / "base", tmp_path / "merged")
    merged = adapter_backend(tmp_path / "merged", device="cpu")
    outputs = [b.generate(prompts, 2, temperature=0.0, max_new_tokens=12, seed=3)
               for b in (base, tuned, merged)]
    assert outputs[1] == outputs[2]
    assert outputs[0] != outputs[1]
    with pytest.raises(BackendError, match="neither a PEFT adapter"):
        adapter_backend(tmp_path)


def test_eval_command_with_an_adapter(gym_env, run_dir, tmp_path):
    dataset = Path(__file__).parents[2] / "trainer" / "data" / "arith_heldout.jsonl"
    common = ("--dataset", str(dataset), "--model", str(run_dir / "base"), "-k", "2",
              "--seeds", "2", "--limit", "3", "--max-new-tokens", "4", "--verifier", "exact")
    (tmp_path / "library.json").write_text(json.dumps(["Add the two numbers."]))
    result = gym_env.run("eval", "--adapter", str(run_dir / "adapter"), "--library",
                         str(tmp_path / "library.json"), *common,
                         "--output", str(tmp_path / "e.json"))
    assert result.returncode == 0, result.stderr
    data = json.loads((tmp_path / "e.json").read_text())
    assert data["arms"] == ["baseline", "library", "adapter", "adapter+library"]
    assert data["seeds"] == [0, 1] and data["library_size"] == 1
    assert len(data["adapter"]["mean_at_k"]["values"]) == 2
    assert data["adapter_dir"] == str(run_dir / "adapter")
    assert "adapter" in result.stdout and "baseline" in result.stdout

    nothing = gym_env.run("eval", *common)
    assert nothing.returncode == 1
    assert nothing.stderr.strip().splitlines()[-1] == (
        "error: nothing to compare: give --library, --library-log, --adapter or both")
