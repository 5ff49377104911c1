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
  CID Kubo would give); both with ``size-262144`` chunks, sha2-256, balanced DAGs. Anything
  else (another chunker, trickle, raw leaves under CIDv0, wrap-with-directory, nocopy,
  inline, directories) is refused: this store cannot make those DAGs, and a CID that differs
  from Kubo's must never be returned. ``pin`` defaults to true, as in Kubo.
- ``cat``, ``block/get``, ``block/put``, ``block/stat``, ``pin/add``, ``pin/ls``, ``version``.
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

import asyncio
import json
import platform
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from urllib.parse import unquote

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from devnet.ipfs_gateway import add_gateway, car_bytes, gateway_status, header_params
from ledger.blockstore import LocalBlockStore
from ledger.errors import LedgerError, VerificationError
from ledger.multiformats import CID, DAG_PB, RAW
from ledger.unixfs import CHUNK_SIZE, decode_pbnode, import_bytes_stream, walk_dag

KUBO_RPC_VERSION = "0.35.0"  # the Kubo release whose RPC reference this subset follows
KUBO_REPO_VERSION = "16"
MAX_BLOCK_SIZE = 1024 * 1024  # Kubo's soft block limit; `allow-big-block` lifts it
_SPOOL_IN_MEMORY = 8 * 1024 * 1024  # uploads above this go to a temporary file
_MAX_PART_HEADERS = 16 * 1024
_MAX_PARTS = 1024
_CODECS = {"raw": RAW, "dag-pb": DAG_PB}
_TRUE = {"", "1", "t", "T", "TRUE", "true", "True"}
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}


class RpcError(Exception):
    """An RPC call fails; ``code`` 0 is Kubo's ErrNormal (HTTP 500), 1 its ErrClient (400)."""

    def __init__(self, message: str, code: int = 0):
        super().__init__(message)
        self.code = code


def _kubo_error(message: str, code: int = 0) -> JSONResponse:
    return JSONResponse({"Message": message, "Code": code, "Type": "error"},
                        status_code=400 if code == 1 else 500)


# --- RPC arguments ---------------------------------------------------------------------------


class _Args:
    """The query-string arguments of one RPC call, read the way go-ipfs-cmds reads them."""

    def __init__(self, request: Request):
        self._params = request.query_params

    def args(self, name: str, *, required: bool = True) -> list[str]:
        values = self._params.getlist("arg")
        if required and not values:
            raise RpcError(f'argument "{name}" is required', code=1)
        return values

    def flag(self, name: str, default: bool) -> bool:
        value = self._params.get(name)
        if value is None:
            return default
        if value in _TRUE:
            return True
        if value in _FALSE:
            return False
        raise RpcError(f'invalid value for option "{name}": {value!r} is not a boolean', code=1)

    def text(self, name: str, default: str | None = None) -> str | None:
        return self._params.get(name, default)

    def integer(self, name: str, default: int | None) -> int | None:
        value = self._params.get(name)
        if value is None:
            return default
        try:
            return int(value)
        except ValueError:
            raise RpcError(f'invalid value for option "{name}": {value!r} is not an integer',
                           code=1) from None


def _parse_cid(text: str) -> CID:
    """A CID argument; Kubo also accepts ``/ipfs/<cid>`` paths."""
    try:
        return CID.parse(text.removeprefix("/ipfs/"))
    except VerificationError as exc:
        raise RpcError(f'invalid path "{text}": {exc}') from None


# --- multipart uploads -----------------------------------------------------------------------


@dataclass
class _Part:
    """One uploaded file: its name (from ``filename``) and its bytes, spooled."""

    filename: str
    content_type: str
    body: tempfile.SpooledTemporaryFile




async def _read_parts(request: Request, argument: str) -> list[_Part]:
    """Stream a ``multipart/form-data`` body into spooled parts (bounded memory)."""
    mime, params = header_params(request.headers.get("content-type", ""))
    boundary = params.get("boundary")
    if not mime.startswith("multipart/") or not boundary:
        raise RpcError(f'argument "{argument}" is required', code=1)
    delimiter = b"--" + boundary.encode("latin-1")
    separator = b"\r\n" + delimiter
    chunks = request.stream().__aiter__()
    buf = bytearray()

    async def more() -> None:
        try:
            buf.extend(await chunks.__anext__())
        except StopAsyncIteration:
            raise RpcError("malformed multipart body: truncated", code=1) from None

    while (start := buf.find(delimiter)) < 0:
        if len(buf) > _MAX_PART_HEADERS:
            raise RpcError("malformed multipart body: no boundary", code=1)
        await more()
    del buf[: start + len(delimiter)]
    parts: list[_Part] = []
    while True:
        while len(buf) < 2:
            await more()
        if buf.startswith(b"--"):
            return parts
        while (eol := buf.find(b"\r\n")) < 0:
            await more()
        del buf[: eol + 2]
        while not buf.startswith(b"\r\n") and (end := buf.find(b"\r\n\r\n")) < 0:
            if len(buf) > _MAX_PART_HEADERS:
                raise RpcError("malformed multipart body: part headers too long", code=1)
            await more()
        if buf.startswith(b"\r\n"):
            raw_headers, skip = b"", 2
        else:
            raw_headers, skip = bytes(buf[:end]), end + 4
        del buf[:skip]
        headers = {}
        for line in raw_headers.decode("utf-8", "replace").split("\r\n"):
            key, _, value = line.partition(":")
            headers[key.strip().lower()] = value.strip()
        _, disposition = header_params(headers.get("content-disposition", ""))
        body = tempfile.SpooledTemporaryFile(max_size=_SPOOL_IN_MEMORY)  # noqa: SIM115 (caller closes)
        keep = len(separator) - 1
        while (found := buf.find(separator)) < 0:
            if len(buf) > keep:
                body.write(buf[:-keep])
                del buf[:-keep]
            await more()
        body.write(buf[:found])
        del buf[: found + len(separator)]
        body.seek(0)
        if len(parts) >= _MAX_PARTS:
            raise RpcError(f"too many parts in one upload (at most {_MAX_PARTS})", code=1)
        parts.append(_Part(unquote(disposition.get("filename", "")),
                           headers.get("content-type", "").lower(), body))


# --- the store's side of each call -----------------------------------------------------------


def _cumulative_size(cid: CID, block: bytes) -> int:
    """What Kubo reports as ``Size``: the block plus every linked subtree (``Tsize``)."""
    if cid.codec != DAG_PB:
        return len(block)
    return len(block) + sum(link.tsize or 0 for link in decode_pbnode(block).links)


def _import_file(store: LocalBlockStore, stream, *, cid_version: int, only_hash: bool,
                 pin: bool) -> tuple[str, int]:
    """Import one uploaded file; returns ``(root CID string, cumulative size)``."""
    last: list[bytes] = [b""]

    def keep(_cid: CID, block: bytes) -> None:
        last[0] = block  # blocks come root last

    if only_hash:
        root = import_bytes_stream(stream, keep, cid_version=cid_version)
    elif cid_version == 1:
        root = CID.parse(store.add_file(stream, pin=pin))
        last[0] = store.get_block(root)
    else:
        def put(cid: CID, block: bytes) -> None:
            store.put_block(cid, block)
            keep(cid, block)

        root = import_bytes_stream(stream, put, cid_version=0)
        if pin:
            store.pin_add(root)
    return str(root), _cumulative_size(root, last[0])


def _add_layout(args: _Args) -> int:
    """Check ``add``'s import options; returns the CID version to use."""
    cid_version = args.integer("cid-version", 0)
    raw_leaves = args.flag("raw-leaves", cid_version == 1)
    chunker = args.text("chunker") or f"size-{CHUNK_SIZE}"
    layout = (f"this store makes only Kubo's CIDv1 raw-leaves and CIDv0 layouts "
              f"(chunker size-{CHUNK_SIZE}, sha2-256, balanced DAG)")
    if cid_version not in (0, 1):
        raise RpcError(f"unknown CID version {cid_version}")
    if raw_leaves != (cid_version == 1):
        raise RpcError(f"raw-leaves={str(raw_leaves).lower()} with cid-version={cid_version} "
                       f"is not supported: {layout}")
    if chunker != f"size-{CHUNK_SIZE}":
        raise RpcError(f'chunker "{chunker}" is not supported: {layout}')
    if (args.text("hash") or "sha2-256") != "sha2-256":
        raise RpcError(f'hash "{args.text("hash")}" is not supported: {layout}')
    for option in ("trickle", "wrap-with-directory", "nocopy", "fscache", "inline",
                   "preserve-mode", "preserve-mtime"):
        if args.flag(option, False):
            raise RpcError(f"option {option} is not supported: {layout}")
    return cid_version


def _put_codec(args: _Args) -> tuple[int, int]:
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
    if len(data) > MAX_BLOCK_SIZE and not allow_big:
        raise RpcError("produced block is over 1MiB: big blocks can't be exchanged with other "
                       "peers. consider using UnixFS for automatic chunking of bigger files, "
                       "or pass --allow-big-block to override")
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


def _ndjson(items: list[dict]) -> Response:
    """One JSON object per line, as Kubo streams its answers."""
    body = "".join(json.dumps(item, separators=(",", ":")) + "\n" for item in items)
    return Response(body, media_type="application/json")


class ClientGone(Exception):
    """The client closed its connection while its request was being served."""


DISCONNECT_POLL_S = 0.2


async def _read_all_while_connected(request: Request,
                                    chunks_of: Callable[[], Iterator[bytes]]) -> None:
    """Exhaust ``chunks_of()`` in a worker thread (so a bad block fails the request before
    its 200) while polling the client: once it has gone (``ClientGone``), or the server is
    stopping (this coroutine cancelled), the thread stops at its next block instead of
    reading on for no one."""
    stop = threading.Event()

    def read() -> None:
        for _ in chunks_of():
            if stop.is_set():
                return

    task = asyncio.ensure_future(run_in_threadpool(read))
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
            if not task.done() and await request.is_disconnected():
                raise ClientGone
        task.result()
    finally:
        stop.set()


def _verified_stream(chunks: Iterator[bytes]) -> StreamingResponse:
    return StreamingResponse(chunks, media_type="text/plain",
                             headers={"X-Stream-Output": "1"})


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
        return _kubo_error(str(exc), exc.code)

    @app.exception_handler(LedgerError)
    async def ledger_error(request: Request, exc: LedgerError) -> Response:
        if request.url.path.startswith("/api/"):
            return _kubo_error(str(exc))
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
        args = _Args(request)
        cid_version = _add_layout(args)
        only_hash = args.flag("only-hash", False)
        pin = args.flag("pin", True)
        parts = await _read_parts(request, "path")
        answers = []
        for part in parts:
            if part.content_type == "application/x-directory" or "/" in part.filename:
                raise RpcError("directories are not supported by this store: add files one "
                               "by one")
            with part.body:
                cid, size = await run_in_threadpool(_import_file, store, part.body,
                                                    cid_version=cid_version,
                                                    only_hash=only_hash, pin=pin)
            answers.append({"Name": part.filename or cid, "Hash": cid, "Size": str(size)})
        return _ndjson(answers)

    @app.post("/api/v0/cat")
    async def cat(request: Request) -> Response:
        args = _Args(request)
        (path,) = args.args("ipfs-path")[:1]
        cid = _parse_cid(path)
        offset = args.integer("offset", 0)
        length = args.integer("length", None)
        if offset < 0:
            raise RpcError("cannot specify negative offset")
        if length is not None and length < 0:
            raise RpcError("cannot specify negative length")
        try:  # every block checked before the 200, as Kubo's errors come first
            await _read_all_while_connected(request, lambda: store.cat_iter(cid))
        except ClientGone:
            return Response(status_code=499)  # nginx's "client closed request"; no one reads it
        return _verified_stream(_byte_range(store.cat_iter(cid), offset, length))

    @app.post("/api/v0/block/get")
    async def block_get(request: Request) -> Response:
        cid = _parse_cid(_Args(request).args("cid")[0])
        block = await run_in_threadpool(store.get_block, cid)
        return Response(block, media_type="text/plain", headers={"X-Stream-Output": "1"})

    @app.post("/api/v0/block/stat")
    async def block_stat(request: Request) -> dict:
        cid = _parse_cid(_Args(request).args("cid")[0])
        block = await run_in_threadpool(store.get_block, cid)
        return {"Key": str(cid), "Size": len(block)}

    @app.post("/api/v0/block/put")
    async def block_put(request: Request) -> Response:
        args = _Args(request)
        version, codec = _put_codec(args)
        allow_big = args.flag("allow-big-block", False)
        pin = args.flag("pin", False)
        answers = []
        for part in await _read_parts(request, "data"):
            with part.body:
                data = part.body.read()
            answer = await run_in_threadpool(_put_block, store, data, version, codec, allow_big)
            if pin:
                await run_in_threadpool(store.pin_add, answer["Key"])
            answers.append(answer)
        return _ndjson(answers)

    @app.post("/api/v0/dag/export")
    async def dag_export(request: Request) -> Response:
        root = _parse_cid(_Args(request).args("arg")[0])
        await run_in_threadpool(store.get_block, root)  # Kubo's error before the 200
        return StreamingResponse(_exported(store, root), media_type="application/vnd.ipld.car",
                                 headers={"X-Stream-Output": "1"})

    @app.post("/api/v0/pin/add")
    async def pin_add(request: Request) -> dict:
        args = _Args(request)
        if not args.flag("recursive", True):
            raise RpcError("direct (non-recursive) pins are not supported by this store")
        cids = [_parse_cid(path) for path in args.args("ipfs-path")]
        pinned = [await run_in_threadpool(store.pin_add, cid) for cid in cids]
        return {"Pins": pinned}

    @app.post("/api/v0/pin/ls")
    async def pin_ls(request: Request) -> Response:
        args = _Args(request)
        kind = args.text("type", "all")
        if kind not in ("all", "recursive", "indirect", "direct"):
            raise RpcError(f"invalid type '{kind}', must be one of {{direct, indirect, "
                           "recursive, all}}", code=1)
        kinds = await run_in_threadpool(_pinned, store)
        wanted = args.args("ipfs-path", required=False)
        if wanted:
            keys = {}
            for path in wanted:
                cid = _parse_cid(path)
                found = kinds.get(str(cid.to_v1()))
                if found is None or kind not in ("all", found):
                    raise RpcError(f"path '{path}' is not pinned")
                keys[str(cid)] = found
        else:
            keys = {cid: found for cid, found in sorted(kinds.items())
                    if kind in ("all", found)}
        if args.flag("stream", False):
            return _ndjson([{"Cid": cid, "Type": found} for cid, found in keys.items()])
        return JSONResponse({"Keys": {cid: {"Type": found} for cid, found in keys.items()}})

    add_gateway(app, store)
    return app
