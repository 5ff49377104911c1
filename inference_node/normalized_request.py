"""The normalized request (``gym-request/1``): what a v2 receipt's ``request_digest`` covers, and
the key of the verifiable sampler (``inference_node.sampling``). Build, digest, check.

The normalized request holds the fields that determine a completion's tokens, with the node's
defaults filled in, and nothing else, so an equivalent request (``stream`` given or not, keys in
another order, ``max_tokens`` left to the node's default, content given as text parts) has the
same digest::

    {"v": "gym-request/1", "route": "chat", "model": <served name>,
     "messages": [{"role": …, "content": <text, parts joined>}, …],
     "max_tokens": <the completion's limit>, "temperature": T, "top_p": P,
     "seed": <the request's seed, or the one the node drew>, "stop": [<stop strings>]}

``route`` "completion" has ``"prompt": <text>`` in place of ``messages``. The knobs of
``gym-sampler/2`` and the stopping ones (``protocol.NORMALIZED_KEYS``: ``min_tokens``,
``logit_bias`` as ``{"<id>": bias}``, ``repetition_penalty``, ``frequency_penalty``,
``presence_penalty``, ``min_p``, ``top_k``, ``ignore_eos``, ``stop_token_ids`` ascending) are
present only when not neutral, so a request without them keeps the digest it had. A request with a
response format adds ``"response_format"``, in its canonical form
(``inference_node.response_format``) with a ``json_schema``'s schema as its compact JSON text
(``normalized_format``: the digest then covers the order of its properties, which RFC 8785
would sort away); without one the key is absent. A chat request with tools adds ``"tools"``
(canonical, each tool's ``parameters`` as compact JSON text, ``inference_node.tools``) and
``"guided_choice"`` or ``"guided_regex"`` when the request sets one
(``inference_node.guided``; ``guided_json`` is its ``response_format``);
``"tool_choice"`` ("none", "auto", "required" or ``{"name": N}``) and, where it sets the
grammar, ``"parallel_tool_calls"`` (``inference_node.tools``); a message that carries an
assistant's ``tool_calls`` or a tool result's ``tool_call_id`` keeps them. Left out, because
they do not change the tokens: ``stream``, ``stream_options``, ``n`` (always 1), ``user``,
``logprobs``/``top_logprobs`` and ``echo`` (the response digest covers the completion only).

``request_digest`` = ``sha256:`` + hex SHA-256 of its RFC 8785 bytes; ``request_key`` is the same
32 bytes, which key the sampler's noise. A client that kept the request it sent and the receipt
rebuilds it with ``from_client_request``: what the request leaves unset (``max_tokens``,
``seed``) is taken from the receipt, which signs those values.
"""

from __future__ import annotations

import hashlib
from typing import Any

import rfc8785
from pydantic import ValidationError

from inference_node.errors import ReceiptError
from inference_node.guided import constraint_source
from inference_node.protocol import ChatCompletionRequest, ChatMessage, CompletionRequest
from inference_node.response_format import MAX_SCHEMA_BYTES, Constraint, FormatError
from inference_node.tools import (
    call_constraint,
    choice_as_sent,
    normalized_tools,
    parallel_key,
    tools_as_sent,
)
from ledger.errors import LedgerError
from ledger.json_input import parse_json
from trainer.grammar import ANY_OBJECT, schema_text

FORMAT = "gym-request/1"
ROUTES = ("chat", "completion")


def normalized_request(route: str, request: ChatCompletionRequest | CompletionRequest, *,
                       max_tokens: int, seed: int, prompt: str | None = None) -> dict[str, Any]:
    """The normalized form of a validated request, with the limit and seed the node uses;
    ``prompt``: which of a list prompt's prompts (each choice's request has one)."""
    body: dict[str, Any] = {"v": FORMAT, "route": route, "model": request.model}
    if route == "chat":
        body["messages"] = [_message(m) for m in request.messages]
    elif route == "completion":
        body["prompt"] = request.prompt_text() if prompt is None else prompt
    else:
        raise ValueError(f"route must be one of {ROUTES}, got {route!r}")
    body.update(max_tokens=max_tokens, temperature=request.temperature, top_p=request.top_p,
                seed=seed, stop=request.stop_list())
    body.update(request.knobs())  # gym-sampler/2's knobs, only those not neutral
    if request.response_format is not None:
        body["response_format"] = normalized_format(request.response_format)
    for name in ("guided_choice", "guided_regex"):  # `inference_node.guided`
        if getattr(request, name) is not None:
            body[name] = getattr(request, name)
    if getattr(request, "tools", None):
        body["tools"] = normalized_tools(request.tools)
        body["tool_choice"] = request.tool_choice
        parallel = parallel_key(request.tool_choice, request.parallel_tool_calls)
        if parallel is not None:
            body["parallel_tool_calls"] = parallel
    return body


def _message(message: ChatMessage) -> dict[str, Any]:
    """A chat message as the normalized request holds it: role and text, plus an assistant's
    ``tool_calls`` or a tool message's ``tool_call_id`` when there are."""
    out: dict[str, Any] = {"role": message.role, "content": message.text()}
    if message.tool_calls:
        out["tool_calls"] = [c.model_dump() for c in message.tool_calls]
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    return out


def normalized_format(canonical: dict) -> dict:
    """A canonical response format as the normalized request holds it: a ``json_schema``'s
    schema as its compact JSON text, so the digest (RFC 8785 sorts object keys) covers the
    order of its properties, which is the order the answer writes them in."""
    if canonical["type"] != "json_schema":
        return canonical
    spec = canonical["json_schema"]
    return {"type": "json_schema", "json_schema": {**spec, "schema": schema_text(spec["schema"])}}


def _format_as_sent(normalized: dict) -> dict:
    """``normalized_format`` undone: the schema text parsed back (key order kept)."""
    spec = normalized.get("json_schema")
    if normalized.get("type") != "json_schema" or not isinstance(spec, dict) \
            or not isinstance(spec.get("schema"), str):
        raise ReceiptError("malformed", "a normalized json_schema response format holds its "
                           "schema as JSON text")
    try:
        schema = parse_json(spec["schema"].encode(), max_bytes=MAX_SCHEMA_BYTES, what="schema")
    except LedgerError as exc:
        raise ReceiptError("malformed", f"the response format's schema: {exc}") from None
    return {**normalized, "json_schema": {**spec, "schema": schema}}


def request_key(normalized: dict[str, Any]) -> bytes:
    """The 32-byte SHA-256 of the normalized request's RFC 8785 bytes (the sampler's key)."""
    return hashlib.sha256(rfc8785.dumps(normalized)).digest()


def request_digest(normalized: dict[str, Any]) -> str:
    return "sha256:" + request_key(normalized).hex()


def parse_client_request(route: object, body: object) -> ChatCompletionRequest | CompletionRequest:
    """A request body as the node validates it; ``ReceiptError`` malformed otherwise."""
    model = {"chat": ChatCompletionRequest, "completion": CompletionRequest}.get(route)  # type: ignore[call-overload]
    if model is None:
        raise ReceiptError("malformed", f"route must be 'chat' or 'completion', got {route!r}")
    if not isinstance(body, dict):
        raise ReceiptError("malformed", f"the request must be a JSON object, got "
                           f"{type(body).__name__}")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise ReceiptError("malformed", f"not a valid {route} request: "
                           f"{exc.errors(include_url=False)[0]['msg']}") from None


def client_body(normalized: dict[str, Any]) -> dict[str, Any]:
    """A request body a client could have sent for ``normalized`` (without ``v`` and
    ``route``; a json_schema's schema an object again)."""
    body = {k: v for k, v in normalized.items() if k not in ("v", "route")}
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        body["response_format"] = _format_as_sent(fmt)
    if "tools" in body:
        try:
            body["tools"] = tools_as_sent(body["tools"])
        except FormatError as exc:
            raise ReceiptError("malformed", str(exc)) from None
    if "tool_choice" in body:
        body["tool_choice"] = choice_as_sent(body["tool_choice"])
    return body


def limit_of(request: ChatCompletionRequest | CompletionRequest) -> int | None:
    """The completion limit the request asks for (``max_completion_tokens`` first), or None."""
    limit = getattr(request, "max_completion_tokens", None)
    return limit if limit is not None else request.max_tokens


def from_client_request(route: object, body: object, *, max_tokens: int, seed: int
                        ) -> dict[str, Any]:
    """The normalized request of a body a client sent; ``max_tokens`` and ``seed`` (the
    receipt's) fill what the body leaves unset. A body that sets them keeps its own values,
    so a receipt for another limit or seed fails the digest."""
    request = parse_client_request(route, body)
    limit = limit_of(request)
    return normalized_request(str(route), request,
                              max_tokens=max_tokens if limit is None else limit,
                              seed=seed if request.seed is None else request.seed)


def check_normalized(normalized: object) -> dict[str, Any]:
    """A normalized request read from a bundle: well formed, and its own normalization (so the
    digest a verifier recomputes is over exactly these fields); ``ReceiptError`` malformed."""
    if not isinstance(normalized, dict) or normalized.get("v") != FORMAT:
        raise ReceiptError("malformed", f"not a {FORMAT} normalized request")
    route = normalized.get("route")
    body = client_body(normalized)
    if not isinstance(body.get("max_tokens"), int) or not isinstance(body.get("seed"), int):
        raise ReceiptError("malformed", "a normalized request sets max_tokens and seed")
    again = from_client_request(route, body, max_tokens=body["max_tokens"], seed=body["seed"])
    if again != normalized:
        legacy = {k: v for k, v in again.items() if k != "parallel_tool_calls"}
        if legacy != normalized or again.get("parallel_tool_calls") is not True:
            raise ReceiptError("malformed", "the request is not in normalized form")
        return normalized  # a "required" request signed before calls were bounded
    return again


def constraint_of(normalized: dict) -> Constraint | None:
    """The constraint a normalized request (``inference_node.normalized_request``) sets, or
    None: the one function the node and the verifier both derive it with. A forced tool call
    (``inference_node.tools``) is decoded under its call schema, ``tool_choice: "auto"`` under
    its text-or-calls structural tag."""
    call = call_constraint(normalized) or constraint_source(normalized)
    if call is not None:
        return Constraint(call)
    fmt = normalized.get("response_format")
    if fmt is None:
        return None
    if fmt["type"] == "json_object":
        return Constraint.of_schema(ANY_OBJECT)
    schema = fmt["json_schema"]["schema"]  # the normalized form's text (order kept)
    return Constraint(schema if isinstance(schema, str) else schema_text(schema))
