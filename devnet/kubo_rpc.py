"""The Kubo RPC's plumbing, shared by every ``gym ipfs serve`` route: its errors, its arguments
as go-ipfs-cmds reads them, its multipart uploads (streamed, bounded) and its NDJSON answers.

Errors are ``{"Message", "Code", "Type": "error"}`` with HTTP 500 (``Code`` 0, Kubo's
ErrNormal) or, for a malformed call (missing or unparsable argument), HTTP 400 (``Code`` 1,
ErrClient).
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from urllib.parse import unquote

from fastapi import Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from devnet.ipfs_gateway import header_params
from ledger.errors import VerificationError
from ledger.multiformats import CID

MAX_BLOCK_SIZE = 1024 * 1024  # Kubo's soft block limit; `allow-big-block` lifts it
_SPOOL_IN_MEMORY = 8 * 1024 * 1024  # uploads above this go to a temporary file
_MAX_PART_HEADERS = 16 * 1024
_MAX_PARTS = 1024
_TRUE = {"", "1", "t", "T", "TRUE", "true", "True"}
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}


class RpcError(Exception):
    """An RPC call fails; ``code`` 0 is Kubo's ErrNormal (HTTP 500), 1 its ErrClient (400)."""

    def __init__(self, message: str, code: int = 0):
        super().__init__(message)
        self.code = code


def kubo_error(message: str, code: int = 0) -> JSONResponse:
    return JSONResponse({"Message": message, "Code": code, "Type": "error"},
                        status_code=400 if code == 1 else 500)


# --- RPC arguments ---------------------------------------------------------------------------


class Args:
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


def parse_cid(text: str) -> CID:
    """A CID argument; Kubo also accepts ``/ipfs/<cid>`` paths."""
    try:
        return CID.parse(text.removeprefix("/ipfs/"))
    except VerificationError as exc:
        raise RpcError(f'invalid path "{text}": {exc}') from None


# --- multipart uploads -----------------------------------------------------------------------


@dataclass
class Part:
    """One uploaded file: its name (from ``filename``) and its bytes, spooled."""

    filename: str
    content_type: str
    body: tempfile.SpooledTemporaryFile




async def read_parts(request: Request, argument: str) -> list[Part]:
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
    parts: list[Part] = []
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
        parts.append(Part(unquote(disposition.get("filename", "")),
                           headers.get("content-type", "").lower(), body))


def ndjson(items: list[dict]) -> Response:
    """One JSON object per line, as Kubo streams its answers."""
    body = "".join(json.dumps(item, separators=(",", ":")) + "\n" for item in items)
    return Response(body, media_type="application/json")


class ClientGone(Exception):
    """The client closed its connection while its request was being served."""


DISCONNECT_POLL_S = 0.2


async def read_all_while_connected(request: Request,
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


def verified_stream(chunks: Iterator[bytes]) -> StreamingResponse:
    return StreamingResponse(chunks, media_type="text/plain",
                             headers={"X-Stream-Output": "1"})


def check_block_size(block: bytes, allow_big: bool) -> None:
    """Kubo's refusal of a block over 1 MiB unless ``allow-big-block``."""
    if len(block) > MAX_BLOCK_SIZE and not allow_big:
        raise RpcError("produced block is over 1MiB: big blocks can't be exchanged with other "
                       "peers. consider using UnixFS for automatic chunking of bigger files, "
                       "or pass --allow-big-block to override")
