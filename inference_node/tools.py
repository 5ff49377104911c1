"""Function calling on the chat route: a request's ``tools`` and ``tool_choice`` checked and put
in canonical form, the JSON schema a forced call is decoded under, the prompt the tools add, and
the answer's ``tool_calls``.

``tools`` is OpenAI's list of ``{"type": "function", "function": {"name", "description",
"parameters", "strict"}}`` (at most ``MAX_TOOLS``; ``parameters`` a JSON schema the grammar
enforces, checked as a response format's is, default an empty object). Canonical form, one per
tool (``strict`` changes nothing: every schema is enforced strictly)::

    {"name": N, "description": D or "", "parameters": <schema>}

``tool_choice`` is ``"none"``, ``"auto"``, ``"required"`` or ``{"type": "function", "function":
{"name": N}}``; its canonical form is the string, or ``{"name": N}``. Without tools it must be
absent or ``"none"``; with tools and no ``tool_choice`` it is ``"auto"``, as OpenAI's default.

What each does here:

- ``required``: the answer is a JSON array (at least one item, at most ``call_limit``) of
  ``{"name": <a tool's name>, "arguments": <that tool's parameters>}``
  (``forced_call_schema``), decoded under its grammar, and always answered as ``tool_calls``:
  an array cut by the token limit gives the calls it completed (``finish_reason`` "length").
  ``parallel_tool_calls: false`` bounds it to one call, else ``MAX_PARALLEL_CALLS`` (a small
  model would otherwise repeat a call until the token limit).
- ``{"name": N}``: the answer is N's arguments object, decoded under N's parameters schema.
- ``none``: no constraint, plain content; the tools are not shown to the model.
- ``auto``, with a chat template that renders tools (``template_has_tools``): the tools go to
  the template, and the answer is decoded under ``auto_grammar``: free text (never containing
  ``<tool_call>``), then optionally one or more calls in the Hermes/Qwen syntax, separated by
  a newline, and nothing after them::

      <tool_call>
      {"name": <a tool's name>, "arguments": <that tool's parameters>}
      </tool_call>

  (compact JSON as every grammar here writes it). Once ``<tool_call>`` is written the call must
  match one tool's schema. An answer that ends (end of sequence) with calls is ``tool_calls``
  with ``content`` the text before the first call (null when there is none); otherwise it is
  plain content (``answer_of``). With a template that does not render tools, ``auto`` is
  refused (400 naming ``tool_choice``): the model would not know the syntax. A node can be
  given one that does (``inference_node.chat_templates``: ``--chat-template``, and the
  SmolLM2 template it ships for ``--enable-auto-tool-choice --tool-call-parser hermes``). With
  ``parallel_tool_calls: false`` the grammar ends after the first call.

The normalized request holds ``parallel_tool_calls`` where it sets the grammar: always for
``required``, for ``auto`` when false. A receipt signed before the bound existed holds none for
``required`` and is re-checked under the unbounded grammar it was decoded with.

The normalized request (``inference_node.normalized_request``) holds both canonical forms, each
tool's parameters as compact JSON text (``normalized_tools``: the digest then covers the order
of its properties), so the receipt signs them and ``normalized_request.constraint_of`` derives the
same grammar (``call_constraint``) on the node and in the verifier, whose sampling replay masks
with it. ``chat_messages`` builds the messages the chat template renders, on the node and in the
verifier's prompt rebuild alike.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from inference_node.response_format import FormatError, check_schema
from ledger.json_input import complete_array_items
from trainer.grammar import schema_text, structural_tag_text

MAX_TOOLS = 64
MAX_NAME_CHARS = 64  # OpenAI's limit on a function name
MAX_DESCRIPTION_CHARS = 1024
NO_PARAMETERS = {"type": "object", "properties": {}}
CHOICES = ("none", "auto", "required")
TOOLS_NOTE = "You can call these functions:"
CALL_OPEN, CALL_CLOSE = "<tool_call>\n", "\n</tool_call>"  # tool_choice auto's call syntax
CALL_TRIGGER = "<tool_call>"


def _check_name(name: object, where: str, param: str) -> str:
    if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME_CHARS \
            or not all(c.isascii() and (c.isalnum() or c in "_-") for c in name):
        raise FormatError(f"{where} must be 1 to {MAX_NAME_CHARS} letters, digits, '_' or '-'",
                          param)
    return name


def canonical_tools(value: object) -> list[dict] | None:
    """The canonical form of a request's ``tools`` (module doc); None for none or an empty
    list. ``FormatError`` with ``param`` "tools" otherwise."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise FormatError("tools must be a list", "tools")
    if len(value) > MAX_TOOLS:
        raise FormatError(f"at most {MAX_TOOLS} tools", "tools")
    tools, names = [], set()
    for i, tool in enumerate(value):
        where = f"tools[{i}]"
        if not isinstance(tool, dict) or tool.get("type") != "function" \
                or not isinstance(tool.get("function"), dict) or set(tool) - {"type", "function"}:
            raise FormatError(f"{where} must be {{\"type\": \"function\", \"function\": {{…}}}}",
                              "tools")
        function = tool["function"]
        extra = set(function) - {"name", "description", "parameters", "strict"}
        if extra:
            raise FormatError(f"{where}.function has unsupported fields {sorted(extra)}", "tools")
        name = _check_name(function.get("name"), f"{where}.function.name", "tools")
        if name in names:
            raise FormatError(f"{where}.function.name {name!r} is given twice", "tools")
        names.add(name)
        description = function.get("description") or ""
        if not isinstance(description, str) or len(description) > MAX_DESCRIPTION_CHARS:
            raise FormatError(f"{where}.function.description must be a string of at most "
                              f"{MAX_DESCRIPTION_CHARS} characters", "tools")
        if not isinstance(function.get("strict", False), bool | None):
            raise FormatError(f"{where}.function.strict must be a boolean", "tools")
        parameters = function.get("parameters")
        parameters = NO_PARAMETERS if parameters is None else check_schema(
            parameters, f"{where}.function.parameters", param="tools")
        tools.append({"name": name, "description": description, "parameters": parameters})
    return tools or None


def canonical_tool_choice(value: object, tools: list[dict] | None) -> str | dict | None:
    """The canonical form of ``tool_choice`` given the canonical ``tools``: None without tools
    (when absent or "none"), "auto" when absent with tools; ``FormatError`` with ``param``
    "tool_choice" otherwise."""
    if value is None:
        return "auto" if tools else None
    if isinstance(value, str):
        if value not in CHOICES:
            raise FormatError(f"unsupported tool_choice {value!r}: use 'none', 'auto', "
                              "'required' or {\"type\": \"function\", \"function\": {\"name\": "
                              "…}}", "tool_choice")
        choice: str | dict = value
    elif isinstance(value, dict) and value.get("type") == "function" and set(value) == {
            "type", "function"} and isinstance(value["function"], dict) \
            and set(value["function"]) == {"name"}:
        name = _check_name(value["function"]["name"], "tool_choice.function.name",
                           "tool_choice")
        if name not in {t["name"] for t in tools or ()}:
            raise FormatError(f"tool_choice names the function {name!r}, which is not one of "
                              "the tools", "tool_choice")
        choice = {"name": name}
    else:
        raise FormatError("tool_choice must be 'none', 'auto', 'required' or {\"type\": "
                          "\"function\", \"function\": {\"name\": …}}", "tool_choice")
    if not tools:
        if choice == "none":
            return None
        raise FormatError("tool_choice needs tools", "tool_choice")
    return choice


def normalized_tools(tools: list[dict]) -> list[dict]:
    """Canonical tools as the normalized request holds them: parameters as compact JSON text."""
    return [{**tool, "parameters": schema_text(tool["parameters"])} for tool in tools]


def tools_as_sent(normalized: object) -> list[dict]:
    """``normalized_tools`` undone, back to the request's ``tools`` shape (key order kept)."""
    if not isinstance(normalized, list) or not all(
            isinstance(t, dict) and isinstance(t.get("parameters"), str) for t in normalized):
        raise FormatError("normalized tools hold their parameters as JSON text", "tools")
    try:
        return [{"type": "function", "function": {**t, "parameters": json.loads(t["parameters"])}}
                for t in normalized]
    except json.JSONDecodeError as exc:
        raise FormatError(f"a normalized tool's parameters: {exc}", "tools") from None


def choice_as_sent(choice: str | dict) -> str | dict:
    """A canonical ``tool_choice`` back to the request's shape."""
    if isinstance(choice, dict):
        return {"type": "function", "function": {"name": choice.get("name")}}
    return choice


def forces_call(normalized: dict) -> bool:
    """Whether the normalized request's answer is a tool call (``required`` or a named one)."""
    choice = normalized.get("tool_choice")
    return choice == "required" or isinstance(choice, dict)


def may_call(normalized: dict) -> bool:
    """Whether the answer may be tool calls (a forced call, or ``auto``)."""
    return forces_call(normalized) or normalized.get("tool_choice") == "auto"


MAX_PARALLEL_CALLS = 4  # calls in one "required" answer unless parallel_tool_calls is false


def parallel_key(tool_choice: object, parallel: bool | None) -> bool | None:
    """The normalized request's ``parallel_tool_calls`` (module doc), or None to leave it out."""
    if tool_choice == "required":
        return parallel is not False
    if tool_choice == "auto" and parallel is False:
        return False
    return None


def call_limit(normalized: dict) -> int | None:
    """How many calls an answer may hold (None: unbounded, a legacy ``required``)."""
    parallel = normalized.get("parallel_tool_calls")
    if parallel is None:
        return None
    return MAX_PARALLEL_CALLS if parallel else 1


def forced_call_schema(normalized: dict) -> str | None:
    """The schema text a forced call is decoded under (module doc), or None."""
    if not forces_call(normalized):
        return None
    parameters = {t["name"]: json.loads(t["parameters"]) for t in normalized["tools"]}
    choice = normalized["tool_choice"]
    if isinstance(choice, dict):
        return schema_text(parameters[choice["name"]])
    calls = [{"type": "object", "properties": {"name": {"const": name}, "arguments": schema},
              "required": ["name", "arguments"], "additionalProperties": False}
             for name, schema in parameters.items()]
    limit = call_limit(normalized)
    bound = {} if limit is None else {"maxItems": limit}
    return schema_text({"type": "array", "minItems": 1, **bound, "items": {"anyOf": calls}})


def auto_grammar(normalized: dict) -> str | None:
    """The source of the grammar ``tool_choice: "auto"`` is decoded under (module doc), or None:
    a structural tag (``trainer.grammar``) of free text up to the first ``<tool_call>``, then
    calls separated by a newline. The call's JSON is ``{"name": "N", "arguments": `` written
    out, N's parameters schema, then ``}``."""
    if normalized.get("tool_choice") != "auto":
        return None
    tags = [{"type": "tag",
             "begin": CALL_OPEN + '{"name": ' + json.dumps(t["name"]) + ', "arguments": ',
             "content": {"type": "json_schema", "json_schema": json.loads(t["parameters"])},
             "end": "}" + CALL_CLOSE}
            for t in normalized["tools"]]
    first = {"type": "triggered_tags", "triggers": [CALL_TRIGGER], "tags": tags,
             "stop_after_first": True}
    if call_limit(normalized) == 1:
        return structural_tag_text(first)
    return structural_tag_text({"type": "sequence", "elements": [
        first,
        {"type": "star", "content": {"type": "sequence", "elements": [
            {"type": "const_string", "value": "\n"}, {"type": "or", "elements": tags}]}}]})


def call_constraint(normalized: dict) -> str | None:
    """The grammar source a request's tool choice sets (forced call or auto), or None."""
    return forced_call_schema(normalized) or auto_grammar(normalized)


# --------------------------------------------------------------------------- prompt


def _call_text(call: dict) -> str:
    return "<tool_call>" + json.dumps({"name": call["function"]["name"],
                                       "arguments": call["function"]["arguments"]},
                                      ensure_ascii=False) + "</tool_call>"


def chat_messages(normalized: dict, template_has_tools: bool) -> tuple[list[dict], list | None]:
    """The messages (and the ``tools=`` argument) the chat template renders for a normalized
    chat request, on the node and in the verifier alike.

    A template that knows tools (``template_has_tools``) gets the messages' tool calls and tool
    results natively, and the tools when a call is forced or ``auto``. Otherwise both are
    rendered as text (``<tool_call>{"name", "arguments"}</tool_call>`` after an assistant's
    content, a tool result as a user message ``<tool_response id=…>…</tool_response>``), and a
    forced call's tools are listed in a system note (``TOOLS_NOTE``) that opens the system
    message; ``auto`` is then a ``FormatError`` (the serving route refuses it before)."""
    messages = []
    for m in normalized["messages"]:
        if template_has_tools:
            messages.append(dict(m))
        elif m["role"] == "tool":
            messages.append({"role": "user", "content": f"<tool_response id={m['tool_call_id']}>"
                                                        f"{m['content']}</tool_response>"})
        elif m.get("tool_calls"):
            text = "\n".join([m["content"]] * bool(m["content"])
                             + [_call_text(c) for c in m["tool_calls"]])
            messages.append({"role": m["role"], "content": text})
        else:
            messages.append({"role": m["role"], "content": m["content"]})
    if normalized.get("tool_choice") == "auto" and not template_has_tools:
        raise FormatError("tool_choice 'auto' needs a chat template that renders tools",
                          "tool_choice")
    if not may_call(normalized):
        return messages, None
    if template_has_tools:
        return messages, tools_as_sent(normalized["tools"])
    lines = [TOOLS_NOTE] + [f"- {t['name']}: {t['description']}".rstrip(": ")
                            + f" (arguments: {t['parameters']})" for t in normalized["tools"]]
    note = "\n".join(lines)
    if messages and messages[0]["role"] in ("system", "developer"):
        messages[0] = {**messages[0], "content": f"{note}\n\n{messages[0]['content']}"}
    else:
        messages.insert(0, {"role": "system", "content": note})
    return messages, None


def template_has_tools(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template renders tools (it mentions them)."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        template = template.get("tool_use") or template.get("default")
    return isinstance(template, str) and "tools" in template


# --------------------------------------------------------------------------- answer


def tool_calls_of(normalized: dict, text: str, *, cut: bool = False) -> list[dict] | None:
    """A forced call's answer as OpenAI's ``tool_calls``, or None when ``text`` is not a
    complete call; with ``cut`` (the token limit ended it) a ``required`` answer gives the
    calls it completed."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        if not (cut and normalized["tool_choice"] == "required"):
            return None
        at = text.find("[")
        value = complete_array_items(text, at) if at >= 0 else []
        if not value:
            return None
    choice = normalized["tool_choice"]
    calls = [{"name": choice["name"], "arguments": value}] if isinstance(choice, dict) else value
    if not isinstance(calls, list) or not all(
            isinstance(c, dict) and "name" in c and "arguments" in c for c in calls):
        return None
    return [_as_tool_call(c) for c in calls]


def auto_calls_of(text: str) -> tuple[str | None, list[dict]] | None:
    """An ``auto`` answer's content (the text before the first call, None when empty) and its
    calls as ``tool_calls``; None when ``text`` has no complete call (module doc)."""
    at = text.find(CALL_TRIGGER)
    if at < 0:
        return None
    calls, rest = [], text[at:]
    while rest:
        if calls:
            if not rest.startswith("\n"):
                return None
            rest = rest[1:]
        end = rest.find(CALL_CLOSE)
        if not rest.startswith(CALL_OPEN) or end < 0:
            return None
        try:
            call = json.loads(rest[len(CALL_OPEN):end])
        except json.JSONDecodeError:
            return None
        if not isinstance(call, dict) or set(call) != {"name", "arguments"}:
            return None
        calls.append(call)
        rest = rest[end + len(CALL_CLOSE):]
    return text[:at] or None, [_as_tool_call(c) for c in calls]


def _as_tool_call(call: dict) -> dict:
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": call["name"],
                         "arguments": json.dumps(call["arguments"], ensure_ascii=False)}}


def answer_of(normalized: dict, text: str, finish_reason: str
              ) -> tuple[str | None, list[dict] | None]:
    """A chat answer's ``content`` and ``tool_calls``: calls only when the model ended the
    answer (``finish_reason`` "stop") with complete calls (forced, or ``auto``); otherwise the
    text as content."""
    if finish_reason == "length" and normalized.get("tool_choice") == "required" \
            and "parallel_tool_calls" in normalized:  # never a JSON array as content
        calls = tool_calls_of(normalized, text, cut=True)
        if calls is not None:
            return None, calls
    if finish_reason == "stop":
        if forces_call(normalized):
            calls = tool_calls_of(normalized, text)
            if calls is not None:
                return None, calls
        elif normalized.get("tool_choice") == "auto":
            answer = auto_calls_of(text)
            if answer is not None:
                return answer
    return text, None


def sendable_length(text: str) -> int:
    """How much of an ``auto`` answer's text so far a stream may send as content: up to the
    first ``<tool_call>``, or up to a tail that could still begin one."""
    at = text.find(CALL_TRIGGER)
    if at >= 0:
        return at
    for keep in range(min(len(CALL_TRIGGER) - 1, len(text)), 0, -1):
        if CALL_TRIGGER.startswith(text[-keep:]):
            return len(text) - keep
    return len(text)
