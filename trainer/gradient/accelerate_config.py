"""`gym train ... --accelerate-config FILE`: an accelerate config file (what `accelerate config`
writes) chooses how the ranks of a multi-process run train.

    gym train sft trainer/configs/sft_smollm2.yaml --accelerate-config trainer/configs/accelerate/fsdp.yaml

| ``distributed_type`` | launched by | what the ranks do |
|---|---|---|
| ``NO``, ``MULTI_CPU`` | torchrun, as ``--num-processes`` (``trainer.gradient.distributed``) | DDP, gloo on the CPU |
| ``MULTI_GPU`` | ``accelerate launch --config_file FILE`` | DDP, NCCL, one GPU per rank |
| ``FSDP`` | ``accelerate launch --config_file FILE`` | parameters, gradients and optimizer state sharded (``fsdp_config``) |
| ``DEEPSPEED`` | ``accelerate launch --config_file FILE`` | DeepSpeed ZeRO (``deepspeed_config``: stage, offload) |

accelerate's launcher turns the file into the environment that TRL's trainer (through
accelerate's ``Accelerator``) reads, so FSDP and ZeRO are theirs, not this project's. The GPU
kinds need CUDA devices (and DeepSpeed the ``deepspeed`` package, the ``gpu`` extra): without
them the command stops before anything starts, with one line saying what is missing.
``read_accelerate_config`` checks the file (YAML mapping, at most ``MAX_BYTES``, a known
``distributed_type``, ``num_processes`` from 1 to ``MAX_PROCESSES``) and says which field is
wrong.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from trainer.errors import TrainerError

MAX_BYTES = 64 * 1024
MAX_PROCESSES = 64
CPU_TYPES = ("NO", "MULTI_CPU")
GPU_TYPES = ("MULTI_GPU", "FSDP", "DEEPSPEED")


class AccelerateConfigError(TrainerError, ValueError):
    """The accelerate config file is unreadable, malformed, or asks for what is not here."""


@dataclass(frozen=True)
class AccelerateConfig:
    path: Path
    distributed_type: str  # one of CPU_TYPES + GPU_TYPES
    num_processes: int

    @property
    def on_gpus(self) -> bool:
        return self.distributed_type in GPU_TYPES


def read_accelerate_config(path: Path) -> AccelerateConfig:
    """The file's distributed type and process count, checked (module docstring)."""
    import yaml

    try:
        if path.stat().st_size > MAX_BYTES:
            raise AccelerateConfigError(f"{path}: larger than {MAX_BYTES // 1024} KiB: not an "
                                        "accelerate config")
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise AccelerateConfigError(f"{path}: not a readable YAML file ({detail})") from None
    if not isinstance(data, dict):
        raise AccelerateConfigError(f"{path}: an accelerate config is a YAML mapping "
                                    "(`accelerate config` writes one)")
    kind = data.get("distributed_type", "NO")
    if kind not in CPU_TYPES + GPU_TYPES:
        raise AccelerateConfigError(f"{path}: distributed_type {kind!r} is not one of "
                                    f"{', '.join(CPU_TYPES + GPU_TYPES)}")
    count = data.get("num_processes", 1)
    if type(count) is not int or not 1 <= count <= MAX_PROCESSES:
        raise AccelerateConfigError(f"{path}: num_processes is an integer from 1 to "
                                    f"{MAX_PROCESSES}, got {count!r}")
    return AccelerateConfig(path, kind, count)


def check_available(config: AccelerateConfig) -> None:
    """`AccelerateConfigError` when the file asks for GPUs or a package this machine lacks."""
    if not config.on_gpus:
        return
    import torch

    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if have == 0:
        raise AccelerateConfigError(
            f"{config.path}: {config.distributed_type} needs CUDA GPUs and this machine has "
            "none; on the CPU use distributed_type MULTI_CPU or --num-processes N")
    if config.num_processes > have:
        raise AccelerateConfigError(
            f"{config.path}: {config.num_processes} processes, one GPU each, and this machine "
            f"has {have}: lower num_processes (or --num-processes)")
    if config.distributed_type == "DEEPSPEED" and importlib.util.find_spec("deepspeed") is None:
        raise AccelerateConfigError(f"{config.path}: DEEPSPEED needs the deepspeed package: "
                                    "pip install -e '.[gpu]'")
