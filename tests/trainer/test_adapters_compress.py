"""Merging an adapter into its base, and quantised weight deltas: merged logits equal the PEFT
model's, 1-bit deltas keep sign and group scale exactly, 8-bit deltas stay within half a step,
sizes add up, and the commands work (and refuse) through the real `gym` CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from test_adapters_support import make_adapter_run

from ledger import LocalBlockStore
from trainer.adapters import BaseModelMismatchError, build_adapter_entries, fetch_adapter
from trainer.adapters.compress import (
    CONFIG_FILE,
    DELTA_FILE,
    adapter_delta,
    apply_delta,
    compress_adapter,
    compress_delta,
    decompress_delta,
    load_delta,
    merge_delta,
    pack_codes,
    save_delta,
    unpack_codes,
)
from trainer.adapters.errors import AdapterError, DeltaFormatError
from trainer.adapters.merge import load_adapted, load_base, merge_adapter
from trainer.adapters.perplexity import load_eval_texts, perplexity
from trainer.backends import tiny_random_model
from trainer.provenance import model_digest

IDS = torch.tensor([[5, 17, 42, 99, 7, 250, 3, 64], [1, 2, 3, 4, 5, 6, 7, 8]])


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, tiny_model_dir) -> Path:
    return make_adapter_run(tmp_path_factory.mktemp("adapter-run") / "run", tiny_model_dir,
                            rank=8)


@pytest.fixture(scope="module")
def fetched(run_dir, tmp_path_factory) -> Path:
    """The adapter as `gym adapter fetch` leaves it: with adapter_entry.json."""
    root = tmp_path_factory.mktemp("fetched")
    content = LocalBlockStore(root / "ipfs")
    cid = content.add_file(build_adapter_entries(run_dir, content).adapter)
    return fetch_adapter(content, cid, root / "adapter").directory


@pytest.fixture(scope="module")
def other_base(tmp_path_factory) -> Path:
    return tiny_random_model(tmp_path_factory.mktemp("other") / "model", seed=1)


@pytest.fixture(scope="module")
def delta(run_dir) -> dict[str, torch.Tensor]:
    return adapter_delta(run_dir / "base", run_dir / "adapter")


def logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(IDS).logits


def test_merged_model_logits_equal_the_peft_model_logits(run_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    peft_logits = logits(load_adapted(run_dir / "base", run_dir / "adapter"))
    result = merge_adapter(run_dir / "adapter", run_dir / "base", tmp_path / "merged")
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged").eval()
    assert torch.allclose(logits(merged), peft_logits, atol=1e-5)
    assert not torch.allclose(logits(load_base(run_dir / "base")), peft_logits, atol=1e-3)
    names = {p.name for p in (tmp_path / "merged").iterdir()}
    assert {"model.safetensors", "config.json", "tokenizer.json", "merged_from.json"} <= names
    assert (tmp_path / "merged" / "tokenizer.json").read_bytes() == (
        run_dir / "base" / "tokenizer.json").read_bytes()
    assert result.base.expected is None  # a bare adapter dir: nothing to compare against
    assert [p.name for p in tmp_path.iterdir()] == ["merged"]  # no temporary left behind


def test_merge_checks_the_base_weights_digest(fetched, run_dir, other_base, tmp_path):
    result = merge_adapter(fetched, run_dir / "base", tmp_path / "ok")
    assert result.base.expected == result.base.digest == model_digest(run_dir / "base")
    with pytest.raises(BaseModelMismatchError, match="is not the base model of adapter"):
        merge_adapter(fetched, other_base, tmp_path / "refused")
    assert not (tmp_path / "refused").exists()
    forced = merge_adapter(fetched, other_base, tmp_path / "forced", force=True)
    assert forced.base.forced
    assert json.loads((tmp_path / "forced" / "merged_from.json").read_text())[
        "forced_base_mismatch"] is True
    with pytest.raises(AdapterError, match="not an empty directory"):
        merge_adapter(fetched, run_dir / "base", tmp_path / "ok")


@pytest.mark.parametrize("bits", range(1, 9))
def test_codes_pack_and_unpack(bits):
    generator = torch.Generator().manual_seed(bits)
    for count in (1, 7, 8, 1001):
        codes = torch.randint(0, 2 ** bits, (count,), generator=generator, dtype=torch.uint8)
        packed = pack_codes(codes, bits)
        assert packed.numel() == (count * bits + 7) // 8
        assert torch.equal(unpack_codes(packed, bits, count), codes)
        # the layout is the plain little-endian bit stream, whichever path packed it
        stream = np.unpackbits(codes.numpy()[:, None], axis=1, count=bits, bitorder="little")
        assert torch.equal(packed, torch.from_numpy(np.packbits(stream.reshape(-1),
                                                                 bitorder="little")))


def test_the_delta_is_the_lora_product(delta, run_dir):
    """ΔW = merged − base equals scaling · B @ A of each LoRA layer."""
    model = load_adapted(run_dir / "base", run_dir / "adapter", torch.float32)
    layer = model.base_model.model.model.layers[0].self_attn.q_proj
    expected = layer.get_delta_weight("default")
    assert torch.allclose(delta["model.layers.0.self_attn.q_proj.weight"], expected, atol=1e-6)
    assert len(delta) == 14 and all(d.dim() == 2 for d in delta.values())  # 7 linears x 2 layers


def test_one_bit_keeps_the_sign_and_the_group_mean_exactly(delta):
    for group_size in (0, 16):
        approx = decompress_delta(compress_delta(delta, 1, group_size))
        for name, d in delta.items():
            rows, cols = d.shape
            size = group_size or cols
            groups = d.reshape(rows, cols // size, size)
            scale = groups.abs().mean(-1, keepdim=True)
            got = approx[name].reshape(rows, cols // size, size)
            assert torch.equal(got.abs(), scale.expand_as(got))
            nonzero = groups != 0
            assert torch.equal(torch.sign(got)[nonzero], torch.sign(groups)[nonzero])


def test_eight_bit_stays_within_half_a_step(delta):
    approx = decompress_delta(compress_delta(delta, 8))
    for name, d in delta.items():
        step = d.abs().amax(dim=1, keepdim=True) / 127
        assert ((approx[name] - d).abs() <= step / 2 + 1e-7).all()
        assert torch.allclose(approx[name], d, atol=float(d.abs().max()) / 127)
    four = decompress_delta(compress_delta(delta, 4))
    err = {bits: sum(float((a[n] - delta[n]).norm()) for n in delta)
           for bits, a in ((4, four), (8, approx))}
    assert err[8] < err[4] / 8


def test_one_bit_is_32x_smaller_than_fp32_minus_the_scales():
    rows, cols = 256, 4096
    compressed = compress_delta({"w": torch.randn(rows, cols)}, 1)
    assert compressed.payload_bytes() == rows * cols // 8 + 4 * rows
    assert 4 * rows * cols / compressed.payload_bytes() == pytest.approx(32 / (1 + 32 / cols))
    for bits in (2, 4, 8):
        c = compress_delta({"w": torch.randn(rows, cols)}, bits)
        assert c.payload_bytes() == rows * cols * bits // 8 + 4 * rows


def test_applying_the_delta_reproduces_the_merged_model(delta, run_dir):
    merged = logits(load_adapted(run_dir / "base", run_dir / "adapter").merge_and_unload())
    exact = logits(apply_delta(load_base(run_dir / "base"), delta))
    assert torch.allclose(exact, merged, atol=1e-5)
    eight = logits(apply_delta(load_base(run_dir / "base"),
                               decompress_delta(compress_delta(delta, 8))))
    base = logits(load_base(run_dir / "base"))
    assert (eight - merged).abs().max() < (base - merged).abs().max() / 20


def test_a_delta_directory_round_trips_and_a_mismatch_is_refused(delta, tmp_path):
    compressed = compress_delta(delta, 3, 16)
    save_delta(compressed, {"format": "gym-weight-delta", "v": 1, "bits": 3,
                            "grouping": {"group_size": 16},
                            "tensors": [{"name": s.name, "shape": list(s.shape), "kind": s.kind}
                                        for s in compressed.specs]}, tmp_path)
    loaded, _ = load_delta(tmp_path)
    for name, tensor in decompress_delta(compressed).items():
        assert torch.equal(decompress_delta(loaded)[name], tensor)
    config = json.loads((tmp_path / CONFIG_FILE).read_text())
    config["tensors"][0]["shape"][0] += 1
    (tmp_path / CONFIG_FILE).write_text(json.dumps(config))
    with pytest.raises(DeltaFormatError, match="does not match its config"):
        load_delta(tmp_path)
    with pytest.raises(DeltaFormatError, match="the model has no parameter"):
        apply_delta(torch.nn.Linear(2, 2), delta)


def test_compress_adapter_writes_the_artefact_and_measures_it(fetched, run_dir, tmp_path):
    texts = load_eval_texts(limit=12)
    report = compress_adapter(fetched, run_dir / "base", tmp_path / "d8", bits=8,
                              eval_texts=texts)
    assert {p.name for p in (tmp_path / "d8").iterdir()} == {
        "compress_report.json", CONFIG_FILE, DELTA_FILE}
    config = json.loads((tmp_path / "d8" / CONFIG_FILE).read_text())
    assert config["bits"] == 8 and config["base_model"]["weights_digest"] == model_digest(
        run_dir / "base")
    assert config["source_adapter"]["entry_cid"].startswith("bafkrei")
    assert report.file_bytes == (tmp_path / "d8" / DELTA_FILE).stat().st_size
    assert report.dense_fp32_bytes == 4 * report.numel
    ppl = report.perplexity
    assert ppl["merged"] < ppl["base"]  # the adapter learnt something about this text
    assert abs(ppl["delta"] - ppl["merged"]) < 0.01 * ppl["merged"]
    assert ppl["base"] == pytest.approx(perplexity(load_base(run_dir / "base"), _tokenizer(run_dir),
                                                   texts, batch_size=1), rel=1e-5)
    with pytest.raises(AdapterError, match="do not split into groups of 5"):
        compress_adapter(fetched, run_dir / "base", tmp_path / "bad", bits=2, group_size=5)
    assert not (tmp_path / "bad").exists()


def test_a_delta_directory_merges_into_its_base_only(fetched, run_dir, other_base, tmp_path):
    from transformers import AutoModelForCausalLM

    compress_adapter(fetched, run_dir / "base", tmp_path / "d8", bits=8)
    result = merge_delta(tmp_path / "d8", run_dir / "base", tmp_path / "m8")
    assert result.base.expected == result.base.digest
    merged = logits(AutoModelForCausalLM.from_pretrained(tmp_path / "m8").eval())
    peft_logits = logits(load_adapted(run_dir / "base", fetched))
    base = logits(load_base(run_dir / "base"))
    assert (merged - peft_logits).abs().max() < (base - peft_logits).abs().max() / 20
    with pytest.raises(BaseModelMismatchError, match="is not the base model of the delta"):
        merge_delta(tmp_path / "d8", other_base, tmp_path / "refused")
    assert not (tmp_path / "refused").exists()


def _tokenizer(run_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(run_dir / "base")


def last_line(text: str) -> str:
    return text.strip().splitlines()[-1]


def test_merge_and_compress_commands(gym_env, fetched, run_dir, other_base, tmp_path):
    ok = gym_env.run("adapter", "merge", str(fetched), "--base", str(run_dir / "base"),
                     "--output", str(tmp_path / "merged"))
    assert ok.returncode == 0, ok.stderr
    assert "matches the one recorded" in ok.stdout and (tmp_path / "merged" / "config.json"
                                                        ).is_file()
    refused = gym_env.run("adapter", "merge", str(fetched), "--base", str(other_base),
                          "--output", str(tmp_path / "refused"))
    assert refused.returncode == 1 and last_line(refused.stderr).startswith("error: ")
    assert "is not the base model of adapter" in refused.stderr and "--force" in refused.stderr
    assert not (tmp_path / "refused").exists()

    ok = gym_env.run("adapter", "compress", str(fetched), "--base", str(run_dir / "base"),
                     "--bits", "1", "--output", str(tmp_path / "d1"), "--eval-limit", "8")
    assert ok.returncode == 0, ok.stderr
    assert "ratio vs fp32" in ok.stdout and "perplexity: delta" in ok.stdout
    report = json.loads((tmp_path / "d1" / "compress_report.json").read_text())
    assert report["bits"] == 1 and report["ratio_fp32"] > 8
    bad = gym_env.run("adapter", "compress", str(fetched), "--base", str(run_dir / "base"),
                      "--bits", "4", "--group-size", "7", "--output", str(tmp_path / "d4"))
    assert bad.returncode == 1 and last_line(bad.stderr).startswith("error: ")
    assert "64 input columns do not split into groups of 7" in bad.stderr
    assert not (tmp_path / "d4").exists()
    unpublishable = gym_env.run("adapter", "compress", str(run_dir / "adapter"), "--base",
                                str(run_dir / "base"), "--bits", "1", "--output",
                                str(tmp_path / "d"), "--publish", "alice/adapters")
    assert unpublishable.returncode == 1 and "needs" in unpublishable.stderr
