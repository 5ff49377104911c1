"""The node's HTTP API: thin FastAPI routers over `inference_node.serving.OpenAIServing`.

`create_app(engine, library_source, settings)` builds the app; `gym node serve` runs it with
uvicorn. Routes: `GET /v1/models`, `POST /v1/chat/completions`, `POST /v1/completions` (JSON, or
Server-Sent Events `data: {chunk}` … `data: [DONE]` with `"stream": true`), `GET /health`,
`GET /metrics` (Prometheus text), and on a node that signs receipts
`GET /v1/receipts/{cid}/proof` (the receipt's inclusion proof in the node's receipt log).

`create_app(..., receipts=ReceiptSigner, receipt_log=ReceiptLog)` turns receipts on (see
`inference_node.serving`); the receipt log is anchored every `receipt_log.interval_s` and once
more on shutdown. A `ChainLibrarySource` is polled every `poll_s` while the app runs.

Every error body has OpenAI's shape `{"error": {message, type, param, code}}`: 400 for invalid
requests (FastAPI's 422 schema errors and malformed JSON included, as OpenAI answers them), 404
for an unknown model or route, 429 when the engine's waiting queue is full, 500 for an engine
failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from contextlib import asynccontextmanager
from typing import Annotated

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.exceptions import HTTPException as StarletteHTTPException

from inference_node.engine import Engine
from inference_node.library import LibrarySource
from inference_node.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    ErrorDetail,
    ErrorResponse,
    ModelList,
)
from inference_node.receipt_log import ReceiptLog
from inference_node.receipts import ReceiptSigner
from inference_node.serving import APIError, OpenAIServing
from inference_node.settings import NodeSettings
from inference_node.sync import ChainLibrarySource
from ledger.errors import NotFoundError

log = logging.getLogger(__name__)


def get_serving(request: Request) -> OpenAIServing:
    return request.app.state.serving


Serving = Annotated[OpenAIServing, Depends(get_serving)]
router = APIRouter()


@router.get("/v1/models", response_model=ModelList)
async def list_models(serving: Serving) -> ModelList:
    return serving.models()


async def _request_json(raw: Request, serving: OpenAIServing) -> dict | None:
    """The body as JSON, which a receipt's request digest is over (only when signing)."""
    return await raw.json() if serving.receipts is not None else None


@router.post("/v1/chat/completions")
async def create_chat_completion(body: ChatCompletionRequest, serving: Serving,
                                 raw: Request) -> Response:
    prepared = serving.prepare_chat(body)
    request_json = await _request_json(raw, serving)
    if body.stream:
        return StreamingResponse(serving.chat_stream(body, prepared, request_json),
                                 media_type="text/event-stream", headers=prepared.headers())
    response = await serving.chat(body, prepared, request_json)
    return JSONResponse(prepared.body(response), headers=prepared.headers())


@router.post("/v1/completions")
async def create_completion(body: CompletionRequest, serving: Serving, raw: Request
                            ) -> Response:
    prepared = serving.prepare_completion(body)
    request_json = await _request_json(raw, serving)
    if body.stream:
        return StreamingResponse(serving.completion_stream(body, prepared, request_json),
                                 media_type="text/event-stream", headers=prepared.headers())
    response = await serving.completion(body, prepared, request_json)
    return JSONResponse(prepared.body(response), headers=prepared.headers())


@router.get("/v1/receipts/{cid}/proof")
async def receipt_proof(cid: str, serving: Serving) -> dict:
    if serving.receipt_log is None:
        raise APIError(404, "This node keeps no receipt log.", code="not_found")
    try:
        return await asyncio.to_thread(serving.receipt_log.proof, cid)
    except NotFoundError as exc:
        raise APIError(404, str(exc), code="receipt_not_found") from None


@router.get("/health")
async def health(serving: Serving) -> dict:
    return serving.health()


@router.get("/metrics")
async def metrics(serving: Serving) -> Response:
    return Response(serving.metrics.render(), media_type=CONTENT_TYPE_LATEST)


def _error(status: int, message: str, type: str, param: str | None = None,
           code: str | None = None) -> JSONResponse:
    body = ErrorResponse(error=ErrorDetail(message=message, type=type, param=param, code=code))
    return JSONResponse(body.model_dump(), status_code=status)


async def _api_error(_: Request, exc: APIError) -> JSONResponse:
    return JSONResponse(exc.body.model_dump(), status_code=exc.status)


async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
    errors = exc.errors()
    first = errors[0] if errors else {}
    loc = [str(part) for part in first.get("loc", ()) if part != "body"]
    if first.get("type") == "json_invalid":
        return _error(400, f"The request body is not valid JSON: {first.get('msg')}",
                      "invalid_request_error", code="invalid_json")
    message = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()) if p != 'body')}: "
                        f"{e.get('msg')}" for e in errors)
    return _error(400, message or "invalid request", "invalid_request_error",
                  param=".".join(loc) or None, code="invalid_value")


async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
    kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
    return _error(exc.status_code, str(exc.detail), kind)


async def _unexpected_error(_: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error")
    return _error(500, f"internal error: {type(exc).__name__}", "server_error")


def create_app(engine: Engine, library_source: LibrarySource,
               settings: NodeSettings | None = None, *, receipts: ReceiptSigner | None = None,
               receipt_log: ReceiptLog | None = None, adapter_cid: str | None = None) -> FastAPI:
    """The node's app; starts the engine's worker (and library polling, receipt anchoring) on
    startup and stops them on shutdown, anchoring pending receipts last. ``adapter_cid``: the
    adapter entry merged into the engine's weights (``inference_node.adapters``), in /health."""
    settings = settings or NodeSettings()
    serving = OpenAIServing(engine, library_source, settings, receipts, receipt_log,
                            adapter_cid=adapter_cid)

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
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected_error)

    @app.middleware("http")
    async def count_requests(request: Request, call_next):
        response = await call_next(request)
        if request.url.path.startswith("/v1/"):
            serving.metrics.requests.labels(request.url.path, str(response.status_code)).inc()
        return response

    return app
