"""`train tfgrpo` and `eval` through typer, on the tiny random model."""

import json

from typer.testing import CliRunner

from trainer.cli import eval_library, train_app
from trainer.data import generate_problems, write_jsonl


def test_train_then_resume_then_eval(tmp_path, tiny_model_dir):
    import typer

    write_jsonl(generate_problems(4, seed=9), tmp_path / "train.jsonl")
    (tmp_path / "c.yaml").write_text(
        f"train_path: {tmp_path / 'train.jsonl'}\nepochs: 1\nbatch_size: 2\ngroup_size: 2\n"
        f"max_new_tokens: 8\nstage_max_new_tokens: 8\nverifier: exact\ndomain: math\n"
        f"policy:\n  model: {tiny_model_dir}\n")
    runner = CliRunner()
    out = tmp_path / "run"
    result = runner.invoke(train_app, ["tfgrpo", str(tmp_path / "c.yaml"), "--output", str(out)])
    assert result.exit_code == 0, result.output
    assert "run report:" in result.output and (out / "run_report.json").is_file()
    assert len(list((out / "snapshots").iterdir())) == 2
    result = runner.invoke(train_app, ["tfgrpo", str(tmp_path / "c.yaml"), "--output", str(out),
                                       "--resume"])
    assert result.exit_code == 0, result.output  # nothing left to do: same report again

    app = typer.Typer()
    app.command()(eval_library)
    result = runner.invoke(app, ["--library", str(out / "library.json"), "--dataset",
                                 str(tmp_path / "train.jsonl"), "-k", "2", "--seeds", "2",
                                 "--model", str(tiny_model_dir), "--max-new-tokens", "4",
                                 "--verifier", "exact", "--output", str(tmp_path / "e.json")])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "e.json").read_text())
    assert data["seeds"] == [0, 1] and set(data) >= {"baseline", "library"}
