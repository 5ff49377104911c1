"""`gym ipfs serve` as a real process, driven by ipfshttpclient, httpx and KuboStore: Kubo's
CIDs and wire format, the trustless gateway, tampering, and a node that lies."""

from __future__ import annotations

import io
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import ipfshttpclient.exceptions as ipfs_errors
import pytest
import uvicorn
from fastapi import FastAPI, Request, Response
from gym_helpers import kubo_cid

from devnet.anvil import free_port
from ledger.car import read_car
from ledger.errors import ContentIntegrityError, ContentStoreUnreachableError
from ledger.kubo import KuboError, KuboStore
from ledger.multiformats import CID, DAG_PB, RAW
from ledger.unixfs import CHUNK_SIZE, MAX_LINKS, file_cid

aleph_cid = pytest.importorskip("aleph_cid")
REPO = Path(__file__).resolve().parents[2]
# ipfshttpclient 0.7 hands urllib3 2 a parameter it only warns about
pytestmark = pytest.mark.filterwarnings("ignore:The 'strict' parameter:FutureWarning")


def v1_add(client, data: bytes, **kwargs):
    return client.add(io.BytesIO(data), cid_version=1, raw_leaves=True,
                      chunker=f"size-{CHUNK_SIZE}", **kwargs)


# --- RPC ---------------------------------------------------------------------------------------


def test_version_has_kubo_fields(client):
    info = client.version()
    assert set(info) == {"Version", "Commit", "Repo", "System", "Golang"}
    assert all(isinstance(value, str) for value in info.values())


@pytest.mark.parametrize("size", [0, 11, CHUNK_SIZE, CHUNK_SIZE + 1, 3 * CHUNK_SIZE + 5])
def test_add_v1_matches_kubo_and_cats_back(client, size):
    data = random.Random(size).randbytes(size)
    answer = v1_add(client, data)
    assert answer["Hash"] == kubo_cid(data) == file_cid(data)
    assert isinstance(answer["Size"], str) and int(answer["Size"]) >= size
    assert client.cat(answer["Hash"]) == data


def test_add_without_options_gives_kubos_default_cidv0(client):
    data = random.Random(5).randbytes(CHUNK_SIZE * 2 + 9)
    answer = client.add(io.BytesIO(data))
    assert answer["Hash"] == aleph_cid.compute_cid(data) == file_cid(data, cid_version=0)
    assert client.cat(answer["Hash"]) == data
    assert client.add_bytes(b"") == aleph_cid.compute_cid(b"")


def test_add_reports_cumulative_size_like_kubo(client):
    # a two-chunk file: root block + two leaves; Kubo's Size counts all three
    answer = v1_add(client, bytes(CHUNK_SIZE + 1))
    root = client.block.get(answer["Hash"])
    assert int(answer["Size"]) == len(root) + CHUNK_SIZE + 1


def test_add_only_hash_stores_nothing(client):
    data = b"only hashed " + os.urandom(16)
    answer = v1_add(client, data, only_hash=True)
    assert answer["Hash"] == file_cid(data)
    with pytest.raises(ipfs_errors.ErrorResponse):
        client.block.stat(answer["Hash"])


@pytest.mark.parametrize("options", [
    {"cid_version": 1, "raw_leaves": True, "chunker": "size-1000"},
    {"cid_version": 1, "raw_leaves": True, "trickle": True},
    {"cid_version": 0, "opts": {"hash": "blake2b-256"}},
])
def test_add_refuses_other_layouts(client, options):
    with pytest.raises(ipfs_errors.ErrorResponse, match="not supported"):
        client.add(io.BytesIO(b"x" * 10), **options)


def test_error_body_is_kubos(node):
    response = httpx.post(f"{node.url}/api/v0/block/get", params={"arg": "not-a-cid"})
    assert response.status_code == 500
    assert response.json().keys() == {"Message", "Code", "Type"}
    assert response.json()["Type"] == "error" and response.json()["Code"] == 0
    missing = httpx.post(f"{node.url}/api/v0/block/get")
    assert missing.status_code == 400 and missing.json()["Code"] == 1


def test_cat_offset_and_length(client):
    data = random.Random(1).randbytes(2 * CHUNK_SIZE + 100)
    cid = v1_add(client, data)["Hash"]
    assert client.cat(cid, offset=CHUNK_SIZE - 3, length=10) == data[CHUNK_SIZE - 3:CHUNK_SIZE + 7]
    assert client.cat(cid, offset=len(data) - 5) == data[-5:]


def test_block_put_get_stat(client):
    put = client.block.put(io.BytesIO(b"a raw block"))
    assert put["Key"] == str(CID.for_block(RAW, b"a raw block")) and put["Size"] == 11
    assert client.block.get(put["Key"]) == b"a raw block"
    assert client.block.stat(put["Key"]) == {"Key": put["Key"], "Size": 11}
    node_bytes = b"\x0a\x02\x08\x01"  # PBNode{Data: UnixFS{Type: Directory}}: the empty dir
    v0 = client.block.put(io.BytesIO(node_bytes), opts={"format": "v0"})
    assert v0["Key"] == "QmUNLLsPACCz1vLxQVkXqqLX5R1X345qqfHbsf67hvA3Nn"
    v1 = client.block.put(io.BytesIO(node_bytes), opts={"cid-codec": "dag-pb"})
    assert CID.parse(v1["Key"]).codec == DAG_PB
    with pytest.raises(ipfs_errors.ErrorResponse, match="dag-pb"):
        client.block.put(io.BytesIO(b"\xff\xff"), opts={"cid-codec": "dag-pb"})
    with pytest.raises(ipfs_errors.ErrorResponse, match="1MiB"):
        client.block.put(io.BytesIO(bytes(1024 * 1024 + 1)))


def test_pin_add_and_ls(client):
    data = random.Random(2).randbytes(CHUNK_SIZE + 10)
    cid = v1_add(client, data, pin=False)["Hash"]
    assert cid not in client.pin.ls(type="recursive")["Keys"]
    assert client.pin.add(cid) == {"Pins": [cid]}
    keys = client.pin.ls()["Keys"]
    assert keys[cid] == {"Type": "recursive"}
    leaves = [str(CID.for_block(RAW, data[:CHUNK_SIZE])), str(CID.for_block(RAW, data[CHUNK_SIZE:]))]
    assert all(keys[leaf] == {"Type": "indirect"} for leaf in leaves)
    assert client.pin.ls(cid)["Keys"] == {cid: {"Type": "recursive"}}
    with pytest.raises(ipfs_errors.ErrorResponse, match="not pinned"):
        client.pin.ls(client.block.put(io.BytesIO(os.urandom(8)))["Key"])


def test_rpc_is_post_only(node):
    assert httpx.get(f"{node.url}/api/v0/version").status_code == 405


# --- gateway -----------------------------------------------------------------------------------


def test_gateway_raw_block(node, client):
    cid = client.block.put(io.BytesIO(b"gateway raw"))["Key"]
    for kwargs in ({"params": {"format": "raw"}},
                   {"headers": {"Accept": "application/vnd.ipld.raw"}}):
        response = httpx.get(f"{node.url}/ipfs/{cid}", **kwargs)
        assert response.status_code == 200 and response.content == b"gateway raw"
        assert response.headers["content-type"] == "application/vnd.ipld.raw"
        assert response.headers["content-disposition"].startswith("attachment")
        assert response.headers["etag"] == f'"{cid}.raw"'
    assert httpx.head(f"{node.url}/ipfs/{cid}?format=raw").status_code == 200


def test_gateway_car_is_the_verified_dag(node, client):
    data = random.Random(3).randbytes(3 * CHUNK_SIZE)
    data = data[:CHUNK_SIZE] * 2 + data[2 * CHUNK_SIZE:]  # three leaves, two identical
    cid = v1_add(client, data)["Hash"]
    variants = [
        ({"params": {"format": "car"}}, "n", 3),
        ({"headers": {"Accept": "application/vnd.ipld.car"}}, "n", 3),
        ({"headers": {"Accept": "application/vnd.ipld.car; version=1; order=dfs; dups=y"}},
         "y", 4),
        ({"params": {"format": "car", "dag-scope": "block"}}, "n", 1),
    ]
    for kwargs, dups, count in variants:
        response = httpx.get(f"{node.url}/ipfs/{cid}", **kwargs)
        assert response.status_code == 200
        assert response.headers["content-type"] == (
            f"application/vnd.ipld.car; version=1; order=dfs; dups={dups}")
        roots, blocks = read_car(io.BytesIO(response.content))  # verifies every block
        blocks = list(blocks)
        assert roots == [CID.parse(cid)] and len(blocks) == count
        assert blocks[0][0] == CID.parse(cid)
    whole = list(read_car(io.BytesIO(httpx.get(f"{node.url}/ipfs/{cid}?format=car").content))[1])
    assert b"".join(block for c, block in whole if c.codec == RAW) == data[CHUNK_SIZE:]


def test_gateway_statuses(node):
    missing = str(CID.for_block(RAW, b"never added"))
    assert httpx.get(f"{node.url}/ipfs/{missing}?format=raw").status_code == 404
    assert httpx.get(f"{node.url}/ipfs/{missing}?format=car").status_code == 404
    assert httpx.get(f"{node.url}/ipfs/{missing}").status_code == 400  # no format asked
    assert httpx.get(f"{node.url}/ipfs/not-a-cid?format=raw").status_code == 400
    assert httpx.get(f"{node.url}/ipfs/{missing}?format=car&car-version=2").status_code == 400
    probe = httpx.get(f"{node.url}/ipfs/bafkqaaa?format=raw")
    assert probe.status_code == 200 and probe.content == b""
    car = httpx.get(f"{node.url}/ipfs/bafkqaaa?format=car")
    roots, blocks = read_car(io.BytesIO(car.content))
    assert str(roots[0]) == "bafkqaaa" and list(blocks) == []


def test_tampered_block_is_never_served(node, client):
    data = random.Random(4).randbytes(CHUNK_SIZE + 50)
    cid = v1_add(client, data)["Hash"]
    leaf = str(CID.for_block(RAW, data[CHUNK_SIZE:]))
    path = node.block_path(leaf)
    original = path.read_bytes()
    path.write_bytes(bytes([original[0] ^ 1]) + original[1:])
    try:
        with pytest.raises(ipfs_errors.ErrorResponse, match="does not hash"):
            client.block.get(leaf)
        with pytest.raises(ipfs_errors.ErrorResponse, match="does not hash"):
            client.cat(cid)
        raw = httpx.get(f"{node.url}/ipfs/{leaf}?format=raw")
        assert raw.status_code == 500 and original[1:20] not in raw.content
        car = httpx.get(f"{node.url}/ipfs/{cid}?format=car")
        assert car.status_code == 500 and original[1:20] not in car.content
        with pytest.raises(KuboError, match="does not hash"), KuboStore(node.url) as store:
            store.cat(cid)  # the honest node refuses; test_kubostore_catches_a_lying_node
            # covers a node that serves the bytes anyway
    finally:
        path.write_bytes(original)
    assert client.cat(cid) == data


# --- KuboStore ---------------------------------------------------------------------------------


def test_kubostore_round_trip(node, tmp_path):
    data = random.Random(6).randbytes(2 * CHUNK_SIZE + 1)
    source = tmp_path / "weights.bin"
    source.write_bytes(data)
    with KuboStore(node.url) as store:
        cid = store.add_file(source, pin=True)
        assert cid == file_cid(data)
        assert store.cat(cid) == data and b"".join(store.cat_iter(cid)) == data
        assert store.has(cid) and not store.has(str(CID.for_block(RAW, b"absent")))
        assert store.add_file(iter([data[:10], data[10:]])) == cid  # a stream is spooled
        assert store.add_file(b"") == file_cid(b"")
        assert store.pin_add(cid) == cid


def test_dag_export_through_ipfshttpclient_and_kubostore(node, client):
    """`dag/export` as Kubo answers it: the DAG's blocks, parents first, each once; KuboStore
    re-hashes each and bounds the answer by the blocks and bytes the caller expects."""
    from ledger.batches import batch_dag

    leaves = [b"leaf %d" % i for i in range(3)] + [b"leaf 0"]  # one leaf twice: sent once
    with KuboStore(node.url) as store:
        cids = [str(store.put_block(CID.for_block(RAW, leaf), leaf)) for leaf in leaves]
        dag = batch_dag(cids)
        (root, block), = dag.nodes
        assert store.put_block(root, block) == root
        assert client.block.stat(str(root))["Size"] == len(block)
        exported = store.export_dag(root, max_blocks=5, max_bytes=10_000)
        assert [str(cid) for cid, _ in exported] == [str(root)] + cids[:3]
        roots, blocks = read_car(io.BytesIO(client.dag.export(str(root))))
        assert roots == [root] and list(blocks) == exported
        with pytest.raises(KuboError, match="more than the 3"):
            store.export_dag(root, max_blocks=3, max_bytes=10_000)
        with pytest.raises(KuboError, match="bytes"):
            store.export_dag(root, max_blocks=5, max_bytes=100)
        with pytest.raises(KuboError, match="dag/export"):
            store.export_dag(CID.for_block(DAG_PB, b""), max_blocks=5, max_bytes=10_000)


def test_kubostore_unreachable_names_the_setting():
    store = KuboStore(f"http://127.0.0.1:{free_port()}")
    with pytest.raises(ContentStoreUnreachableError, match="GYM_IPFS_API"):
        store.cat(str(CID.for_block(RAW, b"x")))


@pytest.fixture
def liar():
    """A fake Kubo that flips a byte of every block and claims CIDv0 for every add."""
    fake = FastAPI()

    @fake.post("/api/v0/block/get")
    async def block_get(request: Request) -> Response:
        return Response(b"not the bytes you asked for", media_type="text/plain")

    @fake.post("/api/v0/dag/export")
    async def dag_export(request: Request) -> Response:
        from content_endpoint.gateway import car_bytes

        root = CID.parse(request.query_params["arg"])
        return Response(b"".join(car_bytes(root, iter([(root, b"other bytes")]))))

    @fake.post("/api/v0/add")
    async def add(request: Request) -> Response:
        await request.body()
        return Response('{"Name":"f","Hash":"QmUNLLsPACCz1vLxQVkXqqLX5R1X345qqfHbsf67hvA3Nn",'
                        '"Size":"4"}\n', media_type="application/json")

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(fake, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


def test_kubostore_catches_a_lying_node(liar):
    with KuboStore(liar) as store:
        with pytest.raises(ContentIntegrityError):
            store.cat(str(CID.for_block(RAW, b"what I want")))
        with pytest.raises(ContentIntegrityError, match="Import"):
            store.add_file(b"hello")
        with pytest.raises(ContentIntegrityError):
            store.export_dag(CID.for_block(RAW, b"mine"), max_blocks=2, max_bytes=1000)


# --- CLI -----------------------------------------------------------------------------------------


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "content_endpoint.cli", *args], cwd=REPO, env=env,
                          capture_output=True, timeout=120, check=False)


def test_cli_add_cat_export_import(tmp_path, node):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GYM_")}
    env.update(GYM_DATA_DIR=str(tmp_path / "data"), COLUMNS="200", NO_COLOR="1")
    data = random.Random(7).randbytes(CHUNK_SIZE + 3)
    source = tmp_path / "file.bin"
    source.write_bytes(data)
    added = _cli("add", "--pin", str(source), env=env)
    assert added.returncode == 0, added.stderr
    cid = added.stdout.decode().strip()
    assert cid == file_cid(data)
    assert _cli("add", "--only-hash", str(source), env=env).stdout.decode().strip() == cid
    assert _cli("cat", cid, env=env).stdout == data
    car = tmp_path / "file.car"
    assert _cli("export", cid, str(car), env=env).returncode == 0
    other = {**env, "GYM_DATA_DIR": str(tmp_path / "other")}
    imported = _cli("import", str(car), env=other)
    assert imported.stdout.decode().split() == [cid]
    assert _cli("cat", cid, env=other).stdout == data
    # through the running node: GYM_IPFS_API routes add and cat to it
    remote = {**env, "GYM_IPFS_API": node.url}
    assert _cli("add", str(source), env=remote).stdout.decode().strip() == cid
    assert _cli("cat", cid, env=remote).stdout == data
    remote_car = tmp_path / "remote.car"  # `export` reads the DAG block by block from the node
    assert _cli("export", cid, str(remote_car), env=remote).returncode == 0
    assert remote_car.read_bytes() == car.read_bytes()
    failed = _cli("cat", str(CID.for_block(RAW, b"nowhere")), env=env)
    assert failed.returncode == 1 and failed.stderr.decode().startswith("error:")
    assert "Traceback" not in failed.stderr.decode()


# --- big -----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_multi_level_file_through_kubostore(node, tmp_path):
    data = random.Random(8).randbytes((MAX_LINKS + 26) * CHUNK_SIZE + 17)  # ~50 MB, depth 2
    source = tmp_path / "big.bin"
    source.write_bytes(data)
    with KuboStore(node.url) as store:
        cid = store.add_file(source)
        assert cid == kubo_cid(data)
        assert store.cat(cid) == data
