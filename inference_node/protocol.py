"""OpenAI-shaped request and response models for the node's `/v1/*` routes.

The shapes follow the OpenAI API reference (chat completions, legacy completions, models) as the
official `openai` Python SDK reads them. Only the sampling fields this node honours are declared;
unknown fields are ignored, as vLLM's server does. `n` is 1 to `MAX_N` (each choice is its own
sample with its own receipt, so the bound keeps one request's work in line).

The request models are strict where OpenAI is: a JSON string is not a number or a boolean
(`"max_tokens": "4"`, `"stream": "yes"`), a number with a fraction is not an integer, and a
content part's `text` must be a string; each is a 400 naming the field (`server.py` turns a
`ValidationError` into OpenAI's error shape). `seed` is a 64-bit signed integer, as in vLLM's
protocol (a larger one overflowed the engines' generators).
"""

from __future__ import annotations

import time
import uuid
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from inference_node.response_format import FormatError, canonical_response_format
from inference_node.tools import canonical_tool_choice, canonical_tools

MAX_STOP_SEQUENCES = 4  # OpenAI's limit
MAX_TOP_LOGPROBS = 20
MAX_N = 16  # choices per request
SEED_MIN, SEED_MAX = -(2**63), 2**63 - 1  # torch.long, as vLLM's protocol bounds `seed`


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def now() -> int:
    return int(time.time())


# --------------------------------------------------------------------------- errors


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    """`{"error": {message, type, param, code}}`, the body of every non-2xx answer."""

    error: ErrorDetail


# --------------------------------------------------------------------------- models


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = Field(default_factory=now)
    owned_by: str = "zoo-gym"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


# --------------------------------------------------------------------------- shared


class _StrictRequest(BaseModel):
    """What a client sends: no coercion from strings, fractions or booleans."""

    model_config = ConfigDict(strict=True)


class StreamOptions(_StrictRequest):
    include_usage: bool = False


class UsageInfo(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


# OpenAI parameters the node refuses (400) unless they have one of these no-op values.
UNSUPPORTED: dict[str, tuple[object, ...]] = {
    "presence_penalty": (0, 0.0), "frequency_penalty": (0, 0.0), "logit_bias": ({},),
    "functions": (), "function_call": (), "modalities": (["text"],), "audio": (),
    "prediction": (), "best_of": (1,), "suffix": ("",), "parallel_tool_calls": (True,),
}


class _SamplingRequest(_StrictRequest):
    model: str
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    seed: int | None = Field(default=None, ge=SEED_MIN, le=SEED_MAX)
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(default=1, ge=1, le=MAX_N)
    user: str | None = None
    # canonical form (`inference_node.response_format`), None when unconstrained
    response_format: dict | None = None
    # OpenAI parameters this node does not implement: a 400 unless neutral (`_unsupported`)
    presence_penalty: object = None
    frequency_penalty: object = None
    logit_bias: object = None
    functions: object = None
    function_call: object = None
    modalities: object = None
    audio: object = None
    prediction: object = None

    @field_validator(*UNSUPPORTED, mode="before", check_fields=False)
    @classmethod
    def _unsupported(cls, value: object, info: ValidationInfo) -> None:
        """An OpenAI parameter the node does not implement is refused, never ignored, unless
        it has the value that changes nothing."""
        if any(value == neutral and type(value) is type(neutral)
               for neutral in UNSUPPORTED[info.field_name]) or value is None:
            return
        raise ValueError(f"{info.field_name} is not supported by this node (a verifiable "
                         "answer has no hidden sampling knobs); leave it out")

    @field_validator("response_format", mode="before")
    @classmethod
    def _response_format(cls, value: object) -> dict | None:
        try:
            return canonical_response_format(value)
        except FormatError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, value: str | list[str] | None) -> str | list[str] | None:
        stops = [value] if isinstance(value, str) else (value or [])
        if len(stops) > MAX_STOP_SEQUENCES:
            raise ValueError(f"at most {MAX_STOP_SEQUENCES} stop sequences")
        if any(s == "" for s in stops):
            raise ValueError("stop sequences must not be empty")
        return value

    def stop_list(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])


# --------------------------------------------------------------------------- chat


class TextPart(_StrictRequest):
    """A content part `{"type": "text", "text": "..."}`; other part types are refused."""

    type: Literal["text"]
    text: str


class FunctionCall(_StrictRequest):
    name: str
    arguments: str  # JSON text, as the model wrote it


class ToolCall(_StrictRequest):
    """An assistant's call, as an answer gave it and a later request sends it back."""

    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(_StrictRequest):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    tool_calls: list[ToolCall] | None = None  # an assistant's calls
    tool_call_id: str | None = Field(default=None, validate_default=True)  # a tool result: its call

    @field_validator("tool_call_id")
    @classmethod
    def _tool_call_id(cls, value: str | None, info: ValidationInfo) -> str | None:
        if (info.data.get("role") == "tool") != (value is not None):
            raise ValueError("a tool message, and only a tool message, has a tool_call_id")
        return value

    @field_validator("tool_calls")
    @classmethod
    def _tool_calls(cls, value: list[ToolCall] | None, info: ValidationInfo
                    ) -> list[ToolCall] | None:
        if value is not None and info.data.get("role") != "assistant":
            raise ValueError("only an assistant message has tool_calls")
        return value or None

    def text(self) -> str:
        """The message text; content parts are joined."""
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        return "".join(part.text for part in self.content)

    @field_validator("content", mode="before")
    @classmethod
    def _text_parts_only(cls, value: object) -> object:
        if isinstance(value, list):
            for part in value:
                if not isinstance(part, dict) or part.get("type") != "text":
                    raise ValueError("only text content parts are supported")
                if not isinstance(part.get("text"), str):
                    raise ValueError(  # noqa: TRY004 (pydantic reports ValueError, not TypeError)
                        "a text content part's `text` must be a string")
        return value


class ChatCompletionRequest(_SamplingRequest):
    messages: list[ChatMessage] = Field(min_length=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    # canonical forms (`inference_node.tools`); tool_choice None without tools
    tools: list[dict] | None = None
    tool_choice: str | dict | None = Field(default=None, validate_default=True)
    parallel_tool_calls: object = None  # refused when false (`UNSUPPORTED`)

    @field_validator("tools", mode="before")
    @classmethod
    def _tools(cls, value: object) -> list[dict] | None:
        try:
            return canonical_tools(value)
        except FormatError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("tool_choice", mode="before")
    @classmethod
    def _tool_choice(cls, value: object, info: ValidationInfo) -> str | dict | None:
        if "tools" not in info.data:  # the tools failed: that is the error to report
            return None
        try:
            choice = canonical_tool_choice(value, info.data["tools"])
        except FormatError as exc:
            raise ValueError(str(exc)) from None
        if info.data.get("response_format") and choice not in (None, "none"):
            which = repr(choice) if isinstance(choice, str) else "naming a function"
            raise ValueError(f"tool_choice {which} sets the answer's format (a call, or text "
                             "or calls): it cannot be combined with a response_format")
        return choice


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None = None


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob] = []


class ChoiceLogprobs(BaseModel):
    content: list[TokenLogprob] | None = None


class ChatMessageOut(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    tool_calls: list[ToolCall] | None = None


class ChatChoice(BaseModel):
    index: int = 0
    message: ChatMessageOut
    logprobs: ChoiceLogprobs | None = None
    finish_reason: Literal["stop", "length", "tool_calls"] | None


class ChatCompletionResponse(BaseModel):
    id: str = Field(default_factory=lambda: new_id("chatcmpl"))
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(default_factory=now)
    model: str
    system_fingerprint: str | None = None
    choices: list[ChatChoice]
    usage: UsageInfo


class DeltaToolCall(ToolCall):
    index: int  # the call's place in the message's tool_calls


class DeltaMessage(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[DeltaToolCall] | None = None


class ChatChunkChoice(BaseModel):
    index: int = 0
    delta: DeltaMessage
    logprobs: ChoiceLogprobs | None = None
    finish_reason: Literal["stop", "length", "tool_calls"] | None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    system_fingerprint: str | None = None
    choices: list[ChatChunkChoice]
    usage: UsageInfo | None = None


# --------------------------------------------------------------------------- completions


class CompletionRequest(_SamplingRequest):
    prompt: str | list[str]
    logprobs: int | None = Field(default=None, ge=0, le=5)  # OpenAI's limit for completions
    echo: bool = False
    best_of: object = None  # refused unless 1 (`UNSUPPORTED`)
    suffix: object = None  # refused unless empty

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, value: str | list[str]) -> str | list[str]:
        if isinstance(value, list) and len(value) != 1:
            raise ValueError("exactly one prompt per request")
        if (value if isinstance(value, str) else value[0]) == "":
            raise ValueError("the prompt must not be empty")  # vLLM's answer too
        return value

    def prompt_text(self) -> str:
        return self.prompt if isinstance(self.prompt, str) else self.prompt[0]


class CompletionLogprobs(BaseModel):
    tokens: list[str] = []
    token_logprobs: list[float] = []
    top_logprobs: list[dict[str, float]] | None = None
    text_offset: list[int] = []


class CompletionChoice(BaseModel):
    index: int = 0
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: Literal["stop", "length"] | None


class CompletionResponse(BaseModel):
    id: str = Field(default_factory=lambda: new_id("cmpl"))
    object: Literal["text_completion"] = "text_completion"
    created: int = Field(default_factory=now)
    model: str
    system_fingerprint: str | None = None
    choices: list[CompletionChoice]
    usage: UsageInfo | None = None
