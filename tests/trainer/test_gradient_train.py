"""SFT, DPO, KTO, ORPO, GRPO and GSPO through TRL + PEFT on a tiny random Llama, on CPU: LoRA weights move,
the base does not, the saved adapter reloads to the same logits, the same seed gives the same
adapter bytes, and run.json is what the adapter publisher needs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from peft import PeftModel
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

from ledger.entries import RunEntry
from trainer.gradient import (
    QLoRAUnavailableError,
    RunDirectoryError,
    train,
    validate_config,
)
from trainer.provenance import file_digest, model_digest
from trainer.tfgrpo_config import ConfigError

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "trainer" / "data"
PARITY = "python:tfgrpo_fakes:length_parity"  # garbage text earns it half of the time

CASES = {
    "sft-alpaca": ("sft", "alpaca", "sft_arith_alpaca.jsonl", {}),
    "sft-sharegpt": ("sft", "sharegpt", "sft_arith_sharegpt.jsonl", {}),
    "dpo": ("dpo", "preference", "dpo_arith_pairs.jsonl", {"dpo": {"beta": 0.5}}),
    "kto": ("kto", "kto", "kto_arith.jsonl", {"kto": {"beta": 0.5}}),
    "orpo": ("orpo", "preference", "dpo_arith_pairs.jsonl", {"orpo": {"beta": 0.5}}),
    "grpo": ("grpo", "prompt", "arith_train.jsonl", {}),
    "gspo": ("gspo", "prompt", "arith_train.jsonl", {"grpo": {
        "num_generations": 4, "max_completion_length": 12, "num_iterations": 2}}),
}


def make_config(tmp_path: Path, case: str, name: str = "run", **changes):
    method, fmt, data, extra = CASES[case]
    config = {"model": "tiny-random",
              "dataset": {"path": str(DATA / data), "format": fmt, "limit": 8},
              "lora": {"r": 4, "alpha": 8},
              "training": {"max_steps": 3, "batch_size": 4, "max_length": 512,
                           "learning_rate": 2e-2, "seed": 1},
              "output_dir": str(tmp_path / name), **extra}
    if method in ("grpo", "gspo"):
        config.setdefault("grpo", {"num_generations": 4, "max_completion_length": 12})
        config["reward"] = {"verifiers": [PARITY]}
    for key, value in changes.items():
        config[key] = {**config.get(key, {}), **value} if isinstance(value, dict) else value
    return validate_config(config).for_method(method)


class Snapshot(TrainerCallback):
    """The trainable tensors as training starts (after PEFT wrapped the model)."""

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.trainable = {n: p.detach().clone() for n, p in model.named_parameters()
                          if p.requires_grad}


def logits(model, tokenizer) -> torch.Tensor:
    ids = tokenizer("A farmer has 12 apples. Answer: 28", return_tensors="pt")
    with torch.no_grad():
        return model.eval()(**ids).logits


@pytest.mark.parametrize("case", list(CASES))
def test_training_moves_lora_only_and_the_adapter_reloads(tmp_path, case):
    config = make_config(tmp_path, case)
    snapshot = Snapshot()
    result = train(config, callbacks=[snapshot])
    model = result.trainer.model
    assert result.trainer.state.global_step == 3

    trained = {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}
    assert trained and all("lora_" in n for n in trained)
    changed = [n for n in trained if not torch.equal(trained[n], snapshot.trainable[n])]
    assert len(changed) == len(trained), f"unchanged: {set(trained) - set(changed)}"

    base_dir = result.run_dir / "base"
    base = AutoModelForCausalLM.from_pretrained(base_dir)
    frozen = {n.replace(".base_layer", ""): p for n, p in model.get_base_model().named_parameters()
              if "lora_" not in n}
    for name, weight in base.named_parameters():
        assert torch.equal(frozen[name], weight), f"base weight {name} changed"

    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    reloaded = PeftModel.from_pretrained(base, result.run_dir / "adapter")
    assert torch.equal(logits(reloaded, tokenizer), logits(model, tokenizer))
    assert sorted(p.name for p in (result.run_dir / "adapter").iterdir()) == [
        "adapter_config.json", "adapter_model.safetensors"]

    manifest = json.loads((result.run_dir / "run.json").read_text())
    assert manifest == result.manifest
    assert manifest["method"] == config.method and manifest["adapter_dir"] == "adapter"
    assert manifest["base_model"]["name"].startswith("tiny-random:")
    assert manifest["base_model"]["weights_digest"] == model_digest(base_dir)
    run = RunEntry(type="run", v=1, **manifest["run"])
    assert run.config["training"]["seed"] == 1 and run.config["method"] == config.method
    assert run.dataset_digests == [file_digest(config.dataset.path)]
    assert len(run.metrics["train_loss"]) == 3
    # the throughput per step, and tokens per second where TRL counts tokens
    assert len(run.metrics["step_time_s"]) == 3 and min(run.metrics["step_time_s"]) > 0
    if "num_tokens" in run.metrics:  # one rate per row that counts tokens
        rates = run.metrics["step_tokens_per_s"]
        assert len(rates) == len(run.metrics["num_tokens"]) and min(rates) > 0
    adapter = manifest["adapter"]
    assert adapter["config"] == json.loads(
        (result.run_dir / "adapter" / "adapter_config.json").read_text())
    assert adapter["dataset_digest"] == run.dataset_digests[0]
    assert adapter["metrics"]["final_train_loss"] == run.metrics["train_loss"][-1]
    assert all(type(v) is float for v in adapter["metrics"].values())
    if config.method in ("grpo", "gspo"):
        assert "final_reward" in adapter["metrics"]


@pytest.mark.parametrize("case", ["sft-alpaca", "grpo"])
def test_same_seed_same_adapter_bytes(tmp_path, case):
    first = train(make_config(tmp_path, case, "first")).run_dir / "adapter"
    second = train(make_config(tmp_path, case, "second")).run_dir / "adapter"
    other = train(make_config(tmp_path, case, "other", training={"seed": 2})).run_dir / "adapter"
    for name in ("adapter_model.safetensors", "adapter_config.json"):
        assert (first / name).read_bytes() == (second / name).read_bytes()
    assert (first / "adapter_model.safetensors").read_bytes() != (
        other / "adapter_model.safetensors").read_bytes()


def test_rslora_dora_and_pissa_reach_the_adapter(tmp_path):
    config = make_config(tmp_path, "sft-alpaca",
                         lora={"rslora": True, "dora": True, "init": "pissa"})
    result = train(config)
    saved = json.loads((result.run_dir / "adapter" / "adapter_config.json").read_text())
    assert (saved["use_rslora"], saved["use_dora"], saved["init_lora_weights"]) == (
        True, True, "pissa")
    assert saved["r"] == 4 and saved["lora_alpha"] == 8
    assert saved["target_modules"] == sorted(saved["target_modules"])
    assert saved["base_model_name_or_path"] == result.manifest["base_model"]["name"]
    weights = load_file(result.run_dir / "adapter" / "adapter_model.safetensors")
    assert any("lora_magnitude_vector" in key for key in weights)  # DoRA's magnitudes
    # PiSSA moved the principal part of W into the adapter; loading recomputes the residual.
    base_dir = result.run_dir / "base"
    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    reloaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_dir),
                                         result.run_dir / "adapter")
    assert torch.equal(logits(reloaded, tokenizer), logits(result.trainer.model, tokenizer))


def test_qlora_without_gpu_is_a_clear_error(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    with pytest.raises(QLoRAUnavailableError, match="qlora needs bitsandbytes and a CUDA GPU"
                       r".*no CUDA device.*qlora: false"):
        train(make_config(tmp_path, "sft-alpaca", qlora=True))
    assert not (tmp_path / "run" / "adapter").exists()


def test_rows_truncated_away_are_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="no .*sft_arith_alpaca.jsonl row is left to train on "
                                          "after truncation to training.max_length = 16"):
        train(make_config(tmp_path, "sft-alpaca", training={"max_length": 16}))


def test_a_finished_run_is_never_overwritten(tmp_path):
    config = make_config(tmp_path, "sft-alpaca", training={"max_steps": 1})
    train(config)
    before = (tmp_path / "run" / "adapter" / "adapter_model.safetensors").read_bytes()
    with pytest.raises(RunDirectoryError, match="already holds a run"):
        train(config)
    assert (tmp_path / "run" / "adapter" / "adapter_model.safetensors").read_bytes() == before


@pytest.mark.gpu
def test_qlora_on_a_gpu_trains_a_lora_over_a_4bit_base(tmp_path):
    pytest.importorskip("bitsandbytes")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    result = train(make_config(tmp_path, "sft-alpaca", qlora=True))
    assert getattr(result.trainer.model.get_base_model(), "is_loaded_in_4bit", False)
    saved = json.loads((result.run_dir / "adapter" / "adapter_config.json").read_text())
    assert saved["r"] == 4 and result.manifest["run"]["config"]["qlora"] is True
