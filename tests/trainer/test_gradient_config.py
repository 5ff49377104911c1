"""Gradient-training configs and dataset formats: what is accepted, what is refused and how the
refusal names the key, file, line and field. No model is loaded here."""

from __future__ import annotations

import doctest
import json
import subprocess
import sys
from pathlib import Path

import pytest

import trainer.gradient
from trainer.gradient.config import load_config, validate_config
from trainer.gradient.formats import DatasetFormatError, load_dataset_rows
from trainer.gradient.sample_data import write_sample_data
from trainer.tfgrpo_config import ConfigError

REPO = Path(__file__).resolve().parents[2]
SFT = {"model": "tiny-random",
       "dataset": {"path": "trainer/data/sft_arith_alpaca.jsonl", "format": "alpaca"}}


def test_package_docstring_example_runs(monkeypatch):
    monkeypatch.chdir(REPO)
    result = doctest.testmod(trainer.gradient, verbose=False)
    assert result.attempted > 0 and result.failed == 0


def test_import_and_cli_registration_do_not_load_torch():
    code = ("import sys, trainer.gradient, trainer.gradient.cli, devnet.cli; "
            "assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def _yaml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("method", ["sft", "dpo", "kto", "orpo", "grpo", "gspo"])
def test_shipped_configs_load_and_their_datasets_convert(method, monkeypatch):
    monkeypatch.chdir(REPO)
    config = load_config(f"trainer/configs/{method}_smollm2.yaml", method=method)
    assert config.method == method and config.output_dir == f"runs/{method}-smollm2"
    rows = load_dataset_rows(config.dataset.path, config.dataset.format, chat=True,
                             system_prompt=config.dataset.system_prompt, limit=config.dataset.limit)
    assert rows and all(row["prompt"][0]["role"] == "system" for row in rows)
    if method == "gspo":
        assert config.grpo.loss_type == "grpo" and config.grpo.num_iterations == 2


def test_demo_config_is_a_short_sft_run(monkeypatch):
    monkeypatch.chdir(REPO)
    config = load_config("trainer/configs/sft_demo.yaml", method="sft")
    assert config.training.max_steps == 3 and config.dataset.limit == 6


def test_unknown_keys_are_named(tmp_path):
    path = _yaml(tmp_path, "dataset: {path: d.jsonl, format: alpaca}\n"
                           "training: {lerning_rate: 0.1}\nlora: {rank: 4}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, method="sft")
    assert "training.lerning_rate: unknown key" in str(err.value)
    assert "lora.rank: unknown key" in str(err.value)
    with pytest.raises(ConfigError, match=r"^config: optimizer: unknown key"):
        validate_config({**SFT, "optimizer": "adamw"})


def test_method_must_match_the_command(tmp_path):
    path = _yaml(tmp_path, "method: dpo\ndataset: {path: d.jsonl, format: preference}\n")
    assert load_config(path, method="dpo").method == "dpo"
    with pytest.raises(ConfigError, match="for method 'dpo', not 'sft'.*gym train dpo"):
        load_config(path, method="sft")


def test_cli_overrides_win(tmp_path):
    path = _yaml(tmp_path, "dataset: {path: d.jsonl, format: alpaca}\n"
                           "training: {max_steps: 50, seed: 3}\noutput_dir: a\n")
    config = load_config(path, method="sft", output_dir="b", max_steps=2)
    assert (config.output_dir, config.training.max_steps, config.training.seed) == ("b", 2, 3)


@pytest.mark.parametrize(("change", "message"), [
    ({"dpo": {"beta": 0.1}}, "the dpo section applies to method dpo, not sft"),
    ({"kto": {"beta": 0.1}}, "the kto section applies to method kto, not sft"),
    ({"orpo": {"beta": 0.1}}, "the orpo section applies to method orpo, not sft"),
    ({"dataset": {"path": "x", "format": "kto"}}, "dataset.format 'kto' does not fit sft"),
    ({"reward": {"verifiers": ["math"]}}, "apply to grpo/gspo, not sft"),
    ({"dataset": {"path": "x", "format": "prompt"}}, "dataset.format 'prompt' does not fit sft"),
    ({"lora": {"init": "loftq"}}, "lora: init must be default, gaussian, pissa"),
    ({"lora": {"r": 0}}, "lora.r: Input should be greater than or equal to 1"),
    ({"training": {"device": "tpu"}}, "training.device: Input should be 'auto', 'cpu' or 'cuda'"),
])
def test_bad_values_are_refused_with_the_key(change, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        validate_config({**SFT, **change}).for_method("sft")


def test_grpo_rules():
    grpo = {"model": "tiny-random", "dataset": {"path": "x", "format": "prompt"}}
    config = validate_config(grpo).for_method("gspo")
    assert config.reward.verifiers == ["math"] and config.grpo.num_generations == 4
    with pytest.raises(ConfigError, match="must be a multiple of grpo.num_generations = 3"):
        validate_config({**grpo, "grpo": {"num_generations": 3}}).for_method("grpo")
    with pytest.raises(ConfigError, match="llm-judge needs a second model"):
        validate_config({**grpo, "reward": {"verifiers": ["llm-judge"]}})
    with pytest.raises(ConfigError, match="2 weights for 1 verifiers"):
        validate_config({**grpo, "reward": {"verifiers": ["exact"], "weights": [1, 2]}})
    # PiSSA rewrites the base, which is what DPO/GRPO-with-KL use as their reference model
    with pytest.raises(ConfigError, match="rewrites the base weights.*grpo.beta: 0"):
        validate_config({**grpo, "lora": {"init": "pissa"},
                         "grpo": {"beta": 0.04}}).for_method("grpo")
    assert validate_config({**grpo, "lora": {"init": "pissa"}}).for_method("grpo").grpo.beta == 0
    pairs = {"model": "tiny-random", "dataset": {"path": "x", "format": "preference"},
             "lora": {"init": "olora"}}
    with pytest.raises(ConfigError, match="rewrites the base weights"):
        validate_config(pairs).for_method("dpo")


# --------------------------------------------------------------------------- formats


def _jsonl(tmp_path: Path, rows: list, name: str = "d.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_alpaca_rows_become_prompt_completion(tmp_path):
    path = _jsonl(tmp_path, [{"instruction": "Add.", "input": "2 and 3", "output": "5"},
                             {"instruction": "Say hi.", "output": "hi", "system": "Be brief."}])
    chat = load_dataset_rows(path, "alpaca", chat=True, system_prompt="Default system.")
    assert chat[0] == {"prompt": [{"role": "system", "content": "Default system."},
                                  {"role": "user", "content": "Add.\n\n2 and 3"}],
                       "completion": [{"role": "assistant", "content": "5"}]}
    assert chat[1]["prompt"][0]["content"] == "Be brief."  # the row's own system wins
    plain = load_dataset_rows(path, "alpaca", chat=False)
    assert plain[0] == {"prompt": "### Instruction:\nAdd.\n\n2 and 3\n\n### Response:\n",
                        "completion": "5"}


def test_sharegpt_preference_and_prompt_rows(tmp_path):
    talk = {"system": "S", "conversations": [{"from": "human", "value": "q"},
                                             {"from": "gpt", "value": "a"}]}
    assert load_dataset_rows(_jsonl(tmp_path, [talk]), "sharegpt", chat=True) == [
        {"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "q"},
                      {"role": "assistant", "content": "a"}]}]
    pair = {"prompt": "p", "chosen": "good", "rejected": "bad"}
    (row,) = load_dataset_rows(_jsonl(tmp_path, [pair]), "preference", chat=True)
    assert row["chosen"] == [{"role": "assistant", "content": "good"}]
    (row,) = load_dataset_rows(_jsonl(tmp_path, [{"problem": "1+1?", "answer": 2}]), "prompt",
                               chat=True)
    assert row == {"prompt": [{"role": "user", "content": "1+1?"}], "problem": "1+1?",
                   "answer": "2"}
    array = tmp_path / "d.json"
    array.write_text(json.dumps([pair, pair]))
    assert len(load_dataset_rows(array, "preference", chat=False, limit=1)) == 1


@pytest.mark.parametrize(("fmt", "rows", "where"), [
    ("alpaca", [{"instruction": "a", "output": "b"}, {"instruction": "a"}],
     r"d.jsonl:2: field 'output': missing"),
    ("alpaca", [{"instruction": "a", "output": 5}], r"d.jsonl:1: field 'output': must be a string"),
    ("alpaca", [{"instruction": "  ", "output": "b"}], r"d.jsonl:1: field 'instruction': is empty"),
    ("alpaca", ["", '{"instruction": "a", "output": "b"', ""], r"d.jsonl:2: not valid JSON"),
    ("alpaca", ["[1]"], r"d.jsonl\[0\]: a row must be a JSON object"),
    ("sharegpt", [{"conversations": [{"from": "human", "value": "q"},
                                     {"from": "bot", "value": "a"}]}],
     r"d.jsonl:1: field 'conversations\[1\].from': 'bot' is not one of"),
    ("sharegpt", [{"conversations": [{"from": "human", "value": "q"}]}],
     r"d.jsonl:1: field 'conversations': has no gpt/assistant turn"),
    ("preference", [{"prompt": "p", "chosen": "x"}], r"d.jsonl:1: field 'rejected': missing"),
    ("preference", [{"prompt": "p", "chosen": "x", "rejected": "x"}],
     r"d.jsonl:1: field 'rejected': equals 'chosen'"),
    ("prompt", [{"problem": "p", "answer": "1"}, {"problem": "q"}],
     r"d.jsonl:2: field 'answer': missing"),
    ("kto", [{"prompt": "p", "completion": "c", "label": True},
             {"prompt": "p", "completion": "c", "label": "yes"}],
     r"d.jsonl:2: field 'label': must be true \(desirable\) or false, got 'yes'"),
    ("kto", [{"prompt": "p", "completion": "c", "label": 1}],
     r"d.jsonl:1: field 'label': must be true \(desirable\) or false, got 1"),
    ("kto", [{"prompt": "p", "label": False}], r"d.jsonl:1: field 'completion': missing"),
])
def test_bad_rows_name_file_line_and_field(tmp_path, fmt, rows, where):
    path = _jsonl(tmp_path, rows)
    with pytest.raises(DatasetFormatError, match=where):
        load_dataset_rows(path, fmt, chat=True)


def test_empty_and_missing_files(tmp_path):
    with pytest.raises(DatasetFormatError, match="no rows"):
        load_dataset_rows(_jsonl(tmp_path, ["", ""]), "alpaca", chat=True)
    with pytest.raises(DatasetFormatError, match="no such dataset file"):
        load_dataset_rows(tmp_path / "missing.jsonl", "alpaca", chat=True)
    with pytest.raises(DatasetFormatError, match="need a tokenizer with a chat template"):
        load_dataset_rows(_jsonl(tmp_path, [{"conversations": []}]), "sharegpt", chat=False)


def test_bundled_datasets_regenerate_identically(tmp_path):
    for path in write_sample_data(tmp_path):
        assert path.read_bytes() == (REPO / "trainer" / "data" / path.name).read_bytes()
    pairs = [json.loads(line) for line in (tmp_path / "dpo_arith_pairs.jsonl").open()]
    # the rejected answer is wrong: its final number differs from the chosen one
    assert all(p["chosen"].rsplit(" ", 1)[1] != p["rejected"].rsplit(" ", 1)[1] for p in pairs)


def test_verifiers_as_trl_reward_functions():
    from trainer.gradient.rewards import VerifierReward

    reward = VerifierReward("math")
    assert reward.__name__ == "reward_math"
    chat = [[{"role": "assistant", "content": "2 + 3 = 5. Answer: 5"}],
            [{"role": "assistant", "content": "Answer: 6"}]]
    kwargs = {"prompts": [[], []], "completion_ids": [[1], [2]], "trainer_state": None,
              "problem": ["2 + 3?", "2 + 3?"], "answer": ["5", "5"]}
    assert reward(completions=chat, **kwargs) == [1.0, 0.0]
    assert reward(completions=["the answer is 5", "Answer: 1/2"], **kwargs) == [1.0, 0.0]
    assert VerifierReward("python:tfgrpo_fakes:length_parity").__name__ == (
        "reward_python_tfgrpo_fakes_length_parity")
    with pytest.raises(ConfigError, match="reward verifier 'python:no_such_module:f'"):
        VerifierReward("python:no_such_module:f")
