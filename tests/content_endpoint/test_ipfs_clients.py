"""`gym ipfs serve` under the Kubo clients people use, ipfshttpclient 0.7 and aioipfs 0.7: the
layouts they ask `add` for, pins, `get`, `ls`, `refs`, `files/stat`, `dag/get|put|export`,
`id`, and a call outside the subset. CIDs are checked against aleph-cid, not against the
store's own importer."""

from __future__ import annotations

import asyncio
import base64
import gzip
import io
import json
import random
import tarfile

import aioipfs
import httpx
import ipfshttpclient.exceptions as ipfs_errors
import pytest
from gym_helpers import kubo_cid

from content_endpoint.peer import identity_of, load_identity
from ledger.car import read_car
from ledger.multiformats import CID, DAG_PB, RAW
from ledger.unixfs import CHUNK_SIZE, decode_pbnode, file_cid

aleph_cid = pytest.importorskip("aleph_cid")
pytestmark = pytest.mark.filterwarnings("ignore:The 'strict' parameter:FutureWarning")


def aio(node, body):
    """Run ``body(client)`` with an aioipfs client of ``node``."""
    async def main():
        client = aioipfs.AsyncIPFS(host="127.0.0.1", port=node.port)
        try:
            return await body(client)
        finally:
            await client.close()
    return asyncio.run(main())


def rpc(node, command: str, **params) -> httpx.Response:
    return httpx.post(f"{node.url}/api/v0/{command}", params=params, timeout=30)


# --- add: the layouts clients ask for --------------------------------------------------------


@pytest.mark.parametrize("size", [11, CHUNK_SIZE + 1])
def test_ipfshttpclient_add_with_cid_version_1_makes_kubos_dag_pb_leaves(client, tmp_path, size):
    """ipfshttpclient's `add(path, cid_version=1)` sends raw-leaves=False; Kubo then makes
    dag-pb leaves under CIDv1."""
    data = random.Random(size).randbytes(size)
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    answer = client.add(str(path), cid_version=1)
    cid = CID.parse(answer["Hash"])
    assert cid.version == 1 and cid.codec == DAG_PB
    assert answer["Hash"] == file_cid(data, cid_version=1, raw_leaves=False)
    if size <= CHUNK_SIZE:  # one dag-pb leaf: the CIDv0 block, named by CIDv1
        assert cid.multihash == CID.parse(aleph_cid.compute_cid(data)).multihash
    else:
        for link in decode_pbnode(client.block.get(answer["Hash"])).links:
            assert link.cid.version == 1 and link.cid.codec == DAG_PB
    assert client.cat(answer["Hash"]) == data


def test_cid_version_0_with_raw_leaves(client):
    data = random.Random(3).randbytes(2 * CHUNK_SIZE)
    answer = client.add(io.BytesIO(data), cid_version=0, raw_leaves=True)
    root = CID.parse(answer["Hash"])
    assert root.version == 0 and answer["Hash"] == file_cid(data, cid_version=0, raw_leaves=True)
    links = decode_pbnode(client.block.get(answer["Hash"])).links
    assert [str(link.cid) for link in links] == [kubo_cid(data[:CHUNK_SIZE]),
                                                 kubo_cid(data[CHUNK_SIZE:])]
    assert client.add(io.BytesIO(b"small"), cid_version=0, raw_leaves=True)["Hash"] == \
        kubo_cid(b"small")  # one raw leaf is the file, and raw blocks are CIDv1


def test_aioipfs_add_bytes_cat_and_pins(node):
    data = b"through aioipfs " + random.Random(9).randbytes(100)

    async def body(client):
        v0 = await client.core.add_bytes(data)
        v1 = await client.core.add_bytes(data, cid_version=1)
        assert v0["Hash"] == aleph_cid.compute_cid(data)
        assert v1["Hash"] == kubo_cid(data)
        assert await client.core.cat(v1["Hash"]) == data
        assert await client.core.cat(v0["Hash"], offset=3, length=4) == data[3:7]
        pinned = [answer async for answer in client.pin.add(v1["Hash"])]
        assert pinned[-1]["Pins"] == [v1["Hash"]]
        listed = await client.pin.ls(v1["Hash"])
        assert listed["Keys"][v1["Hash"]]["Type"] == "recursive"
        return True  # pin/rm needs credentials: test_authorizations.py

    assert aio(node, body)


def test_ipfshttpclient_pin_rm_is_refused_to_anonymous_callers(client):
    """Without --authorizations every caller is anonymous: it may pin, never unpin (its
    removal would be everyone's). test_authorizations.py unpins with credentials."""
    cid = client.add_bytes(b"pin me, then not")
    assert client.pin.ls(cid)["Keys"][cid]["Type"] == "recursive"
    with pytest.raises(ipfs_errors.ErrorResponse, match="anonymous callers cannot remove"):
        client.pin.rm(cid)
    assert client.pin.ls(cid)["Keys"][cid]["Type"] == "recursive"


# --- get, ls, refs, files/stat ---------------------------------------------------------------


def test_get_is_a_tar_of_the_file(client, node, tmp_path):
    data = random.Random(4).randbytes(CHUNK_SIZE + 77)
    cid = client.add(io.BytesIO(data), cid_version=1, raw_leaves=True)["Hash"]
    client.get(cid, target=tmp_path)  # ipfshttpclient extracts the tar into target/<cid>
    assert (tmp_path / cid).read_bytes() == data
    answer = rpc(node, "get", arg=f"/ipfs/{cid}", archive="true")
    assert answer.headers["x-content-length"] == str(len(data))
    with tarfile.open(fileobj=io.BytesIO(answer.content)) as tar:
        (member,) = tar.getmembers()
        assert (member.name, member.size, member.mode, member.uid) == (cid, len(data), 0o644, 0)
        assert tar.extractfile(member).read() == data
    gz = rpc(node, "get", arg=cid, compress="true", **{"compression-level": "6"})
    assert gz.headers["content-type"] == "application/gzip"
    assert gzip.decompress(gz.content) == data  # archive=false with compress: the file alone
    assert rpc(node, "get", arg=cid, compress="true").json()["Message"] == \
        "compression level must be between 1 and 9"


def test_aioipfs_get(node, tmp_path):
    data = b"aioipfs get " * 1000

    async def body(client):
        cid = (await client.core.add_bytes(data, cid_version=1))["Hash"]
        await client.core.get(cid, dstdir=str(tmp_path))
        return cid

    cid = aio(node, body)
    assert (tmp_path / cid).read_bytes() == data


def test_ls_lists_a_files_chunks_like_kubo(client, node):
    data = random.Random(5).randbytes(2 * CHUNK_SIZE + 10)
    v1 = client.add(io.BytesIO(data), cid_version=1, raw_leaves=True)["Hash"]
    v0 = client.add(io.BytesIO(data))["Hash"]
    (obj,) = client.ls(v1)["Objects"]
    assert obj["Hash"] == v1
    assert [(link["Name"], link["Type"], link["Size"]) for link in obj["Links"]] == \
        [("", 2, CHUNK_SIZE), ("", 2, CHUNK_SIZE), ("", 2, 10)]
    assert [link["Hash"] for link in obj["Links"]] == [
        kubo_cid(data[i:i + CHUNK_SIZE]) for i in range(0, len(data), CHUNK_SIZE)]
    # dag-pb leaves: their file size, not their block size
    (obj0,) = aio(node, lambda c: c.core.ls(v0))["Objects"]
    assert [link["Size"] for link in obj0["Links"]] == [CHUNK_SIZE, CHUNK_SIZE, 10]
    assert client.ls(kubo_cid(data[:CHUNK_SIZE]))["Objects"][0]["Links"] == []
    streamed = [json.loads(line) for line in
                rpc(node, "ls", arg=v1, stream="true").text.splitlines()]
    assert [o["Objects"][0]["Links"][0]["Hash"] for o in streamed] == \
        [link["Hash"] for link in obj["Links"]]


def test_refs(client, node):
    data = bytes(3 * CHUNK_SIZE)  # three identical chunks: one raw leaf, linked three times
    cid = client.add(io.BytesIO(data), cid_version=1, raw_leaves=True)["Hash"]
    leaf = kubo_cid(bytes(CHUNK_SIZE))

    def refs(**params):
        lines = [json.loads(line) for line in rpc(node, "refs", arg=cid, **params).text.splitlines()]
        assert all(line["Err"] == "" for line in lines)
        return [line["Ref"] for line in lines]

    assert refs() == [leaf] * 3
    assert refs(unique="true") == [leaf]
    assert refs(edges="true", unique="true") == [f"{cid} -> {leaf}"]
    assert refs(format="<src>:<dst>", recursive="true", **{"max-depth": "0"}) == []
    assert rpc(node, "refs", arg=cid, edges="true", format="<dst>").json()["Message"] == \
        "using format argument with edges is not allowed"


def test_refs_of_a_dag_with_a_missing_block_ends_with_its_error(client, node):
    data = random.Random(6).randbytes(CHUNK_SIZE + 5)
    cid = client.add(io.BytesIO(data), cid_version=0)["Hash"]  # dag-pb leaves: refs descends
    links = decode_pbnode(client.block.get(cid)).links
    node.block_path(str(links[1].cid)).unlink()
    lines = [json.loads(line) for line in
             rpc(node, "refs", arg=cid, recursive="true").text.splitlines()]
    assert [line["Ref"] for line in lines[:2]] == [str(link.cid) for link in links]
    assert lines[-1]["Ref"] == "" and "not in the local content store" in lines[-1]["Err"]


def test_files_stat(client, node):
    data = random.Random(7).randbytes(CHUNK_SIZE + 3)
    cid = client.add(io.BytesIO(data), cid_version=1, raw_leaves=True)["Hash"]
    root = client.block.get(cid)
    stat = client.files.stat(f"/ipfs/{cid}")
    assert stat == {"Hash": cid, "Size": len(data), "CumulativeSize": len(root) + len(data),
                    "Blocks": 2, "Type": "file"}
    raw = kubo_cid(b"raw stat")
    client.block.put(io.BytesIO(b"raw stat"))
    assert aio(node, lambda c: c.files.stat(f"/ipfs/{raw}", with_local=True)) == {
        "Hash": raw, "Size": 8, "CumulativeSize": 8, "Blocks": 0, "Type": "file",
        "WithLocality": True, "Local": True, "SizeLocal": 8}
    answer = rpc(node, "files/stat", arg="/my-mfs-dir")
    assert answer.status_code == 500 and "no MFS" in answer.json()["Message"]


# --- dag -------------------------------------------------------------------------------------


def test_dag_get_put_round_trip_and_export(client, node):
    data = random.Random(8).randbytes(CHUNK_SIZE + 1)
    cid = client.add(io.BytesIO(data))["Hash"]  # CIDv0, dag-pb leaves
    text = rpc(node, "dag/get", arg=cid).content
    shown = json.loads(text)
    assert client.dag.get(cid)["Links"][1]["Hash"]["/"] == shown["Links"][1]["Hash"]["/"]
    assert shown.keys() == {"Data", "Links"}
    assert base64.b64decode(shown["Data"]["/"]["bytes"] + "==") == \
        decode_pbnode(client.block.get(cid)).data
    assert [link["Hash"]["/"] for link in shown["Links"]] == \
        [str(link.cid) for link in decode_pbnode(client.block.get(cid)).links]
    assert {"Name": "", "Tsize": CHUNK_SIZE + 14} == {
        k: v for k, v in shown["Links"][0].items() if k != "Hash"}
    assert text == json.dumps(shown, sort_keys=True, separators=(",", ":")).encode()

    def put(document: bytes, **params) -> httpx.Response:
        # aioipfs 0.7.1's dag.put cannot send a file (it wraps an open file in a BytesIO
        # payload), and ipfshttpclient's sends pre-0.10 option names: plain multipart here.
        return httpx.post(f"{node.url}/api/v0/dag/put", params=params,
                          files={"file": ("node.json", document)}, timeout=30)

    # the same node, put back from its dag-json: the same block, named by CIDv1
    assert put(text, **{"store-codec": "dag-pb"}).json()["Cid"]["/"] == \
        str(CID.parse(cid).to_v1())
    raw = aio(node, lambda c: c.dag.get(kubo_cid(b"raw stat")))  # aioipfs gives the text
    assert json.loads(raw) == {"/": {"bytes": "cmF3IHN0YXQ"}}  # base64 without padding
    roots, blocks = read_car(io.BytesIO(client.dag.export(cid)))
    assert roots == [CID.parse(cid)] and len(list(blocks)) == 3

    refused = put(text)  # Kubo's default store codec
    assert refused.status_code == 500 and "dag-cbor" in refused.json()["Message"]
    bad = put(b'{"Links": [{"Hash": {"/": "not-a-cid"}}]}', **{"store-codec": "dag-pb"})
    assert bad.status_code == 500 and bad.json()["Message"].startswith("Links[0].Hash: ")


# --- id, and what is not here ----------------------------------------------------------------


def test_id_is_a_stable_ed25519_peer(client, node):
    me = client.id()
    assert me["ID"].startswith("12D3KooW") and me["PublicKey"].startswith("CAESI")
    assert me["ID"] == load_identity(node.data_dir).peer_id  # the key kept beside the store
    assert aio(node, lambda c: c.core.id())["ID"] == me["ID"]
    assert identity_of(base64.b64decode(me["PublicKey"])[4:]).peer_id == me["ID"]
    import multiaddr  # aioipfs's dependency: decodes the peer ID as a multihash itself
    assert str(multiaddr.Multiaddr(f"/p2p/{me['ID']}")) == f"/p2p/{me['ID']}"


def test_a_call_outside_the_subset_is_a_kubo_error_naming_it(node):
    answer = rpc(node, "swarm/peers")
    assert answer.status_code == 404
    body = answer.json()
    assert body.keys() == {"Message", "Code", "Type"} and body["Type"] == "error"
    assert "'swarm/peers' is not supported" in body["Message"]
    for command in ("add", "cat", "dag/export", "pin/rm", "refs", "id"):
        assert command in body["Message"]
    assert httpx.get(f"{node.url}/api/v0/swarm/peers").status_code == 405

    async def body_(client):
        with pytest.raises(aioipfs.EndpointNotFoundError):
            await client.swarm.peers()
        return True

    assert aio(node, body_)


def test_raw_block_codec_is_raw(client):
    assert CID.parse(client.block.put(io.BytesIO(b"x"))["Key"]).codec == RAW


def test_refs_of_a_dag_that_repeats_a_node_stops_at_its_bound(node, monkeypatch):
    """A node linking one child many times, itself linked many times: the refs grow as a
    product of the fan-outs. The answer stops at its bound with an error line."""
    from content_endpoint import rpc_dag as ipfs_rpc_dag
    from ledger.blockstore import LocalBlockStore
    from ledger.unixfs import PBLink, PBNode, encode_pbnode

    monkeypatch.setattr(ipfs_rpc_dag, "MAX_REFS", 1000)  # the bound, at a test's scale
    store = LocalBlockStore(node.data_dir.parent / "fanout")
    leaf = store.put(b"leaf")
    inner = encode_pbnode(PBNode(tuple(PBLink(leaf, "", 4) for _ in range(100))))
    inner_cid = store.put(inner, codec=DAG_PB)
    outer = store.put(encode_pbnode(PBNode(tuple(PBLink(inner_cid, "", 1) for _ in range(100)))),
                      codec=DAG_PB)
    lines = [json.loads(line) for line in ipfs_rpc_dag._refs(
        store, outer, max_depth=-1, unique=False, template="<dst>")]
    assert len(lines) == 1001 and lines[-1]["Err"].startswith("more than 1000 refs")
    unique = list(ipfs_rpc_dag._refs(store, outer, max_depth=-1, unique=True, template="<dst>"))
    assert len(unique) == 2


@pytest.mark.parametrize("document, codec, message", [
    (b"[" * 100_000 + b"]" * 100_000, DAG_PB, "not JSON"),
    (b'{"Data": {"/": {"bytes": "***"}}}', DAG_PB, "Data: not base64"),
    (b'{"Data": null, "Links": [], "Extra": 1}', DAG_PB, "Data and Links only"),
    ((b'{"Links": [{"Hash": {"/": "bafkreifzjut3te2nhyekklss27nh3k72ysco7y32koao5eei66wof36n5e"},'
     b' "Tsize": -1}]}'), DAG_PB, "Links[0].Tsize"),
    (b'{"/": {"bytes": "aGk", "x": 1}}', RAW, "raw block"),
    (b" " * (3 << 20), RAW, "over"),
])
def test_hostile_dag_json_is_one_error(document, codec, message):
    from content_endpoint.dagjson import DagJsonError, decode_dag_json

    with pytest.raises(DagJsonError, match=message.replace("[", r"\[").replace(".", r"\.")):
        decode_dag_json(document, codec)
