"""The Kubo RPC's plumbing, shared by every ``gym ipfs serve`` route: its errors, its arguments
as go-ipfs-cmds reads them, its multipart uploads (streamed, bounded), its NDJSON answers, and
long work that stops when its client leaves.

Errors are ``{"Message", "Code", "Type": "error"}`` with HTTP 500 (``Code`` 0, Kubo's
ErrNormal) or, for a malformed call (missing or unparsable argument), HTTP 400 (``Code`` 1,
ErrClient); an upload over its bound is 413 and one that stalls 408, both closing the
connection (``content_endpoint.limits``).
"""

from __future__ import annotations

import asyncio
import json
import queue
import re
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import unquote

import anyio
from fastapi import Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.requests import ClientDisconnect

from content_endpoint.limits import WORK_THREADS, EndpointLimits
from ledger.errors import VerificationError
from ledger.multiformats import CID

MAX_BLOCK_SIZE = 1024 * 1024  # Kubo's soft block limit; `allow-big-block` lifts it
_MAX_PART_HEADERS = 16 * 1024
_MAX_PARTS = 1024
_PIPE_CHUNKS = 16  # body chunks queued for an import thread (each at most what one read gave)
T = TypeVar("T")
_TRUE = {"", "1", "t", "T", "TRUE", "true", "True"}
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}


class RpcError(Exception):
    """An RPC call fails; ``code`` 0 is Kubo's ErrNormal (HTTP 500), 1 its ErrClient (400);
    ``status`` overrides the HTTP status (401, 403, 408, 413)."""

    def __init__(self, message: str, code: int = 0, status: int | None = None):
        super().__init__(message)
        self.code = code
        self.status = status or (400 if code == 1 else 500)


def kubo_error(message: str, code: int = 0, status: int | None = None) -> JSONResponse:
    status = status or (400 if code == 1 else 500)
    # an upload cut short is not read on: the connection closes after this answer
    headers = {"Connection": "close"} if status in (408, 413) else None
    return JSONResponse({"Message": message, "Code": code, "Type": "error"},
                        status_code=status, headers=headers)


_PARAM = re.compile(r';\s*([\w*.-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^;]*))')


def header_params(value: str) -> tuple[str, dict[str, str]]:
    """``'form-data; name="file"'`` → ``("form-data", {"name": "file"})``: an ``Accept`` item
    in the gateway, a multipart part's headers in the RPC's uploads."""
    main, _, rest = value.partition(";")
    params = {m.group(1).lower(): (m.group(2) if m.group(2) is not None else m.group(3).strip())
              for m in _PARAM.finditer(";" + rest)}
    return main.strip().lower(), params


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


@dataclass(frozen=True)
class Part:
    """One uploaded file's headers: its name (from ``filename``) and content type."""

    filename: str
    content_type: str


class Upload:
    """A ``multipart/form-data`` body read as it arrives, one part at a time, never held whole:
    ``next_part()`` gives each part's headers, then ``chunks()`` (or ``read(limit)``) its bytes.

    Bounded by ``limits``: the body at most ``max_upload_bytes`` (413), no read waits more than
    ``stall_timeout_s`` and the bytes average at least ``min_upload_rate`` over the time spent
    waiting for them (408), at most ``_MAX_PARTS`` parts. A client that leaves raises
    ``ClientGone``."""

    def __init__(self, request: Request, argument: str, limits: EndpointLimits):
        mime, params = header_params(request.headers.get("content-type", ""))
        boundary = params.get("boundary")
        if not mime.startswith("multipart/") or not boundary:
            raise RpcError(f'argument "{argument}" is required', code=1)
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limits.max_upload_bytes:
            raise _too_big(limits)
        self._limits = limits
        self._chunks = request.stream().__aiter__()
        self._buf = bytearray()
        self._delimiter = b"--" + boundary.encode("latin-1")
        self._separator = b"\r\n" + self._delimiter
        self._received = 0
        self._waited = 0.0
        self._parts = 0
        self._in_body = False
        self._done = False

    async def _more(self, *, end_ok: bool = False) -> bool:
        """Append the body's next bytes to the buffer; at the body's end, False if ``end_ok``
        (else a truncated body is refused)."""
        started = time.monotonic()
        try:
            async with asyncio.timeout(self._limits.stall_timeout_s):
                chunk = await self._chunks.__anext__()
        except TimeoutError:
            raise RpcError(f"upload stalled: no bytes for {self._limits.stall_timeout_s:g} s",
                           code=1, status=408) from None
        except StopAsyncIteration:
            if end_ok:
                return False
            raise RpcError("malformed multipart body: truncated", code=1) from None
        except ClientDisconnect:
            raise ClientGone from None
        self._waited += time.monotonic() - started
        self._received += len(chunk)
        if self._received > self._limits.max_upload_bytes:
            raise _too_big(self._limits)
        if (self._waited > self._limits.stall_timeout_s
                and self._received < self._limits.min_upload_rate * self._waited):
            raise RpcError(f"upload too slow: {self._received / self._waited:.0f} bytes/s, "
                           f"under the {self._limits.min_upload_rate} this endpoint needs",
                           code=1, status=408)
        self._buf.extend(chunk)
        return True

    async def _read_to_end(self) -> None:
        """Read what follows the close delimiter (its CRLF, an epilogue that RFC 2046 says to
        ignore, a chunked body's end) up to the body's end, at most ``_MAX_PART_HEADERS``
        bytes: a body read to its end leaves the connection open for the client's next
        request (``protocol.BoundedH11Protocol`` closes it otherwise, and a client that sent
        that request at once was reset)."""
        self._buf.clear()
        while len(self._buf) <= _MAX_PART_HEADERS and await self._more(end_ok=True):
            pass
        self._buf.clear()

    async def next_part(self) -> Part | None:
        """The next part's headers, or ``None`` after the last (the current part's unread
        bytes are skipped)."""
        if self._in_body:
            async for _ in self.chunks():
                pass
        if self._done:
            return None
        buf = self._buf
        if self._parts == 0:
            while (start := buf.find(self._delimiter)) < 0:
                if len(buf) > _MAX_PART_HEADERS:
                    raise RpcError("malformed multipart body: no boundary", code=1)
                await self._more()
            del buf[: start + len(self._delimiter)]
        while len(buf) < 2:
            await self._more()
        if buf.startswith(b"--"):
            self._done = True
            await self._read_to_end()
            return None
        if self._parts == _MAX_PARTS:
            raise RpcError(f"too many parts in one upload (at most {_MAX_PARTS})", code=1)
        while (eol := buf.find(b"\r\n")) < 0:
            if len(buf) > _MAX_PART_HEADERS:
                raise RpcError("malformed multipart body: part headers too long", code=1)
            await self._more()
        del buf[: eol + 2]
        while not buf.startswith(b"\r\n") and (end := buf.find(b"\r\n\r\n")) < 0:
            if len(buf) > _MAX_PART_HEADERS:
                raise RpcError("malformed multipart body: part headers too long", code=1)
            await self._more()
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
        self._parts += 1
        self._in_body = True
        return Part(unquote(disposition.get("filename", "")),
                    headers.get("content-type", "").lower())

    async def chunks(self) -> AsyncIterator[bytes]:
        """The current part's bytes as they arrive (the separator's length held back)."""
        buf, keep = self._buf, len(self._separator) - 1
        while self._in_body:
            found = buf.find(self._separator)
            if found >= 0:
                piece = bytes(buf[:found])
                del buf[: found + len(self._separator)]
                self._in_body = False
            elif len(buf) > keep:
                piece = bytes(buf[:-keep])
                del buf[:-keep]
            else:
                piece = b""
            if piece:
                yield piece
            if self._in_body:
                await self._more()

    async def read(self, limit: int, too_big: Callable[[], RpcError]) -> bytes:
        """The current part whole, refusing it (``too_big()``) as soon as it passes ``limit``
        bytes: memory is bounded by ``limit``, not by what the client sends."""
        data = bytearray()
        async for piece in self.chunks():
            data += piece
            if len(data) > limit:
                raise too_big()
        return bytes(data)


def _too_big(limits: EndpointLimits) -> RpcError:
    return RpcError(f"request body over {limits.max_upload_bytes} bytes, this endpoint's limit "
                    "(gym ipfs serve --max-upload-bytes)", code=1, status=413)


class _BodyPipe:
    """A binary file whose ``read`` (in a worker thread) takes the bytes the event loop puts,
    so an import hashes and writes an upload while it arrives."""

    def __init__(self):
        self._queue: queue.Queue[bytes | None] = queue.Queue(_PIPE_CHUNKS)
        self._pending = b""
        self._ended = False
        self.aborted = threading.Event()

    async def put(self, chunk: bytes | None, reader: asyncio.Future) -> bool:
        """Queue ``chunk`` (``None``: the end); False if the reader finished first."""
        while True:
            try:
                self._queue.put_nowait(chunk)
                return True
            except queue.Full:
                if reader.done():
                    return False
                await asyncio.sleep(0.005)  # the import is behind: the upload waits for it

    def read(self, size: int = -1) -> bytes:
        while not self._ended and (size < 0 or len(self._pending) < size):
            try:
                chunk = self._queue.get(timeout=DISCONNECT_POLL_S)
            except queue.Empty:
                if self.aborted.is_set():
                    raise ClientGone from None
                continue
            if chunk is None:
                self._ended = True
            else:
                self._pending += chunk
        cut = len(self._pending) if size < 0 else size
        piece, self._pending = self._pending[:cut], self._pending[cut:]
        return piece


async def consume_streaming(upload: Upload, consume: Callable[[_BodyPipe], T]) -> T:
    """Run ``consume(stream)`` in a worker thread on the current part's bytes while they
    arrive (the upload is never spooled); whatever stops the upload stops the thread."""
    pipe = _BodyPipe()
    task = asyncio.ensure_future(anyio.to_thread.run_sync(consume, pipe, limiter=_WORK))
    try:
        async for chunk in upload.chunks():
            if not await pipe.put(chunk, task):
                break
        else:
            await pipe.put(None, task)
        return await task
    finally:
        pipe.aborted.set()  # the thread's next read raises, if it is still reading
        task.add_done_callback(_quiet)


def ndjson(items: list[dict]) -> Response:
    """One JSON object per line, as Kubo streams its answers."""
    body = "".join(json.dumps(item, separators=(",", ":")) + "\n" for item in items)
    return Response(body, media_type="application/json")


# --- long work -------------------------------------------------------------------------------


class ClientGone(Exception):
    """The client closed its connection while its request was being served."""


DISCONNECT_POLL_S = 0.2
_WORK = anyio.CapacityLimiter(WORK_THREADS)


def _quiet(task: asyncio.Future) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: a late failure of work no one waits for is not logged


async def run_while_connected(request: Request, steps: Callable[[], Iterator[object]]) -> None:
    """Exhaust ``steps()`` in a worker thread (one of ``WORK_THREADS``, so quick calls never
    queue behind long work) while polling the client: once it has gone (``ClientGone``), or
    the server is stopping (this coroutine cancelled), the thread stops at its next step
    instead of working on for no one. ``steps()`` is called in the thread."""
    stop = threading.Event()

    def run() -> None:
        for _ in steps():
            if stop.is_set():
                return

    task = asyncio.ensure_future(anyio.to_thread.run_sync(run, limiter=_WORK))
    try:
        while not task.done():
            await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
            if not task.done() and await request.is_disconnected():
                raise ClientGone
        task.result()
    finally:
        stop.set()
        task.add_done_callback(_quiet)


async def in_work_thread(call: Callable[..., T], *args) -> T:
    """``call(*args)`` on one of the ``WORK_THREADS`` threads (bounded work that may take a
    while, such as one import)."""
    return await anyio.to_thread.run_sync(call, *args, limiter=_WORK)


def verified_stream(chunks: Iterator[bytes]) -> StreamingResponse:
    return StreamingResponse(chunks, media_type="text/plain",
                             headers={"X-Stream-Output": "1"})


def block_over_kubo_limit() -> RpcError:
    """Kubo's refusal of a block over 1 MiB unless ``allow-big-block``."""
    return RpcError("produced block is over 1MiB: big blocks can't be exchanged with other "
                    "peers. consider using UnixFS for automatic chunking of bigger files, "
                    "or pass --allow-big-block to override")


def block_over_hard_limit(limits: EndpointLimits) -> RpcError:
    return RpcError(f"block over {limits.max_block_bytes} bytes: this endpoint's limit even "
                    "with allow-big-block (gym ipfs serve --max-block-bytes)", code=1, status=413)


def block_limit(limits: EndpointLimits, allow_big: bool) -> tuple[int, Callable[[], RpcError]]:
    """How many bytes one block part may have, and the error past it."""
    if allow_big:
        return limits.max_block_bytes, lambda: block_over_hard_limit(limits)
    return MAX_BLOCK_SIZE, block_over_kubo_limit
