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
from typer.testing import CliRunner

from devnet.anvil import free_port
from devnet.settings import ANVIL_DEV_KEYS
from inference_node.library import StaticLibrarySource
from inference_node.receipts import ReceiptDomain, ReceiptSigner, model_digest
from inference_node.server import create_app
from inference_node.transformers_engine import TransformersEngine
from trainer.backends import RECEIPT_CID, OpenAIBackend
from trainer.cli import eval_library
from trainer.data import generate_problems, write_jsonl

MODEL_NAME = "tiny-trainer-llama"


@pytest.fixture(scope="module")
def node_url(tiny_model_dir):
    """The /v1 URL of a receipt-signing node serving the tiny model, for this module."""
    engine = TransformersEngine.from_pretrained(tiny_model_dir, model_name=MODEL_NAME,
                                                device="cpu")
    signer = ReceiptSigner(ANVIL_DEV_KEYS[1], ReceiptDomain(), engine.model,
                           model_digest(tiny_model_dir))
    app = create_app(engine, StaticLibrarySource(), receipts=signer)
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
