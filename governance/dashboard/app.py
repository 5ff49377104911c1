"""The dashboard's FastAPI application: pages, JSON API, devnet RPC proxy, and their guards.

``create_app(runtime)`` wires the routers (``pages``, ``api``), the static files (one script,
one stylesheet: no build step) and the guards of ``security``: the Host check, CORS for the
served origins only, and on every POST the Origin check and the CSRF token bound to the
session cookie. Errors become a non-2xx status with one readable line (``errors``); a POST
body over the limits or not JSON (``protocol.BoundedJSONRequest``) is 413 or 400, on ``/rpc``
as a JSON-RPC error.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.middleware.trustedhost import TrustedHostMiddleware

from governance.dashboard import api, pages, rpc_proxy
from governance.dashboard.errors import error_body, http_status
from governance.dashboard.pages import templates
from governance.dashboard.runtime import DashboardRuntime
from governance.dashboard.security import (
    CSRF_HEADER,
    SAFE_METHODS,
    SECURITY_HEADERS,
    SESSION_COOKIE,
    CsrfTokens,
    allowed_hosts,
    request_origin,
)
from governance.errors import GovernanceError
from ledger.errors import LedgerError
from ledger.json_input import JSONInputError

HERE = Path(__file__).resolve().parent


def _wants_json(request: Request) -> bool:
    path = request.url.path
    return path.startswith(("/api/", "/rpc", "/health")) or request.method not in SAFE_METHODS


def _refuse(status: int, message: str, kind: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "code": None}}, status,
                        headers=SECURITY_HEADERS)


def create_app(runtime: DashboardRuntime) -> FastAPI:
    app = FastAPI(title="Gym DAO dashboard", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.runtime = runtime
    app.include_router(pages.router)
    app.include_router(api.router)
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")

    @app.middleware("http")
    async def guard(request: Request, call_next) -> Response:
        session = request.cookies.get(SESSION_COOKIE)
        new_session = None
        if request.method not in SAFE_METHODS:
            origin = request_origin(request.headers)
            if origin not in runtime.origins:
                sender = f"{origin} is not" if origin else "the request names no Origin, not"
                return _refuse(403, f"cross-origin request refused: {sender} the dashboard's "
                               f"origin ({', '.join(runtime.origins)})", "CrossOriginError")
            if not runtime.csrf.check(session, request.headers.get(CSRF_HEADER)):
                return _refuse(403, f"missing or invalid CSRF token ({CSRF_HEADER} must match "
                               "the session cookie): reload the page", "CsrfError")
        elif not session:
            new_session = session = CsrfTokens.new_session()
        request.state.csrf_token = runtime.csrf.token_for(session)
        response = await call_next(request)
        if new_session:
            response.set_cookie(SESSION_COOKIE, new_session, httponly=True, samesite="strict",
                                path="/")
        response.headers.update(SECURITY_HEADERS)
        return response

    # Added last = outermost: the Host check runs first, then CORS answers preflights.
    app.add_middleware(CORSMiddleware, allow_origins=list(runtime.origins),
                       allow_methods=["GET", "POST"],
                       allow_headers=["Content-Type", CSRF_HEADER], allow_credentials=True)
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts(runtime.origins))

    @app.exception_handler(GovernanceError)
    @app.exception_handler(LedgerError)
    async def refused(request: Request, exc: Exception) -> Response:
        status = http_status(exc)
        if _wants_json(request):
            return JSONResponse(error_body(exc), status)
        return templates.TemplateResponse(request, "error.html",
                                          {"status": status, "message": str(exc)}, status)

    @app.exception_handler(JSONInputError)
    async def unreadable(request: Request, exc: JSONInputError) -> Response:
        if request.url.path == "/rpc":
            return JSONResponse(rpc_proxy.unreadable_answer(exc), http_status(exc))
        return JSONResponse(error_body(exc), http_status(exc))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'][1:]) or 'body'}: "
            f"{str(e['msg']).removeprefix('Value error, ')}" for e in exc.errors())
        message = f"invalid request: {problems}"
        if _wants_json(request):
            return JSONResponse({"error": {"message": message, "type": "DashboardInputError",
                                           "code": None}}, 422)
        return templates.TemplateResponse(request, "error.html",
                                          {"status": 422, "message": message}, 422)

    return app
