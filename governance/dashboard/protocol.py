"""Request bodies of the dashboard's JSON API, validated before anything touches the chain.

Every POST body is read by ``BoundedJSONRequest``: at most ``MAX_BODY_BYTES`` (a longer one is
refused before it is all read) and parsed by ``ledger.json_input.parse_json`` within
``MAX_BODY_DEPTH``, never by the ``json.loads`` Starlette and FastAPI would use, which has no
limits of its own. ``JSONBodyRoute`` does it before FastAPI's body handling, so a refusal is
the app's ``JSONInputError`` answer (413 or 400, with the reason) and not FastAPI's bare 400.
The bodies are then validated into the models below.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from eth_utils import is_hex, is_hex_address, to_checksum_address
from fastapi import Request, Response
from fastapi.routing import APIRoute
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from governance.client import VoteType
from ledger.json_input import JSONInputError, parse_json

# The largest body the page sends is a `propose` transaction through /rpc: its calldata holds
# up to 256 leaves, each with its inclusion proof (about 0.5 MB as hex).
MAX_BODY_BYTES = 1024 * 1024
MAX_BODY_DEPTH = 16  # the deepest legitimate body, typed data to sign inside /rpc, nests 6


class BoundedJSONRequest(Request):
    """A request whose body is read up to ``MAX_BODY_BYTES`` and parsed by ``parse_json``."""

    async def body(self) -> bytes:
        if not hasattr(self, "_body"):
            declared = self.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
                raise _too_large(int(declared))
            body = bytearray()
            async for chunk in self.stream():
                body += chunk
                if len(body) > MAX_BODY_BYTES:
                    raise _too_large(len(body))
            self._body = bytes(body)
        return self._body

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = parse_json(await self.body(), max_bytes=MAX_BODY_BYTES,
                                    max_depth=MAX_BODY_DEPTH, what="the request body")
        return self._json


def _too_large(size: int) -> JSONInputError:
    return JSONInputError(f"the request body is {size} bytes or more, the limit is "
                          f"{MAX_BODY_BYTES}", reason="too_large")


class JSONBodyRoute(APIRoute):
    """A route whose POST body is read and parsed by ``BoundedJSONRequest`` first."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()

        async def bounded(request: Request) -> Response:
            request = BoundedJSONRequest(request.scope, request.receive)
            if request.method == "POST":
                await request.json()  # JSONInputError: answered by the app's handler
            return await handle(request)

        return bounded


async def json_body(request: Request) -> Any:
    """The body's JSON, as ``BoundedJSONRequest`` parsed it (for routes that take any JSON)."""
    return await request.json()


def parse_address(value: str) -> str:
    if not is_hex_address(value):
        raise ValueError(f"{value!r} is not an address (0x and 40 hex digits)")
    return to_checksum_address(value)


def parse_support(value: str) -> str:
    if value.strip().upper() not in VoteType.__members__:
        raise ValueError(f"a vote is for, against or abstain, not {value!r}")
    return value.strip().lower()


def parse_signature(value: str) -> str:
    if not (value.startswith("0x") and is_hex(value) and len(value) == 132):
        raise ValueError("a signature is 65 bytes as 0x-prefixed hex")
    return value


Address = Annotated[str, AfterValidator(parse_address)]
Support = Annotated[str, AfterValidator(parse_support)]
MAX_REASON = 2000  # characters of a vote's reason (it is stored on chain, in the event)
Reason = Annotated[str, Field(max_length=MAX_REASON)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RelayRequest(_Body):
    """A ballot signed by ``voter`` (``eth_signTypedData_v4`` over ``/ballot``'s typed data)."""

    voter: Address
    support: Support
    reason: Reason = ""
    signature: Annotated[str, AfterValidator(parse_signature)]


class SenderRequest(_Body):
    """``from``: the connected account that will send the transaction."""

    sender: Address = Field(alias="from")


class DelegateRequest(SenderRequest):
    to: Address | None = None  # default: the sender itself


class ClaimRequest(SenderRequest):
    """Claim ``account``'s line of an epoch (paid to ``account``), sent by ``from``."""

    account: Address


class ProposeRequest(SenderRequest):
    log: Annotated[str, Field(min_length=1, max_length=200)]
    indices: Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1, max_length=256)]
    description: Reason = ""


class AdvanceRequest(_Body):
    seconds: Annotated[int, Field(ge=0, le=10 * 365 * 86400)]
    blocks: Annotated[int, Field(ge=1, le=1000)] = 1
