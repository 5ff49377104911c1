"""`TransformersEngine`: a Hugging Face causal LM on CPU or one GPU with a single worker thread.

It implements `inference_node.engine.Engine`:

- Requests wait in a FIFO; the worker takes the oldest and up to `max_batch - 1` more that share
  its library prefix, and decodes them together to completion (static batching: a request that
  arrives during a batch waits for the next one; continuous batching is vLLM's job).
- The prefix's past_key_values come from `PrefixKVCache` (computed once per library version,
  deep-copied per batch). Each request's own tokens are left-padded *after* the prefix: the
  attention mask hides the pad slots and explicit position ids continue from the prefix, so
  every row sees exactly `prefix + its tokens`, as if it ran alone.
- Sampling is per request and stateless: every token is `inference_node.sampling.choose` on
  the row's logits, keyed by the request's seed, its request key and the token's position
  (gym-sampler/1, docs/sampling.md), so a seeded request gives the same tokens whatever else is
  in the batch (up to float differences from batch shapes, which only matter at near-ties),
  and a verifier re-derives each token from one prefill.
- Structured outputs: a request with a `constraint` samples each token among those its grammar
  allows (`inference_node.response_format`: one xgrammar matcher per request, advanced by
  every token), so the answer is valid JSON for its schema unless `max_tokens` cuts it.
- Stop strings are matched on the decoded text; text that might be the start of a stop string is
  held back until it is decided, so a stream never shows the stop string. Finished and cancelled
  rows are dropped from the batch (`DynamicCache.batch_select_indices`).
- Logprobs are those of the model's own distribution (before temperature and top-p), as vLLM
  and OpenAI report them.
- A request fails alone: an error while sampling its token (a seed outside the sampler's
  range included) drops its row, and when a forward pass fails the requests that
  have emitted nothing yet run again one by one (the others fail: their stream has begun).
  A request whose consumer is gone (`stream` closed: a client that disconnected) is dropped
  at the next token.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inference_node.engine import (
    Engine,
    EngineError,
    FinishReason,
    GenerationDelta,
    SamplingParams,
    TokenLogprob,
    deltas_until_finished,
    resolve_seed,
)
from inference_node.generation_checks import eos_token_ids
from inference_node.injection import PrefixKVCache, Prompt
from inference_node.response_format import Constraint, check_compiles
from inference_node.sampler_knobs import History
from inference_node.sampling import choose
from trainer.grammar import Grammars, TokenMask

log = logging.getLogger(__name__)

@dataclass(eq=False)
class _Request:
    prompt: Prompt
    params: SamplingParams
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue
    cancelled: bool = False
    # decoding state, owned by the worker thread
    token_ids: list[int] = field(default_factory=list)
    activations: list[Any] = field(default_factory=list)
    sent_chars: int = 0
    mask: TokenMask | None = None  # the grammar's progress, with `params.constraint`
    past: Any = None  # the penalties' History (`sampler_knobs`), with penalty knobs

    def emit(self, item: GenerationDelta | Exception) -> None:
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, item)
        except RuntimeError:  # the event loop is gone (server shut down): nobody is listening
            self.cancelled = True


class TransformersEngine(Engine):
    """A Hugging Face causal LM with batched decoding on one worker thread; see the module doc."""

    kind = "transformers"

    def __init__(self, model: Any, tokenizer: Any, model_name: str, max_batch: int = 8,
                 prefix_reuse: bool = True) -> None:
        import torch

        self.torch = torch
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.max_batch = max_batch
        self.prefix_reuse = prefix_reuse
        self.device = next(model.parameters()).device
        self.max_model_len = int(getattr(model.config, "max_position_embeddings", 2048))
        self.eos_ids = eos_token_ids(model, tokenizer)
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else next(iter(self.eos_ids), 0)
        self.prefix_cache = PrefixKVCache(self._prefill_prefix)
        self._grammars: Grammars | None = None
        self._grammars_lock = threading.Lock()
        self.batch_sizes: collections.Counter[int] = collections.Counter()  # size -> batches run
        self._waiting: collections.deque[_Request] = collections.deque()
        self._wakeup = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._running = 0

    @classmethod
    def from_pretrained(cls, model_dir: str | Path, model_name: str | None = None,
                        device: str | None = None, dtype: str = "auto", max_batch: int = 8,
                        prefix_reuse: bool = True) -> TransformersEngine:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        torch_dtype = {"auto": torch.bfloat16 if device.startswith("cuda") else torch.float32,
                       "float32": torch.float32, "bfloat16": torch.bfloat16,
                       "float16": torch.float16}[dtype]
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch_dtype).to(device)
        return cls(model, tokenizer, model_name or Path(model_dir).name, max_batch=max_batch,
                   prefix_reuse=prefix_reuse)

    # ---------------------------------------------------------------- interface

    def start(self) -> None:
        if self._thread is None:
            self._stopping = False
            self._thread = threading.Thread(target=self._worker, name="gym-engine", daemon=True)
            self._thread.start()

    def shutdown(self) -> None:
        with self._wakeup:
            self._stopping = True
            self._wakeup.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        while self._waiting:
            self._waiting.popleft().emit(EngineError("engine shut down"))

    def queue_depth(self) -> int:
        return len(self._waiting)

    def grammars(self) -> Grammars:
        """The grammar compiler for this model's tokenizer and logits (built on first use)."""
        with self._grammars_lock:
            if self._grammars is None:
                width = self.model.get_output_embeddings().weight.shape[0]
                self._grammars = Grammars(self.tokenizer, width, self.eos_ids)
            return self._grammars

    def check_constraint(self, constraint: Constraint) -> None:
        check_compiles(self.grammars(), constraint)

    def running(self) -> int:
        return self._running

    async def stream(self, prompt: Prompt, params: SamplingParams
                     ) -> AsyncIterator[GenerationDelta]:
        self.start()
        request = _Request(prompt, resolve_seed(params), asyncio.get_running_loop(),
                           asyncio.Queue())
        with self._wakeup:
            self._waiting.append(request)
            self._wakeup.notify()
        try:
            async for item in deltas_until_finished(request.events):
                yield item
        finally:
            request.cancelled = True  # no-op when finished; stops the worker otherwise

    # ---------------------------------------------------------------- worker

    def _worker(self) -> None:
        torch = self.torch
        while True:
            with self._wakeup:
                while not self._waiting and not self._stopping:
                    self._wakeup.wait()
                if self._stopping:
                    return
                batch = self._take_batch()
            try:
                with torch.inference_mode():
                    self._run_batch(batch)
            except Exception as exc:
                log.exception("engine batch of %d failed", len(batch))
                self._fail_or_retry_alone(batch, exc)
            finally:
                self._running = 0
            del batch  # an idle worker must not keep the last prompts (and their prefix) alive

    def _fail_or_retry_alone(self, batch: list[_Request], exc: Exception) -> None:
        """After a batch failed: requests that have emitted nothing yet run again one by one,
        so a request that breaks the model fails alone; the others fail with ``exc``."""
        torch = self.torch
        fresh = [r for r in batch if not r.token_ids and not r.cancelled] if len(batch) > 1 else []
        for request in batch:
            if request not in fresh:
                request.emit(EngineError(f"engine failure: {exc}"))
        for request in fresh:
            request.activations.clear()
            try:
                with torch.inference_mode():
                    self._run_batch([request])
            except Exception as alone:
                log.exception("request failed alone")
                request.emit(EngineError(f"engine failure: {alone}"))

    def _take_batch(self) -> list[_Request]:
        """The oldest live request and up to max_batch - 1 later ones with the same prefix."""
        while self._waiting and self._waiting[0].cancelled:
            self._waiting.popleft()
        if not self._waiting:
            return []
        first = self._waiting.popleft()
        batch, others = [first], collections.deque()
        while self._waiting and len(batch) < self.max_batch:
            request = self._waiting.popleft()
            if request.cancelled:
                continue
            (batch if request.prompt.prefix is first.prompt.prefix else others).append(request)
        self._waiting.extendleft(reversed(others))
        return batch

    def _prefill_prefix(self, token_ids: tuple[int, ...]) -> Any:
        from transformers import DynamicCache

        ids = self.torch.tensor([token_ids], device=self.device)
        cache = DynamicCache(config=self.model.config)
        self.model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
        return cache

    def _run_batch(self, batch: list[_Request]) -> None:
        from transformers import DynamicCache

        torch = self.torch
        self.batch_sizes[len(batch)] += 1
        self._running = len(batch)
        prefix = batch[0].prompt.prefix
        reuse = (self.prefix_reuse and prefix is not None
                 and all(r.prompt.token_ids for r in batch))
        if reuse:
            cache = self.prefix_cache.copy_for(prefix, len(batch))
            past = len(prefix.token_ids)
            rows = [list(r.prompt.token_ids) for r in batch]
        else:
            cache = DynamicCache(config=self.model.config)
            past = 0
            rows = [r.prompt.all_token_ids for r in batch]
        width = max(len(row) for row in rows)
        input_ids = torch.tensor([[self.pad_id] * (width - len(row)) + row for row in rows],
                                 device=self.device)
        own = torch.tensor([[0] * (width - len(row)) + [1] * len(row) for row in rows],
                           device=self.device)
        mask = torch.cat([torch.ones(len(rows), past, dtype=own.dtype, device=self.device), own], 1)
        positions = (past + own.cumsum(1) - 1).clamp(min=0)

        # Receipts commit to the final hidden state of each decode position: a hook on the
        # model's body (its output is what `hidden_states[-1]` is, after the final norm) keeps
        # the last forward's, so no second pass over prompt + completion is needed.
        body_output: list[Any] = []

        def keep_body_output(_module: Any, _args: Any, output: Any) -> None:
            body_output[:] = [output[0]]  # last_hidden_state: [batch, positions, hidden]

        hook = None
        if any(r.params.capture_activations for r in batch):
            hook = self.model.base_model.register_forward_hook(keep_body_output)

        def last_states() -> Any:
            """The last position's states of the pass that just ran, left on the device and
            in the model's dtype (converted once per request, when it finishes)."""
            if hook is None:
                return None
            output = body_output.pop()
            # a view of a decode pass's [batch, 1, hidden] output; a copy out of a prefill's
            # [batch, prompt, hidden], which must not stay alive for the whole answer
            return output[:, -1] if output.shape[1] == 1 else output[:, -1].clone()

        live = list(batch)
        try:
            logits = self.model(input_ids=input_ids, attention_mask=mask, position_ids=positions,
                                past_key_values=cache, use_cache=True,
                                logits_to_keep=1).logits[:, -1]
            states = last_states()
            next_position = positions[:, -1:] + 1
            while live:
                chosen = []
                keep = []
                for row, request in enumerate(live):
                    try:
                        token = self._step(request, logits[row].float(),
                                           None if states is None else states[row])
                    except Exception as exc:  # this request's failure, not the batch's
                        log.exception("request failed while sampling")
                        request.emit(EngineError(f"engine failure: {exc}"))
                        token = None
                    if token is not None:
                        keep.append(row)
                        chosen.append(token)
                if len(keep) != len(live):
                    self._running = len(keep)
                    if not keep:
                        return
                    index = torch.tensor(keep, device=self.device)
                    cache.batch_select_indices(index)
                    mask, next_position = mask[index], next_position[index]
                    live = [live[row] for row in keep]
                mask = torch.cat([mask, mask.new_ones(len(live), 1)], 1)
                input_ids = torch.tensor(chosen, device=self.device)[:, None]
                logits = self.model(input_ids=input_ids, attention_mask=mask,
                                    position_ids=next_position, past_key_values=cache,
                                    use_cache=True).logits[:, -1]
                states = last_states()
                next_position = next_position + 1
        finally:
            if hook is not None:
                hook.remove()

    def _step(self, request: _Request, logits: Any, state: Any = None) -> int | None:
        """Sample one token for `request`, emit its delta; the token to feed back, or None if
        done. `state`: the final hidden state that gave `logits` (captured for receipts)."""
        torch = self.torch
        if request.cancelled:
            return None
        params = request.params
        if params.capture_activations:
            request.activations.append(state)
        token = self._sample(logits, params, len(request.token_ids), request)
        logprobs = None
        if params.logprobs:
            logp = torch.log_softmax(logits, -1)
            top = ()
            if params.top_logprobs:
                values, ids = logp.topk(params.top_logprobs)
                top = tuple((self.tokenizer.decode([i]), v)
                            for i, v in zip(ids.tolist(), values.tolist(), strict=True))
            logprobs = [TokenLogprob(token, self.tokenizer.decode([token]),
                                     float(logp[token]), top)]
        request.token_ids.append(token)
        finish: FinishReason | None = None
        is_eos = token in params.stop_token_ids or (not params.ignore_eos
                                                     and token in self.eos_ids)
        ids = request.token_ids[:-1] if is_eos else request.token_ids
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        cut = _find_stop(text, params.stop, request.sent_chars)
        if cut is not None:
            text, finish = text[:cut], "stop"
        elif is_eos:
            finish = "stop"
        elif (len(request.token_ids) >= params.max_tokens
              or len(request.prompt) + len(request.token_ids) >= self.max_model_len):
            finish = "length"
        if finish is None:
            # Hold back an incomplete UTF-8 sequence and anything that may begin a stop string.
            end = len(text) - _pending_stop(text, params.stop)
            while end > request.sent_chars and text[end - 1] == "\ufffd":
                end -= 1
        else:
            end = len(text)
        delta = text[request.sent_chars:end] if end > request.sent_chars else ""
        request.sent_chars = max(request.sent_chars, end)
        n = len(request.token_ids)
        activations = None
        if finish and params.capture_activations:  # one conversion and copy to the CPU
            activations = list(torch.stack(request.activations).to(torch.bfloat16).cpu())
        request.emit(GenerationDelta(delta, [token], logprobs, finish, len(request.prompt), n,
                                     activations))
        return None if finish else token

    def _sample(self, logits: Any, params: SamplingParams, position: int,
                request: _Request | None = None) -> int:
        """The sampler's token (gym-sampler/1, or /2 with knobs) for the completion token at
        ``position``, among those the request's grammar allows."""
        allowed = None
        if params.constraint is not None and request is not None:
            if request.mask is None:
                request.mask = self.grammars().mask(params.constraint.schema_json)
            allowed = request.mask.allowed().to(logits.device)
        knobs, past = params.knobs, None
        if knobs is not None and knobs.reads_history and request is not None:
            if request.past is None:
                request.past = History(logits.numel(), request.prompt.all_token_ids,
                                       logits.device)
            past = request.past.sync(request.token_ids)
        token = choose(logits, temperature=params.temperature, top_p=params.top_p,
                       seed=params.seed, request_key=params.request_key, position=position,
                       allowed=allowed, knobs=knobs, past=past).token
        if request is not None and request.mask is not None and not request.mask.accept(token):
            raise EngineError(f"the grammar refused its own token {token}")
        return token


def _find_stop(text: str, stops: tuple[str, ...], sent_chars: int) -> int | None:
    """Index of the earliest stop string in `text` that ends after what was already sent."""
    hits = []
    for stop in stops:
        index = text.find(stop, max(0, sent_chars - len(stop) + 1))
        if index >= 0:
            hits.append(index)
    return min(hits) if hits else None


def _pending_stop(text: str, stops: tuple[str, ...]) -> int:
    """Length of the longest tail of `text` that is a proper start of some stop string."""
    longest = 0
    for stop in stops:
        for k in range(min(len(stop) - 1, len(text)), longest, -1):
            if text.endswith(stop[:k]):
                longest = k
                break
    return longest
