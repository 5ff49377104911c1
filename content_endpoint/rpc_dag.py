"""The Kubo RPC calls that read and write DAGs beyond ``add``/``cat``/blocks/pins, as Kubo
answers them (field names, defaults and error texts from Kubo's ``core/commands``), for clients
and pinning services: ``ls``, ``refs``, ``files/stat`` (``/ipfs/`` paths), ``get`` (a tar of one
file), ``dag/get`` and ``dag/put`` (dag-json, ``content_endpoint.dagjson``) and ``id``.

Each is bounded by work: ``ls`` reads at most ``MAX_READ_BYTES`` of child blocks, ``refs``
lists at most ``MAX_REFS`` and reads at most ``MAX_READ_BYTES`` (a node linked many times is
read each time, as Kubo does without ``unique``), ``files/stat --with-local`` walks each
distinct block once within the store's pin bounds and stops when its client leaves, ``get``
reads as ``cat`` does, and ``dag/put`` reads at most one block (twice that of dag-json).

What is not here is refused with one Kubo error: the store holds files, raw blocks and
dag-pb nodes (no dag-cbor, so ``dag/put``'s default ``store-codec=dag-cbor`` is refused by
name), has no MFS (``files/*`` take ``/ipfs/<cid>`` paths only), no paths inside a DAG, and no
libp2p host (``id`` names the node, with no addresses or protocols).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

from fastapi import FastAPI, Request, Response
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from content_endpoint.authorizations import party_of
from content_endpoint.dagjson import decode_dag_json, encode_dag_json
from content_endpoint.kubo_rpc import (
    Args,
    RpcError,
    Upload,
    block_limit,
    in_work_thread,
    ndjson,
    parse_cid,
    run_while_connected,
)
from content_endpoint.limits import EndpointLimits
from content_endpoint.peer import load_identity
from content_endpoint.tar import gzipped, tar_file
from ledger.blockstore import LocalBlockStore
from ledger.errors import LedgerError
from ledger.multiformats import CID, DAG_PB, RAW
from ledger.unixfs import (
    UNIXFS_DIRECTORY,
    UNIXFS_FILE,
    DagError,
    decode_pbnode,
    decode_unixfs,
)

MAX_REFS = 1 << 20  # one `refs` answer lists at most this many (a DAG can share subtrees)
MAX_READ_BYTES = 256 << 20  # block bytes one `refs` or `ls` reads (a shared node is read
# again each time it is reached)
_ZERO_TIME = "0001-01-01T00:00:00Z"  # Go's zero time.Time, as Kubo's `ls` prints it
_UNIXFS_SYMLINK = 4  # unixfs.pb Data.DataType, beside ledger.unixfs's File and Directory
_UNIXFS_METADATA, _UNIXFS_HAMT = 3, 5  # listed as directories, as Kubo's `ls` does
_STORE_CODECS = {"dag-pb": DAG_PB, "raw": RAW}


def _unixfs(cid: CID, block: bytes) -> tuple[int, int]:
    """(``ls`` type, size) of a node: a file's byte size, 0 for a directory."""
    if cid.codec == RAW:
        return UNIXFS_FILE, len(block)
    node = decode_pbnode(block)
    if node.data is None:
        raise DagError(f"{cid} is a dag-pb node without UnixFS data")
    data = decode_unixfs(node.data)
    if data.type in (UNIXFS_DIRECTORY, _UNIXFS_METADATA, _UNIXFS_HAMT):  # directory, metadata, HAMT shard
        return UNIXFS_DIRECTORY, 0
    if data.type == _UNIXFS_SYMLINK:
        return _UNIXFS_SYMLINK, len(data.data or b"")
    return UNIXFS_FILE, data.filesize if data.filesize is not None else len(data.data or b"")


def _ls(store: LocalBlockStore, path: str, resolve: bool) -> dict:
    cid = parse_cid(path)
    block = store.get_block(cid)
    links, resolved, read = [], {}, 0  # a child linked many times is read once
    for link in (decode_pbnode(block).links if cid.codec == DAG_PB else ()):
        kind, size = 0, 0
        if link.cid.codec == RAW:
            kind, size = UNIXFS_FILE, link.tsize or 0
        elif resolve:
            if link.cid not in resolved:
                child = store.get_block(link.cid)
                read += len(child)
                if read > MAX_READ_BYTES:
                    raise RpcError(f"ls of {path} would read more than {MAX_READ_BYTES >> 20} "
                                   "MiB of child blocks: ask with resolve-type=false size=false")
                resolved[link.cid] = _unixfs(link.cid, child)
            kind, size = resolved[link.cid]
        links.append({"Name": link.name or "", "Hash": str(link.cid), "Size": size,
                      "Type": kind, "Target": "", "Mode": 0, "ModTime": _ZERO_TIME})
    return {"Hash": path, "Links": links}


def _refs(store: LocalBlockStore, root: CID, *, max_depth: int, unique: bool,
          template: str) -> Iterator[bytes]:
    """``refs``' lines, depth-first pre-order in link order; an error (a missing block, too
    many refs) is the last line's ``Err``."""
    def line(ref: str, err: str = "") -> bytes:
        return json.dumps({"Ref": ref, "Err": err}, separators=(",", ":")).encode() + b"\n"

    seen: set[CID] = set()
    stack: list[tuple[CID, int]] = [(root, 0)]  # (node, its depth)
    sent = read = 0
    try:
        while stack:
            cid, depth = stack.pop()
            if cid.codec != DAG_PB or (max_depth >= 0 and depth >= max_depth):
                continue
            block = store.get_block(cid)
            read += len(block)
            if read > MAX_READ_BYTES:
                yield line("", f"more than {MAX_READ_BYTES >> 20} MiB of blocks read: ask for "
                               "fewer (max-depth, unique)")
                return
            children = []
            for link in decode_pbnode(block).links:
                if unique and link.cid in seen:
                    continue
                seen.add(link.cid)
                if sent == MAX_REFS:
                    yield line("", f"more than {MAX_REFS} refs: ask for fewer (max-depth, "
                                   "unique)")
                    return
                sent += 1
                yield line(template.replace("<src>", str(cid)).replace("<dst>", str(link.cid))
                           .replace("<linkname>", link.name or ""))
                children.append((link.cid, depth + 1))
            stack.extend(reversed(children))
    except LedgerError as exc:
        yield line("", str(exc))


def _held_bytes(store: LocalBlockStore, cid: CID, held: list[int]) -> Iterator[None]:
    """Add the bytes of each distinct block under ``cid`` to ``held[0]``, a step a block;
    ``held[0]`` becomes -1 if one is missing or damaged."""
    try:
        for _cid, data in store.walk_bounded(cid):
            held[0] += len(data)
            yield
    except LedgerError:
        held[0] = -1


def _stat(store: LocalBlockStore, path: str) -> dict:
    if not path.startswith("/ipfs/"):
        raise RpcError(f"{path}: this store has no MFS; stat takes /ipfs/<cid> paths only")
    cid = parse_cid(path)
    block = store.get_block(cid)
    kind, size = _unixfs(cid, block)
    if cid.codec == RAW:
        blocks, cumulative = 0, len(block)
    else:
        links = decode_pbnode(block).links
        blocks, cumulative = len(links), len(block) + sum(link.tsize or 0 for link in links)
    return {"Hash": str(cid), "Size": size, "CumulativeSize": cumulative, "Blocks": blocks,
            "Type": "directory" if kind == UNIXFS_DIRECTORY else "file"}


def _file_size(store: LocalBlockStore, cid: CID) -> int:
    kind, size = _unixfs(cid, store.get_block(cid))
    if kind != UNIXFS_FILE:
        raise RpcError(f"{cid} is not a file: this store's get makes archives of files only")
    return size


def _put_dag(store: LocalBlockStore, data: bytes, input_codec: str, codec: int,
             limit: tuple[int, Callable[[], RpcError]]) -> CID:
    if input_codec == "dag-json":
        block = decode_dag_json(data, codec)
    elif input_codec == {DAG_PB: "dag-pb", RAW: "raw"}[codec]:
        block = data
        if codec == DAG_PB:
            decode_pbnode(block)  # the store walks what it holds: refuse what it cannot read
    else:
        raise RpcError(f'input-codec "{input_codec}" with this store-codec is not supported '
                       "(dag-json, or the store codec itself)")
    max_bytes, too_big = limit
    if len(block) > max_bytes:
        raise too_big()
    cid = CID.for_block(codec, block)
    store.put_block(cid, block)
    return cid


def add_dag_routes(app: FastAPI, store: LocalBlockStore, limits: EndpointLimits) -> None:
    """Register the calls of the module docstring on ``app``."""

    @app.post("/api/v0/ls")
    async def ls(request: Request) -> Response:
        args = Args(request)
        resolve = args.flag("resolve-type", True) or args.flag("size", True)
        paths, stream = args.args("ipfs-path"), args.flag("stream", False)

        def answer() -> bytes:  # in a work thread, encoding included: a node can link 100k
            objects = [_ls(store, path, resolve) for path in paths]
            if stream:
                return b"".join(json.dumps({"Objects": [{"Hash": obj["Hash"], "Links": [link]}]},
                                           separators=(",", ":")).encode() + b"\n"
                                for obj in objects for link in obj["Links"])
            return json.dumps({"Objects": objects}, separators=(",", ":")).encode()

        return Response(await in_work_thread(answer), media_type="application/json")

    @app.post("/api/v0/refs")
    async def refs(request: Request) -> Response:
        args = Args(request)
        template = args.text("format")
        if args.flag("edges", False):
            if template is not None:
                raise RpcError("using format argument with edges is not allowed")
            template = "<src> -> <dst>"
        max_depth = args.integer("max-depth", -1) if args.flag("recursive", False) else 1
        roots = [parse_cid(path) for path in args.args("ipfs-path")]
        for root in roots:  # Kubo's error before the 200
            await run_in_threadpool(store.get_block, root)

        def lines() -> Iterator[bytes]:
            for root in roots:
                yield from _refs(store, root, max_depth=max_depth,
                                 unique=args.flag("unique", False), template=template or "<dst>")

        return StreamingResponse(lines(), media_type="application/json",
                                 headers={"X-Chunked-Output": "1"})

    @app.post("/api/v0/files/stat")
    async def files_stat(request: Request) -> dict:
        args = Args(request)
        (path,) = args.args("path")[:1]
        answer = await run_in_threadpool(_stat, store, path)
        if args.flag("with-local", False):
            held = [0]
            await run_while_connected(request, lambda: _held_bytes(store, parse_cid(path), held))
            answer.update(WithLocality=True, Local=held[0] >= 0, SizeLocal=max(held[0], 0))
        return answer

    @app.post("/api/v0/get")
    async def get(request: Request) -> Response:
        args = Args(request)
        (path,) = args.args("ipfs-path")[:1]
        cid = parse_cid(path)
        compress = args.flag("compress", False)
        level = args.integer("compression-level", -1)
        if compress and not 1 <= level <= 9:
            raise RpcError("compression level must be between 1 and 9")
        size = await run_in_threadpool(_file_size, store, cid)
        # every block checked before the 200, as for cat
        await run_while_connected(request, lambda: store.cat_iter(cid))
        name = path.rstrip("/").rsplit("/", 1)[-1]
        body: Iterator[bytes]
        if compress and not args.flag("archive", False):
            body, kind = gzipped(store.cat_iter(cid), level), "application/gzip"
        else:
            body, kind = tar_file(name, size, store.cat_iter(cid)), "application/x-tar"
            if compress:
                body, kind = gzipped(body, level), "application/gzip"
        return StreamingResponse(body, media_type=kind, headers={
            "X-Stream-Output": "1", "X-Content-Length": str(size)})

    @app.post("/api/v0/dag/get")
    async def dag_get(request: Request) -> Response:
        args = Args(request)
        (path,) = args.args("ref")[:1]
        codec = args.text("output-codec", "dag-json")
        if codec != "dag-json":
            raise RpcError(f'output-codec "{codec}" is not supported by this store (dag-json)')
        cid = parse_cid(path.removeprefix("/ipld/"))
        document = await in_work_thread(lambda: encode_dag_json(cid, store.get_block(cid)))
        return Response(document, media_type="text/plain", headers={"X-Stream-Output": "1"})

    @app.post("/api/v0/dag/put")
    async def dag_put(request: Request) -> Response:
        args = Args(request)
        store_codec = args.text("store-codec", "dag-cbor")
        if store_codec not in _STORE_CODECS:
            raise RpcError(f'store-codec "{store_codec}" is not supported by this store: pass '
                           "store-codec=dag-pb or raw")
        input_codec = args.text("input-codec", "dag-json")
        if (args.text("hash") or "sha2-256") != "sha2-256":
            raise RpcError(f'hash "{args.text("hash")}" is not supported by this store')
        pin = args.flag("pin", False)
        limit = block_limit(limits, args.flag("allow-big-block", False))
        owner = party_of(request)
        upload = Upload(request, "object data", limits)
        answers = []
        while await upload.next_part() is not None:
            max_bytes, too_big = limit  # dag-json spells a block's bytes in base64: a third more
            data = await upload.read(2 * max_bytes, too_big)
            cid = await run_in_threadpool(_put_dag, store, data, input_codec,
                                          _STORE_CODECS[store_codec], limit)
            if pin:
                await run_while_connected(request, lambda cid=cid: store.pinning(cid, owner=owner))
            answers.append({"Cid": {"/": str(cid)}})
        return ndjson(answers)

    @app.post("/api/v0/id")
    async def identity(request: Request) -> dict:
        from importlib.metadata import version

        me = await run_in_threadpool(load_identity, store.root)
        wanted = Args(request).args("peerid", required=False)
        if wanted and wanted[0] != me.peer_id:
            raise RpcError(f"peer {wanted[0]} is not known: this node has no libp2p host, "
                           "it knows only itself")
        return {"ID": me.peer_id, "PublicKey": me.public_key, "Addresses": None,
                "AgentVersion": f"zoo-gym/{version('zoo-gym')}", "Protocols": None}

