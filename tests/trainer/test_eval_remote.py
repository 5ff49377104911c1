"""`gym eval --base-url` and `OpenAIBackend` against a real inference node on loopback.

The node (`inference_node.server.create_app`) serves the trainer's tiny random model in a thread
of the test process and signs an unbound receipt for each answer.
"""

from __future__ import annotations

import json
import threading
import time

import pytest
import typer
import uvicorn
from eth_account import Account
from typer.testing import CliRunner

from devnet.anvil import free_port
from devnet.settings import ANVIL_DEV_KEYS
from inference_node.bundle_access import BundleAccess, verifier_headers
from inference_node.bundle_store import BundleStore
from inference_node.library import StaticLibrarySource
from inference_node.receipts import ReceiptDomain, ReceiptSigner, model_digest
from inference_node.server import create_app
from inference_node.transformers_engine import TransformersEngine
from trainer.backends import RECEIPT_CID, OpenAIBackend
from trainer.cli import eval_library
from trainer.data import generate_problems, write_jsonl

MODEL_NAME = "tiny-trainer-llama"


AUDITOR = Account.from_key("0x" + "a1" * 32)


@pytest.fixture(scope="module")
def node_url(tiny_model_dir, tmp_path_factory):
    """The /v1 URL of a receipt-signing node serving the tiny model, which keeps each receipt's
    bundle (`GET /v1/receipts/{cid}`), for this module."""
    engine = TransformersEngine.from_pretrained(tiny_model_dir, model_name=MODEL_NAME,
                                                device="cpu")
    signer = ReceiptSigner(ANVIL_DEV_KEYS[1], ReceiptDomain(), engine.model,
                           model_digest(tiny_model_dir))
    bundles = BundleStore(tmp_path_factory.mktemp("bundles") / "bundles.sqlite",
                          retention_s=3600)
    # a verifier (AUDITOR) may read every bundle; anyone else only with its answer's token
    access = BundleAccess(bytes(32), is_verifier=lambda address: address == AUDITOR.address)
    app = create_app(engine, StaticLibrarySource(), receipts=signer, bundles=bundles,
                     bundle_access=access)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    yield f"http://127.0.0.1:{port}/v1"
    server.should_exit = True
    thread.join(timeout=30)


def test_openai_backend_collects_the_node_receipts(node_url):
    backend = OpenAIBackend(node_url, MODEL_NAME, max_concurrency=2, backoff_s=0)
    prompts = [[{"role": "user", "content": "What is 2 + 2?"}],
               [{"role": "user", "content": "Hi"}]]
    out = backend.generate(prompts, n=2, temperature=1.0, max_new_tokens=6, seed=1)
    assert [len(row) for row in out] == [2, 2]
    cids = [cid for row in backend.last_receipts for cid in row]
    assert len(cids) == 4 and all(RECEIPT_CID.fullmatch(cid) for cid in cids)
    assert len(set(cids)) == 4  # one receipt per answer


def test_eval_runs_its_arms_on_the_endpoint(node_url, tmp_path):
    write_jsonl(generate_problems(3, seed=4), tmp_path / "held.jsonl")
    (tmp_path / "library.json").write_text(json.dumps(["Add the two numbers."]))
    app = typer.Typer()
    app.command()(eval_library)
    common = ["--dataset", str(tmp_path / "held.jsonl"), "--library",
              str(tmp_path / "library.json"), "-k", "2", "--seeds", "2",
              "--max-new-tokens", "4", "--verifier", "exact"]
    result = CliRunner().invoke(app, [*common, "--base-url", node_url, "--model", MODEL_NAME,
                                      "--output", str(tmp_path / "e.json")])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "e.json").read_text())
    assert data["arms"] == ["baseline", "library"] and data["seeds"] == [0, 1]
    assert data["base_url"] == node_url and data["model"] == MODEL_NAME
    assert len(data["library"]["mean_at_k"]["values"]) == 2


@pytest.mark.parametrize(("extra", "message"), [
    (["--base-url", "http://127.0.0.1:9/v1"], "--base-url needs --model NAME"),
    (["--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--adapter", "."],
     "--adapter needs a local model"),
])
def test_eval_refuses_conflicting_or_missing_flags(tmp_path, extra, message):
    write_jsonl(generate_problems(1, seed=4), tmp_path / "held.jsonl")
    (tmp_path / "library.json").write_text(json.dumps(["x"]))
    app = typer.Typer()
    app.command()(eval_library)
    result = CliRunner().invoke(app, ["--dataset", str(tmp_path / "held.jsonl"), "--library",
                                      str(tmp_path / "library.json"), *extra])
    assert result.exit_code != 0 and message in str(result.exception)


@pytest.mark.anvil
def test_tfgrpo_against_the_node_publishes_experiences_naming_their_receipts(
        node_url, tmp_path, ledger_devnet, monkeypatch):
    """The node as both backends: rollouts and stage calls go to `gym node serve`'s API (the
    stage-2 call under the operations schema, which the node enforces); the experiences the
    run publishes name the receipts of the rollouts they were learned from, those receipts
    are the node's, and the published log audits clean."""
    import httpx

    from ledger import LocalBlockStore, LogStore, decode_entry
    from ledger.audit import audit_log
    from trainer.publish import publish_run_dir
    from trainer.tfgrpo_config import ModelConfig, TFGRPOConfig
    from trainer.tfgrpo_trainer import TFGRPOTrainer

    monkeypatch.chdir(tmp_path)
    problems = generate_problems(4, seed=8)
    remote = ModelConfig(backend="openai", base_url=node_url, model=MODEL_NAME,
                         max_concurrency=4)
    config = TFGRPOConfig(
        train_path=str(write_jsonl(problems, tmp_path / "train.jsonl")),
        eval_path=str(tmp_path / "train.jsonl"), output_dir=str(tmp_path / "run"), epochs=1,
        batch_size=4, group_size=3, seed=2, max_new_tokens=8, stage_max_new_tokens=400,
        max_experience_words=6, max_ops_per_query=2,
        verifier="python:tfgrpo_fakes:length_parity", domain="math", policy=remote, stage=remote)
    trainer = TFGRPOTrainer(config)
    report = json.loads(trainer.train().read_text())
    assert report["operations_applied"] >= 1, report["counters"]
    assert report["counters"].get("malformed_json", 0) == 0  # the node enforced the schema

    store = LogStore(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    content = LocalBlockStore(tmp_path / "ipfs")
    contract = ledger_devnet.contract()
    publish_run_dir(tmp_path / "run", store, content, contract, "alice/remote")
    entries = [decode_entry(content.cat(leaf.cid)) for leaf in store.leaves("alice/remote")]
    cited = [e.provenance.receipts for e in entries if e.type == "experience"]
    assert cited and all(cited), "every experience names its rollouts' receipts"
    for cid in {cid for receipts in cited for cid in receipts}:
        # each is a receipt this node logged: its bundle store serves it to a verifier (the
        # user's request and answer go to no one else without the answer's token)
        url = f"{node_url}/receipts/{cid}"
        reply = httpx.get(url, headers=verifier_headers(AUDITOR, cid), timeout=30)
        assert reply.status_code == 200, (cid, reply.text)
        assert reply.json()["receipt"]["node"] == Account.from_key(ANVIL_DEV_KEYS[1]).address.lower()
        assert httpx.get(url, timeout=30).status_code == 401
    log = store.get_log("alice/remote")
    audit = audit_log(contract, content, log.chain_log_id,
                      from_block=ledger_devnet.deployment_block)
    assert audit.ok, audit.discrepancies
