"""Engines: what turns a `Prompt` and `SamplingParams` into tokens, behind one interface.

`Engine.stream(prompt, params)` yields `GenerationDelta`s (new text, token ids, optional
logprobs; the last one carries `finish_reason` and token counts) and `Engine.generate` collects
them into one `Generation`. A prompt is an optional shared library prefix plus the request's own
token ids (`inference_node.injection.Prompt`), so an engine with its own prefix caching (vLLM's
automatic prefix caching, in `inference_node.vllm_engine`) simply runs `prompt.all_token_ids`.

The engines: `inference_node.transformers_engine.TransformersEngine` (a Hugging Face causal LM,
batched on one worker thread) and `inference_node.vllm_engine.VLLMEngine`;
`inference_node.engine_select` chooses between them.
"""

from __future__ import annotations

import abc
import asyncio
import dataclasses
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal

from inference_node.errors import InferenceNodeError
from inference_node.injection import Prompt
from inference_node.response_format import Constraint, FormatError

FinishReason = Literal["stop", "length"]


class EngineError(InferenceNodeError, RuntimeError):
    """The engine failed while running a request (a bug or a device error, not the caller's)."""


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    # The verifiable sampler's inputs (`inference_node.sampling`, docs/sampling.md): with no
    # seed the engine draws one (`resolve_seed`); `request_key` is the normalized request's
    # 32-byte digest when the node serves (a receipt signs both), zeros otherwise.
    seed: int | None = None
    request_key: bytes = bytes(32)
    stop: tuple[str, ...] = ()
    # structured outputs: the grammar every token is chosen under
    # (`inference_node.response_format`), None when unconstrained
    constraint: Constraint | None = None
    # gym-sampler/2's knobs (`inference_node.sampler_knobs.Knobs`), None when all neutral
    knobs: Any = None
    # where an answer stops besides stop strings: the model's EOS ids unless `ignore_eos`,
    # and the request's `stop_token_ids` (the stop token is left out of the text, as vLLM)
    ignore_eos: bool = False
    stop_token_ids: tuple[int, ...] = ()
    logprobs: bool = False
    top_logprobs: int = 0  # alternatives reported per position when `logprobs`
    # Hand back the final hidden state of every decode position (a receipt's activation
    # commitment is over them); engines that cannot leave `activations` None.
    capture_activations: bool = False


@dataclass(frozen=True)
class TokenLogprob:
    token_id: int
    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()  # the most likely tokens at this position


@dataclass
class GenerationDelta:
    text: str
    token_ids: list[int]
    logprobs: list[TokenLogprob] | None = None
    finish_reason: FinishReason | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # On the last delta, with `capture_activations`: one bfloat16 CPU tensor (hidden size) per
    # completion token, the final hidden state at the position that produced it.
    activations: list[Any] | None = None


@dataclass
class Generation:
    text: str
    token_ids: list[int]
    logprobs: list[TokenLogprob] | None
    finish_reason: FinishReason
    prompt_tokens: int
    completion_tokens: int
    activations: list[Any] | None = None  # as `GenerationDelta.activations`


def new_seed() -> int:
    """A random seed below 2**52 for a request that gave none (receipts record it)."""
    return secrets.randbits(52)


def resolve_seed(params: SamplingParams) -> SamplingParams:
    """``params`` with a seed: its own, or `new_seed`, so every request samples through the
    same seeded sampler."""
    if params.seed is not None:
        return params
    return dataclasses.replace(params, seed=new_seed())


class Engine(abc.ABC):
    """A frozen model behind a request queue."""

    kind: str  # "transformers", "vllm": shown in /health
    model_name: str
    tokenizer: Any  # a Hugging Face tokenizer with a chat template
    max_model_len: int
    vocab_size: int  # the width of the logits rows (token ids a request may name are below it)
    eos_ids: frozenset[int]  # the model's end-of-sequence ids (`generation_checks`)

    @abc.abstractmethod
    def stream(self, prompt: Prompt, params: SamplingParams) -> AsyncIterator[GenerationDelta]:
        """Yield deltas as tokens are decided; the last carries finish_reason and counts.

        Raises `EngineError` from the iterator when the engine fails. Closing the iterator early
        cancels the request.
        """

    async def generate(self, prompt: Prompt, params: SamplingParams) -> Generation:
        generation = await collect_generation(self.stream(prompt, params), params.logprobs)
        if generation is None:
            raise EngineError("stream ended without a finish reason")
        return generation

    def check_constraint(self, constraint: Constraint) -> None:
        """Compile ``constraint`` for this model (blocking; cached), so a schema the grammar
        compiler refuses is a ``FormatError`` before the request is queued."""
        raise FormatError("this engine does not support structured outputs")

    @abc.abstractmethod
    def queue_depth(self) -> int:
        """Requests accepted but not yet running."""

    def running(self) -> int:
        """Requests being decoded now (a cancelled one stops counting when the engine drops
        it)."""
        return 0

    def failure(self) -> str | None:
        """Why the engine can no longer answer (its worker or engine process died), or None:
        `/health` then answers 503 with this reason."""
        return None

    def start(self) -> None:
        """Start background workers (called by the server on startup)."""

    def shutdown(self) -> None:
        """Stop background workers; pending requests fail with `EngineError`."""


async def collect_generation(deltas: AsyncIterator[GenerationDelta], logprobs: bool
                             ) -> Generation | None:
    """One ``Generation`` from a request's deltas, through the one with a finish reason; None
    when they end without one. Exceptions from ``deltas`` propagate."""
    text, ids, kept = [], [], [] if logprobs else None
    async for delta in deltas:
        text.append(delta.text)
        ids.extend(delta.token_ids)
        if kept is not None and delta.logprobs:
            kept.extend(delta.logprobs)
        if delta.finish_reason is not None:
            return Generation("".join(text), ids, kept, delta.finish_reason,
                              delta.prompt_tokens, delta.completion_tokens, delta.activations)
    return None


async def deltas_until_finished(events: asyncio.Queue) -> AsyncIterator[GenerationDelta]:
    """The deltas an engine's worker puts on ``events``, through the one with a finish reason;
    an exception put there is raised instead (how every engine hands a request its output)."""
    while True:
        item = await events.get()
        if isinstance(item, Exception):
            raise item
        yield item
        if item.finish_reason is not None:
            return
