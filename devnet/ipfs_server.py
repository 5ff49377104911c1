"""The devnet's IPFS node: a ``LocalBlockStore`` behind the Kubo RPC subset the project uses,
plus a trustless gateway (``devnet.ipfs_gateway``), so Kubo clients (``ipfshttpclient``,
``KuboStore``, curl) work against it unchanged.

RPC (https://docs.ipfs.tech/reference/kubo/rpc/): POST only; arguments in the query string
(``arg`` repeated, booleans as Go's ``strconv.ParseBool`` reads them); uploads are
``multipart/form-data`` with one part per file, read by position as Kubo does (clients name
the field ``file``). Answers are JSON with Kubo's field names; errors are
``{"Message", "Code", "Type": "error"}`` with HTTP 500 (``Code`` 0) or, for a malformed call
(missing or unparsable argument), HTTP 400 (``Code`` 1).

- ``add``: ``cid-version=1`` with raw leaves (the ledger's layout) or ``cid-version=0``
  without (Kubo's default, the ``Qm…`` layout, so a client that passes no options gets the
  CID Kubo would give), and ``raw-leaves`` against the version's default as Kubo reads it
  (``ipfshttpclient``'s ``add(..., cid_version=1)`` sends ``raw-leaves=false``); all with
  ``size-262144`` chunks, sha2-256, balanced DAGs. Anything else (another chunker, trickle,
  wrap-with-directory, nocopy, inline, directories) is refused: this store cannot make those
  DAGs, and a CID that differs from Kubo's must never be returned. ``pin`` defaults to true,
  as in Kubo.
- ``cat``, ``block/get``, ``block/put``, ``block/stat``, ``pin/add``, ``pin/ls``, ``version``;
  ``ls``, ``refs``, ``files/stat``, ``get``, ``dag/get|put``, ``pin/rm`` and ``id`` are
  ``devnet.ipfs_rpc_dag``. Any other command is a 404 in Kubo's error shape naming these.
- ``dag/export``: the DAG under ``arg`` as a CARv1 (parents first, each block once), streamed
  as Kubo streams it: the root must be here before the 200; a block found missing or damaged
  later ends the stream early, which the reader sees as a truncated CAR.

The gateway (``GET``/``HEAD /ipfs/{cid}``, raw blocks and CARs) is ``devnet.ipfs_gateway``.

Every block served is re-verified by the store. ``cat`` (like the gateway's CAR answers) first
walks and verifies the whole DAG, so a damaged or missing block gives a clean error status and
no bytes; the stream then verifies again, and breaks the connection rather than send a block
that changed in between.
"""

from __future__ import annotations

import platform
from collections.abc import Iterator

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from devnet.ipfs_gateway import add_gateway, car_bytes, gateway_status
from devnet.ipfs_rpc_dag import add_dag_routes
from devnet.kubo_rpc import (
    Args,
    ClientGone,
    RpcError,
    check_block_size,
    kubo_error,
    ndjson,
    parse_cid,
    read_all_while_connected,
    read_parts,
    verified_stream,
)
from ledger.blockstore import LocalBlockStore
from ledger.errors import LedgerError
from ledger.multiformats import CID, DAG_PB, RAW
from ledger.unixfs import CHUNK_SIZE, decode_pbnode, import_bytes_stream, walk_dag

KUBO_RPC_VERSION = "0.35.0"  # the Kubo release whose RPC reference this subset follows
KUBO_REPO_VERSION = "16"
_CODECS = {"raw": RAW, "dag-pb": DAG_PB}


# --- the store's side of each call -----------------------------------------------------------


def _cumulative_size(cid: CID, block: bytes) -> int:
    """What Kubo reports as ``Size``: the block plus every linked subtree (``Tsize``)."""
    if cid.codec != DAG_PB:
        return len(block)
    return len(block) + sum(link.tsize or 0 for link in decode_pbnode(block).links)


def _import_file(store: LocalBlockStore, stream, *, layout: tuple[int, bool], only_hash: bool,
                 pin: bool) -> tuple[str, int]:
    """Import one uploaded file as ``layout`` (CID version, raw leaves); returns ``(root CID
    string, cumulative size)``."""
    last: list[bytes] = [b""]
    cid_version, raw_leaves = layout

    def keep(_cid: CID, block: bytes) -> None:
        last[0] = block  # blocks come root last

    if only_hash:
        root = import_bytes_stream(stream, keep, cid_version=cid_version, raw_leaves=raw_leaves)
    elif layout == (1, True):  # the ledger's own layout
        root = CID.parse(store.add_file(stream, pin=pin))
        last[0] = store.get_block(root)
    else:
        def put(cid: CID, block: bytes) -> None:
            store.put_block(cid, block)
            keep(cid, block)

        root = import_bytes_stream(stream, put, cid_version=cid_version, raw_leaves=raw_leaves)
        if pin:
            store.pin_add(root)
    return str(root), _cumulative_size(root, last[0])


def _add_layout(args: Args) -> tuple[int, bool]:
    """Check ``add``'s import options; returns the CID version and whether leaves are raw."""
    cid_version = args.integer("cid-version", 0)
    raw_leaves = args.flag("raw-leaves", cid_version == 1)
    chunker = args.text("chunker") or f"size-{CHUNK_SIZE}"
    layout = (f"this store makes Kubo's balanced layouts only (chunker size-{CHUNK_SIZE}, "
              f"sha2-256, CIDv0 or CIDv1, raw leaves or not)")
    if cid_version not in (0, 1):
        raise RpcError(f"unknown CID version {cid_version}")
    if chunker != f"size-{CHUNK_SIZE}":
        raise RpcError(f'chunker "{chunker}" is not supported: {layout}')
    if (args.text("hash") or "sha2-256") != "sha2-256":
        raise RpcError(f'hash "{args.text("hash")}" is not supported: {layout}')
    for option in ("trickle", "wrap-with-directory", "nocopy", "fscache", "inline",
                   "preserve-mode", "preserve-mtime"):
        if args.flag(option, False):
            raise RpcError(f"option {option} is not supported: {layout}")
    return cid_version, raw_leaves


def _put_codec(args: Args) -> tuple[int, int]:
    """``block/put``'s codec options → ``(CID version, codec)``."""
    codec_name = args.text("cid-codec")
    legacy = args.text("format")
    if legacy and codec_name and legacy != codec_name:
        raise RpcError("unable to use --format and --cid-codec at the same time")
    if legacy in ("v0", "protobuf"):
        version, codec_name = 0, "dag-pb"
    else:
        version, codec_name = 1, codec_name or legacy or "raw"
    if codec_name not in _CODECS:
        raise RpcError(f'codec "{codec_name}" is not supported by this store (raw, dag-pb)')
    if (args.text("mhtype") or "sha2-256") != "sha2-256" or args.integer("mhlen", -1) not in (-1, 32):
        raise RpcError("only sha2-256 multihashes (32 bytes) are supported by this store")
    return version, _CODECS[codec_name]


def _put_block(store: LocalBlockStore, data: bytes, version: int, codec: int,
               allow_big: bool) -> dict:
    check_block_size(data, allow_big)
    if codec == DAG_PB:
        decode_pbnode(data)  # the store walks what it holds: refuse what it cannot read
    cid = CID.for_block(codec, data)
    if version == 0:
        cid = CID(0, DAG_PB, cid.multihash)
    store.put_block(cid, data)
    return {"Key": str(cid), "Size": len(data)}


def _pinned(store: LocalBlockStore) -> dict[str, str]:
    """Every pinned CID (v1 strings) → ``recursive`` or ``indirect``; raw leaves are not read."""
    recursive = store.pin_ls()
    kinds = {cid: "recursive" for cid in recursive}
    for root in recursive:
        stack = [CID.parse(root)]
        while stack:
            cid = stack.pop()
            if cid.codec == DAG_PB:
                for link in decode_pbnode(store.get_block(cid)).links:
                    kinds.setdefault(str(link.cid.to_v1()), "indirect")
                    stack.append(link.cid)
    return kinds


def _exported(store: LocalBlockStore, root: CID, piece: int = 1 << 16) -> Iterator[bytes]:
    """``dag/export``'s body in pieces of about ``piece`` bytes (a block is a few hundred
    bytes: one write per block would cost more than the block); ends where a block fails."""
    pending: list[bytes] = []
    size = 0
    try:
        for part in car_bytes(root, walk_dag(root, store.get_block)):
            pending.append(part)
            size += len(part)
            if size >= piece:
                yield b"".join(pending)
                pending, size = [], 0
    except LedgerError:  # a missing or damaged block: the reader sees the CAR end early
        pass
    if pending:
        yield b"".join(pending)


def _byte_range(chunks: Iterator[bytes], offset: int, length: int | None) -> Iterator[bytes]:
    for chunk in chunks:
        if offset >= len(chunk):
            offset -= len(chunk)
            continue
        piece = chunk[offset:] if length is None else chunk[offset: offset + length]
        offset = 0
        if length is not None:
            length -= len(piece)
        if piece:
            yield piece
        if length is not None and length <= 0:
            return


# --- the app ---------------------------------------------------------------------------------


def create_app(store: LocalBlockStore) -> FastAPI:
    """The Kubo RPC subset and trustless gateway over ``store``; see the module docstring."""
    app = FastAPI(title="gym ipfs", version=KUBO_RPC_VERSION, docs_url=None, redoc_url=None,
                  openapi_url=None)

    @app.exception_handler(RpcError)
    async def rpc_error(_request: Request, exc: RpcError) -> JSONResponse:
        return kubo_error(str(exc), exc.code)

    @app.exception_handler(LedgerError)
    async def ledger_error(request: Request, exc: LedgerError) -> Response:
        if request.url.path.startswith("/api/"):
            return kubo_error(str(exc))
        return PlainTextResponse(str(exc), status_code=gateway_status(exc))

    @app.post("/api/v0/version")
    async def version() -> dict:
        machine = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(),
                                                              platform.machine())
        return {"Version": KUBO_RPC_VERSION, "Commit": "", "Repo": KUBO_REPO_VERSION,
                "System": f"{machine}/{platform.system().lower()}",
                "Golang": f"none (zoo-gym, Python {platform.python_version()})"}

    @app.post("/api/v0/add")
    async def add(request: Request) -> Response:
        args = Args(request)
        layout = _add_layout(args)
        only_hash = args.flag("only-hash", False)
        pin = args.flag("pin", True)
        parts = await read_parts(request, "path")
        answers = []
        for part in parts:
            if part.content_type == "application/x-directory" or "/" in part.filename:
                raise RpcError("directories are not supported by this store: add files one "
                               "by one")
            with part.body:
                cid, size = await run_in_threadpool(_import_file, store, part.body,
                                                    layout=layout,
                                                    only_hash=only_hash, pin=pin)
            answers.append({"Name": part.filename or cid, "Hash": cid, "Size": str(size)})
        return ndjson(answers)

    @app.post("/api/v0/cat")
    async def cat(request: Request) -> Response:
        args = Args(request)
        (path,) = args.args("ipfs-path")[:1]
        cid = parse_cid(path)
        offset = args.integer("offset", 0)
        length = args.integer("length", None)
        if offset < 0:
            raise RpcError("cannot specify negative offset")
        if length is not None and length < 0:
            raise RpcError("cannot specify negative length")
        try:  # every block checked before the 200, as Kubo's errors come first
            await read_all_while_connected(request, lambda: store.cat_iter(cid))
        except ClientGone:
            return Response(status_code=499)  # nginx's "client closed request"; no one reads it
        return verified_stream(_byte_range(store.cat_iter(cid), offset, length))

    @app.post("/api/v0/block/get")
    async def block_get(request: Request) -> Response:
        cid = parse_cid(Args(request).args("cid")[0])
        block = await run_in_threadpool(store.get_block, cid)
        return Response(block, media_type="text/plain", headers={"X-Stream-Output": "1"})

    @app.post("/api/v0/block/stat")
    async def block_stat(request: Request) -> dict:
        cid = parse_cid(Args(request).args("cid")[0])
        block = await run_in_threadpool(store.get_block, cid)
        return {"Key": str(cid), "Size": len(block)}

    @app.post("/api/v0/block/put")
    async def block_put(request: Request) -> Response:
        args = Args(request)
        version, codec = _put_codec(args)
        allow_big = args.flag("allow-big-block", False)
        pin = args.flag("pin", False)
        answers = []
        for part in await read_parts(request, "data"):
            with part.body:
                data = part.body.read()
            answer = await run_in_threadpool(_put_block, store, data, version, codec, allow_big)
            if pin:
                await run_in_threadpool(store.pin_add, answer["Key"])
            answers.append(answer)
        return ndjson(answers)

    @app.post("/api/v0/dag/export")
    async def dag_export(request: Request) -> Response:
        root = parse_cid(Args(request).args("arg")[0])
        await run_in_threadpool(store.get_block, root)  # Kubo's error before the 200
        return StreamingResponse(_exported(store, root), media_type="application/vnd.ipld.car",
                                 headers={"X-Stream-Output": "1"})

    @app.post("/api/v0/pin/add")
    async def pin_add(request: Request) -> dict:
        args = Args(request)
        if not args.flag("recursive", True):
            raise RpcError("direct (non-recursive) pins are not supported by this store")
        cids = [parse_cid(path) for path in args.args("ipfs-path")]
        pinned = [await run_in_threadpool(store.pin_add, cid) for cid in cids]
        return {"Pins": pinned}

    @app.post("/api/v0/pin/ls")
    async def pin_ls(request: Request) -> Response:
        args = Args(request)
        kind = args.text("type", "all")
        if kind not in ("all", "recursive", "indirect", "direct"):
            raise RpcError(f"invalid type '{kind}', must be one of {{direct, indirect, "
                           "recursive, all}}", code=1)
        kinds = await run_in_threadpool(_pinned, store)
        wanted = args.args("ipfs-path", required=False)
        if wanted:
            keys = {}
            for path in wanted:
                cid = parse_cid(path)
                found = kinds.get(str(cid.to_v1()))
                if found is None or kind not in ("all", found):
                    raise RpcError(f"path '{path}' is not pinned")
                keys[str(cid)] = found
        else:
            keys = {cid: found for cid, found in sorted(kinds.items())
                    if kind in ("all", found)}
        if args.flag("stream", False):
            return ndjson([{"Cid": cid, "Type": found} for cid, found in keys.items()])
        return JSONResponse({"Keys": {cid: {"Type": found} for cid, found in keys.items()}})

    add_dag_routes(app, store)
    add_gateway(app, store)
    supported = sorted(route.path.removeprefix("/api/v0/") for route in app.routes
                       if getattr(route, "path", "").startswith("/api/v0/"))

    @app.post("/api/v0/{command:path}")
    async def unsupported(command: str) -> JSONResponse:
        # Kubo answers a command it does not have with a bare 404; clients (aioipfs) read any
        # 404 as "no such endpoint". The body says what this node does have.
        return JSONResponse({"Message": f"command {command!r} is not supported by this node "
                                        f"(gym ipfs serve); it answers {', '.join(supported)}",
                             "Code": 0, "Type": "error"}, status_code=404)

    return app
