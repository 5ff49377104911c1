"""A researcher's first hour: configs that work from any directory, inputs checked before any
model loads, progress with an estimate of the time left, `--limit` for quick runs.

The CLI tests run the real `gym` command from a directory that is neither the repository nor
the config's; the configs name their inputs relative to themselves.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import gym_forkserver
import pytest
from rich.console import Console

from trainer.data import generate_problems, write_jsonl
from trainer.gradient.config import load_config
from trainer.reports import LineProgress, step_progress
from trainer.tfgrpo_config import ConfigError, TFGRPOConfig

REPO = Path(__file__).resolve().parents[2]
GYM = Path(sys.executable).parent / "gym"


def gym(gym_env, cwd: Path, *args: str, timeout: float = 300) -> gym_forkserver.Completed:
    """The real `gym` command, run in ``cwd`` (not a tty: stdout and stderr are captured)."""
    return gym_forkserver.run(GYM, list(args), gym_env.env, timeout=timeout, cwd=cwd)


def error_line(result: gym_forkserver.Completed) -> str:
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr[-2000:])
    assert "Traceback" not in result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-2000:]
    return lines[0]


# --------------------------------------------------------------------------- config paths


def test_tfgrpo_inputs_resolve_against_the_config_directory(tmp_path, monkeypatch):
    (tmp_path / "configs").mkdir()
    config = tmp_path / "configs" / "c.yaml"
    config.write_text("train_path: ../data/train.jsonl\neval_path: held.jsonl\n"
                      "policy:\n  model: ../models/m\noutput_dir: runs/x\n"
                      "stage:\n  backend: openai\n  base_url: http://127.0.0.1:9/v1\n"
                      "  model: judge\n")
    monkeypatch.chdir("/")
    loaded = TFGRPOConfig.from_yaml(config)
    assert loaded.train_path == str(tmp_path / "data" / "train.jsonl")
    assert loaded.eval_path == str(tmp_path / "configs" / "held.jsonl")
    assert loaded.policy.model == str(tmp_path / "models" / "m")
    assert loaded.stage.model == "judge"  # an openai model is a name, not a path
    assert loaded.output_dir == "runs/x"  # outputs stay relative to the working directory


def test_the_shipped_configs_find_their_data_from_anywhere(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    for name in ("tfgrpo_smollm2", "tfgrpo_demo", "tfgrpo_words"):
        config = TFGRPOConfig.from_yaml(REPO / "trainer" / "configs" / f"{name}.yaml")
        assert Path(config.train_path).is_file() and Path(config.eval_path).is_file()
    for name in ("sft_smollm2", "sft_demo", "dpo_smollm2", "grpo_smollm2", "gspo_smollm2"):
        config = load_config(REPO / "trainer" / "configs" / f"{name}.yaml")
        assert Path(config.dataset.path).is_file(), name


@pytest.mark.parametrize(("text", "message"), [
    ("epochs: abc\n", "epochs must be an integer, got 'abc'"),
    ("group_size: 1\n", "group_size must be >= 2"),
    ("train_path: [1\n", "not valid YAML"),
    ("policy: 3\n", "policy must be a mapping or null"),
    ("temperature: hot\n", "temperature must be a number"),
])
def test_a_bad_tfgrpo_config_names_the_file(tmp_path, text, message):
    config = tmp_path / "c.yaml"
    config.write_text(text)
    with pytest.raises(ConfigError) as caught:
        TFGRPOConfig.from_yaml(config)
    assert str(caught.value).startswith(f"{config}: ") and message in str(caught.value)


def test_gradient_dataset_resolves_against_the_config_directory(tmp_path):
    (tmp_path / "configs").mkdir()
    config = tmp_path / "configs" / "sft.yaml"
    config.write_text("model: tiny-random\ndataset: {path: ../data/rows.jsonl, format: alpaca}\n"
                      "output_dir: runs/sft\n")
    loaded = load_config(config, method="sft")
    assert loaded.dataset.path == str(tmp_path / "data" / "rows.jsonl")
    assert loaded.model == "tiny-random" and loaded.output_dir == "runs/sft"


# --------------------------------------------------------------------------- before any model


def test_a_missing_dataset_fails_before_the_model_loads(gym_env, tmp_path):
    """From another directory, a config whose relative train_path is missing: one error line
    naming the config and the resolved dataset path. Its policy model is a directory whose
    config.json is not JSON: had the model been opened first, that would have failed instead."""
    (tmp_path / "exp" / "model").mkdir(parents=True)
    (tmp_path / "exp" / "model" / "config.json").write_text("not json")
    config = tmp_path / "exp" / "c.yaml"
    config.write_text("train_path: data/missing.jsonl\npolicy:\n  model: model\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    line = error_line(gym(gym_env, elsewhere, "train", "tfgrpo", str(config)))
    assert line == (f"error: {config}: train_path: {tmp_path / 'exp' / 'data' / 'missing.jsonl'}"
                    f": no such dataset file")
    assert not (elsewhere / "runs").exists()

    (tmp_path / "exp" / "data").mkdir()
    (tmp_path / "exp" / "data" / "missing.jsonl").write_text('{"problem": "1+1"}\n')
    line = error_line(gym(gym_env, elsewhere, "train", "tfgrpo", str(config)))
    assert "missing.jsonl: row 1 lacks a `problem` or `answer` field" in line


def test_a_bad_gradient_dataset_fails_before_the_model_loads(gym_env, tmp_path):
    (tmp_path / "exp" / "data").mkdir(parents=True)
    (tmp_path / "exp" / "data" / "rows.jsonl").write_text('{"instruction": "add 1 and 2"}\n')
    config = tmp_path / "exp" / "sft.yaml"
    config.write_text("model: broken-model\ndataset: {path: data/rows.jsonl, format: alpaca}\n")
    (tmp_path / "exp" / "broken-model").mkdir()  # no weights: loading it would fail differently
    line = error_line(gym(gym_env, tmp_path, "train", "sft", str(config)))
    assert line == (f"error: {config}: dataset: {tmp_path / 'exp' / 'data' / 'rows.jsonl'}:1: "
                    "field 'output': missing")


# --------------------------------------------------------------------------- runs from elsewhere


def test_train_and_eval_from_another_directory_with_progress(gym_env, tmp_path, tiny_model_dir):
    """A config naming its data and model relative to itself runs from another directory;
    `--limit` cuts the problems; the progress goes to stderr as a few lines with the time left
    (not a tty), advanced per batch of generations, not per seed."""
    exp = tmp_path / "exp"
    (exp / "data").mkdir(parents=True)
    write_jsonl(generate_problems(8, seed=9), exp / "data" / "train.jsonl")
    (exp / "model").symlink_to(tiny_model_dir)
    (exp / "c.yaml").write_text(
        "train_path: data/train.jsonl\neval_path: data/train.jsonl\nepochs: 1\nbatch_size: 2\n"
        "group_size: 2\nmax_new_tokens: 8\nstage_max_new_tokens: 8\nverifier: exact\ndomain: math\n"
        "policy:\n  model: model\noutput_dir: runs/quick\n")
    cwd = tmp_path / "work"
    cwd.mkdir()
    result = gym(gym_env, cwd, "train", "tfgrpo", str(exp / "c.yaml"), "--limit", "4")
    assert result.returncode == 0, result.stderr[-3000:]
    assert (cwd / "runs" / "quick" / "library.json").is_file()  # output: the working directory
    steps = [line for line in result.stderr.splitlines() if " left" in line]
    assert steps and re.search(r": 2/2, \d+:\d\d elapsed, about 0:00 left$", steps[-1]), steps
    assert len(steps) <= 2  # 4 problems / batch_size 2 = 2 steps: one line each at most
    assert "run report:" in result.stdout and " left" not in result.stdout

    result = gym(gym_env, cwd, "eval", "--library", "runs/quick/library.json", "--dataset",
                 str(exp / "data" / "train.jsonl"), "--limit", "3", "-k", "2", "--seeds", "2",
                 "--model", str(tiny_model_dir), "--max-new-tokens", "4", "--batch-size", "2",
                 "--verifier", "exact")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "3 problems, k=2, seeds=2" in result.stdout
    lines = [line for line in result.stderr.splitlines() if " left" in line]
    counts = [int(m.group(1)) for line in lines
              if (m := re.search(r": (\d+)/24, ", line))]
    assert 2 <= len(lines) <= 11 and counts == sorted(counts) and counts[-1] == 24, lines
    # 2 arms x 2 seeds x 3 problems x k = 2 generations, in batches of 2: a pass is 6.
    assert any(count % 6 for count in counts), counts


def test_eval_refuses_bad_arguments_in_one_line(gym_env, tmp_path):
    data = write_jsonl(generate_problems(2, seed=1), tmp_path / "d.jsonl")
    (tmp_path / "lib.json").write_text('{"experiences": [{"text": "no id"}]}')
    line = error_line(gym(gym_env, tmp_path, "eval", "--library", "lib.json", "--dataset",
                          str(data)))
    assert line.startswith("error: lib.json: not a library.json of `gym train tfgrpo`")
    (tmp_path / "lib.json").write_text('["be careful"]')
    line = error_line(gym(gym_env, tmp_path, "eval", "--library", "lib.json", "--dataset",
                          str(data), "--verifier", "regex"))
    assert "unknown verifier 'regex'" in line


# --------------------------------------------------------------------------- the progress


def test_off_a_terminal_progress_prints_about_ten_lines():
    console = Console(record=True, force_terminal=False, width=200)
    with step_progress(console) as bar:
        assert isinstance(bar, LineProgress)
        task = bar.add_task("eval", total=1000)
        for _ in range(1000):
            bar.advance(task)
    lines = console.export_text().splitlines()
    assert len(lines) == 10 and lines[-1].startswith("eval: 1000/1000, ")
    assert all(re.fullmatch(r"eval: \d+/1000, \d+:\d\d elapsed, about \d+:\d\d left", line)
               for line in lines)


def test_the_estimate_is_the_elapsed_time_scaled_by_the_work_left():
    console = Console(record=True, force_terminal=False, width=200)
    bar = LineProgress(console)
    task = bar.add_task("steps", total=4)
    bar.tasks[task]["started"] = time.monotonic() - 30  # one step took 30 s
    bar.update(task, completed=1)
    assert console.export_text().strip() == "steps: 1/4, 0:30 elapsed, about 1:30 left"


def test_on_a_terminal_the_bar_shows_the_time_left():
    console = Console(record=True, force_terminal=True, width=120)
    with step_progress(console) as bar:
        task = bar.add_task("eval", total=4)
        bar.update(task, completed=2)
    columns = [type(column).__name__ for column in bar.columns]
    assert "TimeRemainingColumn" in columns and "TimeElapsedColumn" in columns
