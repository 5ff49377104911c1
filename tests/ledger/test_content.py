"""open_content_store: the GYM_IPFS_API setting → a backend; the Kubo URL → multiaddr rule."""

from __future__ import annotations

import pytest

from ledger.blockstore import LocalBlockStore
from ledger.content import ContentStore, open_content_store
from ledger.errors import ContentStoreConfigError
from ledger.kubo import KuboStore, api_multiaddr


@pytest.mark.parametrize("setting", [None, ""])
def test_unset_gives_the_local_store(tmp_path, setting):
    store = open_content_store(setting, tmp_path / "ipfs")
    assert isinstance(store, LocalBlockStore) and isinstance(store, ContentStore)
    cid = store.add_file(b"local")
    assert store.cat(cid) == b"local" and store.has(cid)
    assert store.pin_add(cid) == cid


def test_a_url_gives_a_kubo_store_without_connecting(tmp_path):
    store = open_content_store("http://127.0.0.1:5001", tmp_path)
    assert isinstance(store, KuboStore) and isinstance(store, ContentStore)


@pytest.mark.parametrize("setting", ["localhost:5001", "ftp://host:21", "http://host:5001/x"])
def test_malformed_settings_are_refused(tmp_path, setting):
    with pytest.raises(ContentStoreConfigError, match="GYM_IPFS_API"):
        open_content_store(setting, tmp_path)


@pytest.mark.parametrize("url, multiaddr", [
    ("http://127.0.0.1:5001", "/ip4/127.0.0.1/tcp/5001/http"),
    ("http://127.0.0.1:5001/", "/ip4/127.0.0.1/tcp/5001/http"),
    ("http://127.0.0.1:5001/api/v0", "/ip4/127.0.0.1/tcp/5001/http"),
    ("https://[::1]:9095", "/ip6/::1/tcp/9095/https"),
    ("http://ipfs.internal", "/dns/ipfs.internal/tcp/80/http"),
    ("/ip4/10.0.0.2/tcp/5001/http", "/ip4/10.0.0.2/tcp/5001/http"),
])
def test_api_multiaddr(url, multiaddr):
    assert api_multiaddr(url) == multiaddr
