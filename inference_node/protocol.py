"""OpenAI-shaped request and response models for the node's `/v1/*` routes.

The shapes follow the OpenAI API reference (chat completions, legacy completions, models) as the
official `openai` Python SDK reads them. Only the sampling fields this node honours are declared.
A field that would change the tokens and is not honoured is a 400 naming it, unless it has the
value that changes nothing: OpenAI's (`UNSUPPORTED`) and vLLM's request extras (`VLLM_EXTRAS`:
`top_k`, `min_tokens`, `guided_grammar`, ...), so a client never gets an answer that silently
ignored what it asked for. vLLM's `guided_choice`, `guided_regex`, `guided_json` and
`structured_outputs` are honoured (`inference_node.guided`), and so are the sampling knobs
`gym-sampler/2` adds (`presence_penalty`, `frequency_penalty`, `logit_bias`,
`repetition_penalty`, `top_k`, `min_p`, `min_tokens`) and the stopping ones (`ignore_eos`,
`stop_token_ids`), declared here with vLLM's domains (`inference_node.sampler_knobs`). Other
unknown fields are ignored, as vLLM's server does. `n` is 1 to `MAX_N` (each choice is its own
sample with its own receipt, so the bound keeps one request's work in line). `top_logprobs` needs `logprobs`, and `stream_options` needs `stream`, as in
OpenAI and vLLM. `parallel_tool_calls: false` bounds an answer to one call
(`inference_node.tools`).

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

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from inference_node.guided import (
    canonical_choice,
    canonical_regex,
    from_structured_outputs,
    guided_json_format,
)
from inference_node.response_format import FormatError, canonical_response_format
from inference_node.tools import canonical_tool_choice, canonical_tools

MAX_STOP_SEQUENCES = 4  # OpenAI's limit
MAX_TOP_LOGPROBS = 20
MAX_N = 16  # choices per request
SEED_MIN, SEED_MAX = -(2**63), 2**63 - 1  # torch.long, as vLLM's protocol bounds `seed`
# gym-sampler/2's knobs (`inference_node.sampler_knobs`): bounds on what one request may set
MAX_BIAS = 100.0  # OpenAI's |logit_bias| bound
MAX_BIASED_TOKENS = 300
MAX_STOP_TOKEN_IDS = 16
MAX_TOKEN_ID = 2**31 - 1
# the normalized request's keys for them (absent when neutral): the sampler's order, then the
# two that only change where an answer stops (`inference_node.generation_checks`)
SAMPLER_KEYS = ("min_tokens", "logit_bias", "repetition_penalty", "frequency_penalty",
                "presence_penalty", "min_p", "top_k")
NORMALIZED_KEYS = (*SAMPLER_KEYS, "ignore_eos", "stop_token_ids")


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
    "functions": (), "function_call": (), "modalities": (["text"],), "audio": (),
    "prediction": (), "best_of": (1,), "suffix": ("",),
}
# vLLM's request extras (its `SamplingParams` and guided decoding), refused the same way unless
# they have the value that changes nothing (or null).
VLLM_EXTRAS: dict[str, tuple[object, ...]] = {
    "length_penalty": (1, 1.0), "bad_words": ([],), "allowed_token_ids": (), "use_beam_search": (False,),
    "include_stop_str_in_output": (False,), "skip_special_tokens": (True,),
    "spaces_between_special_tokens": (True,), "truncate_prompt_tokens": (),
    "prompt_logprobs": (), "logits_processors": (), "guided_grammar": (),
    "guided_decoding_backend": (), "guided_whitespace_pattern": (),
    "add_generation_prompt": (True,),
    "continue_final_message": (False,), "chat_template": (), "chat_template_kwargs": ({},),
    "vllm_xargs": (),
}


def refused(param: str, message: str) -> PydanticCustomError:
    """A request error naming ``param`` (the server's 400 reads it from the error's context:
    a model-level check has no field location)."""
    return PydanticCustomError("invalid_request", message, {"param": param})


def _neutral(value: object, neutrals: tuple[object, ...]) -> bool:
    return value is None or any(value == neutral and type(value) is type(neutral)
                                for neutral in neutrals)


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
    # vLLM's guided decoding, canonical (`inference_node.guided`; guided_json and
    # structured_outputs are read into these and `response_format` before validation)
    guided_choice: list[str] | None = None
    guided_regex: str | None = None
    # gym-sampler/2's knobs (`inference_node.sampler_knobs`), vLLM's domains; None is neutral
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    repetition_penalty: float | None = Field(default=None, gt=0.0, le=2.0)
    logit_bias: dict[str, float] | None = None  # canonical: {"<id>": non-zero bias}
    top_k: int | None = Field(default=None, ge=-1, le=MAX_TOKEN_ID)  # -1 and 0: off
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    min_tokens: int | None = Field(default=None, ge=0, le=MAX_TOKEN_ID)
    ignore_eos: bool = False
    stop_token_ids: list[int] | None = None  # canonical: ascending, no repeats
    # OpenAI parameters this node does not implement: a 400 unless neutral (`_unsupported`)
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
        if _neutral(value, UNSUPPORTED[info.field_name]):
            return
        raise ValueError(f"{info.field_name} is not supported by this node (a verifiable "
                         "answer has no hidden sampling knobs); leave it out")

    @model_validator(mode="before")
    @classmethod
    def _vllm_extras(cls, data: object) -> object:
        """vLLM's extras (`VLLM_EXTRAS`) are refused as OpenAI's unsupported fields are;
        `structured_outputs` and `guided_json` are read as the forms they mean."""
        if isinstance(data, dict):
            data = dict(data)
            try:
                if data.get("structured_outputs") is not None:
                    field, value = from_structured_outputs(data.pop("structured_outputs"))
                    if data.get(field) is not None:
                        raise FormatError(f"structured_outputs and {field} both given",
                                          "structured_outputs")
                    data[field] = value
                if data.get("guided_json") is not None:
                    if data.get("response_format") is not None:
                        raise FormatError("guided_json and response_format both ask for a "
                                          "format: give one", "guided_json")
                    data["response_format"] = guided_json_format(data["guided_json"])
            except FormatError as exc:
                raise refused(exc.param or "structured_outputs", str(exc)) from None
            data.pop("guided_json", None)
            data.pop("structured_outputs", None)
            for name, neutrals in VLLM_EXTRAS.items():
                if name in data and not _neutral(data[name], neutrals):
                    raise refused(name, f"{name} is not supported by this node (vLLM honours "
                                        "it; a verifiable answer here has no hidden sampling "
                                        "knobs): leave it out")
        return data

    @field_validator("guided_choice", "guided_regex", mode="before")
    @classmethod
    def _guided(cls, value: object, info: ValidationInfo) -> object:
        canonical = {"guided_choice": canonical_choice, "guided_regex": canonical_regex}
        try:
            return None if value is None else canonical[info.field_name](value)
        except FormatError as exc:
            raise ValueError(str(exc)) from None

    @model_validator(mode="after")
    def _one_constraint(self) -> _SamplingRequest:
        given = [name for name in ("response_format", "guided_choice", "guided_regex")
                 if getattr(self, name) is not None]
        if len(given) > 1:
            raise refused(given[1], f"{' and '.join(given)} each constrain the answer: give one")
        if given and getattr(self, "tool_choice", None) not in (None, "none"):
            raise refused("tool_choice", f"tool_choice sets the answer's format (a call, or "
                          f"text or calls): it cannot be combined with {given[0]}")
        return self

    @field_validator("logit_bias")
    @classmethod
    def _logit_bias(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        if value is None:
            return None
        if len(value) > MAX_BIASED_TOKENS:
            raise ValueError(f"logit_bias sets at most {MAX_BIASED_TOKENS} tokens")
        canonical = {}
        for key, bias in value.items():
            if not key.isascii() or not key.isdigit() or key != str(int(key)) \
                    or int(key) > MAX_TOKEN_ID:
                raise ValueError(f"logit_bias keys are token ids (decimal, no leading zeros), "
                                 f"got {key!r}")
            if not -MAX_BIAS <= bias <= MAX_BIAS:
                raise ValueError(f"a logit_bias value is between -{MAX_BIAS:g} and "
                                 f"{MAX_BIAS:g}, got {bias!r}")
            if bias:
                canonical[str(int(key))] = float(bias)
        return canonical or None

    @field_validator("stop_token_ids")
    @classmethod
    def _stop_token_ids(cls, value: list[int] | None) -> list[int] | None:
        if not value:
            return None
        if len(value) > MAX_STOP_TOKEN_IDS or not all(0 <= t <= MAX_TOKEN_ID for t in value):
            raise ValueError(f"stop_token_ids lists at most {MAX_STOP_TOKEN_IDS} token ids")
        return sorted(set(value))

    @model_validator(mode="after")
    def _min_tokens(self) -> _SamplingRequest:
        if not self.min_tokens:
            return self
        limit = getattr(self, "max_completion_tokens", None) or self.max_tokens
        if limit is not None and self.min_tokens > limit:
            raise refused("min_tokens", f"min_tokens ({self.min_tokens}) is more than the "
                          f"completion's limit ({limit})")
        if self.stop:
            raise refused("min_tokens", "min_tokens with stop strings is not supported by this "
                          "node (vLLM then ignores stop strings inside the first min_tokens "
                          "tokens, which its receipts could not replay): give one")
        if self.response_format or self.guided_choice or self.guided_regex \
                or getattr(self, "tool_choice", None) not in (None, "none"):
            raise refused("min_tokens", "min_tokens cannot be combined with a response format, "
                          "a guided form or a tool choice (the grammar decides where the answer "
                          "ends)")
        return self

    def knobs(self) -> dict[str, object]:
        """The gym-sampler/2 and stopping knobs that are not neutral, as the normalized request
        holds them (``NORMALIZED_KEYS``)."""
        neutral = {"min_tokens": 0, "logit_bias": None, "repetition_penalty": 1.0,
                   "frequency_penalty": 0.0, "presence_penalty": 0.0, "min_p": 0.0,
                   "ignore_eos": False, "stop_token_ids": None}
        out: dict[str, object] = {}
        for name in NORMALIZED_KEYS:
            value = getattr(self, name)
            if name == "top_k":
                if value is not None and value > 0:
                    out[name] = value
            elif value is not None and value != neutral[name]:
                out[name] = value
        return out

    @model_validator(mode="after")
    def _stream_options_need_stream(self) -> _SamplingRequest:
        if self.stream_options is not None and not self.stream:
            raise refused("stream_options", "stream_options is only allowed when stream is true")
        return self

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
    parallel_tool_calls: bool | None = None  # false: at most one call (`inference_node.tools`)

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

    @model_validator(mode="after")
    def _top_logprobs_need_logprobs(self) -> ChatCompletionRequest:
        if self.top_logprobs is not None and not self.logprobs:
            raise refused("top_logprobs", "top_logprobs is only allowed when logprobs is true")
        return self


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
    def _prompts(cls, value: str | list[str]) -> str | list[str]:
        prompts = [value] if isinstance(value, str) else value
        if not 1 <= len(prompts) <= MAX_N:
            raise ValueError(f"1 to {MAX_N} prompts per request")
        if any(p == "" for p in prompts):
            raise ValueError("the prompt must not be empty")  # vLLM's answer too
        return value

    @model_validator(mode="after")
    def _choices_in_all(self) -> CompletionRequest:
        if len(self.prompts()) * self.n > MAX_N:
            raise refused("n", f"{len(self.prompts())} prompts x n = {self.n} is more than "
                          f"{MAX_N} choices per request")
        return self

    def prompts(self) -> list[str]:
        """The prompts: a list prompt is batched, choice i answering prompt i // n."""
        return [self.prompt] if isinstance(self.prompt, str) else list(self.prompt)

    def prompt_text(self) -> str:
        return self.prompts()[0]


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
