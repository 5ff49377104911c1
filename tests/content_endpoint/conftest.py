"""Fixtures of the content endpoint tests: a `gym ipfs serve` process per test module, and an
ipfshttpclient client of it."""

from __future__ import annotations

import ipfshttpclient
import pytest
from ipfs_node import Node


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    server = Node(tmp_path_factory.mktemp("ipfs") / "store")
    yield server
    server.stop()


@pytest.fixture
def client(node):
    with ipfshttpclient.Client(addr=node.multiaddr) as rpc:
        yield rpc
