"""The `gym demo --sft` step: train the demo config, publish run + adapter, anchored on Anvil."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

import pytest
from rich.console import Console

from ledger import LocalBlockStore, LogStore, decode_entry
from trainer.gradient.demo import demo_sft


def _publish_demo(tmp_path, ledger_devnet, model):
    rt = SimpleNamespace(store=LogStore(f"sqlite:///{tmp_path / 'ledger.sqlite'}"),
                         content=LocalBlockStore(tmp_path / "ipfs"),
                         contract=ledger_devnet.contract())
    out = io.StringIO()
    run_dir = demo_sft(rt, tmp_path / "runs", Console(file=out, width=120),
                       log_name="demo/sft", model=model)
    assert "published adapter" in out.getvalue()
    leaves = list(rt.store.leaves("demo/sft"))
    run, adapter = (decode_entry(rt.content.cat(leaf.cid)) for leaf in leaves)
    manifest = json.loads((run_dir / "run.json").read_text())
    assert (run.type, adapter.type, adapter.run_cid) == ("run", "adapter", leaves[0].cid)
    assert adapter.method == "sft" and adapter.base_model.name == manifest["base_model"]["name"]
    assert run.config["training"]["max_steps"] == 3 and run.metrics["train_steps"] == 3
    files = {f.path: f.size for f in adapter.files}
    assert files["adapter_model.safetensors"] == (
        run_dir / "adapter" / "adapter_model.safetensors").stat().st_size
    log = rt.store.get_log("demo/sft")
    assert rt.contract.log_info(log.chain_log_id).size == 2
    return manifest


@pytest.mark.anvil
def test_demo_sft_publishes_a_tiny_adapter(tmp_path, ledger_devnet):
    manifest = _publish_demo(tmp_path, ledger_devnet, "tiny-random")
    assert manifest["base_model"]["name"].startswith("tiny-random:")


@pytest.mark.anvil
@pytest.mark.slow
def test_demo_sft_on_smollm2(tmp_path, ledger_devnet):
    manifest = _publish_demo(tmp_path, ledger_devnet, None)
    assert manifest["base_model"]["name"] == "SmolLM2-135M-Instruct"
    assert manifest["adapter"]["config"]["target_modules"] == ["k_proj", "o_proj", "q_proj",
                                                               "v_proj"]
