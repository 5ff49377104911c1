"""Fixtures for the inference-node tests (helpers live in `node_helpers`)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))  # `node_helpers`
# One thread: on a shared 2-core machine OpenMP's spinning threads make tiny models much slower.
torch.set_num_threads(1)

from node_helpers import (
    DOMAIN,
    LIBRARY,
    NODE_KEY,
    SNAPSHOT,
    RunningServer,
    build_tiny_model,
    make_engine,
    run_server,
)

from inference_node.library import StaticLibrarySource
from inference_node.receipts import ReceiptSigner, model_digest


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="session")
def vllm_model_dir(tmp_path_factory, tiny_model_dir) -> Path:
    """`tiny_model_dir`'s tokenizer and config with 32-dimensional heads, new random weights."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    directory = tmp_path_factory.mktemp("vllm-tiny") / "model"
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    config = LlamaConfig.from_pretrained(tiny_model_dir)
    config.head_dim = 32
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # as the tiny model: replies run to max_tokens or a stop string
        model.lm_head.weight[tokenizer.eos_token_id] = 0.0
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def library_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("library") / "library.json"
    path.write_text(json.dumps(LIBRARY))
    return path


@pytest.fixture(scope="module")
def server(tiny_model_dir, library_file) -> Iterator[RunningServer]:
    """One node with the tiny model and the three-experience library, shared by a module."""
    source = StaticLibrarySource.from_file(library_file)
    with run_server(make_engine(tiny_model_dir), source) as running:
        yield running


@pytest.fixture(scope="session")
def other_model_dir(tmp_path_factory) -> Path:
    """Same architecture and tokenizer as `tiny_model_dir`, other weights."""
    return build_tiny_model(tmp_path_factory.mktemp("other") / "model", seed=1)


@pytest.fixture(scope="module")
def signing_node(tiny_model_dir) -> Iterator[RunningServer]:
    """A node that signs unbound receipts, with the two-experience `SNAPSHOT` library."""
    engine = make_engine(tiny_model_dir)
    signer = ReceiptSigner(NODE_KEY, DOMAIN, engine.model, model_digest(tiny_model_dir))
    with run_server(engine, StaticLibrarySource(SNAPSHOT), receipts=signer) as running:
        yield running


@pytest.fixture(scope="session")
def json_model_dir(tmp_path_factory) -> Path:
    """A tiny random Llama with a byte-level BPE tokenizer, which can spell any JSON (the
    word-level `tiny_model_dir` has no braces or quotes): the structured-output tests' model."""
    from trainer.backends import tiny_random_model

    return tiny_random_model(tmp_path_factory.mktemp("json-tiny") / "model")


@pytest.fixture(scope="session")
def vllm_json_model_dir(tmp_path_factory, json_model_dir) -> Path:
    """`json_model_dir`'s byte-level tokenizer and config with 32-dimensional heads (vLLM's CPU
    attention needs them), new random weights."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    directory = tmp_path_factory.mktemp("vllm-json-tiny") / "model"
    config = LlamaConfig.from_pretrained(json_model_dir)
    config.head_dim = 32
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(directory)
    AutoTokenizer.from_pretrained(json_model_dir).save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def json_verifier(json_model_dir):
    """The verifier's model and tokenizer for `json_model_dir`, loaded once."""
    from inference_node import verify

    return verify.load_verifier_model(json_model_dir)


@pytest.fixture(scope="module")
def json_node(json_model_dir) -> Iterator[RunningServer]:
    """A node serving `json_model_dir` that signs unbound receipts, with the `SNAPSHOT`
    library."""
    engine = make_engine(json_model_dir)
    signer = ReceiptSigner(NODE_KEY, DOMAIN, engine.model, model_digest(json_model_dir))
    with run_server(engine, StaticLibrarySource(SNAPSHOT), receipts=signer) as running:
        yield running
