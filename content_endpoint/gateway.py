"""The trustless gateway of the content endpoint (``content_endpoint.server`` mounts it).

Gateway (https://specs.ipfs.tech/http-gateways/trustless-gateway/): ``GET``/``HEAD
/ipfs/{cid}`` with ``?format=raw`` or ``?format=car`` (or the ``Accept`` types
``application/vnd.ipld.raw`` / ``application/vnd.ipld.car``), ``dag-scope``, CAR ``version``,
``order`` (always ``dfs``) and ``dups`` parameters, and the ``bafkqaaa`` probe. No deserialised
responses: a request that asks for neither type gets 400.

Every block served is re-verified by the store. CAR answers first walk and verify the whole DAG
(each distinct block once, within the store's pin bounds, stopping if the client leaves), so a
damaged or missing block gives a clean error status and no bytes; the stream then verifies
again, and breaks the connection rather than send a block that changed in between. With
``dups=y`` a block linked many times is sent each time: that stream's work is bounded by the
bytes the client reads.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from fastapi import FastAPI, Request, Response
from fastapi.responses import PlainTextResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from content_endpoint.kubo_rpc import header_params, run_while_connected
from ledger.blockstore import LocalBlockStore
from ledger.car import encode_header
from ledger.errors import LedgerError, NotFoundError, VerificationError
from ledger.multiformats import CID, DAG_PB, encode_varint
from ledger.unixfs import decode_pbnode

RAW_TYPE = "application/vnd.ipld.raw"
CAR_TYPE = "application/vnd.ipld.car"
_IMMUTABLE = "public, max-age=29030400, immutable"

class GatewayError(Exception):
    """A gateway request fails with ``status`` and the message as a plain-text body."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class _Wanted:
    """A negotiated gateway answer: ``raw`` or ``car`` and the CAR parameters."""

    kind: str
    dups: bool = False
    scope: str = "all"
    from_accept: bool = False


def _negotiate(request: Request) -> _Wanted:
    params = request.query_params
    accepted: list[tuple[float, int, str, dict[str, str]]] = []
    for index, item in enumerate(request.headers.get("accept", "").split(",")):
        mime, item_params = header_params(item)
        try:
            quality = float(item_params.pop("q", "1"))
        except ValueError:
            quality = 0.0
        if mime in (RAW_TYPE, CAR_TYPE) and quality > 0:
            accepted.append((-quality, index, mime, item_params))
    accepted.sort()
    fmt = params.get("format")
    car_params: dict[str, str] = {}
    if fmt is not None:
        if fmt not in ("raw", "car"):
            raise GatewayError(400, f"format={fmt} is not served: this is a trustless gateway "
                                "(format=raw or format=car)")
        kind = fmt
        for _, _, mime, item_params in accepted:
            if mime == CAR_TYPE:
                car_params = item_params
                break
    elif accepted:
        _, _, mime, car_params = accepted[0]
        kind = "raw" if mime == RAW_TYPE else "car"
    else:
        raise GatewayError(400, "this is a trustless gateway: ask for ?format=raw or "
                            "?format=car (or send Accept: application/vnd.ipld.raw or "
                            "application/vnd.ipld.car)")
    if kind == "raw":
        return _Wanted("raw", from_accept=fmt is None)
    version = params.get("car-version", car_params.get("version", "1"))
    order = params.get("car-order", car_params.get("order", "dfs"))
    dups = params.get("car-dups", car_params.get("dups", "n"))
    scope = params.get("dag-scope", "all")
    if version != "1":
        raise GatewayError(400, f"CAR version {version} is not served (only 1)")
    if order not in ("dfs", "unk", ""):
        raise GatewayError(400, f"CAR order {order} is not served (only dfs)")
    if dups not in ("y", "n"):
        raise GatewayError(400, f"CAR dups={dups} is not understood (y or n)")
    if scope not in ("all", "entity", "block"):
        raise GatewayError(400, f"dag-scope={scope} is not understood (all, entity, block)")
    if "entity-bytes" in params:
        raise GatewayError(400, "entity-bytes is not supported by this gateway")
    return _Wanted("car", dups=dups == "y", scope=scope, from_accept=fmt is None)


def _dag_blocks(store: LocalBlockStore, root: CID, wanted: _Wanted) -> Iterator[tuple[CID, bytes]]:
    """The blocks of a CAR answer in DFS order, parents first; each verified by the store."""
    if root.hash_code == 0:  # identity CIDs carry their data; a CAR never includes them
        return
    if wanted.scope == "block":
        yield root, store.get_block(root)
        return
    if not wanted.dups:  # entity == all: this store holds files, never directories
        yield from store.walk_bounded(root)
        return
    stack = [root]
    while stack:
        cid = stack.pop()
        block = store.get_block(cid)
        yield cid, block
        if cid.codec == DAG_PB:
            stack.extend(reversed([link.cid for link in decode_pbnode(block).links]))


def car_bytes(root: CID, blocks: Iterator[tuple[CID, bytes]]) -> Iterator[bytes]:
    header = encode_header([root])
    yield encode_varint(len(header)) + header
    for cid, block in blocks:
        cid_bytes = cid.to_bytes()
        yield encode_varint(len(cid_bytes) + len(block)) + cid_bytes
        yield block


def gateway_status(exc: LedgerError) -> int:
    return 404 if isinstance(exc, NotFoundError) else 500


def _gateway_headers(cid: CID, etag: str, filename: str, location: str | None) -> dict[str, str]:
    headers = {
        "Etag": etag,
        "Cache-Control": _IMMUTABLE,
        "Content-Disposition": f'attachment; filename="{filename}"',
        "X-Content-Type-Options": "nosniff",
        "X-Ipfs-Path": f"/ipfs/{cid}",
        "X-Ipfs-Roots": str(cid),
        "Vary": "Accept",
    }
    if location:
        headers["Content-Location"] = location
    return headers


def add_gateway(app: FastAPI, store: LocalBlockStore) -> None:
    """Serve ``GET``/``HEAD /ipfs/{cid}`` from ``store`` on ``app``; see the module docstring."""

    @app.exception_handler(GatewayError)
    async def gateway_error(_request: Request, exc: GatewayError) -> Response:
        return PlainTextResponse(str(exc), status_code=exc.status)

    @app.api_route("/ipfs/{path:path}", methods=["GET", "HEAD"])
    async def gateway(path: str, request: Request) -> Response:
        cid_text, _, rest = path.partition("/")
        try:
            cid = CID.parse(cid_text)
        except VerificationError as exc:
            raise GatewayError(400, f"invalid CID {cid_text!r}: {exc}") from None
        wanted = _negotiate(request)
        if rest.strip("/"):
            if wanted.kind == "raw":
                raise GatewayError(400, "a raw block is addressed by /ipfs/{cid} alone")
            raise GatewayError(404, f"no link named {rest.split('/')[0]!r} under {cid}: "
                                "this store holds files, not directories")
        if wanted.kind == "raw":
            etag = f'"{cid}.raw"'
            headers = _gateway_headers(cid, etag, f"{cid}.bin",
                                       f"/ipfs/{cid}?format=raw" if wanted.from_accept else None)
            if request.headers.get("if-none-match") == etag:
                return Response(status_code=304, headers=headers)
            block = cid.digest if cid.hash_code == 0 else await run_in_threadpool(
                store.get_block, cid)
            body = b"" if request.method == "HEAD" else block
            headers["Content-Length"] = str(len(block))
            return Response(body, media_type=RAW_TYPE, headers=headers)
        dups = "y" if wanted.dups else "n"
        etag = f'W/"{cid}.car.{wanted.scope}.dfs.{dups}"'
        headers = _gateway_headers(cid, etag, f"{cid}.car",
                                   f"/ipfs/{cid}?format=car" if wanted.from_accept else None)
        if request.headers.get("if-none-match") == etag:
            return Response(status_code=304, headers=headers)
        media_type = f"{CAR_TYPE}; version=1; order=dfs; dups={dups}"
        if cid.hash_code != 0:
            if request.method == "HEAD" or wanted.scope == "block":
                await run_in_threadpool(store.get_block, cid)
            else:  # verify the whole DAG first: a damaged one gets an error status, no bytes
                await run_while_connected(request, lambda: store.walk_bounded(cid))
        if request.method == "HEAD":
            return Response(b"", media_type=media_type, headers=headers)
        return StreamingResponse(car_bytes(cid, _dag_blocks(store, cid, wanted)),
                                 media_type=media_type, headers=headers)
