"""The node's HTTP API: thin FastAPI routers over `inference_node.serving.OpenAIServing`.

`create_app(engine, library_source, settings)` builds the app; `gym node serve` runs it with
uvicorn. Routes: `GET /v1/models`, `POST /v1/chat/completions`, `POST /v1/completions` (JSON, or
Server-Sent Events `data: {chunk}` … `data: [DONE]` with `"stream": true`), `GET /health`,
`GET /metrics` (Prometheus text), and on a node that signs receipts
`GET /v1/receipts/{cid}/proof` (the receipt's inclusion proof in the node's receipt log) and,
when it keeps bundles (`create_app(..., bundles=BundleStore)`, `inference_node.bundle_store`),
`GET /v1/receipts/{cid}` (the receipt's whole bundle, as `gym verify receipt --cid` reads it;
404 when unknown, expired or not kept).

`create_app(..., receipts=ReceiptSigner, receipt_log=ReceiptLog)` turns receipts on (see
`inference_node.serving`); the receipt log is anchored every `receipt_log.interval_s` and once
more on shutdown. A `ChainLibrarySource` is polled every `poll_s` while the app runs.

Every error body has OpenAI's shape `{"error": {message, type, param, code}}`: 400 for invalid
requests (schema errors, malformed or too deeply nested JSON, a prompt or `max_tokens` beyond the
context), 404 for an unknown model or route, 413 for a body over `max_body_bytes`, 429 when the
queue is full (`max_queue` waiting requests, streamed ones included), 500 for an engine failure
or a bug (which the connection survives).

Request bodies are read here, not by FastAPI: at most `settings.max_body_bytes` (a larger
`Content-Length` is refused before the body is read), parsed by `ledger.json_input.parse_json`
(nesting beyond `settings.max_json_depth` is refused before the decoder runs; CPython's decoder
recurses per level, and deep input used to kill the process), then validated into the strict
models of `inference_node.protocol`. Prompts are tokenized off the event loop (`serving`).

A client that disconnects before its non-streamed answer is ready cancels the request in the
engine (`until_disconnected`); a stream stops at its next token, when the chunk cannot be
sent (the engine's `stream` is closed). Either is counted with status 499, nginx's "client
closed request". `/metrics` counts every answer by
route template (`/v1/receipts/{cid}/proof`, not each receipt id) and status, unhandled errors
included.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.routing import APIRoute
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from inference_node.bundle_access import BundleAccess
from inference_node.bundle_store import BundleStore
from inference_node.engine import Engine
from inference_node.library import LibrarySource
from inference_node.library_choice import LIBRARY_HEADER, LibraryChoices
from inference_node.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    ErrorDetail,
    ErrorResponse,
    ModelCard,
    ModelList,
)
from inference_node.receipt_log import ReceiptLog
from inference_node.receipts import ReceiptSigner
from inference_node.serving import REQUESTED_LIBRARY, APIError, OpenAIServing, Prepared
from inference_node.settings import NodeSettings
from inference_node.sync import ChainLibrarySource
from ledger.errors import NotFoundError
from ledger.json_input import JSONInputError, parse_json

log = logging.getLogger(__name__)
T = TypeVar("T")
ModelT = TypeVar("ModelT", bound=BaseModel)
PARSE_OFF_LOOP_BYTES = 64 * 1024  # larger bodies are parsed on a worker thread
MAX_ERRORS_SHOWN = 5  # validation errors named in one message
CLIENT_CLOSED = 499  # nginx's status for a request whose client went away


def get_serving(request: Request) -> OpenAIServing:
    return request.app.state.serving


Serving = Annotated[OpenAIServing, Depends(get_serving)]
router = APIRouter()


@router.get("/v1/models", response_model=ModelList)
async def list_models(serving: Serving) -> ModelList:
    return serving.models()


@router.get("/v1/models/{model:path}", response_model=ModelCard)
async def retrieve_model(model: str, serving: Serving) -> ModelCard:
    for card in serving.models().data:
        if card.id == model:
            return card
    raise APIError(404, f"The model `{model}` does not exist; this node serves "
                   f"`{serving.model_name}`.", param="model", code="model_not_found")


async def read_json_body(request: Request, settings: NodeSettings) -> Any:
    """The request's JSON body: 413 beyond ``max_body_bytes`` (by ``Content-Length`` before
    reading, else as it arrives), 400 when it is not JSON or nests too deeply."""
    limit = settings.max_body_bytes
    too_large = APIError(413, f"The request body is larger than this node accepts "
                         f"({limit} bytes).", code="request_too_large")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    data = b"".join(chunks)
    try:
        if len(data) > PARSE_OFF_LOOP_BYTES:
            return await asyncio.to_thread(parse_json, data, max_bytes=limit,
                                           max_depth=settings.max_json_depth,
                                           what="the request body")
        return parse_json(data, max_bytes=limit, max_depth=settings.max_json_depth,
                          what="the request body")
    except JSONInputError as exc:
        raise APIError(400, f"We could not parse the JSON body of your request: {exc}",
                       code="invalid_json") from None


def validate_request(model: type[ModelT], body: Any) -> ModelT:
    """``body`` as ``model`` (strict), or a 400 naming the first field at fault."""
    if not isinstance(body, dict):
        raise APIError(400, "The request body must be a JSON object.", code="invalid_value")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
        where = [".".join(str(p) for p in e["loc"] if not _union_branch(p))
                 or (e.get("ctx") or {}).get("param", "") for e in errors]
        message = "; ".join(f"{w}: {e['msg']}" for w, e in
                            zip(where[:MAX_ERRORS_SHOWN], errors, strict=False))
        if len(errors) > MAX_ERRORS_SHOWN:
            message += f" (and {len(errors) - MAX_ERRORS_SHOWN} more)"
        raise APIError(400, message, param=where[0] or None, code="invalid_value") from None


def _union_branch(part: str | int) -> bool:
    """A part of a pydantic error location that names a branch of a union (`str`,
    `list[str]`, `function-after[...]`), not a field: left out of OpenAI's `param`."""
    return isinstance(part, str) and (part in {"str", "int", "float", "bool", "none"}
                                      or "[" in part)


async def until_disconnected(request: Request, work: Awaitable[T]) -> T:
    """Await ``work`` in this task; if the client disconnects first, cancel it (the engine
    drops the request) and raise Starlette's ``ClientDisconnect``. The body must have been
    read."""
    task = asyncio.current_task()
    state = {"done": False, "gone": False}

    async def watch() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass
        if not state["done"]:
            state["gone"] = True
            task.cancel()

    watcher = asyncio.create_task(watch())
    try:
        return await work
    except asyncio.CancelledError:
        if state["gone"]:
            task.uncancel()
            raise ClientDisconnect from None
        raise
    finally:
        state["done"] = True  # no await between the work's end and here: watch() cannot fire
        watcher.cancel()


class EngineStreamingResponse(StreamingResponse):
    """A stream whose request leaves the admission count however the response ends (also when
    the client is gone before the body starts, and the stream never reaches the engine); one
    that Starlette stopped because the client went away raises ``ClientDisconnect`` (499)."""

    def __init__(self, content: AsyncIterator[str], prepared: Prepared) -> None:
        self.completed = False
        super().__init__(self._to_the_end(content), media_type="text/event-stream",
                         headers=prepared.headers())
        self.prepared = prepared

    async def _to_the_end(self, content: AsyncIterator[str]) -> AsyncIterator[str]:
        async for chunk in content:
            yield chunk
        self.completed = True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.prepared.handed_over()
        if not self.completed:
            raise ClientDisconnect


async def _generate(raw: Request, serving: OpenAIServing, model: type[ModelT],
                    prepare: Callable[[ModelT], Awaitable[Prepared]],
                    answer: Callable[[ModelT, Prepared, dict], Awaitable[BaseModel]],
                    stream: Callable[[ModelT, Prepared, dict], AsyncIterator[str]]) -> Response:
    """One generation route: the body read and validated as ``model`` and prepared, then the
    answer streamed, or sent whole when the engine is done (abandoned if the client leaves)."""
    REQUESTED_LIBRARY.set(raw.headers.get(LIBRARY_HEADER))  # this request's task only
    request_json = await read_json_body(raw, serving.settings)
    serving.check_fits("chat" if model is ChatCompletionRequest else "completion", request_json)
    # validation checks tool and response schemas (jsonschema: up to a second for a large
    # one): off the event loop, so other requests are read and answered meanwhile
    body = await asyncio.to_thread(validate_request, model, request_json)
    prepared = await prepare(body)
    if body.stream:
        return EngineStreamingResponse(stream(body, prepared, request_json), prepared)
    try:
        response = await until_disconnected(raw, answer(body, prepared, request_json))
    finally:
        prepared.handed_over()  # a no-op once the engine has it
    return JSONResponse(prepared.body(response), headers=prepared.headers())


@router.post("/v1/chat/completions")
async def create_chat_completion(raw: Request, serving: Serving) -> Response:
    return await _generate(raw, serving, ChatCompletionRequest, serving.prepare_chat,
                           serving.chat, serving.chat_stream)


@router.post("/v1/completions")
async def create_completion(raw: Request, serving: Serving) -> Response:
    return await _generate(raw, serving, CompletionRequest, serving.prepare_completion,
                           serving.completion, serving.completion_stream)


@router.get("/v1/receipts/{cid}")
async def receipt_bundle(cid: str, raw: Request, serving: Serving) -> dict:
    return await asyncio.to_thread(serving.receipt_bundle, cid, dict(raw.headers))


@router.get("/v1/receipts/{cid}/proof")
async def receipt_proof(cid: str, serving: Serving) -> dict:
    if serving.receipt_log is None:
        raise APIError(404, "This node keeps no receipt log.", code="not_found")
    try:
        return await asyncio.to_thread(serving.receipt_log.proof, cid)
    except NotFoundError as exc:
        raise APIError(404, str(exc), code="receipt_not_found") from None


@router.get("/health")
async def health(serving: Serving) -> Response:
    """200 while the engine answers (`status` "ok", or "degraded" when the library cannot be
    synced); 503 with `status` "failed" and `engine_error` once the engine died."""
    body = serving.health()
    return JSONResponse(body, status_code=503 if body["status"] == "failed" else 200)


@router.get("/metrics")
async def metrics(serving: Serving) -> Response:
    return Response(serving.metrics.render(), media_type=CONTENT_TYPE_LATEST)


def _error(status: int, message: str, type: str, param: str | None = None,
           code: str | None = None) -> JSONResponse:
    body = ErrorResponse(error=ErrorDetail(message=message, type=type, param=param, code=code))
    return JSONResponse(body.model_dump(), status_code=status)


async def _api_error(_: Request, exc: APIError) -> JSONResponse:
    return JSONResponse(exc.body.model_dump(), status_code=exc.status)


async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    if exc.status_code in (404, 405):  # no such route, or not with this method: name the routes
        routes = sorted(f"{method} {route.path}" for route in request.app.routes
                        if isinstance(route, APIRoute) for method in route.methods)
        what = "no route" if exc.status_code == 404 else "not this method on the route"
        return _error(exc.status_code, f"This node has {what} {request.method} "
                      f"{request.url.path}; it serves {', '.join(routes)}.",
                      "not_found_error" if exc.status_code == 404 else "invalid_request_error",
                      code="unknown_route")
    return _error(exc.status_code, str(exc.detail), "invalid_request_error")


class RequestMetrics:
    """ASGI middleware: counts every answer by route template and status, and turns an
    unhandled exception into OpenAI's 500 on a connection that stays open (Starlette's own
    handler re-raises, and the server then drops the keep-alive connection)."""

    def __init__(self, app: ASGIApp, serving: OpenAIServing) -> None:
        self.app, self.serving = app, serving

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status: int | None = None

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        except ClientDisconnect:  # reading the body or sending a stream: nobody to answer
            self._count(scope, CLIENT_CLOSED)
            return
        except Exception as exc:
            log.exception("unhandled error")
            if status is not None:  # the answer has begun: only closing the connection is left
                self._count(scope, 500)
                raise
            await _error(500, f"internal error: {type(exc).__name__}", "server_error")(
                scope, receive, send_status)
        self._count(scope, status or 500)

    def _count(self, scope: Scope, status: int) -> None:
        route = scope.get("route")
        template = getattr(route, "path", None) or "(unmatched)"
        self.serving.metrics.requests.labels(template, str(status)).inc()


def create_app(engine: Engine, library_source: LibrarySource,
               settings: NodeSettings | None = None, *, receipts: ReceiptSigner | None = None,
               receipt_log: ReceiptLog | None = None, adapter_cid: str | None = None,
               bundles: BundleStore | None = None,
               bundle_access: BundleAccess | None = None,
               library_choices: LibraryChoices | None = None) -> FastAPI:
    """The node's app; starts the engine's worker (and library polling, receipt anchoring) on
    startup and stops them on shutdown, anchoring pending receipts last. ``adapter_cid``: the
    adapter entry merged into the engine's weights (``inference_node.adapters``), in /health.
    ``bundles``: keep each receipt's bundle there and serve it (``GET /v1/receipts/{cid}``) to
    the client that made the request and to registered verifiers (``bundle_access``; without
    one, clients' tokens only, with a key that lives as long as the process).
    ``library_choices``: the libraries a request may name in ``X-Gym-Library``
    (``inference_node.library_choice``); default: the node's own and 'none'."""
    settings = settings or NodeSettings()
    serving = OpenAIServing(engine, library_source, settings, receipts, receipt_log,
                            adapter_cid=adapter_cid, bundles=bundles,
                            bundle_access=bundle_access, library_choices=library_choices)

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        engine.start()
        async with contextlib.AsyncExitStack() as stack:
            if isinstance(library_source, ChainLibrarySource):
                polling = asyncio.create_task(library_source.run_polling())
                stack.callback(polling.cancel)
            if receipt_log is not None:
                await stack.enter_async_context(receipt_log.anchoring())
            try:
                yield
            finally:
                engine.shutdown()

    app = FastAPI(title="Gym Ledger inference node", lifespan=lifespan)
    app.state.serving = serving
    app.include_router(router)
    app.add_exception_handler(APIError, _api_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_middleware(RequestMetrics, serving=serving)
    return app
