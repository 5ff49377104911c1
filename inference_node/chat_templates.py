"""Chat templates: the one a node renders chat prompts with, and the one a verifier re-renders
a receipt's prompt with. vLLM's options, in vLLM's terms (`vllm serve --chat-template FILE
--enable-auto-tool-choice --tool-call-parser hermes`).

A node renders with its model's own template (the tokenizer's) unless it is given another:

- ``--chat-template FILE``: that Jinja template, for any model;
- ``--enable-auto-tool-choice --tool-call-parser hermes`` for a model whose own template does
  not render tools: the template the node ships for it (``SHIPPED``, keyed by the digest of the
  model's own template: SmolLM2's gets ``templates/smollm2_tools.jinja``, which renders the
  tools in the system turn as SmolLM2's model card does, and calls in the Hermes syntax). A
  model whose own template renders tools keeps it.

``hermes`` is the only parser: it is the ``<tool_call>`` syntax ``tool_choice: "auto"`` is
decoded under (``inference_node.tools.auto_grammar``), so the calls need no parsing after the
fact. ``choose_chat_template`` checks the options, one line each (a parser other than hermes,
auto tool choice without a template that renders tools, a template that does not parse or
render), before the model loads.

Binding. A chat receipt rendered under a template other than the model's own names its digest
(``chat_template``: ``sha256:`` of the template's UTF-8 text, ``template_digest``); a receipt
without it was rendered under the model's own. A verifier re-renders under a template with that
digest: ``template_for_receipt`` finds it (the one the verifier was given, the model's own, or
a shipped one) or fails with ``ReceiptError`` ``chat_template``, so a receipt made under
another template never verifies as if under the model's own.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inference_node.errors import NodeError, ReceiptError

TOOL_CALL_PARSERS = ("hermes",)
TEMPLATES = Path(__file__).parent / "templates"
# The model's own template's digest -> the tools-capable template the node ships for it.
SHIPPED = {
    # SmolLM2-Instruct's own (the shipped SmolLM2-135M-Instruct's, `gym node model`)
    "sha256:872be49dbb638044ad01b60388f48d469ff2980e5f0dccdc22ec907db54d0788":
        "smollm2_tools.jinja",
}
MAX_TEMPLATE_BYTES = 1 << 20
# What a template is rendered with to check it (and that it renders tools).
_PROBE_TOOL = {"type": "function", "function": {
    "name": "gym_probe_tool", "description": "", "parameters": {"type": "object", "properties": {}}}}
_CHAT = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
_TOOL_ROUND = [*_CHAT, {"role": "assistant", "content": "", "tool_calls": [{
    "id": "call_0", "type": "function", "function": {"name": "gym_probe_tool", "arguments": "{}"}}]},
               {"role": "tool", "tool_call_id": "call_0", "content": "r"}]


def template_digest(text: str) -> str:
    """``sha256:`` + hex SHA-256 of a template's UTF-8 text (what a receipt binds)."""
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def own_template(tokenizer: Any) -> str | None:
    """The tokenizer's chat template (a named set's ``tool_use`` or ``default``), or None."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        template = template.get("tool_use") or template.get("default")
    return template if isinstance(template, str) else None


def shipped_template(digest: str) -> str | None:
    """The text of the template this package ships whose digest is ``digest``, or None."""
    for name in SHIPPED.values():
        text = (TEMPLATES / name).read_text()
        if template_digest(text) == digest:
            return text
    return None


@dataclass(frozen=True)
class ChatTemplate:
    """The template a node renders chat prompts with."""

    text: str | None  # None: the model's own
    digest: str | None  # what its chat receipts bind; None with the model's own
    source: str  # where it comes from, as the node says when it starts

    def install(self, tokenizer: Any) -> None:
        """Make ``tokenizer`` (the engine's, which every prompt is rendered with) use it."""
        if self.text is not None:
            tokenizer.chat_template = self.text


def choose_chat_template(tokenizer: Any, *, chat_template: Path | None = None,
                         auto_tool_choice: bool = False, tool_call_parser: str | None = None
                         ) -> ChatTemplate:
    """The template for `gym node serve`'s options (module doc) given the model's
    ``tokenizer``; ``NodeError`` naming the option when they do not fit."""
    if tool_call_parser is not None and tool_call_parser not in TOOL_CALL_PARSERS:
        raise NodeError(f"--tool-call-parser {tool_call_parser}: the node decodes "
                        "tool_choice 'auto' in the Hermes <tool_call> syntax only; use "
                        "--tool-call-parser hermes")
    if auto_tool_choice and tool_call_parser is None:
        raise NodeError("--enable-auto-tool-choice needs --tool-call-parser hermes")
    if tool_call_parser is not None and not auto_tool_choice:
        raise NodeError("--tool-call-parser goes with --enable-auto-tool-choice")
    own = own_template(tokenizer)
    if chat_template is not None:
        text = _read_template(chat_template)
        _check_renders(tokenizer, text, f"--chat-template {chat_template}",
                       tools=auto_tool_choice)
        same = text == own
        return ChatTemplate(None if same else text, None if same else template_digest(text),
                            "the model's own" if same else f"--chat-template {chat_template}")
    model = ChatTemplate(None, None, "the model's own")
    if not auto_tool_choice or (own is not None and _renders_tools(tokenizer, own)):
        return model
    name = SHIPPED.get(template_digest(own)) if own is not None else None
    if name is None:
        raise NodeError("--enable-auto-tool-choice: the model's chat template does not render "
                        "tools, and the node ships none for it; give --chat-template FILE "
                        "with one that does")
    text = (TEMPLATES / name).read_text()
    return ChatTemplate(text, template_digest(text), f"{name}, shipped for this model")


def _read_template(path: Path) -> str:
    try:
        data = path.read_bytes()
        if len(data) > MAX_TEMPLATE_BYTES:
            raise ValueError(f"{len(data)} bytes, more than {MAX_TEMPLATE_BYTES}")
        return data.decode()
    except (OSError, ValueError) as exc:
        raise NodeError(f"--chat-template {path}: cannot read it ({exc})") from None


def _render(tokenizer: Any, text: str, tools: bool) -> str:
    """The probe conversation under ``text``: with ``tools``, a call and its result too."""
    return tokenizer.apply_chat_template(_TOOL_ROUND if tools else _CHAT, chat_template=text,
                                         tools=[_PROBE_TOOL] if tools else None,
                                         tokenize=False, add_generation_prompt=True)


def _renders_tools(tokenizer: Any, text: str) -> bool:
    """Whether ``text`` shows the model the tools it is given (their names)."""
    try:
        return _PROBE_TOOL["function"]["name"] in _render(tokenizer, text, tools=True)
    except Exception:  # noqa: BLE001 - a template that fails with tools does not render them
        return False


def _check_renders(tokenizer: Any, text: str, option: str, *, tools: bool) -> None:
    """``text`` parses and renders a conversation; with ``tools``, also one with a tool call
    and its result, showing the model the tools. ``NodeError`` in one line otherwise."""
    from jinja2 import TemplateError, TemplateSyntaxError

    for probe in (False, True) if tools else (False,):
        try:
            _render(tokenizer, text, probe)
        except TemplateSyntaxError as exc:
            raise NodeError(f"{option}: not a Jinja template (line {exc.lineno}: "
                            f"{exc.message})") from None
        except (TemplateError, TypeError, ValueError) as exc:  # the template's own errors too
            what = "a conversation with a tool call" if probe else "a conversation"
            raise NodeError(f"{option}: rendering {what} fails: {exc}") from None
    if tools and not _renders_tools(tokenizer, text):
        raise NodeError(f"{option}: --enable-auto-tool-choice needs a template that renders "
                        "the tools it is given; this one does not")


# --------------------------------------------------------------------------- verifying


def template_for_receipt(receipt: Any, tokenizer: Any, given: str | None = None) -> Any:
    """The tokenizer to re-render ``receipt``'s prompt with: ``tokenizer`` (the model's own
    template) for a receipt that binds none, else one with the template whose digest the
    receipt binds: ``given`` (the verifier's ``--chat-template``) when given, else the model's
    own or a shipped one. ``ReceiptError`` ``chat_template`` when that template is not the
    receipt's, or the verifier has none that is."""
    bound = getattr(receipt, "chat_template", None)
    if bound is None:
        return tokenizer
    own = own_template(tokenizer)
    if given is not None:
        text, computed = (given if template_digest(given) == bound else None), given
    elif own is not None and template_digest(own) == bound:
        return tokenizer
    else:
        text, computed = shipped_template(bound), own or ""
    if text is None:
        raise ReceiptError("chat_template", "the prompt was rendered under another chat "
                           "template than " + ("the one given" if given is not None else
                           "the model's (give the receipt's with --chat-template FILE)"),
                           expected=bound, computed=template_digest(computed))
    rendering = copy.copy(tokenizer)  # the caller's tokenizer keeps its template
    rendering.chat_template = text
    return rendering
