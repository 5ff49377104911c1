"""`gym train ... --accelerate-config FILE`: the shipped accelerate configs (DDP on CPUs and
GPUs, FSDP, DeepSpeed ZeRO 2 and 3), the checks before anything starts, accelerate's own
launcher starting the ranks, and (on a machine with 2 CUDA GPUs: marked `gpu`) FSDP and ZeRO
training an adapter that loads with PEFT."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tiny_sft import write_sft_config

from trainer.gradient.accelerate_config import (
    AccelerateConfigError,
    check_available,
    read_accelerate_config,
)

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "trainer" / "configs" / "accelerate"
GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0


def test_the_shipped_accelerate_configs_read_as_documented():
    kinds = {path.name: read_accelerate_config(path) for path in sorted(SHIPPED.glob("*.yaml"))}
    assert {name: (c.distributed_type, c.num_processes) for name, c in kinds.items()} == {
        "ddp_cpu.yaml": ("MULTI_CPU", 2), "ddp_gpu.yaml": ("MULTI_GPU", 2),
        "deepspeed_zero2.yaml": ("DEEPSPEED", 2), "deepspeed_zero3.yaml": ("DEEPSPEED", 2),
        "fsdp.yaml": ("FSDP", 2)}
    docs = (REPO / "docs" / "gradient.md").read_text()
    for name in kinds:  # each with the command that runs it, in the file and in the docs
        command = f"--accelerate-config trainer/configs/accelerate/{name}"
        assert command in (SHIPPED / name).read_text() and command in docs, name


@pytest.mark.parametrize(("text", "message"), [
    ("- a list\n", "an accelerate config is a YAML mapping"),
    ("distributed_type: TPU\n", "distributed_type 'TPU' is not one of NO, MULTI_CPU"),
    ("distributed_type: FSDP\nnum_processes: 0\n", "num_processes is an integer from 1 to 64"),
    ("num_processes: two\n", "num_processes is an integer from 1 to 64, got 'two'"),
    ("a: [unclosed\n", "not a readable YAML file"),
    ("# " + "x" * 70_000 + "\n", "larger than 64 KiB"),
])
def test_a_bad_accelerate_config_is_one_line_naming_the_file(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(AccelerateConfigError) as caught:
        read_accelerate_config(path)
    assert str(caught.value).startswith(f"{path}: ") and message in str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.skipif(GPUS > 0, reason="this machine has a CUDA device")
def test_gpu_kinds_stop_before_anything_starts_without_a_gpu(gym_env, tmp_path):
    for name in ("ddp_gpu.yaml", "fsdp.yaml", "deepspeed_zero2.yaml"):
        with pytest.raises(AccelerateConfigError, match="needs CUDA GPUs and this machine "
                                                        "has none"):
            check_available(read_accelerate_config(SHIPPED / name))
    config = write_sft_config(tmp_path, 3, output_dir=tmp_path / "run")
    result = gym_env.run("train", "sft", str(config), "--accelerate-config",
                         str(SHIPPED / "fsdp.yaml"))
    assert result.returncode == 1 and "FSDP needs CUDA GPUs" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "run").exists()
    swarm = gym_env.run("train", "sft", str(config), "--accelerate-config",
                        str(SHIPPED / "ddp_cpu.yaml"), "--swarm", "r", "--max-steps", "2")
    assert swarm.returncode == 2 and "--swarm and --accelerate-config: one at a time" in \
        swarm.stderr


def test_qlora_trains_with_paged_adamw(tmp_path):
    from trainer.gradient.config import load_config
    from trainer.gradient.train import trl_arguments

    path = write_sft_config(tmp_path, 3)
    plain = trl_arguments(load_config(path), tmp_path, "cpu")
    path.write_text(path.read_text() + "qlora: true\n")
    qlora = trl_arguments(load_config(path), tmp_path, "cpu")
    assert str(qlora.optim) == "OptimizerNames.PAGED_ADAMW" and "paged" not in str(plain.optim)


def test_accelerate_launch_starts_the_ranks_from_a_config_file(tmp_path):
    """The launcher the GPU kinds take (`accelerate launch --config_file FILE -m ...`), run
    here with the DDP file on the CPU (each rank trains on the CPU, gloo): two ranks train one
    adapter and rank 0 writes the run, as with torchrun."""
    from trainer.gradient.distributed import launch

    config = write_sft_config(tmp_path, 3)
    run = tmp_path / "run"
    launch(config, "sft", run, None, 2, accelerate_config=SHIPPED / "ddp_gpu.yaml")
    distributed = json.loads((run / "run.json").read_text())["run"]["hardware"]["distributed"]
    assert (distributed["world_size"], distributed["backend"]) == (2, "gloo")
    ranks = distributed["ranks"]
    assert ranks[0]["inputs_digest"] != ranks[1]["inputs_digest"]
    assert ranks[0]["weights_digest"] == ranks[1]["weights_digest"]


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["fsdp.yaml", "deepspeed_zero2.yaml", "deepspeed_zero3.yaml"])
def test_sharded_training_on_two_gpus_writes_an_adapter_peft_loads(gym_env, tmp_path, name):
    if GPUS < 2:
        pytest.skip("needs 2 CUDA devices")
    if name.startswith("deepspeed"):
        pytest.importorskip("deepspeed")
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    config = write_sft_config(tmp_path, 3, output_dir=tmp_path / "run")
    result = gym_env.run("train", "sft", str(config), "--accelerate-config",
                         str(SHIPPED / name), timeout=600)
    assert result.returncode == 0, result.stderr
    run = tmp_path / "run"
    distributed = json.loads((run / "run.json").read_text())["run"]["hardware"]["distributed"]
    assert distributed["world_size"] == 2
    assert distributed["distributed_type"] == ("FSDP" if name == "fsdp.yaml" else "DEEPSPEED")
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(run / "base"),
                                      run / "adapter")
    lora = [p for n, p in model.named_parameters() if "lora_B" in n]
    assert lora and any(p.abs().sum() > 0 for p in lora)  # trained: B starts at zero
