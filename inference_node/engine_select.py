"""Which engine `gym node serve` runs: `--engine auto` (the default), `transformers` or `vllm`.

`auto` picks vLLM, the faster engine (``benchmarks/bench_engines.py``: on SmolLM2-135M on this
2-core CPU 1.9x transformers single-stream and 2.2x at batch 8, identical greedy answers),
whenever vLLM can serve the model, and the transformers engine otherwise, saying why:

- ``--device`` was given: that option places the transformers engine, so asking for a device
  asks for that engine;
- vLLM is not installed (``scripts/setup_vllm.sh`` installs the CPU build);
- vLLM's attention backend on this platform has no kernel for the model's head size (the CPU
  backend needs 32, 64, 80, …; tiny test models with 16-dimensional heads fall back);
- vLLM has no implementation of the model's architecture.

The checks ask vLLM itself (its platform, its attention backend's head sizes, its model
registry) rather than a copy of those lists, so they follow the installed version. Importing vLLM
to ask takes a few seconds, paid only when vLLM is installed.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path

KINDS = ("auto", "transformers", "vllm")


@dataclass(frozen=True)
class EngineChoice:
    kind: str  # "transformers" or "vllm"
    reason: str
    automatic: bool  # chosen by `auto`; a vLLM start-up failure may then fall back


def choose_engine(kind: str, model_dir: str | Path, *, device: str | None = None
                  ) -> EngineChoice:
    """The engine to run for `--engine kind` (one of `KINDS`) on `model_dir`."""
    if kind not in KINDS:
        raise ValueError(f"unknown engine {kind!r}; choose one of {', '.join(KINDS)}")
    if kind != "auto":
        return EngineChoice(kind, "chosen with --engine", automatic=False)

    def fallback(why: str) -> EngineChoice:
        return EngineChoice("transformers", why, automatic=True)

    if device is not None:
        return fallback(f"--device {device} places the transformers engine")
    if importlib.util.find_spec("vllm") is None:
        return fallback("vLLM is not installed (scripts/setup_vllm.sh installs it on CPUs)")
    config = _read_config(Path(model_dir))
    architectures = config.get("architectures") or []
    head_size = _head_size(config)
    problem = vllm_unsupported(architectures, head_size)
    if problem:
        return fallback(problem)
    return EngineChoice("vllm", f"vLLM supports {architectures[0]} with head size {head_size}, "
                        "and it is the faster engine", automatic=True)


def vllm_unsupported(architectures: list[str], head_size: int | None) -> str | None:
    """Why the installed vLLM cannot serve such a model here, or None when it can."""
    from vllm.platforms import current_platform

    if not architectures:
        return "the model's config.json names no architecture for vLLM to load"
    if current_platform.is_cpu() and head_size is not None:
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

        sizes = CPUAttentionBackend.get_supported_head_sizes()
        if head_size not in sizes:
            return (f"vLLM's CPU attention has no kernel for head size {head_size} "
                    f"(it supports {', '.join(map(str, sizes))})")
    from vllm.model_executor.models import ModelRegistry

    supported = set(ModelRegistry.get_supported_archs())
    if not any(arch in supported for arch in architectures):
        return f"vLLM has no implementation of {', '.join(architectures)}"
    return None


def _read_config(model_dir: Path) -> dict:
    try:
        return json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError):
        return {}  # the engine that loads it reports the real problem


def _head_size(config: dict) -> int | None:
    if config.get("head_dim"):
        return int(config["head_dim"])
    hidden, heads = config.get("hidden_size"), config.get("num_attention_heads")
    return hidden // heads if hidden and heads else None
