"""`gym node serve --adapter CID`: an adapter published on the ledger, fetched and verified by
CID, checked against its base, merged and served; its receipts name it and verify with the base
(`gym verify receipt --model BASE` merges the same adapter); a node that names an adapter it
does not serve fails the activation check. An unknown CID, a corrupt block, another base or a
proof of another entry are refused before anything is served.

The adapter is a random LoRA (all linear layers, non-zero B) over the node's tiny test model,
stored with `trainer.adapters.build_adapter_entries` as `gym adapter publish` stores it.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path

import gym_forkserver
import httpx
import pytest
import torch
from node_helpers import (
    DOMAIN,
    MODEL_NAME,
    NODE_KEY,
    free_port,
    make_engine,
    needs_vllm,
    node_env,
    node_process,
    run_server,
    stop_node,
    wait_for_health,
)

from inference_node.adapters import prepare_adapter
from inference_node.errors import NodeError, ReceiptError
from inference_node.library import StaticLibrarySource
from inference_node.receipts import (
    ReceiptDomain,
    ReceiptSigner,
    bundle_json,
    model_digest,
    parse_receipt,
)
from inference_node.verify import check_receipt_bundle
from ledger import LocalBlockStore, LogStore, decode_entry
from ledger.multiformats import CID, raw_cid
from ledger.proofs import proof_document
from ledger.publish import append_entries
from trainer.adapters import build_adapter_entries

GYM = Path(sys.executable).parent / "gym"
UNKNOWN = raw_cid(b"an adapter entry no store holds")
REQUEST = {"model": MODEL_NAME, "temperature": 0, "max_tokens": 8, "seed": 1,
           "messages": [{"role": "user", "content": "the farmer buys twelve apple"}]}


def publish_random_adapter(base_dir: Path, root: Path):
    """A random LoRA over ``base_dir`` stored in ``root/data/ipfs`` as `gym adapter publish`
    stores it: (data dir, content store, adapter entry CID, the run's two entries)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    run = root / "run"
    torch.manual_seed(3)
    lora = LoraConfig(r=8, lora_alpha=32, target_modules="all-linear", lora_dropout=0.0,
                      init_lora_weights=False, task_type="CAUSAL_LM")
    get_peft_model(AutoModelForCausalLM.from_pretrained(base_dir), lora
                   ).save_pretrained(run / "adapter")
    dataset = "sha256:" + "ab" * 32
    (run / "run.json").write_text(json.dumps({
        "method": "sft",
        "base_model": {"name": "tiny-node-llama", "weights_digest": model_digest(base_dir)},
        "adapter_dir": "adapter",
        "run": {"config": {"rank": 8}, "code_version": "test", "packages": {"peft": "test"},
                "hardware": {"machine": "cpu"}, "dataset_digests": [dataset], "metrics": {}},
        "adapter": {"dataset_digest": dataset, "metrics": {}}}))
    data = root / "data"
    content = LocalBlockStore(data / "ipfs")
    entries = build_adapter_entries(run, content)
    cid = content.add_file(entries.adapter, pin=True)
    content.add_file(entries.run, pin=True)
    return data, content, cid, entries


@pytest.fixture(scope="module")
def published(tmp_path_factory, tiny_model_dir):
    return publish_random_adapter(tiny_model_dir, tmp_path_factory.mktemp("node-adapter"))


def answer(engine, signer) -> dict:
    with run_server(engine, StaticLibrarySource(), receipts=signer) as node:
        reply = httpx.post(f"{node.base_url}/chat/completions", json=REQUEST, timeout=60)
    assert reply.status_code == 200, reply.text
    return reply.json()


def bundle_of(body: dict) -> dict:
    evidence = body["receipt_evidence"]
    return bundle_json(parse_receipt(body["receipt"]), ReceiptDomain.from_json(evidence["domain"]),
                       route="chat", request=REQUEST,
                       text=body["choices"][0]["message"]["content"],
                       completion_token_ids=evidence["completion_token_ids"])


def test_an_adapted_node_signs_receipts_that_verify_and_a_lying_node_fails(
        published, tiny_model_dir, tmp_path):
    _, content, cid, _ = published
    prepared = prepare_adapter(content, cid, tiny_model_dir, tmp_path / "work")
    assert prepared.base_digest == model_digest(tiny_model_dir)
    adapted = make_engine(prepared.model_dir)
    base = make_engine(tiny_model_dir)
    signer = ReceiptSigner(NODE_KEY, DOMAIN, adapted.model, prepared.base_digest, adapter_cid=cid)
    body = answer(adapted, signer)
    plain = answer(base, None)
    assert body["choices"][0]["message"]["content"] != plain["choices"][0]["message"]["content"]
    receipt = parse_receipt(body["receipt"])
    assert (receipt.adapter_cid, receipt.model_digest) == (cid, prepared.base_digest)

    checks = check_receipt_bundle(bundle_of(body), offline=True, model_dir=tiny_model_dir,
                                  content=content)
    passed = {c.name: c.passed for c in checks}
    assert passed["adapter"] is True and passed["activations"] is True
    with pytest.raises(ReceiptError) as no_store:
        check_receipt_bundle(bundle_of(body), offline=True, model_dir=tiny_model_dir)
    assert no_store.value.reason == "adapter"

    # Signs for the adapter, serves the bare base: the verifier's merged prefill disagrees.
    liar = ReceiptSigner(NODE_KEY, DOMAIN, base.model, prepared.base_digest, adapter_cid=cid)
    with pytest.raises(ReceiptError) as lied:
        check_receipt_bundle(bundle_of(answer(base, liar)), offline=True,
                             model_dir=tiny_model_dir, content=content)
    assert lied.value.reason == "activation_mismatch"


def test_unknown_corrupt_foreign_or_unproven_adapters_are_refused(
        published, tiny_model_dir, other_model_dir, tmp_path):
    _, content, cid, entries = published
    with pytest.raises(NodeError, match="is not in the local content store"):
        prepare_adapter(content, UNKNOWN, tiny_model_dir, tmp_path / "unknown")
    with pytest.raises(NodeError, match="is not the base model of adapter"):
        prepare_adapter(content, cid, other_model_dir, tmp_path / "foreign")

    corrupt = LocalBlockStore(tmp_path / "corrupt-ipfs")
    shutil.copytree(content.root, corrupt.root, dirs_exist_ok=True)
    weights = next(f for f in decode_entry(entries.adapter).files
                   if f.path == "adapter_model.safetensors")
    block = corrupt._block_path(CID.parse(weights.cid))
    data = bytearray(block.read_bytes())
    data[len(data) // 2] ^= 0x01
    block.write_bytes(bytes(data))
    with pytest.raises(NodeError, match="adapter_model.safetensors"):
        prepare_adapter(corrupt, cid, tiny_model_dir, tmp_path / "corrupt")
    assert not (tmp_path / "corrupt" / "merged").exists()

    store = LogStore(f"sqlite:///{tmp_path / 'log.sqlite'}")
    store.create_log("alice/sft")
    append_entries(store, content, "alice/sft", [entries.run, entries.adapter])
    proven = prepare_adapter(content, cid, tiny_model_dir, tmp_path / "proven",
                             proof=proof_document(store, content, "alice/sft", 1))
    assert (proven.inclusion.log, proven.inclusion.index) == ("alice/sft", 1)
    with pytest.raises(NodeError, match="inclusion proof is about entry"):
        prepare_adapter(content, cid, tiny_model_dir, tmp_path / "wrong-proof",
                        proof=proof_document(store, content, "alice/sft", 0))


def test_gym_node_serve_with_an_adapter_and_gym_verify_receipt(published, tiny_model_dir,
                                                               tmp_path):
    data, _, cid, _ = published
    env = node_env(data)
    missing = gym_forkserver.run(
        GYM, ["node", "serve", "--model", str(tiny_model_dir), "--offline", "--adapter", UNKNOWN],
        env)
    assert missing.returncode == 1 and "is not in the local content store" in missing.stderr, \
        missing.stderr

    port = free_port()
    with node_process([str(GYM), "node", "serve", "--model", str(tiny_model_dir), "--device",
                       "cpu", "--port", str(port), "--adapter", cid, "--key-env",
                       "GYM_NODE_KEY", "--offline"], env) as proc:
        health = wait_for_health(proc, port, timeout_s=120)
        name = f"{tiny_model_dir.name}+{cid[-12:]}"
        assert (health["adapter"], health["model"]) == (cid, name)
        request = {**REQUEST, "model": name}
        body = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=request,
                          timeout=60).json()
        assert parse_receipt(body["receipt"]).adapter_cid == cid
        output = stop_node(proc)
    assert proc.returncode == 0, output
    assert f"adapter {cid}: sft of tiny-node-llama" in output
    evidence = body["receipt_evidence"]
    bundle = bundle_json(parse_receipt(body["receipt"]), ReceiptDomain.from_json(
        evidence["domain"]), route="chat", request=request,
        text=body["choices"][0]["message"]["content"],
        completion_token_ids=evidence["completion_token_ids"])
    (tmp_path / "bundle.json").write_text(json.dumps(bundle))
    verified = gym_forkserver.run(GYM, ["verify", "receipt", str(tmp_path / "bundle.json"),
                                        "--offline", "--model", str(tiny_model_dir)], env,
                                  timeout=300)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "adapter" in verified.stdout and "FAILS" not in verified.stdout


@needs_vllm
def test_the_merged_adapter_serves_the_same_tokens_on_vllm(vllm_model_dir, tmp_path):
    """The merged directory is a plain model to vLLM too: greedy tokens as transformers'."""
    from inference_node.engine import SamplingParams
    from inference_node.injection import LibraryInjector
    from inference_node.vllm_engine import VLLMEngine

    _, content, cid, _ = publish_random_adapter(vllm_model_dir, tmp_path / "published")
    prepared = prepare_adapter(content, cid, vllm_model_dir, tmp_path / "work")
    reference = make_engine(prepared.model_dir)
    engine = VLLMEngine.from_pretrained(prepared.model_dir, model_name=MODEL_NAME,
                                        enforce_eager=True, max_batch=2, kv_cache_gib=0.25)
    try:
        prompt = LibraryInjector(engine.tokenizer).chat(REQUEST["messages"],
                                                         StaticLibrarySource().current()).prompt
        params = SamplingParams(max_tokens=12, temperature=0.0)
        ours = asyncio.run(engine.generate(prompt, params))
        theirs = asyncio.run(reference.generate(prompt, params))
    finally:
        engine.shutdown()
        reference.shutdown()
    assert ours.token_ids == theirs.token_ids
    base = make_engine(vllm_model_dir)
    try:
        assert asyncio.run(base.generate(prompt, params)).token_ids != theirs.token_ids
    finally:
        base.shutdown()
