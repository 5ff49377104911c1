"""Receipt bundles from what a client has: the answer it saved and the request it sent, or a
receipt CID and the node that keeps its bundle. What `gym verify receipt --response/--request`
and `--cid/--node` run; the result goes to ``inference_node.verify``.

``signed_answers(response, request)`` reads a saved answer into what its receipts sign, one
``SignedAnswer`` per choice, the same way for every form a client saves:

- the answer object: the raw JSON body, or an SDK's dump of it (the openai SDK's
  ``completion.model_dump()``, 2.x and 3.x, litellm's ``response.model_dump()``, llama-index's
  ``response.raw.model_dump()``, instructor's completion): they keep the node's extra fields
  ``receipt`` and ``receipt_evidence`` (litellm, a choice's in its ``provider_specific_fields``),
  and add ``null`` fields of their own, ignored here;
- a streamed answer saved as a JSON array of its chunks (the SSE events' JSON, or the openai
  SDK's ``chunk.model_dump()``; litellm's streamed chunks lose the receipt): each choice's
  ``content`` (or ``text``) deltas joined and its ``tool_calls`` deltas accumulated by their
  ``index``, the ``arguments`` fragments concatenated, as the openai SDK accumulates them; the
  receipt is on the chunk that carries it (the finish chunk, or the usage chunk with
  ``include_usage``), each choice's finish reason on its last chunk.

The route comes from the answer's ``object`` (``chat.completion[.chunk]``, ``text_completion``),
else from the request's shape (``messages`` or ``prompt``). Where the receipts sit
(``inference_node.serving``): one choice, at the top; several (``n`` > 1, or a list prompt),
in each choice object, and choice i answers the request with seed ``seed + i`` (and prompt
i // n of a list prompt), so its bundle's request is that one.

What a receipt signs is the completion text and its token ids (``receipts.response_digest``).
A plain answer shows that text (a ``/v1/completions`` answer to an ``echo`` request starts with
its prompt, which is stripped). A tool call does not: the node reshapes the model's text into
``message.tool_calls`` and adds the text itself as ``receipt_evidence.completion_text``, which
is what is read then; the answer's ``content``, ``tool_calls`` (name and ``arguments``, not the
random ``id``) and ``finish_reason`` must be exactly what the node makes of that text
(``tools.answer_of`` under the request's ``tool_choice``), else ``response_digest``: an edited
call fails as an edited text does. (That check needs the request the receipt signs; with another
one the verifier fails ``request_digest`` first.) A field that is missing or of the wrong type
is ``malformed``, naming it (``choices[0].message.content``, ``receipt_evidence.domain``, …).

``bundle_from_response(response, request, choice=None)``: the bundle of one choice (``choice``
names its ``index``; it may be left out when the answer has one choice). ``request`` is the body
the client sent; ``receipts.bundle_json`` normalizes it with the receipt's max_tokens and seed,
so an equivalent body (keys reordered, ``stream`` added) gives the same digest, another one
fails ``request_digest``.

``fetch_bundle(node_url, cid, token=...)``: ``GET {node}/v1/receipts/{cid}`` (``node_url``
with or without its ``/v1``) with the answer's ``bundle_token`` (or, ``account=``, a
registered verifier's signature), at most ``MAX_BUNDLE_BYTES`` read and ``timeout_s`` waited;
the bundle's receipt must have that CID.

Everything read is hostile: files and answers are size-checked before they are parsed
(``ledger.json_input`` limits), shapes are checked, and a problem is one ``ReceiptError``
(``malformed``: the evidence is not a receipt's; ``response_digest``: the answer is not what
its receipt signs) or ``NodeError`` (cannot read or fetch).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inference_node.errors import NodeError, ReceiptError
from inference_node.normalized_request import FORMAT, from_client_request, parse_client_request
from inference_node.receipts import (
    ReceiptDomain,
    bundle_json,
    parse_receipt,
    request_digest,
)
from inference_node.tools import answer_of
from inference_node.verify import MAX_BUNDLE_BYTES
from ledger.entries import ReceiptEntry, encode_entry, entry_cid

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


@dataclass(frozen=True)
class SignedAnswer:
    """One choice of a saved answer, read into what its receipt signs."""

    index: int  # the choice's `index`
    route: str  # "chat" or "completion"
    receipt: ReceiptEntry
    domain: ReceiptDomain
    request: Any  # the body this choice answers (module docstring)
    text: str  # the completion text the receipt signs
    token_ids: list  # receipt_evidence.completion_token_ids

    def bundle(self) -> dict:
        return bundle_json(self.receipt, self.domain, route=self.route, request=self.request,
                           text=self.text, completion_token_ids=self.token_ids)


@dataclass
class _Shown:
    """What one choice of the answer shows, its streamed parts joined."""

    where: str  # how errors name it: "choices[0]", or "choice 0" when streamed
    streamed: bool
    text: list[str] = field(default_factory=list)  # content (chat) or text (completion) parts
    has_text: bool = False  # a string content/text was seen (a tool call's is null)
    calls: dict[int, dict[str, str]] = field(default_factory=dict)  # index -> name, arguments
    finish_reason: Any = None
    carriers: list[dict] = field(default_factory=list)  # objects holding `receipt`


def _malformed(message: str) -> ReceiptError:
    return ReceiptError("malformed", message)


def _route(response: dict, request: Any) -> str:
    route = _OBJECTS.get(response.get("object"))
    if route is None and isinstance(request, dict):
        route = "chat" if "messages" in request else "completion" if "prompt" in request else None
    if route is None:
        raise _malformed("cannot tell the route: the answer's object is not chat.completion, "
                         "chat.completion.chunk or text_completion, and the request has "
                         "neither messages nor prompt")
    return route


def _read_choice(choice: Any, where: str, route: str, streamed: bool,
                 shown: dict[int, _Shown]) -> None:
    """Add one choice object (a whole one, or a chunk's delta) to what its index shows."""
    if not isinstance(choice, dict):
        raise _malformed(f"{where} is not an object")
    index = choice.get("index", 0)
    if type(index) is not int or not 0 <= index < MAX_CHUNKS:
        raise _malformed(f"{where}.index is not a choice index")
    seen = shown.setdefault(index, _Shown(f"choice {index}" if streamed else where, streamed))
    extra = choice.get("provider_specific_fields")  # litellm keeps a choice's own fields here
    carrier = extra if "receipt" not in choice and isinstance(extra, dict) else choice
    if "receipt" in carrier:
        seen.carriers.append(carrier)
    if choice.get("finish_reason") is not None:
        seen.finish_reason = choice["finish_reason"]
    if route == "completion":
        key, text = f"{where}.text", choice.get("text")
    else:
        key = f"{where}.{'delta' if streamed else 'message'}"
        message = choice.get("delta" if streamed else "message")
        if not isinstance(message, dict):
            raise _malformed(f"{key} is missing")
        _read_calls(message.get("tool_calls"), f"{key}.tool_calls", streamed, seen)
        key, text = f"{key}.content", message.get("content")
    if isinstance(text, str):
        seen.text.append(text)
        seen.has_text = True
    elif text is not None or (route == "completion" and not streamed):
        raise _malformed(f"{key} is not a string")


def _read_calls(calls: Any, where: str, streamed: bool, seen: _Shown) -> None:
    """A message's ``tool_calls`` (or a delta's, accumulated by their ``index``: names and
    ``arguments`` fragments concatenated, as the openai SDK does)."""
    if calls is None:
        return
    if not isinstance(calls, list):
        raise _malformed(f"{where} is not a list")
    for position, call in enumerate(calls):
        at = f"{where}[{position}]"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            raise _malformed(f"{at}.function is missing")
        index = call.get("index", position) if streamed else len(seen.calls)
        if type(index) is not int or not 0 <= index < MAX_CHUNKS:
            raise _malformed(f"{at}.index is not a call index")
        whole = seen.calls.setdefault(index, {"name": "", "arguments": ""})
        for name in ("name", "arguments"):
            part = function.get(name)
            if part is None and streamed:
                continue
            if not isinstance(part, str):
                raise _malformed(f"{at}.function.{name} is not a string")
            whole[name] += part


def _shown_choices(response: Any, request: Any) -> tuple[str, dict[int, _Shown]]:
    """The route and, by choice index, what the saved answer shows and the objects that carry
    each choice's receipt (module docstring)."""
    streamed = isinstance(response, list) or (
        isinstance(response, dict) and response.get("object") == "chat.completion.chunk")
    chunks = response if isinstance(response, list) else [response]
    if not chunks or len(chunks) > MAX_CHUNKS or not all(isinstance(c, dict) for c in chunks):
        raise _malformed("the answer must be a JSON object, or a non-empty array of chunk "
                         "objects")
    route = _route(chunks[0], request)
    shown: dict[int, _Shown] = {}
    at_top = []
    for number, chunk in enumerate(chunks):
        if "error" in chunk and "choices" not in chunk:
            raise _malformed(f"the stream carries an error event: {str(chunk['error'])[:300]}")
        choices = chunk.get("choices")
        where = f"chunks[{number}]" if streamed else "the answer"
        if not isinstance(choices, list):
            raise _malformed(f"{where} has no choices list")
        for position, choice in enumerate(choices):
            _read_choice(choice, f"chunks[{number}].choices[{position}]" if streamed
                         else f"choices[{position}]", route, streamed, shown)
        if "receipt" in chunk:
            at_top.append(chunk)
    if at_top:  # one choice: its receipt at the top (on the usage chunk, which has no choice)
        if len(shown) > 1 or any(s.carriers for s in shown.values()):
            raise _malformed(f"a receipt at the top of an answer with {len(shown)} choices: "
                             "each choice carries its own")
        shown.setdefault(0, _Shown("choice 0", streamed)).carriers.extend(at_top)
    if not shown:
        raise _malformed("the answer has no choices")
    return route, shown


def _choice_request(request: Any, route: str, index: int) -> Any:
    """The body choice ``index`` answers: seed + index, and a list prompt's prompt index // n
    (``inference_node.serving``); choice 0's is the request itself."""
    if index == 0 or not isinstance(request, dict):
        return request
    body = dict(request)
    if type(body.get("seed")) is int:
        body["seed"] += index
    prompt = body.get("prompt")
    if route == "completion" and isinstance(prompt, list) and prompt:
        n = body.get("n") if type(body.get("n")) is int and body["n"] > 0 else 1
        body["prompt"] = prompt[min(index // n, len(prompt) - 1)]
    return body


def _receipt_of(seen: _Shown) -> tuple[ReceiptEntry, ReceiptDomain, list, Any]:
    """The receipt, its domain, completion token ids and completion_text (or None) that one
    choice carries."""
    if len(seen.carriers) != 1:
        raise _malformed(f"{seen.where} carries {len(seen.carriers)} receipts, not one: was it "
                         "served by a node that signs receipts?")
    carrier = seen.carriers[0]
    receipt = parse_receipt(carrier["receipt"])
    evidence = carrier.get("receipt_evidence")
    if not isinstance(evidence, dict):
        raise _malformed("the receipt comes without receipt_evidence {receipt_cid, "
                         "completion_token_ids, domain}")
    ids = evidence.get("completion_token_ids")
    if not isinstance(ids, list):
        raise _malformed("receipt_evidence.completion_token_ids is missing")
    if not all(type(t) is int and 0 <= t < 2**32 for t in ids):
        raise _malformed("receipt_evidence.completion_token_ids holds something other than "
                         "token ids")
    if "domain" not in evidence:
        raise _malformed("receipt_evidence.domain is missing")
    cid = entry_cid(encode_entry(receipt))
    if evidence.get("receipt_cid") not in (None, cid):
        raise ReceiptError("malformed", "receipt_evidence names another receipt",
                           expected=cid, computed=evidence.get("receipt_cid"))
    text = evidence.get("completion_text")
    if text is not None and not isinstance(text, str):
        raise _malformed("receipt_evidence.completion_text is not a string")
    return receipt, ReceiptDomain.from_json(evidence["domain"]), ids, text


def _signed_text(seen: _Shown, route: str, request: Any, receipt: ReceiptEntry,
                 completion_text: str | None) -> str:
    """The text ``receipt`` signs for what choice ``seen`` shows (module docstring)."""
    shown_text = "".join(seen.text)
    if route == "completion" and isinstance(request, dict) and request.get("echo") \
            and not seen.streamed:  # a streamed answer echoes nothing
        prompt = parse_client_request(route, request).prompt_text()
        if not shown_text.startswith(prompt):
            raise _malformed("the request asked for echo, but the answer does not start with "
                             "its prompt")
        shown_text = shown_text[len(prompt):]
    if completion_text is None:
        if seen.calls:
            raise _malformed(f"{seen.where} shows tool_calls, and its receipt_evidence has no "
                             "completion_text (the model's text the receipt signs)")
        if not seen.has_text and not seen.streamed:
            raise _malformed(f"{seen.where}.message.content is missing (a text answer) and so "
                             "is receipt_evidence.completion_text (a tool call's)")
    text = shown_text if completion_text is None else completion_text
    if receipt.v == 2:
        _check_shown(seen, shown_text, route, request, receipt, text)
    return text


def _check_shown(seen: _Shown, shown_text: str, route: str, request: Any,
                 receipt: ReceiptEntry, text: str) -> None:
    """What the choice shows is what the node makes of ``text`` under the request the receipt
    signs (with another request the verifier fails ``request_digest``: not checked here)."""
    normalized = request if isinstance(request, dict) and request.get("v") == FORMAT else \
        from_client_request(route, request, max_tokens=receipt.sampling.max_tokens,
                            seed=receipt.sampling.seed)
    if request_digest(normalized) != receipt.request_digest:
        return
    try:
        content, calls = ((text, None) if route == "completion"
                          else answer_of(normalized, text, receipt.finish_reason))
    except RecursionError:  # JSON nested past Python's stack: no node answered with it
        raise _malformed("the completion text nests too deep to be read as the node reads "
                         "it") from None
    finish = "tool_calls" if calls and receipt.finish_reason == "stop" else \
        receipt.finish_reason
    expected = {"content": content or "", "tool_calls": [
        {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
        for c in calls or ()], "finish_reason": finish}
    if seen.finish_reason is None:
        raise _malformed(f"{seen.where} has no finish_reason (a stream cut short?)")
    computed = {"content": shown_text, "tool_calls": [seen.calls[i] for i in sorted(seen.calls)],
                "finish_reason": seen.finish_reason}
    for name in ("content", "tool_calls", "finish_reason"):
        if expected[name] != computed[name]:
            shown = "text" if route == "completion" and name == "content" else name
            raise ReceiptError("response_digest", f"{seen.where}: the {shown} shown is not "
                               "what the node makes of the completion its receipt signs",
                               expected=expected[name], computed=computed[name])


def signed_answers(response: Any, request: Any) -> list[SignedAnswer]:
    """Every choice of a saved answer (an object, or a list of streamed chunks) read into what
    its receipt signs, by choice index, with the body each choice answers (module docstring);
    ``ReceiptError`` malformed or response_digest otherwise."""
    route, shown = _shown_choices(response, request)
    answers = []
    for index in sorted(shown):
        seen = shown[index]
        receipt, domain, token_ids, completion_text = _receipt_of(seen)
        body = _choice_request(request, route, index)
        text = _signed_text(seen, route, body, receipt, completion_text)
        answers.append(SignedAnswer(index, route, receipt, domain, body, text, token_ids))
    return answers


def bundle_from_response(response: Any, request: Any, choice: int | None = None) -> dict:
    """The bundle of choice ``choice`` (its ``index``; may be left out when the answer has one
    choice) of a saved answer and the request body that asked for it (module docstring);
    ``ReceiptError`` malformed or response_digest otherwise."""
    answers = signed_answers(response, request)
    if choice is None:
        if len(answers) > 1:
            raise _malformed(f"the answer has {len(answers)} choices, each with its own "
                             "receipt: name the one to check (gym verify receipt --choice INDEX)")
        return answers[0].bundle()
    for answer in answers:
        if answer.index == choice:
            return answer.bundle()
    raise _malformed(f"the answer has no choice {choice} (its choices: "
                     f"{[a.index for a in answers]})")


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
