"""Receipt bundles from what a client has: the answer it saved and the request it sent, or a
receipt CID and the node that keeps its bundle. What `gym verify receipt --response/--request`
and `--cid/--node` run; the result goes to ``inference_node.verify``.

``bundle_from_response(response, request)``: ``response`` is the node's answer as JSON, e.g. the
openai SDK's ``completion.model_dump()`` (a chat completion or a completion; the SDK keeps the
node's extra fields ``receipt`` and ``receipt_evidence``), or a streamed answer saved as a JSON
array of its chunks (their deltas joined; the receipt and evidence from the chunk that carries
them, the last before ``[DONE]``). The route comes from the answer's ``object``
(``chat.completion[.chunk]``, ``text_completion``), else from the request's shape (``messages``
or ``prompt``). A non-streamed ``/v1/completions`` answer to an ``echo`` request starts with the
prompt, which the receipt does not cover: it is stripped. ``request`` is the body the client
sent; ``receipts.bundle_json`` normalizes it with the receipt's max_tokens and seed, so an
equivalent body (keys reordered, ``stream`` added) gives the same digest, another one fails
``request_digest``.

``fetch_bundle(node_url, cid, token=...)``: ``GET {node}/v1/receipts/{cid}`` (``node_url``
with or without its ``/v1``) with the answer's ``bundle_token`` (or, ``account=``, a
registered verifier's signature), at most ``MAX_BUNDLE_BYTES`` read and ``timeout_s`` waited;
the bundle's receipt must have that CID.

Everything read is hostile: files and answers are size-checked before they are parsed
(``ledger.json_input`` limits), shapes are checked, and a problem is one ``ReceiptError``
(``malformed``: the evidence is not a receipt's) or ``NodeError`` (cannot read or fetch).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inference_node.errors import NodeError, ReceiptError
from inference_node.normalized_request import parse_client_request
from inference_node.receipts import ReceiptDomain, bundle_json, parse_receipt
from inference_node.verify import MAX_BUNDLE_BYTES
from ledger.entries import encode_entry, entry_cid

FETCH_TIMEOUT_S = 30.0
BUSY_RETRIES = 2  # a 429 (the node checking other readers) is tried again after 1 s
MAX_CHUNKS = 1_000_000  # a streamed answer: at most one chunk per token, and far fewer tokens


class NotRetainedError(NodeError):
    """The node answered 404: it does not keep (or no longer keeps) that receipt's bundle."""


class AccessRefusedError(NodeError):
    """The node answered 401/403: it is up, and the reader has no right to the bundle (neither
    the answer's token nor a registered verifier's signature)."""


_OBJECTS = {"chat.completion": "chat", "chat.completion.chunk": "chat",
            "text_completion": "completion"}


def read_json_file(path: Path, what: str, max_bytes: int = MAX_BUNDLE_BYTES) -> Any:
    """A JSON file from outside: its size checked before it is read, then parsed with
    ``ledger.json_input`` limits; ``NodeError`` when it cannot be read or parsed."""
    from ledger.json_input import parse_json

    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise ValueError(f"{size} bytes, the limit is {max_bytes}")
        return parse_json(path.read_bytes(), max_bytes=max_bytes, what=f"{what} {path}")
    except (OSError, ValueError) as exc:
        raise NodeError(f"cannot read {what} {path}: {exc}") from None


def receipt_cid(receipt_json: Any) -> str:
    return entry_cid(encode_entry(parse_receipt(receipt_json)))


def _route(response: dict, request: Any) -> str:
    route = _OBJECTS.get(response.get("object"))
    if route is None and isinstance(request, dict):
        route = "chat" if "messages" in request else "completion" if "prompt" in request else None
    if route is None:
        raise ReceiptError("malformed", "cannot tell the route: the answer's object is not "
                           "chat.completion, chat.completion.chunk or text_completion, and the "
                           "request has neither messages nor prompt")
    return route


def _choice(response: dict) -> dict | None:
    choices = response.get("choices")
    if not isinstance(choices, list):
        raise ReceiptError("malformed", "an answer without a choices list")
    if not choices:
        return None  # a usage chunk
    if not isinstance(choices[0], dict):
        raise ReceiptError("malformed", "a choice is not an object")
    return choices[0]


def _text_of(choice: dict | None, route: str, streamed: bool) -> str:
    if choice is None:
        return ""
    if route == "chat":
        message = choice.get("delta" if streamed else "message")
        text = message.get("content") if isinstance(message, dict) else None
        text = "" if text is None and streamed else text
    else:
        text = choice.get("text")
    if not isinstance(text, str):
        raise ReceiptError("malformed", f"the answer's {route} choice has no text")
    return text


def bundle_from_response(response: Any, request: Any) -> dict:
    """The bundle of a saved answer (an object, or a list of streamed chunks) and the request
    body that asked for it (module docstring); ``ReceiptError`` malformed otherwise."""
    streamed = isinstance(response, list)
    chunks = response if streamed else [response]
    if not chunks or len(chunks) > MAX_CHUNKS or not all(isinstance(c, dict) for c in chunks):
        raise ReceiptError("malformed", "the answer must be a JSON object, or a non-empty "
                           "array of chunk objects")
    route = _route(chunks[0], request)
    signed = [c for c in chunks if "receipt" in c]
    if len(signed) != 1:
        raise ReceiptError("malformed", f"the answer carries {len(signed)} receipts, not one: "
                           "was it served by a node that signs receipts?")
    carrier = signed[0]
    evidence = carrier.get("receipt_evidence")
    if not isinstance(evidence, dict) or not isinstance(evidence.get("completion_token_ids"),
                                                        list):
        raise ReceiptError("malformed", "the receipt comes without receipt_evidence "
                           "{receipt_cid, completion_token_ids, domain}")
    receipt = parse_receipt(carrier["receipt"])
    cid = entry_cid(encode_entry(receipt))
    if evidence.get("receipt_cid") not in (None, cid):
        raise ReceiptError("malformed", "receipt_evidence names another receipt",
                           expected=cid, computed=evidence.get("receipt_cid"))
    text = "".join(_text_of(_choice(c), route, streamed) for c in chunks)
    if route == "completion" and not streamed and isinstance(request, dict) \
            and request.get("echo"):
        prompt = parse_client_request(route, request).prompt_text()
        if not text.startswith(prompt):
            raise ReceiptError("malformed", "the request asked for echo, but the answer does "
                               "not start with its prompt")
        text = text[len(prompt):]
    return bundle_json(receipt, ReceiptDomain.from_json(evidence.get("domain")), route=route,
                       request=request, text=text,
                       completion_token_ids=evidence["completion_token_ids"])


def bundles_url(node_url: str, cid: str) -> str:
    base = node_url.strip().rstrip("/")
    if not base.startswith(("http://", "https://")):
        raise NodeError(f"--node must be an http(s) URL, got {node_url!r}")
    base = base.removesuffix("/v1")
    return f"{base}/v1/receipts/{cid}"


def fetch_bundle(node_url: str, cid: str, *, timeout_s: float = FETCH_TIMEOUT_S,
                 max_bytes: int = MAX_BUNDLE_BYTES, token: str | None = None,
                 account: Any = None) -> dict:
    """The bundle of receipt ``cid`` that the node at ``node_url`` keeps (module docstring),
    read as the client that made the request (``token``: its answer's ``bundle_token``) or as
    a registered verifier (``account``: its key; ``inference_node.bundle_access``);
    ``NodeError`` when it cannot be fetched (``NotRetainedError``: a 404, the node does not
    retain it; ``AccessRefusedError``: 401/403, the reader has no right to it), ``ReceiptError`` malformed when the node sends
    another receipt's."""
    import time

    import httpx

    from inference_node.bundle_access import client_headers, verifier_headers
    from ledger.json_input import JSONInputError, parse_json

    if not cid.isalnum() or len(cid) > 128:
        raise NodeError(f"not a receipt CID: {cid[:80]!r}")
    url = bundles_url(node_url, cid)
    for attempt in range(BUSY_RETRIES + 1):
        try:
            headers = (client_headers(token) if token is not None
                       else verifier_headers(account, cid) if account is not None else {})
            with httpx.stream("GET", url, timeout=timeout_s, follow_redirects=False,
                              headers=headers) as reply:
                data = bytearray()
                for part in reply.iter_bytes():
                    data += part
                    if len(data) > max_bytes:
                        raise NodeError(f"{url}: the answer exceeds {max_bytes} bytes")
                status = reply.status_code
        except httpx.HTTPError as exc:
            raise NodeError(f"cannot fetch {url}: {exc}") from None
        if status != 429 or attempt == BUSY_RETRIES:
            break
        time.sleep(1.0)  # the node is checking other readers' registrations
    if status == 404:
        raise NotRetainedError(f"the node does not retain the bundle of receipt {cid}: "
                               f"{_message(data)}")
    if status in (401, 403):
        raise AccessRefusedError(f"{url} answered {status}: {_message(data)} (pass the "
                                 "answer's bundle_token, or read as a registered verifier)")
    if status != 200:
        raise NodeError(f"{url} answered {status}: {_message(data)}")
    try:
        bundle = parse_json(bytes(data), max_bytes=max_bytes, what=url)
    except JSONInputError as exc:
        raise ReceiptError("malformed", str(exc)) from None
    got = receipt_cid(bundle.get("receipt") if isinstance(bundle, dict) else None)
    if got != cid:
        raise ReceiptError("malformed", "the node sent the bundle of another receipt",
                           expected=cid, computed=got)
    return bundle


def _message(data: bytes) -> str:
    """The ``error.message`` of an OpenAI-style error body, shortened, else its start."""
    import json

    try:
        return str(json.loads(data[:64 * 1024])["error"]["message"])[:300]
    except (ValueError, KeyError, TypeError):
        return data[:200].decode("utf-8", "replace")
