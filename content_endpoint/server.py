"""The content endpoint's app: a ``LocalBlockStore`` behind the Kubo RPC subset the project uses,
plus a trustless gateway (``content_endpoint.gateway``), so Kubo clients (``ipfshttpclient``,
``KuboStore``, curl) work against it unchanged. Every party shares it, so it is built to hold
against a hostile client (docs/content-endpoint.md).

RPC (https://docs.ipfs.tech/reference/kubo/rpc/): POST only; arguments in the query string
(``arg`` repeated, booleans as Go's ``strconv.ParseBool`` reads them); uploads are
``multipart/form-data`` with one part per file, read by position as Kubo does (clients name
the field ``file``). Answers are JSON with Kubo's field names; errors are
``{"Message", "Code", "Type": "error"}`` with HTTP 500 (``Code`` 0) or, for a malformed call
(missing or unparsable argument), HTTP 400 (``Code`` 1); 401/403 for credentials
(``content_endpoint.authorizations``), 408/413 for an upload that stalls or is too big.

- ``add``: ``cid-version=1`` with raw leaves (the ledger's layout) or ``cid-version=0``
  without (Kubo's default, the ``Qm…`` layout, so a client that passes no options gets the
  CID Kubo would give), and ``raw-leaves`` against the version's default as Kubo reads it
  (``ipfshttpclient``'s ``add(..., cid_version=1)`` sends ``raw-leaves=false``); all with
  ``size-262144`` chunks, sha2-256, balanced DAGs. Anything else (another chunker, trickle,
  wrap-with-directory, nocopy, inline, directories) is refused: this store cannot make those
  DAGs, and a CID that differs from Kubo's must never be returned. ``pin`` defaults to true,
  as in Kubo. Each file is hashed and written while it arrives, never spooled.
- ``cat``, ``block/get``, ``block/put``, ``block/stat``, ``version``; ``pin/add``, ``pin/ls``
  and ``pin/rm`` (pins owned by the parties that made them) are ``content_endpoint.pins``;
  ``ls``, ``refs``, ``files/stat``, ``get``, ``dag/get|put`` and ``id`` are
  ``content_endpoint.rpc_dag``. Any other command (``block/rm``, ``repo/gc``, MFS: nothing
  else removes) is a 404 in Kubo's error shape naming these.
- ``dag/export``: the DAG under ``arg`` as a CARv1 (parents first, each block once), streamed
  as Kubo streams it: the root must be here before the 200; a block found missing or damaged
  later ends the stream early, which the reader sees as a truncated CAR.

Bounds (``content_endpoint.limits``): a block is at most ``max_block_bytes`` even with
``allow-big-block`` and a body ``max_upload_bytes``, bodies that stall are cut, and every DAG
walk visits each distinct block once within the store's pin bounds, runs on a bounded pool of
work threads and stops when its client leaves; what the answer streams is bounded by the bytes
the client reads.

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

from content_endpoint.authorizations import Authorization, AuthorizationGate, party_of
from content_endpoint.gateway import add_gateway, car_bytes, gateway_status
from content_endpoint.kubo_rpc import (
    Args,
    ClientGone,
    RpcError,
    Upload,
    block_limit,
    consume_streaming,
    kubo_error,
    ndjson,
    parse_cid,
    run_while_connected,
    verified_stream,
)
from content_endpoint.limits import EndpointLimits
from content_endpoint.pins import add_pin_routes
from content_endpoint.rpc_dag import add_dag_routes
from ledger.blockstore import LocalBlockStore
from ledger.errors import LedgerError
from ledger.multiformats import CID, DAG_PB, RAW
from ledger.unixfs import CHUNK_SIZE, decode_pbnode, import_bytes_stream

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
                 pin: bool, owner: str) -> tuple[str, int]:
    """Import one uploaded file as ``layout`` (CID version, raw leaves), pinned for ``owner``
    if ``pin``; returns ``(root CID string, cumulative size)``."""
    last: list[bytes] = [b""]
    cid_version, raw_leaves = layout

    def keep(_cid: CID, block: bytes) -> None:
        last[0] = block  # blocks come root last

    if only_hash:
        root = import_bytes_stream(stream, keep, cid_version=cid_version, raw_leaves=raw_leaves)
    elif layout == (1, True):  # the ledger's own layout
        root = CID.parse(store.add_file(stream))
        last[0] = store.get_block(root)
    else:
        def put(cid: CID, block: bytes) -> None:
            store.put_block(cid, block)
            keep(cid, block)

        root = import_bytes_stream(stream, put, cid_version=cid_version, raw_leaves=raw_leaves)
    if pin and not only_hash:
        store.pin_add(root, owner=owner)
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


def _put_block(store: LocalBlockStore, data: bytes, version: int, codec: int) -> dict:
    if codec == DAG_PB:
        decode_pbnode(data)  # the store walks what it holds: refuse what it cannot read
    cid = CID.for_block(codec, data)
    if version == 0:
        cid = CID(0, DAG_PB, cid.multihash)
    store.put_block(cid, data)
    return {"Key": str(cid), "Size": len(data)}


def _exported(store: LocalBlockStore, root: CID, piece: int = 1 << 16) -> Iterator[bytes]:
    """``dag/export``'s body in pieces of about ``piece`` bytes (a block is a few hundred
    bytes: one write per block would cost more than the block); ends where a block fails."""
    pending: list[bytes] = []
    size = 0
    try:
        for part in car_bytes(root, store.walk_bounded(root)):
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


def create_app(store: LocalBlockStore, *, limits: EndpointLimits | None = None,
               authorizations: tuple[Authorization, ...] | None = None) -> FastAPI:
    """The Kubo RPC subset and trustless gateway over ``store``, within ``limits``; RPC callers
    are named by ``authorizations`` (``None``: every caller is ``anonymous``). See the module
    docstring."""
    limits = limits or EndpointLimits()
    app = FastAPI(title="gym ipfs", version=KUBO_RPC_VERSION, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.add_middleware(AuthorizationGate, authorizations=authorizations)

    @app.exception_handler(RpcError)
    async def rpc_error(_request: Request, exc: RpcError) -> JSONResponse:
        return kubo_error(str(exc), exc.code, exc.status)

    @app.exception_handler(ClientGone)
    async def client_gone(_request: Request, _exc: ClientGone) -> Response:
        return Response(status_code=499)  # nginx's "client closed request"; no one reads it

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
        owner = party_of(request)
        upload = Upload(request, "path", limits)
        answers = []
        while (part := await upload.next_part()) is not None:
            if part.content_type == "application/x-directory" or "/" in part.filename:
                raise RpcError("directories are not supported by this store: add files one "
                               "by one")
            cid, size = await consume_streaming(upload, lambda stream: _import_file(
                store, stream, layout=layout, only_hash=only_hash, pin=pin, owner=owner))
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
        # every block checked before the 200, as Kubo's errors come first
        await run_while_connected(request, lambda: store.cat_iter(cid))
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
        limit, too_big = block_limit(limits, args.flag("allow-big-block", False))
        pin = args.flag("pin", False)
        owner = party_of(request)
        upload = Upload(request, "data", limits)
        answers = []
        while await upload.next_part() is not None:
            data = await upload.read(limit, too_big)  # at most one block in memory
            answer = await run_in_threadpool(_put_block, store, data, version, codec)
            if pin:
                await run_while_connected(
                    request, lambda key=answer["Key"]: store.pinning(key, owner=owner))
            answers.append(answer)
        return ndjson(answers)

    @app.post("/api/v0/dag/export")
    async def dag_export(request: Request) -> Response:
        root = parse_cid(Args(request).args("arg")[0])
        await run_in_threadpool(store.get_block, root)  # Kubo's error before the 200
        return StreamingResponse(_exported(store, root), media_type="application/vnd.ipld.car",
                                 headers={"X-Stream-Output": "1"})

    add_pin_routes(app, store, limits)
    add_dag_routes(app, store, limits)
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
