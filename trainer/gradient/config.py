"""The YAML config of a gradient-training run (`gym train sft|dpo|kto|orpo|grpo|gspo CONFIG.yaml`).

One file describes one run, in the spirit of LLaMA-Factory and Axolotl: the base model, the
method, the dataset and its format, the LoRA adapter, the optimisation, and for GRPO/GSPO the
rewards. Sections map onto TRL's `SFTConfig`/`DPOConfig`/`GRPOConfig` and PEFT's `LoraConfig`
(see `trainer/gradient/train.py`); only the knobs a researcher turns every day are exposed.

    method: sft                       # sft | dpo | kto | orpo | grpo | gspo (optional: the
                                      # command decides)
    model: ""                         # local model dir; "" = cached SmolLM2; tiny-random (tests)
    dataset: {path: trainer/data/sft_arith_alpaca.jsonl, format: alpaca}
    lora: {r: 8, alpha: 16, dropout: 0.0, target_modules: all-linear, rslora: false,
           dora: false, init: default}
    qlora: false                      # 4-bit base (bitsandbytes + CUDA only)
    training: {learning_rate: 2.0e-4, epochs: 1, max_steps: null, batch_size: 4,
               grad_accumulation: 1, max_length: 256, seed: 0, logging_steps: 1}
    output_dir: runs/sft-smollm2

Unknown keys anywhere are rejected with their dotted path (`training.lerning_rate: unknown
key`), as is a section that does not belong to the method (`dpo:` in an SFT config).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from trainer.tfgrpo_config import ConfigError, resolve_input

Method = Literal["sft", "dpo", "kto", "orpo", "grpo", "gspo"]
METHODS: tuple[str, ...] = ("sft", "dpo", "kto", "orpo", "grpo", "gspo")
TINY_RANDOM = "tiny-random"
# LoRA initialisations that rewrite the base weights (W -> W - BA): with the adapter disabled the
# model is no longer the base, so TRL's implicit reference model (adapter off) would be wrong.
BASE_MUTATING_INITS = ("pissa", "olora")
FORMATS_BY_METHOD = {"sft": ("alpaca", "sharegpt"), "dpo": ("preference",), "kto": ("kto",),
                     "orpo": ("preference",), "grpo": ("prompt",), "gspo": ("prompt",)}
# methods whose reference model is the base with the adapter disabled (TRL's PEFT path)
REFERENCE_BY_ADAPTER_OFF = ("dpo", "kto")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class DatasetSection(_Section):
    path: str = Field(description="local JSON or JSONL file (a list of objects, or one a line).")
    format: Literal["alpaca", "sharegpt", "preference", "kto", "prompt"] = Field(
        description="alpaca: instruction/input/output; sharegpt: conversations of {from, value}; "
                    "preference: prompt/chosen/rejected (DPO, ORPO); kto: prompt/completion/"
                    "label (true: desirable); prompt: problem/answer (GRPO/GSPO).")
    system_prompt: str | None = Field(default=None, description=(
        "system message put before each alpaca/preference/prompt row (sharegpt rows carry "
        "their own); None = none (the tokenizer's template may add its default)."))
    limit: int = Field(default=0, ge=0, description="use only the first N rows (0 = all).")


class LoraSection(_Section):
    r: int = Field(default=8, ge=1, description="LoRA rank.")
    alpha: float = Field(default=16, gt=0, description="scaling numerator: alpha / r "
                                                       "(alpha / sqrt(r) with rslora).")
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0, description="dropout on the LoRA input.")
    target_modules: str | list[str] = Field(default="all-linear", description=(
        "module names (or PEFT's `all-linear`, or a regex string) that get adapters."))
    rslora: bool = Field(default=False, description="rank-stabilised scaling alpha / sqrt(r).")
    dora: bool = Field(default=False, description="weight-decomposed LoRA (DoRA).")
    init: str = Field(default="default", description=(
        "default (PEFT: Kaiming A, zero B) | gaussian | pissa | pissa_niter_N | olora. PiSSA and "
        "OLoRA move the principal part of W into the adapter and leave the residual in the base; "
        "PeftModel.from_pretrained recomputes that residual when it loads the adapter."))

    @model_validator(mode="after")
    def _known_init(self) -> LoraSection:
        if self.init not in ("default", "gaussian", "pissa", "olora") and not re.fullmatch(
                r"pissa_niter_\d+", self.init):
            raise ValueError(f"init must be default, gaussian, pissa, pissa_niter_N or olora, "
                             f"got {self.init!r}")
        return self

    @property
    def mutates_base(self) -> bool:
        return self.init.startswith(BASE_MUTATING_INITS)


class TrainingSection(_Section):
    learning_rate: float = Field(default=2e-4, gt=0, description="peak AdamW learning rate.")
    lr_scheduler: str = Field(default="linear", description="transformers scheduler name.")
    warmup_steps: int = Field(default=0, ge=0, description="linear warm-up steps.")
    epochs: float = Field(default=1.0, gt=0, description="passes over the data "
                                                         "(ignored when max_steps is set).")
    max_steps: int | None = Field(default=None, ge=1, description="optimizer steps; wins over "
                                                                  "epochs.")
    batch_size: int = Field(default=4, ge=1, description=(
        "rows per device step; for grpo/gspo: completions per device step."))
    grad_accumulation: int = Field(default=1, ge=1, description="steps per optimizer update.")
    max_length: int = Field(default=512, ge=8, description=(
        "token cap of one sequence (sft) or of prompt + answer (dpo); grpo/gspo cap only the "
        "completion (grpo.max_completion_length)."))
    seed: int = Field(default=0, ge=0, description="seeds data order, dropout, LoRA init and "
                                                    "sampling: same seed, same adapter bytes.")
    logging_steps: int = Field(default=1, ge=1, description="record metrics every N steps.")
    gradient_checkpointing: bool = Field(default=False, description=(
        "recompute activations in the backward pass (less memory, ~20% slower)."))
    device: Literal["auto", "cpu", "cuda"] = Field(default="auto", description=(
        "auto = cuda when available, else cpu. bf16 is used on cuda only."))


class DPOSection(_Section):
    beta: float = Field(default=0.1, gt=0, description="strength of the KL pull to the base.")
    loss_type: str = Field(default="sigmoid", description="TRL DPO loss (sigmoid, ipo, ...).")


class KTOSection(_Section):
    beta: float = Field(default=0.1, gt=0, description="strength of the KL pull to the base.")
    desirable_weight: float = Field(default=1.0, gt=0, description=(
        "weight of the desirable (label true) rows' loss; raise it when they are fewer."))
    undesirable_weight: float = Field(default=1.0, gt=0, description=(
        "weight of the undesirable (label false) rows' loss."))


class ORPOSection(_Section):
    beta: float = Field(default=0.1, gt=0, description=(
        "lambda of the ORPO paper: weight of the odds-ratio term beside the SFT loss."))


class GRPOSection(_Section):
    num_generations: int = Field(default=4, ge=2, description="G: completions per prompt.")
    max_completion_length: int = Field(default=128, ge=1, description="completion token cap.")
    temperature: float = Field(default=1.0, gt=0, description="rollout sampling temperature.")
    top_p: float = Field(default=1.0, gt=0, le=1, description="rollout nucleus sampling.")
    beta: float = Field(default=0.0, ge=0, description="KL coefficient (0: no reference pass).")
    epsilon: float | None = Field(default=None, gt=0, description=(
        "lower clip range; None = 0.2 (grpo) or 3e-4 (gspo, as in the GSPO paper)."))
    epsilon_high: float | None = Field(default=None, gt=0, description=(
        "upper clip range; None = epsilon (grpo) or 4e-4 (gspo)."))
    loss_type: str | None = Field(default=None, description=(
        "TRL loss aggregation; None = TRL's default (dapo) for grpo, `grpo` for gspo (the "
        "per-sequence objective of the GSPO paper)."))
    num_iterations: int = Field(default=1, ge=1, description="policy updates per generation "
                                                             "batch (mu).")


class RewardSection(_Section):
    verifiers: list[str] = Field(default_factory=lambda: ["math"], min_length=1, description=(
        "trainer/verifiers.py names: math | exact | python:module:function; one TRL reward "
        "function each."))
    weights: list[float] | None = Field(default=None, description="one weight per verifier; "
                                                                  "None = all 1.")

    @model_validator(mode="after")
    def _names(self) -> RewardSection:
        for name in self.verifiers:
            if name == "llm-judge":
                raise ValueError("llm-judge needs a second model and is not a gradient reward")
            if name not in ("math", "exact") and not (name.startswith("python:")
                                                      and name.count(":") == 2):
                raise ValueError(f"unknown verifier {name!r}: use math, exact or "
                                 "python:module:function")
        if self.weights is not None and len(self.weights) != len(self.verifiers):
            raise ValueError(f"{len(self.weights)} weights for {len(self.verifiers)} verifiers")
        return self


class GradientConfig(_Section):
    """Everything of one gradient-training run; see the module docstring for the layout."""

    method: Method | None = Field(default=None, description="sft | dpo | kto | orpo | grpo | "
                                                            "gspo; may be left out (the command "
                                                            "decides).")
    model: str = Field(default="", description=(
        "local model directory; '' = SmolLM2-135M-Instruct (trainer.backends.default_model_dir);"
        " tiny-random = a ~100k-parameter random Llama written to <output_dir>/base (tests)."))
    dataset: DatasetSection
    lora: LoraSection = Field(default_factory=LoraSection)
    qlora: bool = Field(default=False, description="load the base in 4-bit NF4 (bitsandbytes, "
                                                   "CUDA only) and train LoRA on top.")
    training: TrainingSection = Field(default_factory=TrainingSection)
    dpo: DPOSection | None = Field(default=None, description="dpo only.")
    kto: KTOSection | None = Field(default=None, description="kto only.")
    orpo: ORPOSection | None = Field(default=None, description="orpo only.")
    grpo: GRPOSection | None = Field(default=None, description="grpo and gspo only.")
    reward: RewardSection | None = Field(default=None, description="grpo and gspo only.")
    output_dir: str = Field(default="", description="run directory; '' = runs/<method>.")

    @model_validator(mode="after")
    def _sections_fit_method(self) -> GradientConfig:
        if self.method is None:
            return self
        method = self.method
        for section in ("dpo", "kto", "orpo"):
            if getattr(self, section) is not None and method != section:
                raise ValueError(f"the {section} section applies to method {section}, not "
                                 f"{method}")
        if (self.grpo is not None or self.reward is not None) and method not in ("grpo", "gspo"):
            raise ValueError(f"the grpo and reward sections apply to grpo/gspo, not {method}")
        if self.dataset.format not in FORMATS_BY_METHOD[method]:
            raise ValueError(f"dataset.format {self.dataset.format!r} does not fit {method}: use "
                             f"{' or '.join(FORMATS_BY_METHOD[method])}")
        if self.lora.mutates_base and (method in REFERENCE_BY_ADAPTER_OFF or (
                method in ("grpo", "gspo") and self.grpo and self.grpo.beta > 0)):
            raise ValueError(
                f"lora.init {self.lora.init!r} rewrites the base weights, but {method} takes the "
                "base with the adapter disabled as its reference model; use init default or "
                "gaussian" + (" (or grpo.beta: 0)" if method in ("grpo", "gspo") else ""))
        if self.grpo is not None:
            completions = self.training.batch_size * self.training.grad_accumulation
            if completions % self.grpo.num_generations:
                raise ValueError(
                    f"training.batch_size x grad_accumulation = {completions} completions per "
                    f"update must be a multiple of grpo.num_generations = "
                    f"{self.grpo.num_generations}: each prompt's group must stay whole")
        return self

    def for_method(self, method: str, source: str = "config") -> GradientConfig:
        """This config with `method` filled in and method defaults applied; a config that names
        another method is refused (`gym train dpo sft.yaml`)."""
        if self.method is not None and self.method != method:
            raise ConfigError(f"the config is for method {self.method!r}, not {method!r}: run "
                              f"`gym train {self.method}` or change `method:`")
        data = self.model_dump(exclude_unset=False)
        data["method"] = method
        for section, default in (("dpo", DPOSection), ("kto", KTOSection),
                                 ("orpo", ORPOSection)):
            if method == section and data[section] is None:
                data[section] = default().model_dump()
        if method in ("grpo", "gspo"):
            data["grpo"] = data["grpo"] or GRPOSection().model_dump()
            data["reward"] = data["reward"] or RewardSection().model_dump()
        if not data["output_dir"]:
            data["output_dir"] = f"runs/{method}"
        return validate_config(data, source)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def _dotted(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def validate_config(data: Any, source: str = "config") -> GradientConfig:
    """A `GradientConfig` from parsed YAML; any problem is a `ConfigError` naming the key."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level")
    try:
        return GradientConfig.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            where = _dotted(err["loc"])
            message = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
            message = message.removeprefix("Value error, ")
            problems.append(f"{where}: {message}" if where else message)
        raise ConfigError(f"{source}: " + "; ".join(problems)) from None


def load_config(path: str | Path, *, method: str | None = None, output_dir: str | None = None,
                max_steps: int | None = None) -> GradientConfig:
    """Read a YAML config; `method`, `output_dir` and `max_steps` (CLI overrides) win.

    Relative input paths in the file (`dataset.path`, a local `model` directory) are resolved
    against the file's directory; `output_dir` stays relative to the working directory."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    base = path.resolve().parent  # relative inputs are the config file's neighbours
    dataset = data.get("dataset")
    if isinstance(dataset, dict) and isinstance(dataset.get("path"), str) and dataset["path"]:
        data["dataset"] = {**dataset, "path": str(resolve_input(dataset["path"], base))}
    model = data.get("model")
    if isinstance(model, str) and model and model != TINY_RANDOM:
        data["model"] = str(resolve_input(model, base))
    if output_dir is not None:
        data["output_dir"] = output_dir
    if max_steps is not None:
        data.setdefault("training", {})
        if not isinstance(data["training"], dict):
            raise ConfigError(f"{path}: training must be a mapping")
        data["training"]["max_steps"] = max_steps
    config = validate_config(data, str(path))
    return config.for_method(method, str(path)) if method else config
