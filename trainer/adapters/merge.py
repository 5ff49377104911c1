"""Merge a PEFT adapter into its base model, for engines that load plain weights.

``merge_adapter`` loads the base in its saved dtype, wraps it with
``PeftModel.from_pretrained``, folds the adapter into the weights with ``merge_and_unload``
and writes the result with ``save_pretrained`` (safetensors), plus a byte-for-byte copy of
the base's tokenizer files and ``merged_from.json`` (base and adapter digests). The output is
written to a temporary sibling and renamed when complete.

The base must be the model the adapter was trained on. When the adapter directory carries
``adapter_entry.json`` (``gym adapter fetch`` writes it), the base's weights digest
(``trainer.publish.model_digest``: names and SHA-256 of its weight and config files) must equal
the entry's ``base_model.weights_digest``; ``force`` merges anyway and records that it did.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from ledger.entries import files_digest
from trainer.adapters.errors import AdapterError, BaseModelMismatchError
from trainer.adapters.fetch import read_adapter_entry
from trainer.provenance import model_digest

TOKENIZER_FILES = ("tokenizer*", "special_tokens_map.json", "added_tokens.json", "vocab.*",
                   "merges.txt", "chat_template.*", "*.model")
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")


@dataclass(frozen=True)
class BaseCheck:
    digest: str | None  # weights digest of the base directory given
    expected: str | None  # what adapter_entry.json names, when there is one
    entry_cid: str | None  # CID of that adapter entry
    name: str | None = None  # the base model's name in that entry

    @property
    def forced(self) -> bool:
        return self.expected is not None and self.expected != self.digest


@dataclass(frozen=True)
class MergeResult:
    output: Path
    base: BaseCheck
    tensors: int  # weight tensors written


def adapter_digest(adapter_dir: str | Path) -> str:
    """``sha256:`` over the names and SHA-256 of a PEFT adapter's config and weight files."""
    adapter_dir = Path(adapter_dir)
    files = [adapter_dir / name for name in ADAPTER_FILES if (adapter_dir / name).is_file()]
    if not files:
        raise AdapterError(f"{adapter_dir} is not a PEFT adapter directory (no "
                           "adapter_config.json)")
    return files_digest(files)


def check_base_model(adapter_dir: str | Path, base_dir: str | Path, *, force: bool = False
                     ) -> BaseCheck:
    """Compare ``base_dir``'s weights digest with the adapter entry's, if the adapter has one.

    Raises ``BaseModelMismatchError`` on a mismatch unless ``force``.
    """
    if not (Path(base_dir) / "config.json").is_file():
        raise AdapterError(f"{base_dir} is not a model directory (no config.json)")
    found = read_adapter_entry(adapter_dir)
    if found is None:
        return BaseCheck(model_digest(base_dir), None, None)
    cid, entry = found
    digest = model_digest(base_dir)
    expected = entry.base_model.weights_digest
    if digest != expected and not force:
        raise BaseModelMismatchError(
            f"{base_dir} is not the base model of adapter {cid}: its weights digest is "
            f"{digest}, the adapter entry names {entry.base_model.name} with {expected} "
            "(pass --force to use it anyway)")
    return BaseCheck(digest, expected, cid, entry.base_model.name)


def load_base(base_dir: str | Path, dtype="auto"):
    """The base causal LM in eval mode (``dtype='auto'``: as saved)."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(base_dir, dtype=dtype).eval()


def load_adapted(base_dir: str | Path, adapter_dir: str | Path, dtype="auto"):
    """``PeftModel`` of the adapter over a freshly loaded base, in eval mode."""
    from peft import PeftModel

    if not (Path(adapter_dir) / "adapter_config.json").is_file():
        raise AdapterError(f"{adapter_dir} is not a PEFT adapter directory (no "
                           "adapter_config.json)")
    return PeftModel.from_pretrained(load_base(base_dir, dtype), adapter_dir).eval()


def copy_tokenizer(base_dir: Path, output: Path) -> list[str]:
    """Copy the base's tokenizer files unchanged; returns their names."""
    names = sorted({p.name for pattern in TOKENIZER_FILES for p in base_dir.glob(pattern)
                    if p.is_file()})
    for name in names:
        shutil.copy2(base_dir / name, output / name)
    return names


def prepare_output(output: Path) -> Path:
    """A fresh temporary sibling of ``output``; ``output`` must not exist or be empty."""
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        raise AdapterError(f"{output} already exists and is not an empty directory: choose a "
                           "new one (nothing is overwritten)")
    tmp = output.parent / f".{output.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def finish_output(tmp: Path, output: Path) -> None:
    if output.is_dir():
        output.rmdir()
    tmp.rename(output)


def merge_adapter(adapter_dir: str | Path, base_dir: str | Path, output: str | Path, *,
                  force: bool = False) -> MergeResult:
    """Write base + adapter as one plain model directory at ``output``."""
    adapter_dir, base_dir, output = Path(adapter_dir), Path(base_dir), Path(output)
    base = check_base_model(adapter_dir, base_dir, force=force)
    model = load_adapted(base_dir, adapter_dir).merge_and_unload()
    tmp = prepare_output(output)
    try:
        model.save_pretrained(tmp)
        copy_tokenizer(base_dir, tmp)
        (tmp / "merged_from.json").write_text(json.dumps({
            "base_dir": str(base_dir), "base_weights_digest": base.digest,
            "adapter_dir": str(adapter_dir), "adapter_digest": adapter_digest(adapter_dir),
            "adapter_entry_cid": base.entry_cid, "forced_base_mismatch": base.forced}, indent=1))
        finish_output(tmp, output)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return MergeResult(output, base, len(model.state_dict()))
