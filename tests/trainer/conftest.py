"""Fixtures for the trainer tests: a tiny random model (built offline once per session)."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))  # `tfgrpo_fakes` for python:module:function
# One thread: on a shared 2-core machine OpenMP's spinning threads make tiny models 20x slower.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    from trainer.backends import tiny_random_model

    return tiny_random_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="session")
def tiny_backend(tiny_model_dir):
    from trainer.backends import TransformersBackend

    return TransformersBackend(tiny_model_dir, batch_size=16, device="cpu")


@pytest.fixture(scope="session")
def identities(tmp_path_factory):
    """Four libp2p identities (key file, DER private key, peer id), as swarm peers hold."""
    from hivemind.p2p import P2P
    from hivemind.proto import crypto_pb2

    from trainer.swarm.records import libp2p_peer_id, sign_with_libp2p_key

    out = []
    for i in range(4):
        path = tmp_path_factory.mktemp("ids") / f"id{i}.key"
        P2P.generate_identity(str(path))
        der = crypto_pb2.PrivateKey.FromString(path.read_bytes()).data
        key, _ = sign_with_libp2p_key(der, b"")
        out.append((path, der, libp2p_peer_id(bytes.fromhex(key))))
    return out
