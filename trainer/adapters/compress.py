"""Quantised weight deltas: what an adapter changes in its base, stored in 1 to 8 bits.

The delta of an adapter is ``ΔW = merged − base`` for every weight the merge changes
(``weight_delta``), computed in float32. Each 2-D ΔW (out × in) is cut into scale groups along
its input dimension: a whole output row by default, or ``group_size`` consecutive columns of a
row. Then (``compress_delta``):

- **1 bit** (BitDelta, Liu et al. 2024): the sign of each element, packed 8 to a byte, and one
  scale per group, the mean of |ΔW| over the group. ``Ŵ = scale · sign``: for a fixed sign
  pattern this is the scale that minimises the squared error. BitDelta then distils the scales
  against the fine-tuned model; that step is not done here (the scales are the closed form).
- **2 to 8 bits**: symmetric round-to-nearest with one scale per group,
  ``scale = max|ΔW| / (2^(b−1) − 1)``, codes ``q + 2^(b−1) − 1`` in ``[0, 2^b − 2]`` packed
  ``b`` bits each into a little-endian bit stream. Every element is within ``scale / 2`` of ΔW.
- other changed tensors (1-D: norms, biases) are kept dense in float32.

``decompress_delta`` inverts this to float32 tensors and ``apply_delta`` adds them to a base
model in place. The artefact directory (``save_delta``) holds ``delta.safetensors`` (per tensor
``NAME:codes`` uint8, ``NAME:scales`` float32, or ``NAME:dense`` float32) and
``delta_config.json`` (format, bits, grouping, base weights digest, source adapter digest and
entry CID, and every tensor's name, shape and kind); ``load_delta`` reads it back and checks
that the two agree, and ``merge_delta`` writes base + delta as a plain model directory (what
``gym adapter merge`` does with a delta directory, e.g. one fetched from the ledger).

``compress_adapter`` is the whole ``gym adapter compress`` pipeline: delta, compression,
artefact, sizes, and perplexity of base, merged and compressed-delta models on held-out text.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from trainer._json import read_json_file
from trainer.adapters.errors import AdapterError, BaseModelMismatchError, DeltaFormatError
from trainer.adapters.fetch import read_adapter_entry
from trainer.adapters.merge import (
    BaseCheck,
    MergeResult,
    adapter_digest,
    check_base_model,
    copy_tokenizer,
    finish_output,
    load_adapted,
    load_base,
    prepare_output,
)
from trainer.provenance import model_digest

DELTA_FILE = "delta.safetensors"
CONFIG_FILE = "delta_config.json"
REPORT_FILE = "compress_report.json"  # measurements; not part of the published artefact
FORMAT = "gym-weight-delta"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class TensorSpec:
    name: str  # parameter name in the base model's state dict
    shape: tuple[int, ...]
    kind: str  # "sign" (1 bit), "int" (2-8 bits) or "dense" (float32)


@dataclass
class CompressedDelta:
    bits: int  # 1..8
    group_size: int  # input columns per scale (0: a whole output row)
    specs: list[TensorSpec]
    tensors: dict[str, torch.Tensor]  # the safetensors payload

    def payload_bytes(self) -> int:
        """Bytes of codes, scales and dense tensors (the safetensors file adds a header)."""
        return sum(t.numel() * t.element_size() for t in self.tensors.values())

    def numel(self) -> int:
        """Elements of the dense delta this encodes."""
        return sum(int(np.prod(s.shape)) for s in self.specs)


# --- bit packing --------------------------------------------------------------------------


def pack_codes(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack uint8 ``codes`` (each < 2**bits) as a little-endian stream of ``bits``-bit fields:
    code i occupies stream bits [i*bits, (i+1)*bits), stream bit j is bit j % 8 of byte j // 8."""
    flat = codes.reshape(-1).to(torch.uint8)
    if bits == 8:
        return flat.clone()
    if 8 % bits == 0:  # 1, 2, 4: whole fields per byte, shift and OR
        per = 8 // bits
        flat = torch.cat([flat, flat.new_zeros(-flat.numel() % per)]).reshape(-1, per)
        packed = flat[:, 0].clone()
        for i in range(1, per):
            packed |= flat[:, i] << (i * bits)
        return packed
    fields = np.unpackbits(flat.numpy()[:, None], axis=1, count=bits, bitorder="little")
    return torch.from_numpy(np.packbits(fields.reshape(-1), bitorder="little"))


def unpack_codes(packed: torch.Tensor, bits: int, count: int) -> torch.Tensor:
    """Inverse of ``pack_codes``: ``count`` uint8 codes."""
    data = packed.reshape(-1).to(torch.uint8)
    if bits == 8:
        return data[:count].clone()
    if 8 % bits == 0:
        per, mask = 8 // bits, 2 ** bits - 1
        fields = torch.stack([(data >> (i * bits)) & mask for i in range(per)], dim=1)
        return fields.reshape(-1)[:count].contiguous()
    fields = np.unpackbits(data.numpy(), count=count * bits, bitorder="little")
    fields = fields.reshape(count, bits)
    return torch.from_numpy(np.packbits(fields, axis=1, bitorder="little").reshape(count))


def packed_size(count: int, bits: int) -> int:
    return (count * bits + 7) // 8


# --- delta --------------------------------------------------------------------------------


def weight_delta(base_model, tuned_model) -> dict[str, torch.Tensor]:
    """``tuned − base`` in float32 for every tensor that differs (tied aliases once)."""
    base = base_model.state_dict()
    delta, seen = {}, set()
    for name, tensor in tuned_model.state_dict().items():
        if name not in base or tensor.data_ptr() in seen:
            continue
        seen.add(tensor.data_ptr())
        if tensor.shape != base[name].shape:
            raise AdapterError(f"{name} has shape {tuple(tensor.shape)} in the tuned model and "
                               f"{tuple(base[name].shape)} in the base")
        if not torch.equal(tensor, base[name]):
            delta[name] = tensor.detach().float() - base[name].detach().float()
    return delta


def adapter_delta(base_dir: str | Path, adapter_dir: str | Path) -> dict[str, torch.Tensor]:
    """ΔW of a PEFT adapter: merged (in float32) minus base."""
    merged = load_adapted(base_dir, adapter_dir, torch.float32).merge_and_unload()
    return weight_delta(load_base(base_dir, torch.float32), merged)


def _groups(delta: torch.Tensor, group_size: int, name: str) -> torch.Tensor:
    rows, cols = delta.shape
    size = group_size or cols
    if cols % size:
        raise AdapterError(f"{name}: {cols} input columns do not split into groups of {size}")
    return delta.reshape(rows, cols // size, size)


def compress_delta(delta: dict[str, torch.Tensor], bits: int, group_size: int = 0
                   ) -> CompressedDelta:
    """Quantise ``delta`` (name -> float tensor) to ``bits`` per element (module docstring)."""
    if not 1 <= bits <= 8:
        raise AdapterError(f"bits must be 1..8, got {bits}")
    if group_size < 0:
        raise AdapterError(f"group size must be >= 0 (0: a whole row), got {group_size}")
    specs, tensors = [], {}
    for name in sorted(delta):
        d = delta[name].detach().float().cpu()
        if d.dim() != 2:
            specs.append(TensorSpec(name, tuple(d.shape), "dense"))
            tensors[f"{name}:dense"] = d.contiguous()
            continue
        g = _groups(d, group_size, name)
        if bits == 1:
            scales = g.abs().mean(-1)
            codes = (g >= 0).to(torch.uint8)
            kind = "sign"
        else:
            qmax = 2 ** (bits - 1) - 1
            scales = g.abs().amax(-1) / qmax
            safe = scales.clamp_min(torch.finfo(torch.float32).tiny)[..., None]
            codes = (torch.round(g / safe).clamp(-qmax, qmax) + qmax).to(torch.uint8)
            kind = "int"
        specs.append(TensorSpec(name, tuple(d.shape), kind))
        tensors[f"{name}:codes"] = pack_codes(codes, bits)
        tensors[f"{name}:scales"] = scales.contiguous()
    return CompressedDelta(bits, group_size, specs, tensors)


def decompress_delta(compressed: CompressedDelta) -> dict[str, torch.Tensor]:
    """The float32 delta that ``compressed`` encodes, name -> tensor."""
    out = {}
    qmax = 2 ** (compressed.bits - 1) - 1
    for spec in compressed.specs:
        if spec.kind == "dense":
            out[spec.name] = compressed.tensors[f"{spec.name}:dense"].float()
            continue
        scales = compressed.tensors[f"{spec.name}:scales"].float()
        count = int(np.prod(spec.shape))
        codes = unpack_codes(compressed.tensors[f"{spec.name}:codes"], compressed.bits, count)
        codes = codes.reshape(scales.shape[0], scales.shape[1], -1).float()
        values = (2 * codes - 1) if spec.kind == "sign" else (codes - qmax)
        out[spec.name] = (values * scales[..., None]).reshape(spec.shape)
    return out


def apply_delta(base_model, delta: dict[str, torch.Tensor]):
    """Add ``delta`` to ``base_model``'s parameters in place (each tied tensor once)."""
    params = dict(base_model.named_parameters(remove_duplicate=False))
    done = set()
    with torch.no_grad():
        for name, d in delta.items():
            if name not in params:
                raise DeltaFormatError(f"the model has no parameter {name}: is it the base the "
                                       "delta was made for?")
            param = params[name]
            if tuple(param.shape) != tuple(d.shape):
                raise DeltaFormatError(f"{name}: the delta has shape {tuple(d.shape)}, the model "
                                       f"{tuple(param.shape)}")
            if param.data_ptr() in done:
                continue
            done.add(param.data_ptr())
            param.add_(d.to(param.device, param.dtype))
    return base_model


# --- artefact -----------------------------------------------------------------------------


def delta_config(compressed: CompressedDelta, *, base_name: str | None, base_digest: str | None,
                 source_digest: str | None, source_entry_cid: str | None) -> dict:
    """The JSON object written as ``delta_config.json`` (and published as the entry config)."""
    return {
        "format": FORMAT, "v": FORMAT_VERSION, "bits": compressed.bits,
        "scheme": "sign x mean|dW| per group" if compressed.bits == 1
        else "symmetric round-to-nearest, max|dW| per group",
        "grouping": {"axis": "input columns within an output row",
                     "group_size": compressed.group_size},
        "base_model": {"name": base_name, "weights_digest": base_digest},
        "source_adapter": {"digest": source_digest, "entry_cid": source_entry_cid},
        "tensors": [{"name": s.name, "shape": list(s.shape), "kind": s.kind}
                    for s in compressed.specs],
    }


def save_delta(compressed: CompressedDelta, config: dict, directory: Path) -> None:
    save_file(compressed.tensors, directory / DELTA_FILE, metadata={"format": "pt"})
    (directory / CONFIG_FILE).write_text(json.dumps(config, indent=1) + "\n")


def _expected_sizes(spec: TensorSpec, bits: int, group_size: int) -> dict[str, tuple[int, ...]]:
    if spec.kind == "dense":
        return {f"{spec.name}:dense": spec.shape}
    rows, cols = spec.shape
    groups = cols // (group_size or cols)
    return {f"{spec.name}:codes": (packed_size(rows * cols, bits),),
            f"{spec.name}:scales": (rows, groups)}


def load_delta(directory: str | Path) -> tuple[CompressedDelta, dict]:
    """Read a delta directory; ``DeltaFormatError`` unless config and tensors agree."""
    directory = Path(directory)
    try:
        config = read_json_file(directory / CONFIG_FILE)
        tensors = load_file(directory / DELTA_FILE)
    except FileNotFoundError as exc:
        raise DeltaFormatError(f"{directory} is not a delta directory: {exc.filename} is "
                               "missing") from None
    except (ValueError, OSError) as exc:
        raise DeltaFormatError(f"{directory}: unreadable delta ({exc})") from None
    if not isinstance(config, dict) or config.get("format") != FORMAT or \
            config.get("v") != FORMAT_VERSION:
        raise DeltaFormatError(f"{directory / CONFIG_FILE} is not a {FORMAT} v{FORMAT_VERSION} "
                               "config")
    bits, group_size = config.get("bits"), config.get("grouping", {}).get("group_size")
    if type(bits) is not int or not 1 <= bits <= 8 or type(group_size) is not int:
        raise DeltaFormatError(f"{directory / CONFIG_FILE}: bad bits or group_size")
    specs, expected = [], {}
    for item in config.get("tensors", []):
        spec = TensorSpec(item["name"], tuple(item["shape"]), item["kind"])
        kind_ok = spec.kind == "dense" or (len(spec.shape) == 2 and spec.kind ==
                                           ("sign" if bits == 1 else "int"))
        if not kind_ok or (spec.kind != "dense" and group_size and spec.shape[1] % group_size):
            raise DeltaFormatError(f"{directory / CONFIG_FILE}: tensor {spec.name} has kind "
                                   f"{spec.kind!r} and shape {spec.shape}, which {bits} bits "
                                   f"and group size {group_size} cannot encode")
        specs.append(spec)
        expected.update(_expected_sizes(spec, bits, group_size))
    actual = {name: tuple(t.shape) for name, t in tensors.items()}
    if actual != expected:
        wrong = sorted(set(actual) ^ set(expected)) or sorted(
            n for n in expected if expected[n] != actual[n])
        raise DeltaFormatError(f"{directory / DELTA_FILE} does not match its config (first "
                               f"difference: {wrong[0]})")
    return CompressedDelta(bits, group_size, specs, tensors), config


def merge_delta(delta_dir: str | Path, base_dir: str | Path, output: str | Path, *,
                force: bool = False) -> MergeResult:
    """Write base + decompressed delta as one model directory at ``output``.

    The base's weights digest must be the one ``delta_config.json`` names, unless ``force``.
    """
    delta_dir, base_dir, output = Path(delta_dir), Path(base_dir), Path(output)
    compressed, config = load_delta(delta_dir)
    expected = (config.get("base_model") or {}).get("weights_digest")
    digest = model_digest(base_dir)
    if expected is not None and digest != expected and not force:
        raise BaseModelMismatchError(
            f"{base_dir} is not the base model of the delta in {delta_dir}: its weights digest "
            f"is {digest}, the delta was made against {expected} (pass --force to use it anyway)")
    entry = read_adapter_entry(delta_dir)
    base = BaseCheck(digest, expected, entry[0] if entry else None,
                     (config.get("base_model") or {}).get("name"))
    model = apply_delta(load_base(base_dir), decompress_delta(compressed))
    tmp = prepare_output(output)
    try:
        model.save_pretrained(tmp)
        copy_tokenizer(base_dir, tmp)
        (tmp / "merged_from.json").write_text(json.dumps({
            "base_dir": str(base_dir), "base_weights_digest": digest, "delta_dir": str(delta_dir),
            "delta_bits": compressed.bits, "delta_entry_cid": base.entry_cid,
            "source_adapter": config.get("source_adapter"),
            "forced_base_mismatch": base.forced}, indent=1))
        finish_output(tmp, output)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return MergeResult(output, base, len(model.state_dict()))


# --- the gym adapter compress pipeline ----------------------------------------------------


@dataclass
class DeltaReport:
    output: str
    bits: int
    group_size: int
    tensors: int  # tensors in the delta
    numel: int  # elements of the dense delta
    dense_fp32_bytes: int
    dense_bf16_bytes: int
    payload_bytes: int  # codes + scales + dense parts
    file_bytes: int  # delta.safetensors on disk
    adapter_bytes: int  # the PEFT adapter's weight file(s)
    relative_error: float  # ||ΔW − ΔŴ||_F / ||ΔW||_F over all tensors
    perplexity: dict[str, float] = field(default_factory=dict)  # base, merged, delta

    @property
    def ratio_fp32(self) -> float:
        return self.dense_fp32_bytes / self.file_bytes

    @property
    def ratio_bf16(self) -> float:
        return self.dense_bf16_bytes / self.file_bytes

    @property
    def ratio_vs_adapter(self) -> float:
        return self.adapter_bytes / self.file_bytes

    def to_json(self) -> dict:
        return {**asdict(self), "ratio_fp32": self.ratio_fp32, "ratio_bf16": self.ratio_bf16,
                "ratio_vs_adapter": self.ratio_vs_adapter}

    def metrics(self) -> dict[str, float]:
        """Numbers for a published entry's ``metrics``."""
        out = {"compression_ratio_fp32": self.ratio_fp32,
               "compression_ratio_bf16": self.ratio_bf16,
               "size_vs_adapter": 1 / self.ratio_vs_adapter,
               "relative_error": self.relative_error}
        out.update((f"perplexity_{k}", v) for k, v in self.perplexity.items())
        return out


def relative_error(delta: dict[str, torch.Tensor], approx: dict[str, torch.Tensor]) -> float:
    num = sum(float((delta[n].float() - approx[n]).pow(2).sum()) for n in delta)
    den = sum(float(delta[n].float().pow(2).sum()) for n in delta)
    return (num / den) ** 0.5 if den else 0.0


def adapter_weight_bytes(adapter_dir: Path) -> int:
    return sum(p.stat().st_size for p in adapter_dir.glob("adapter_model.*"))


def compress_adapter(adapter_dir: str | Path, base_dir: str | Path, output: str | Path, *,
                     bits: int, group_size: int = 0, eval_texts: list[str] | None = None,
                     force: bool = False, on_stage=None) -> DeltaReport:
    """Compress the adapter's delta into the artefact directory ``output``; measure it.

    ``eval_texts``: held-out texts to compute the perplexity of base, merged and
    compressed-delta models on (skipped when None). ``on_stage(text)`` reports progress.
    """
    from transformers import AutoTokenizer

    from trainer.adapters.perplexity import perplexity

    adapter_dir, base_dir, output = Path(adapter_dir), Path(base_dir), Path(output)
    stage = on_stage or (lambda _text: None)
    check = check_base_model(adapter_dir, base_dir, force=force)
    stage("computing the weight delta")
    base = load_base(base_dir, torch.float32)
    merged = load_adapted(base_dir, adapter_dir, torch.float32).merge_and_unload()
    delta = weight_delta(base, merged)
    if not delta:
        raise AdapterError(f"the adapter in {adapter_dir} changes no weight of {base_dir}")
    stage(f"quantising {len(delta)} tensors to {bits} bits")
    compressed = compress_delta(delta, bits, group_size)
    approx = decompress_delta(compressed)
    config = delta_config(compressed, base_name=check.name or base_dir.name,
                          base_digest=check.digest,
                          source_digest=adapter_digest(adapter_dir),
                          source_entry_cid=check.entry_cid)
    numel = compressed.numel()
    report = DeltaReport(str(output), bits, group_size, len(delta), numel, 4 * numel, 2 * numel,
                         compressed.payload_bytes(), 0, adapter_weight_bytes(adapter_dir),
                         relative_error(delta, approx))
    if eval_texts:
        tokenizer = AutoTokenizer.from_pretrained(base_dir)
        stage("perplexity: base")
        report.perplexity["base"] = perplexity(base, tokenizer, eval_texts)
        stage("perplexity: merged adapter")
        report.perplexity["merged"] = perplexity(merged, tokenizer, eval_texts)
        del merged
        stage(f"perplexity: base + {bits}-bit delta")
        report.perplexity["delta"] = perplexity(apply_delta(base, approx), tokenizer,
                                                eval_texts)
    tmp = prepare_output(output)
    try:
        save_delta(compressed, config, tmp)
        report.file_bytes = (tmp / DELTA_FILE).stat().st_size
        (tmp / REPORT_FILE).write_text(json.dumps(report.to_json(), indent=1) + "\n")
        finish_output(tmp, output)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return report
