"""Run one gradient-training config through TRL + PEFT and write its run directory.

    config = load_config("trainer/configs/sft_smollm2.yaml", method="sft")
    result = train(config, callbacks=[RichProgressCallback()])

`train` maps the config onto TRL's trainers and PEFT's `LoraConfig`, and adds nothing to the
training itself:

- sft  -> `SFTTrainer` (alpaca rows as prompt/completion: loss on the answer only; sharegpt rows
  as `messages`: loss on the whole conversation);
- dpo  -> `DPOTrainer`; the reference model is the base with the adapter disabled (TRL's PEFT
  path), so no second copy of the weights is loaded;
- kto  -> `KTOTrainer` (TRL 1.16 has it in the stable API) on prompt/completion/label rows, the
  reference model as DPO's;
- orpo -> `trl.experimental.orpo.ORPOTrainer` on DPO's preference pairs (no reference model:
  the odds-ratio term rides on the SFT loss);
- grpo -> `GRPOTrainer` with the verifiers of `trainer/verifiers.py` as reward functions;
- gspo -> the same with `importance_sampling_level="sequence"`, `loss_type="grpo"` and the GSPO
  paper's clip range (3e-4, 4e-4), as TRL documents GSPO.

TRL seeds everything from `training.seed` before PEFT initialises the adapter, so on one machine
the same config gives the same `adapter_model.safetensors`, byte for byte (on CPU; the tests
check it). The run directory holds:

- `adapter/`: PEFT `save_pretrained` (`adapter_config.json`, `adapter_model.safetensors`),
  loadable with `PeftModel.from_pretrained(base, run_dir / "adapter")`. The config's
  `target_modules` are sorted and `base_model_name_or_path` is `base_model.name`, so the bytes
  do not depend on hash order or on where the base lives on this machine; PEFT's placeholder
  model card (README.md) is left out: the ledger entries are the card.
- `base/`: only for `model: tiny-random`, the random base the adapter belongs to.
- `run.json`: the manifest `trainer.adapters.publish` turns into `run` and `adapter` entries.
  `base_model.name` is `SmolLM2-135M-Instruct` for the default model, the directory as the
  config gives it for a local model, and `tiny-random:<first 16 hex of sha256(config.json)>`
  for the tiny random base; `weights_digest` is `trainer.publish.model_digest` of the weights.
  Metric curves hold one value per logged step (non-finite values are left out).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer._json import read_json_file
from trainer.errors import TrainerError
from trainer.gradient.config import TINY_RANDOM, GradientConfig
from trainer.gradient.ranks import RankTrace, weights_digest
from trainer.tfgrpo_config import ConfigError

ADAPTER_DIR = "adapter"
RUN_MANIFEST = "run.json"
DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
# The last value of these curves is also an adapter metric (`final_<key>`, '/' -> '_').
EXTRA_PACKAGES = ("accelerate", "datasets", "safetensors", "bitsandbytes")
FINAL_METRICS = ("mean_token_accuracy", "rewards/accuracies", "rewards/margins", "reward")


class QLoRAUnavailableError(TrainerError, RuntimeError):
    """QLoRA was asked for on a machine without bitsandbytes or a CUDA device."""


class RunDirectoryError(TrainerError, FileExistsError):
    """The output directory already holds a finished run."""


@dataclass(frozen=True)
class BaseWeights:
    path: Path  # local directory the weights are loaded from
    name: str  # what run.json and the adapter entry call it
    weights_digest: str  # trainer.publish.model_digest of `path`


@dataclass
class TrainResult:
    run_dir: Path
    manifest: dict[str, Any]  # the content of run.json
    trainer: Any  # the TRL trainer, its `model` the trained PeftModel


# --------------------------------------------------------------------------- inputs


def resolve_base_model(config: GradientConfig, run_dir: Path) -> BaseWeights:
    """Where the base weights are, their name and digest (writes `base/` for tiny-random)."""
    from trainer.backends import default_model_dir, tiny_random_model
    from trainer.provenance import model_digest

    if config.model == TINY_RANDOM:
        path = tiny_random_model(run_dir / "base")
        config_hash = hashlib.sha256((path / "config.json").read_bytes()).hexdigest()
        name = f"{TINY_RANDOM}:{config_hash[:16]}"
    elif config.model:
        path, name = Path(config.model), config.model
    else:
        path, name = default_model_dir(), DEFAULT_MODEL_NAME
    if not (path / "config.json").is_file():
        raise ConfigError(f"model {config.model!r}: {path} is not a local model directory "
                          "(no config.json)")
    digest = model_digest(path)
    if digest is None:
        raise ConfigError(f"model {config.model!r}: {path} holds no weight files")
    return BaseWeights(path, name, digest)


def resolve_device(config: GradientConfig) -> str:
    import torch

    device = config.training.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("training.device is cuda but torch sees no CUDA device")
    return device


def qlora_quantization(device: str):
    """The 4-bit NF4 `BitsAndBytesConfig` of QLoRA, or a clear error saying what is missing."""
    missing = []
    if importlib.util.find_spec("bitsandbytes") is None:
        missing.append("the bitsandbytes package is not installed")
    if device != "cuda":
        missing.append("there is no CUDA device (training.device resolves to cpu)")
    if missing:
        raise QLoRAUnavailableError(
            "qlora needs bitsandbytes and a CUDA GPU: " + "; ".join(missing) +
            ". Set `qlora: false` to train LoRA on the full-precision base.")
    import torch
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                              bnb_4bit_use_double_quant=True,
                              bnb_4bit_compute_dtype=torch.bfloat16)


def lora_config(config: GradientConfig):
    from peft import LoraConfig

    lora = config.lora
    return LoraConfig(
        r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
        target_modules=lora.target_modules, use_rslora=lora.rslora, use_dora=lora.dora,
        init_lora_weights=True if lora.init == "default" else lora.init, task_type="CAUSAL_LM")


def load_tokenizer(path: Path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_train_dataset(config: GradientConfig, tokenizer):
    from datasets import Dataset

    from trainer.gradient.formats import load_dataset_rows

    section = config.dataset
    rows = load_dataset_rows(section.path, section.format, chat=bool(tokenizer.chat_template),
                             system_prompt=section.system_prompt, limit=section.limit)
    return Dataset.from_list(rows)


# --------------------------------------------------------------------------- TRL


def trl_arguments(config: GradientConfig, run_dir: Path, device: str):
    """The TRL config object (`SFTConfig`, `DPOConfig` or `GRPOConfig`) for `config`."""
    t = config.training
    common = {
        "output_dir": str(run_dir / "trl"), "seed": t.seed, "data_seed": t.seed,
        "learning_rate": t.learning_rate, "lr_scheduler_type": t.lr_scheduler,
        "warmup_steps": t.warmup_steps, "num_train_epochs": t.epochs,
        "max_steps": t.max_steps if t.max_steps is not None else -1,
        "per_device_train_batch_size": t.batch_size,
        "gradient_accumulation_steps": t.grad_accumulation, "logging_steps": t.logging_steps,
        "gradient_checkpointing": t.gradient_checkpointing, "use_cpu": device == "cpu",
        "bf16": device == "cuda", "save_strategy": "no", "report_to": [], "disable_tqdm": True,
        "dataloader_num_workers": 0, "ddp_find_unused_parameters": False,
        "model_init_kwargs": {"dtype": "bfloat16" if config.qlora else "float32"},
        # QLoRA's paged AdamW (bitsandbytes): optimizer state pages out to CPU memory on spikes
        **({"optim": "paged_adamw_32bit"} if config.qlora else {})}
    try:
        if config.method == "sft":
            from trl import SFTConfig

            return SFTConfig(**common, max_length=t.max_length)
        if config.method == "dpo":
            from trl import DPOConfig

            return DPOConfig(**common, max_length=t.max_length, beta=config.dpo.beta,
                             loss_type=[config.dpo.loss_type])
        if config.method == "kto":
            from trl import KTOConfig  # TRL 1.16: promoted from trl.experimental

            k = config.kto
            return KTOConfig(**common, max_length=t.max_length, beta=k.beta,
                             desirable_weight=k.desirable_weight,
                             undesirable_weight=k.undesirable_weight)
        if config.method == "orpo":
            from trl.experimental.orpo import ORPOConfig  # experimental in TRL 1.16

            return ORPOConfig(**common, max_length=t.max_length, beta=config.orpo.beta)
        from trl import GRPOConfig

        g, gspo = config.grpo, config.method == "gspo"
        return GRPOConfig(
            **common, num_generations=g.num_generations,
            max_completion_length=g.max_completion_length, temperature=g.temperature,
            top_p=g.top_p, beta=g.beta, num_iterations=g.num_iterations,
            epsilon=g.epsilon if g.epsilon is not None else (3e-4 if gspo else 0.2),
            epsilon_high=g.epsilon_high if g.epsilon_high is not None else (
                4e-4 if gspo else None),
            loss_type=g.loss_type or ("grpo" if gspo else "dapo"),
            importance_sampling_level="sequence" if gspo else "token",
            reward_weights=config.reward.weights, log_completions=False)
    except ValueError as exc:  # TRL's own consistency checks
        raise ConfigError(f"TRL refused the {config.method} settings: {exc}") from None


def _throughput_callback():
    """A `TrainerCallback` that adds to each training log row the seconds per optimizer step
    since the previous row (`step_time_s`) and, where TRL counts tokens (its cumulative
    `num_tokens`, all ranks), the tokens per second over them (`step_tokens_per_s`): the
    throughput curves of `run.metrics`."""
    import time

    from transformers import TrainerCallback

    class Throughput(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            start = time.perf_counter()
            self.last = (start, state.global_step)  # the previous training row
            self.counted = (start, 0.0)  # the previous row with a token count

        def on_log(self, args, state, control, logs=None, **kwargs):
            row = state.log_history[-1] if state.log_history else {}
            if "loss" not in row or state.global_step <= self.last[1]:
                return
            now = time.perf_counter()
            row["step_time_s"] = (now - self.last[0]) / (state.global_step - self.last[1])
            self.last = (now, state.global_step)
            if "num_tokens" in row and now > self.counted[0]:
                tokens = float(row["num_tokens"])
                row["step_tokens_per_s"] = (tokens - self.counted[1]) / (now - self.counted[0])
                self.counted = (now, tokens)

    return Throughput()


def build_trainer(config: GradientConfig, base: BaseWeights, run_dir: Path, callbacks=()):
    """The TRL trainer of `config`, its model wrapped by PEFT (nothing trained yet)."""
    from transformers import PrinterCallback

    device = resolve_device(config)
    quantization = qlora_quantization(device) if config.qlora else None
    args = trl_arguments(config, run_dir, device)
    tokenizer = load_tokenizer(base.path)
    dataset = load_train_dataset(config, tokenizer)
    shared = {"model": str(base.path), "args": args, "train_dataset": dataset,
              "processing_class": tokenizer, "peft_config": lora_config(config),
              "callbacks": [*callbacks, _throughput_callback()],
              "quantization_config": quantization}
    if config.method == "sft":
        from trl import SFTTrainer

        trainer = SFTTrainer(**shared)
    elif config.method == "dpo":
        from trl import DPOTrainer

        trainer = DPOTrainer(**shared)
    elif config.method == "kto":
        from trl import KTOTrainer

        trainer = KTOTrainer(**shared)
    elif config.method == "orpo":
        from trl.experimental.orpo import ORPOTrainer

        if quantization is not None:  # ORPOTrainer loads the model from model_init_kwargs
            args.model_init_kwargs["quantization_config"] = quantization
        del shared["quantization_config"]
        trainer = ORPOTrainer(**shared)
    else:
        from trl import GRPOTrainer

        from trainer.gradient.rewards import reward_functions

        trainer = GRPOTrainer(reward_funcs=reward_functions(config.reward.verifiers), **shared)
    trainer.remove_callback(PrinterCallback)  # the caller's callbacks report progress
    if len(trainer.train_dataset) == 0:  # TRL drops rows whose answer truncation removed
        raise ConfigError(f"no {config.dataset.path} row is left to train on after truncation "
                          f"to training.max_length = {config.training.max_length} tokens: "
                          "raise max_length")
    return trainer


# --------------------------------------------------------------------------- outputs


def save_adapter(model, directory: Path, base_name: str,
                 state_dict: dict[str, Any] | None = None) -> dict[str, Any]:
    """PEFT `save_pretrained` of the default adapter, with a hash-order-free config (from
    ``state_dict`` when the parameters were sharded: `sharded_state_dict`)."""
    peft_config = model.peft_config["default"]
    peft_config.base_model_name_or_path = base_name
    if isinstance(peft_config.target_modules, set | list):
        peft_config.target_modules = sorted(peft_config.target_modules)
    extra = {} if state_dict is None else {"state_dict": state_dict}
    model.save_pretrained(str(directory), selected_adapters=["default"],
                          save_embedding_layers=False, **extra)
    (directory / "README.md").unlink(missing_ok=True)
    return read_json_file(directory / "adapter_config.json")


def sharded_state_dict(trainer) -> dict[str, Any] | None:
    """The full state dict when FSDP or DeepSpeed sharded the parameters (accelerate gathers
    it: a collective every rank calls; rank 0 holds it), else None (every rank holds them)."""
    from accelerate.utils import DistributedType

    accelerator = trainer.accelerator
    if accelerator.distributed_type not in (DistributedType.FSDP, DistributedType.DEEPSPEED):
        return None
    return accelerator.get_state_dict(trainer.model)


def metric_curves(log_history: list[dict]) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Per-step curves (`loss` renamed `train_loss`) and the run summary from TRL's log."""
    curves: dict[str, list[float]] = {}
    summary: dict[str, float] = {}
    for row in log_history:
        if "train_runtime" in row:
            summary = {"train_runtime_s": float(row["train_runtime"]),
                       "mean_train_loss": float(row.get("train_loss", math.nan))}
            continue
        for key, value in row.items():
            if key in ("epoch", "step") or isinstance(value, bool):
                continue
            if isinstance(value, int | float) and math.isfinite(value):
                curves.setdefault("train_loss" if key == "loss" else key, []).append(float(value))
    return curves, {k: v for k, v in summary.items() if math.isfinite(v)}


def build_manifest(config: GradientConfig, base: BaseWeights, adapter_config: dict,
                   log_history: list[dict], global_step: int) -> dict[str, Any]:
    from trainer.provenance import code_version, file_digest, hardware, packages

    curves, summary = metric_curves(log_history)
    dataset_digest = file_digest(config.dataset.path)
    metrics: dict[str, Any] = {**curves, **summary, "train_steps": global_step}
    if "num_tokens" in curves and summary.get("train_runtime_s"):
        metrics["train_tokens_per_s"] = curves["num_tokens"][-1] / summary["train_runtime_s"]
    final = {"train_steps": float(global_step), **summary}
    if "train_tokens_per_s" in metrics:
        final["train_tokens_per_s"] = metrics["train_tokens_per_s"]
    if curves.get("train_loss"):
        final["final_train_loss"] = curves["train_loss"][-1]
    for key in FINAL_METRICS:
        if curves.get(key):
            final["final_" + key.replace("/", "_")] = curves[key][-1]
    run_config = {**config.to_dict(), "base_model": {"name": base.name,
                                                     "weights_digest": base.weights_digest}}
    return {
        "method": config.method,
        "base_model": {"name": base.name, "weights_digest": base.weights_digest},
        "adapter_dir": ADAPTER_DIR,
        "run": {"config": run_config, "code_version": code_version(),
                "packages": packages(EXTRA_PACKAGES),
                "hardware": hardware(), "dataset_digests": [dataset_digest],
                "metrics": metrics},
        "adapter": {"config": adapter_config, "dataset_digest": dataset_digest,
                    "metrics": final},
    }


def distributed_section(trainer, rank: dict[str, Any], weights: str) -> dict[str, Any]:
    """``run.hardware.distributed``: how many processes trained and how (every rank calls it:
    the ranks' records are gathered to each)."""
    from accelerate.utils import gather_object

    accelerator, args = trainer.accelerator, trainer.args
    world = accelerator.num_processes
    ranks = gather_object([{"rank": accelerator.process_index, **rank,
                            "weights_digest": weights}])
    return {"world_size": world, "backend": accelerator.state.backend,
            "distributed_type": str(accelerator.distributed_type.value),
            "per_device_batch_size": args.per_device_train_batch_size,
            "gradient_accumulation_steps": args.gradient_accumulation_steps,
            "global_batch_size": args.per_device_train_batch_size
            * args.gradient_accumulation_steps * world,
            "ranks": sorted(ranks, key=lambda r: r["rank"])}


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def check_run_dir(run_dir: Path) -> None:
    """``RunDirectoryError`` when ``run_dir`` already holds a finished run."""
    if (run_dir / RUN_MANIFEST).exists() or (run_dir / ADAPTER_DIR).exists():
        raise RunDirectoryError(f"{run_dir} already holds a run ({ADAPTER_DIR}/ or "
                                f"{RUN_MANIFEST}); choose another --output or remove it")


def train(config: GradientConfig, callbacks=(), swarm=None) -> TrainResult:
    """Train `config` (its method set, see `GradientConfig.for_method`); write the run dir.
    With ``swarm`` (a `trainer.swarm.peer.SwarmSession`) the peers of a volunteer run average
    the training, and run.json's ``run.hardware.swarm`` says who contributed."""
    if config.method is None:
        raise ConfigError("the config names no method: load it with load_config(..., method=)")
    run_dir = Path(config.output_dir)
    check_run_dir(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # a rank of `distributed.launch`
        from accelerate import PartialState

        with PartialState().main_process_first():  # rank 0 writes base/, the others read it
            base = resolve_base_model(config, run_dir)
    else:
        base = resolve_base_model(config, run_dir)
    trainer = build_trainer(config, base, run_dir, callbacks)
    trace = RankTrace(trainer.model)
    swarm_section = None
    try:
        if swarm is not None:
            swarm.attach(trainer, base)
        trainer.train()
        if swarm is not None:
            swarm_section = swarm.finish(trainer)
    finally:
        if swarm is not None:
            swarm.close()
    accelerator = trainer.accelerator
    model = accelerator.unwrap_model(trainer.model)
    full_state = sharded_state_dict(trainer)  # FSDP, ZeRO: gathered by every rank, for rank 0
    distributed = distributed_section(
        trainer, trace.close(),
        "gathered on rank 0" if full_state == {} else weights_digest(model, full_state))
    if not accelerator.is_main_process:  # rank 0 alone writes the run directory
        return TrainResult(run_dir, {}, trainer)
    adapter_config = save_adapter(model, run_dir / ADAPTER_DIR, base.name, full_state)
    manifest = build_manifest(config, base, adapter_config, trainer.state.log_history,
                              trainer.state.global_step)
    manifest["run"]["hardware"]["distributed"] = distributed
    if swarm_section is not None:
        manifest["run"]["hardware"]["swarm"] = swarm_section
    _write_json(run_dir / RUN_MANIFEST, manifest)
    try:
        (run_dir / "trl").rmdir()  # TRL's output_dir: empty unless something saved there
    except OSError:
        pass
    return TrainResult(run_dir, manifest, trainer)
