"""Fixtures for the committee tests that judge real receipts (test_judge): the inference-node
test helpers (`node_helpers`, the attacker of `test_receipt_attacks`) on sys.path and the tiny
models they build, offline."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "inference_node"))  # `node_helpers`

# The attacker's fixtures, shared with test_judge: the verifier's model and the node's engine
# and signer (module-scoped).
from test_receipt_attacks import node, verifier  # noqa: F401


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    from node_helpers import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="session")
def json_model_dir(tmp_path_factory) -> Path:
    """A tiny random Llama with a byte-level tokenizer that can spell JSON (grammar tests)."""
    from trainer.backends import tiny_random_model

    return tiny_random_model(tmp_path_factory.mktemp("json-tiny") / "model")
