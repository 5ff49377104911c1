"""Who may do what on `gym ipfs serve` (issue 44, finding 9: a stranger unpinned 8 of 8 pins):
Kubo's API.Authorizations (`--authorizations`), pins owned by the parties that made them, and
the clients that send credentials (ipfshttpclient, aioipfs, KuboStore, `GYM_IPFS_API_AUTH`)."""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys

import aioipfs
import httpx
import ipfshttpclient
import ipfshttpclient.exceptions as ipfs_errors
import pytest
from ipfs_node import REPO, Node

from content_endpoint.authorizations import load_authorizations
from content_endpoint.errors import ContentEndpointError
from ledger.blockstore import LocalBlockStore
from ledger.content import open_content_store
from ledger.kubo import KuboError, KuboStore, authorization_header

pytestmark = [
    pytest.mark.filterwarnings("ignore:The 'strict' parameter:FutureWarning"),
    # aioipfs 0.7 takes aiohttp's BasicAuth, which aiohttp now deprecates
    pytest.mark.filterwarnings("ignore:BasicAuth is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:The 'auth' parameter is deprecated:DeprecationWarning"),
]

AUTHORIZATIONS = {
    "alice": {"AuthSecret": "bearer:alice-token", "AllowedPaths": ["/api/v0"]},
    "bob": {"AuthSecret": "basic:bob:bob-password", "AllowedPaths": ["/api/v0"]},
    # writes and reads, but removes nothing: what a party gets on a real Kubo (docs)
    "carol": {"AuthSecret": "bearer:carol-token",
              "AllowedPaths": ["/api/v0/add", "/api/v0/cat", "/api/v0/pin/add"]},
    # callers without credentials may read
    "anonymous": {"AllowedPaths": ["/api/v0/cat", "/api/v0/block/get", "/api/v0/pin/ls"]},
}
ALICE = {"Authorization": "Bearer alice-token"}
BOB = {"Authorization": authorization_header("basic:bob:bob-password")}
CAROL = {"Authorization": "Bearer carol-token"}


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("guarded")
    (folder / "auth.json").write_text(json.dumps(AUTHORIZATIONS))
    server = Node(folder / "store", "--authorizations", str(folder / "auth.json"))
    yield server
    server.stop()


def rpc(node, command: str, headers=None, **params) -> httpx.Response:
    return httpx.post(f"{node.url}/api/v0/{command}", params=params, headers=headers, timeout=30)


def add(node, data: bytes, headers) -> str:
    answer = httpx.post(f"{node.url}/api/v0/add", params={"cid-version": "1"}, headers=headers,
                        files={"file": ("f", data)}, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()["Hash"]


def pinned(node, cid: str) -> bool:
    return cid in rpc(node, "pin/ls", ALICE, type="recursive").json()["Keys"]


# --- Kubo's API.Authorizations ---------------------------------------------------------------


def test_callers_need_credentials_and_allowed_paths(guarded):
    assert rpc(guarded, "add").status_code == 401  # no credentials, a path anonymous lacks
    wrong = rpc(guarded, "version", {"Authorization": "Bearer guess"})
    assert wrong.status_code == 401 and wrong.json()["Type"] == "error"
    assert "Access Denied" in wrong.json()["Message"]
    assert rpc(guarded, "version", CAROL).status_code == 200  # always, with valid credentials
    refused = rpc(guarded, "pin/rm", CAROL, arg="bafkqaaa")
    assert refused.status_code == 403 and "'carol' may not call /api/v0/pin/rm" in \
        refused.json()["Message"]
    cid = add(guarded, b"carol writes", CAROL)
    assert rpc(guarded, "cat", arg=cid).content == b"carol writes"  # the anonymous entry reads
    assert rpc(guarded, "pin/add", arg=cid).status_code == 401
    gateway = httpx.get(f"{guarded.url}/ipfs/{cid}?format=raw", timeout=10)
    assert gateway.content == b"carol writes"  # as in Kubo, the gateway is not guarded


def test_a_partys_pins_are_its_own(guarded):
    cid = add(guarded, b"alice's evidence", ALICE)
    stranger = rpc(guarded, "pin/rm", BOB, arg=cid)
    assert stranger.status_code == 403 and "pinned by other parties" in stranger.json()["Message"]
    assert pinned(guarded, cid)
    assert rpc(guarded, "pin/add", BOB, arg=cid).json() == {"Pins": [cid]}  # bob holds it too
    assert rpc(guarded, "pin/rm", ALICE, arg=cid).json() == {"Pins": [cid]}
    assert pinned(guarded, cid)  # bob's pin remains
    assert rpc(guarded, "pin/rm", ALICE, arg=cid).status_code == 403  # alice's is gone
    assert rpc(guarded, "pin/rm", BOB, arg=cid).json() == {"Pins": [cid]}
    assert not pinned(guarded, cid)
    assert rpc(guarded, "pin/rm", BOB, arg=cid).json()["Message"] == \
        "not pinned or pinned indirectly"


def test_owners_survive_a_restart(tmp_path):
    (tmp_path / "auth.json").write_text(json.dumps(AUTHORIZATIONS))
    serve = ("--authorizations", str(tmp_path / "auth.json"))
    node = Node(tmp_path / "store", *serve)
    cid = add(node, b"kept across restarts", ALICE)
    node.stop()
    node = Node(tmp_path / "store", *serve)
    try:
        assert rpc(node, "pin/rm", BOB, arg=cid).status_code == 403
        assert rpc(node, "pin/rm", ALICE, arg=cid).status_code == 200
    finally:
        node.stop()
    assert LocalBlockStore(tmp_path / "store").pin_ls() == []


def test_real_clients_send_credentials(guarded):
    with ipfshttpclient.Client(addr=guarded.multiaddr, headers=ALICE) as client:
        cid = client.add(io.BytesIO(b"through ipfshttpclient"), cid_version=1,
                         raw_leaves=True)["Hash"]
        assert client.pin.rm(cid)["Pins"] == [cid]
        with pytest.raises(ipfs_errors.ErrorResponse, match="not pinned or pinned indirectly"):
            client.pin.rm(cid)
    with ipfshttpclient.Client(addr=guarded.multiaddr) as client, \
            pytest.raises(ipfs_errors.Error, match="Access Denied"):
        client.add(io.BytesIO(b"no credentials"))

    async def with_aioipfs():
        client = aioipfs.AsyncIPFS(host="127.0.0.1", port=guarded.port,
                                   auth=aioipfs.BasicAuth("bob", "bob-password"))
        try:
            added = await client.core.add_bytes(b"through aioipfs", cid_version=1)
            assert (await client.pin.rm(added["Hash"]))["Pins"] == [added["Hash"]]
            with pytest.raises(aioipfs.NotPinnedError):
                await client.pin.rm(added["Hash"])
        finally:
            await client.close()

    asyncio.run(with_aioipfs())


def test_kubostore_authenticates_from_the_url_or_gym_ipfs_api_auth(guarded, tmp_path,
                                                                    monkeypatch):
    userinfo = guarded.url.replace("http://", "http://bob:bob-password@")
    with KuboStore(userinfo) as store:
        assert "bob-password" not in store.api_url
        cid = store.add_file(b"kubostore with userinfo", pin=True)
        assert store.cat(cid) == b"kubostore with userinfo"
    monkeypatch.setenv("GYM_IPFS_API_AUTH", "bearer:alice-token")
    store = open_content_store(guarded.url, tmp_path)
    assert store.cat(cid) == b"kubostore with userinfo"
    monkeypatch.setenv("GYM_IPFS_API_AUTH", "bearer:wrong-token")
    with pytest.raises(KuboError, match="Access Denied") as refused:
        open_content_store(guarded.url, tmp_path).add_file(b"x")
    assert "wrong-token" not in str(refused.value)


# --- the open devnet: no --authorizations ----------------------------------------------------


def test_a_stranger_cannot_unpin_what_others_pinned(tmp_path):
    """Finding 9, rebuilt: eight pins by the parties of an open endpoint (and one by this
    host's own commands); a stranger asks to remove each; all nine stay pinned."""
    store = LocalBlockStore(tmp_path / "store")
    local = store.add_file(b"this host's manifest", pin=True)
    node = Node(tmp_path / "store")
    try:
        cids = [add(node, f"party {n}'s content".encode(), None) for n in range(8)]
        for cid in [*cids, local]:
            answer = rpc(node, "pin/rm", arg=cid)
            assert answer.status_code == 403, answer.text
        kept = rpc(node, "pin/ls", type="recursive").json()["Keys"]
        assert set(kept) == {*cids, local}
    finally:
        node.stop()


# --- the file -----------------------------------------------------------------------------------


@pytest.mark.parametrize("document, message", [
    ("{", "is not JSON"),
    ("[]", "JSON object of name"),
    ('{"alice": {"AuthSecret": "digest:x", "AllowedPaths": []}}', "'alice': an authorization"),
    ('{"alice": {"AuthSecret": "bearer:", "AllowedPaths": []}}', "'alice': an authorization"),
    ('{"alice": {"AllowedPaths": ["/api/v0"]}}', "'alice' has no AuthSecret"),
    ('{"alice": {"AuthSecret": "bearer:t", "AllowedPaths": "/api/v0"}}', "AllowedPaths must"),
    ('{"local": {"AuthSecret": "bearer:t", "AllowedPaths": []}}', "a name is"),
    ('{"a": {"AuthSecret": "bearer:t"}, "b": {"AuthSecret": "t"}}', "AuthSecret of another"),
    ('{"anonymous": {"AuthSecret": "bearer:t"}}', "anonymous entry has no AuthSecret"),
])
def test_a_bad_authorizations_file_is_one_line(tmp_path, document, message):
    path = tmp_path / "auth.json"
    path.write_text(document)
    with pytest.raises(ContentEndpointError, match=message) as refused:
        load_authorizations(path)
    assert "\n" not in str(refused.value)


def test_serve_checks_the_file_at_start_without_printing_secrets(tmp_path):
    path = tmp_path / "auth.json"
    path.write_text('{"alice": {"AuthSecret": "mysecret:hunter2", "AllowedPaths": []}}')
    done = subprocess.run(
        [sys.executable, "-m", "content_endpoint.cli", "serve", "--port", "0", "--data-dir",
         str(tmp_path / "store"), "--authorizations", str(path)],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert done.stderr.strip().startswith("error:") and "auth.json" in done.stderr
    assert "hunter2" not in done.stderr + done.stdout and "Traceback" not in done.stderr
