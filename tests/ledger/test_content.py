"""open_content_store: the GYM_IPFS_API setting → a backend; the Kubo URL → multiaddr rule; the
credentials (GYM_IPFS_API_AUTH, URL userinfo) in Kubo's AuthSecret syntax."""

from __future__ import annotations

import pytest

from ledger.blockstore import LocalBlockStore
from ledger.content import ContentStore, open_content_store
from ledger.errors import ContentStoreConfigError
from ledger.kubo import KuboStore, api_multiaddr, authorization_header, split_credentials


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


@pytest.mark.parametrize("secret, header", [
    ("bearer:tok", "Bearer tok"),
    ("tok", "Bearer tok"),  # Kubo: no type is a bearer token
    ("basic:alice:pw:with:colons", "Basic YWxpY2U6cHc6d2l0aDpjb2xvbnM="),
    ("basic:YWxpY2U6cHc=", "Basic YWxpY2U6cHc="),  # already base64
])
def test_authorization_header_reads_kubos_auth_secret(secret, header):
    assert authorization_header(secret) == header


@pytest.mark.parametrize("secret", ["", "bearer:", "digest:hunter2"])
def test_other_secrets_are_refused_without_repeating_them(secret):
    with pytest.raises(ContentStoreConfigError, match="bearer:TOKEN or basic:USER:PASSWORD") as e:
        authorization_header(secret)
    assert "hunter2" not in str(e.value)


def test_url_userinfo_is_basic_and_never_shown(tmp_path, monkeypatch):
    monkeypatch.delenv("GYM_IPFS_API_AUTH", raising=False)
    assert split_credentials("http://al%40ce:p%3Aw@127.0.0.1:5001") == \
        ("http://127.0.0.1:5001", "basic:al@ce:p:w")
    assert split_credentials("http://127.0.0.1:5001") == ("http://127.0.0.1:5001", None)
    store = open_content_store("http://alice:hunter2@127.0.0.1:5001", tmp_path)
    assert store.api_url == "http://127.0.0.1:5001" and "hunter2" not in repr(store.__dict__)
    with pytest.raises(ContentStoreConfigError, match="give them once") as both:
        open_content_store("http://alice:hunter2@127.0.0.1:5001", tmp_path, auth="bearer:t")
    assert "hunter2" not in str(both.value)
