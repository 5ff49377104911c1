"""The logic behind the node's OpenAI-compatible routes (the routers in `server.py` stay thin).

One request: check the model name and the seed, take the library snapshot *once* (the request keeps
it even if the library is swapped while it runs), inject it (`inference_node.injection`) and
tokenize on the one tokenizer thread (off the event loop), check that prompt and `max_tokens` fit
the context, admit it (429 when `max_queue` requests are waiting: admitted ones not yet handed to
the engine, streamed or not, plus the engine's own queue), run the engine, and shape the answer
as OpenAI does. Every answer names the library it was prompted with in `system_fingerprint`
(`library-<version>`) and in the `x-gym-library-*` headers.

Sampling: every request is run with a seed (the request's, 0 … 2**53 - 1, or a random 52-bit
one the node draws) and its normalized request's digest as the key of the verifiable sampler
(`inference_node.normalized_request`, `inference_node.sampling`), signed or not.

`n` choices (1 … `MAX_N`): choice i is sampled with seed `seed + i` as its own engine request
(the engine batches them), with its own normalized request (the one with seed `seed + i`), so
each verifies as a one-choice answer would. The choices share the prompt.

Receipts (`inference_node.receipts`), when the node has a `ReceiptSigner`: a non-streaming answer
gets a signed v2 receipt binding the library snapshot, the normalized request, the completion's
text and token ids, the sampling parameters (the seed included, so the answer can be
reproduced), the sampler, the finish reason and a TOPLOC activation commitment. The receipt is appended to the node's
`ReceiptLog` and returned in the body (`receipt`, plus `receipt_evidence`: the completion token
ids and the EIP-712 domain a verifier needs) and as `X-Gym-Receipt` (base64url of its canonical
bytes; left out above `MAX_RECEIPT_HEADER`, `X-Gym-Receipt-Cid` is always there). A streamed
answer's headers leave before its last token exists, so its receipt rides on the last chunk
before `data: [DONE]` (the finish chunk, or the usage chunk when `stream_options.include_usage`
asks for one), as the same two fields `receipt` and `receipt_evidence`; the SDKs keep unknown
fields (the `openai` SDK in `chunk.model_extra`). It verifies as the non-streamed one does.
With `n > 1` each choice has its own receipt: the two fields sit in each choice object (and in
each choice's last chunk when streamed), never at the top, and there is no `X-Gym-Receipt`.
With a `BundleStore` (`inference_node.bundle_store`) the signing thread also keeps what a
verifier needs beside the receipt, and `receipt_bundle(cid)` serves the whole bundle.

Tools (`inference_node.tools`): a forced call (`tool_choice` "required" or a named function) is
decoded under its call schema and answered as `message.tool_calls` with `finish_reason`
"tool_calls" when its JSON completed (the text as `content` otherwise, "length"); its
`receipt_evidence` adds `completion_text`, the model's JSON text the receipt signs; streamed, its
text is held back and the whole `tool_calls` delta rides on the choice's finish chunk.
`tool_choice` "auto" (a chat template that renders tools: the model's own, or the one
`--chat-template` or `--enable-auto-tool-choice` gave the node, `inference_node.chat_templates`;
a 400 otherwise) is decoded under the text-or-calls grammar: an answer that ends with `<tool_call>` blocks is `tool_calls` with
`content` the text before them (null if none) and "tool_calls"; streamed, text is sent as it
comes up to where a `<tool_call>` may begin (a tail that could start one waits), and the calls
ride on the finish chunk (or the held text, when no complete call came).

Errors are `APIError`s, rendered by the server as `{"error": {message, type, param, code}}`.
A failure after a stream has started cannot change the HTTP status any more; it is sent as one
`data: {"error": …}` event before `data: [DONE]`, as vLLM does.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import secrets
import time
from collections.abc import AsyncIterator, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from inference_node.bundle_access import AccessError, BundleAccess
from inference_node.bundle_store import MAX_CID_CHARS, BundleStore
from inference_node.engine import (
    Engine,
    EngineError,
    Generation,
    GenerationDelta,
    SamplingParams,
    TokenLogprob,
    collect_generation,
    new_seed,
)
from inference_node.errors import InferenceNodeError
from inference_node.generation_checks import min_tokens_stop_ids
from inference_node.injection import InjectedPrompt, LibraryInjector
from inference_node.library import LibrarySnapshot, LibrarySource
from inference_node.library_choice import LibraryChoiceError, LibraryChoices
from inference_node.metrics import NodeMetrics
from inference_node.normalized_request import constraint_of, normalized_request, request_key
from inference_node.protocol import (
    NORMALIZED_KEYS,
    ChatChoice,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatMessageOut,
    ChoiceLogprobs,
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
    CompletionResponse,
    DeltaMessage,
    DeltaToolCall,
    ErrorDetail,
    ErrorResponse,
    ModelCard,
    ModelList,
    ToolCall,
    UsageInfo,
    new_id,
    now,
)
from inference_node.protocol import TokenLogprob as ApiTokenLogprob
from inference_node.protocol import TopLogprob as ApiTopLogprob
from inference_node.receipt_log import ReceiptLog
from inference_node.receipts import (
    ReceiptDomain,
    ReceiptSigner,
    bundle_json,
    library_ref,
    parse_receipt,
    receipt_header,
)
from inference_node.response_format import FormatError
from inference_node.settings import NodeSettings
from inference_node.tools import (
    answer_of,
    chat_messages,
    forces_call,
    may_call,
    sendable_length,
    template_has_tools,
)
from ledger.entries import GYM_SAMPLER, ReceiptEntry, encode_entry, entry_cid
from ledger.errors import LedgerError

# Clients cap response headers (h11: 16 KiB in all); the commitment grows by ~180 characters
# per 32 completion tokens, so a very long answer carries its receipt in the body only.
MAX_RECEIPT_HEADER = 8 * 1024
SEED_LIMIT = 2**53 - 1  # the largest seed: receipts are RFC 8785 JSON, whose integers stop here

StreamChunk = ChatCompletionChunk | CompletionResponse  # one SSE event's body


class APIError(InferenceNodeError):
    """An error answer: HTTP status plus OpenAI's error fields."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = ErrorResponse(error=ErrorDetail(message=message, type=type, param=param,
                                                    code=code))


@dataclass
class Sample:
    """One choice of an answer: its own normalized request (the seed `seed + index`), engine
    request and receipt."""

    index: int
    params: SamplingParams
    normalized: dict  # the normalized request (`inference_node.normalized_request`)
    injected: InjectedPrompt | None = None  # its prompt, when a request has several
    receipt: ReceiptEntry | None = None  # set once the answer is signed
    receipt_json: dict | None = None  # its canonical JSON
    evidence: dict | None = None  # what a verifier needs beside the receipt

    def receipt_fields(self) -> dict:
        """`receipt` and `receipt_evidence` when the choice is signed (else nothing)."""
        if self.receipt is None:
            return {}
        return {"receipt": self.receipt_json, "receipt_evidence": self.evidence}


@dataclass
class Prepared:
    injected: InjectedPrompt
    samples: list[Sample]  # one per choice (`n`)
    started: float
    # ends the request's admission (it then waits in the engine's queue, or is gone)
    release: Callable[[], None] | None = None

    @property
    def params(self) -> SamplingParams:
        return self.samples[0].params

    def prompt_of(self, sample: Sample) -> InjectedPrompt:
        """The prompt ``sample`` answers (a list ``prompt`` gives each its own)."""
        return sample.injected or self.injected

    @property
    def normalized(self) -> dict:
        return self.samples[0].normalized

    @property
    def receipt(self) -> ReceiptEntry | None:
        return self.samples[0].receipt if len(self.samples) == 1 else None

    def handed_over(self) -> None:
        """The request left the node's admission count (idempotent)."""
        release, self.release = self.release, None
        if release is not None:
            release()

    @property
    def snapshot(self) -> LibrarySnapshot:
        return self.injected.snapshot

    def headers(self) -> dict[str, str]:
        s = self.snapshot
        headers = {"x-gym-library-version": s.version, "x-gym-library-size": str(s.size),
                   "x-gym-library-root": s.root}
        if self.receipt is not None:  # one choice: its receipt (n > 1: in each choice)
            headers["x-gym-receipt-cid"] = self.samples[0].evidence["receipt_cid"]
            if "bundle_token" in self.samples[0].evidence:
                headers["x-gym-bundle-token"] = self.samples[0].evidence["bundle_token"]
            header = receipt_header(self.receipt)
            if len(header) <= MAX_RECEIPT_HEADER:
                headers["x-gym-receipt"] = header
        return headers

    def body(self, response) -> dict:
        """The response's JSON body with the receipts: at the top for one choice, in each
        choice object for several."""
        body = response.model_dump(mode="json")
        if len(self.samples) == 1:
            return {**body, **self.samples[0].receipt_fields()}
        for choice, sample in zip(body["choices"], self.samples, strict=True):
            choice.update(sample.receipt_fields())
        return body

    def chunk(self, chunk, signed: Sample | None = None) -> str:
        """One SSE event of `chunk`; `signed`: the sample whose receipt it carries (its last
        chunk): at the top for one choice, in the choice object for several."""
        if signed is None or signed.receipt is None:
            return sse(chunk.model_dump_json(exclude_none=True))
        body = chunk.model_dump(mode="json", exclude_none=True)
        if len(self.samples) == 1:
            body.update(signed.receipt_fields())
        else:
            body["choices"][0].update(signed.receipt_fields())
        return sse(json.dumps(body))


def fingerprint(snapshot: LibrarySnapshot) -> str:
    return f"library-{snapshot.version}"


def sse(payload: str) -> str:
    return f"data: {payload}\n\n"


def max_token_bytes(tokenizer: Any) -> int:
    """At least the UTF-8 bytes of text any one token of ``tokenizer`` stands for: the longest
    vocabulary entry as UTF-8 (byte-level BPE writes each byte as one character of at most 2
    bytes, SentencePiece a space as 3: an overestimate, never an underestimate). A text of B
    bytes is therefore at least B / this many tokens."""
    vocab = tokenizer.get_vocab()
    return max([len(token.encode("utf-8", "surrogatepass")) for token in vocab] or [1]) or 1


def _string_bytes(value: Any) -> int:
    """UTF-8 bytes of the strings in ``value`` (dict values, list items), as the chat template
    renders them; the request's JSON depth is already bounded."""
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogatepass"))
    if isinstance(value, dict):
        return sum(_string_bytes(v) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(_string_bytes(v) for v in value)
    return 0


# The ``X-Gym-Library`` header of the request being prepared (``inference_node.library_choice``),
# set by the route for the request's task.
REQUESTED_LIBRARY: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "gym_requested_library", default=None)


class OpenAIServing:
    def __init__(self, engine: Engine, library_source: LibrarySource,
                 settings: NodeSettings, receipts: ReceiptSigner | None = None,
                 receipt_log: ReceiptLog | None = None, *, adapter_cid: str | None = None,
                 bundles: BundleStore | None = None,
                 bundle_access: BundleAccess | None = None,
                 library_choices: LibraryChoices | None = None) -> None:
        self.engine = engine
        # which library a request may name (`X-Gym-Library`): without a chain, 'none' only
        self.library_choices = library_choices or LibraryChoices(library_source)
        # verifying a chosen log reads the chain and content store: its own threads, so that
        # tokenizing other requests never waits on it
        self._choosing = ThreadPoolExecutor(2, thread_name_prefix="gym-library-choice")
        self.receipts, self.receipt_log, self.bundles = receipts, receipt_log, bundles
        if bundles is not None and bundle_access is None:  # tokens for this process's life
            bundle_access = BundleAccess(secrets.token_bytes(32), is_verifier=None)
        self.bundle_access = bundle_access
        self.adapter_cid = adapter_cid
        self.library_source = library_source
        self.settings = settings
        self.model_name = settings.served_model_name or engine.model_name
        self.injector = LibraryInjector(engine.tokenizer)
        # no token stands for more bytes of text than this: a longer prompt cannot fit
        self.max_token_bytes = max_token_bytes(engine.tokenizer)
        # One thread builds and tokenizes prompts: off the event loop, and never two at once (a
        # Hugging Face fast tokenizer is not safe to call from several threads).
        self._tokenizing = ThreadPoolExecutor(1, thread_name_prefix="gym-tokenize")
        self._admitted = 0  # admitted requests not yet handed to the engine
        cache = getattr(engine, "prefix_cache", None)
        self.metrics = NodeMetrics(
            queue_depth=self.queue_depth,
            library_size=lambda: len(library_source.current().experiences),
            prefix_computations=lambda: cache.computations if cache is not None else 0,
            running=engine.running)

    # ---------------------------------------------------------------- models and health

    def models(self) -> ModelList:
        return ModelList(data=[ModelCard(id=self.model_name)])

    def health(self) -> dict:
        snapshot, status = self.library_source.current(), self.library_source.status()
        failure = self.engine.failure()
        return {
            "status": "failed" if failure else "degraded" if status.error else "ok",
            "engine_error": failure,
            "model": self.model_name,
            "engine": getattr(self.engine, "kind", type(self.engine).__name__),
            "adapter": self.adapter_cid,
            "queue_depth": self.queue_depth(),
            "library": {"version": snapshot.version, "log_id": snapshot.log_id,
                        "size": snapshot.size, "root": snapshot.root,
                        "experiences": len(snapshot.experiences),
                        "last_sync": status.last_sync, "error": status.error},
            "receipts": None if self.receipts is None else {
                "node": self.receipts.address, "model_digest": self.receipts.model_digest,
                "chat_template": self.receipts.chat_template,
                "domain": self.receipts.domain.to_json(),
                "log": self.receipt_log.status() if self.receipt_log else None},
        }

    # ---------------------------------------------------------------- shared checks

    def _check_queue(self) -> None:
        if self.queue_depth() >= self.settings.max_queue:
            raise APIError(429, f"The request queue is full ({self.settings.max_queue} waiting); "
                           "retry later.", type="rate_limit_error", code="queue_full")

    def queue_depth(self) -> int:
        """Requests waiting: admitted but not yet handed to the engine, plus the engine's own
        queue (what `--max-queue` bounds, streamed requests included)."""
        return self._admitted + self.engine.queue_depth()

    def check_fits(self, route: str, body: Any) -> None:
        """Refuse (400, ``context_length_exceeded``) a request body, as parsed JSON and before
        it is validated, whose prompt text (chat: the messages' contents and the tools;
        completion: the prompt) has more bytes than the context could hold at this
        tokenizer's longest token: such a body never costs validation or tokenization."""
        if not isinstance(body, dict):
            return  # validation refuses it
        if route == "chat":
            messages = body.get("messages")
            text_bytes = _string_bytes(body.get("tools")) + (sum(
                _string_bytes(m.get("content")) for m in messages if isinstance(m, dict))
                if isinstance(messages, list) else 0)
            param = "messages"
        else:
            text_bytes, param = _string_bytes(body.get("prompt")), "prompt"
        self._check_text_bytes(text_bytes, param)

    def _check_text_bytes(self, text_bytes: int, param: str) -> None:
        context = self.engine.max_model_len
        if text_bytes > context * self.max_token_bytes:
            # at least text_bytes / max_token_bytes tokens: refused without tokenizing, so a
            # prompt of megabytes never holds the tokenizer thread other requests wait for
            raise APIError(400, f"The {param} ({text_bytes} bytes of text) cannot fit the "
                           f"model's {context}-token context: no token of its tokenizer stands "
                           f"for more than {self.max_token_bytes} bytes.", param=param,
                           code="context_length_exceeded")

    async def _requested_snapshot(self) -> LibrarySnapshot:
        """The library snapshot the request's ``X-Gym-Library`` names (the node's own when it
        names none); ``APIError`` with the choice's status and code when it is refused."""
        header = REQUESTED_LIBRARY.get()
        try:
            if header is None:
                return self.library_choices.snapshot(None)
            return await asyncio.get_running_loop().run_in_executor(
                self._choosing, self.library_choices.snapshot, header)
        except LibraryChoiceError as exc:
            raise APIError(exc.status, str(exc), param="X-Gym-Library", code=exc.code) from None

    async def _prepare(self, request: ChatCompletionRequest | CompletionRequest,
                       injected_for: Callable[[LibrarySnapshot], list[InjectedPrompt]],
                       max_tokens: tuple[str, int | None], logprobs: bool, top_logprobs: int,
                       prompt_param: str, route: str, text_bytes: int) -> Prepared:
        """Checks, then the prompt built and tokenized on the tokenizer thread (a large prompt
        must not stall the event loop), then admission: the request counts as waiting from
        here until `Prepared.handed_over`, when the engine's queue takes over."""
        started = time.perf_counter()
        if request.model != self.model_name:
            raise APIError(404, f"The model `{request.model}` does not exist; this node serves "
                           f"`{self.model_name}`.", param="model", code="model_not_found")
        # a list prompt (completions): choice i answers prompt i // request.n
        texts = request.prompts() if isinstance(request, CompletionRequest) else [None]
        seed, n = request.seed, request.n * len(texts)
        if seed is not None and not 0 <= seed <= SEED_LIMIT - (n - 1):
            raise APIError(400, f"The seed keys this node's verifiable sampler and its receipts "
                           f"record it: choice i is sampled with seed + i, which must be "
                           f"between 0 and {SEED_LIMIT} (2**53 - 1).",
                           param="seed", code="invalid_value")
        if seed is None:  # the receipt names the seed, so the answer can be reproduced
            seed = new_seed()
        self._check_queue()  # cheap refusal before tokenizing
        context = self.engine.max_model_len
        self._check_text_bytes(text_bytes, prompt_param)
        checked = time.perf_counter()
        snapshot = await self._requested_snapshot()
        chosen = time.perf_counter()
        prompts = await asyncio.get_running_loop().run_in_executor(
            self._tokenizing, injected_for, snapshot)
        tokenized = time.perf_counter()
        limit_param, asked = max_tokens
        limits = []
        for injected in prompts:
            prompt_len = len(injected.prompt)
            room = context - prompt_len
            if room <= 0:
                raise APIError(400, f"The prompt ({prompt_len} tokens with the library) leaves "
                               f"no room in the model's {context}-token context.",
                               param=prompt_param, code="context_length_exceeded")
            if asked is not None and asked > room:
                raise APIError(400, f"This model's maximum context length is {context} tokens. "
                               f"However, you requested {prompt_len + asked} tokens "
                               f"({prompt_len} in the {prompt_param} with the library, {asked} "
                               f"in the completion). Please reduce the length of the "
                               f"{prompt_param} or completion.", param=limit_param,
                               code="context_length_exceeded")
            limits.append(min(asked or self.settings.default_max_tokens, room))
        normalized = normalized_request(route, request, max_tokens=limits[0], seed=seed,
                                        prompt=texts[0])
        constraint = constraint_of(normalized)
        if constraint is not None:  # compiled once per schema, off the event loop
            try:
                await asyncio.get_running_loop().run_in_executor(
                    self._tokenizing, self.engine.check_constraint, constraint)
            except FormatError as exc:
                raise APIError(400, str(exc), param=exc.param, code="unsupported_value"
                               ) from None
        knobs = self._knobs(normalized)
        samples = []
        # choice i (prompt i // request.n): seed + i, its own normalized request and key
        for index in range(n):
            which = index // request.n
            limit = limits[which]
            if index:
                normalized = normalized_request(route, request, max_tokens=limit,
                                                seed=seed + index, prompt=texts[which])
            params = SamplingParams(max_tokens=limit, temperature=request.temperature,
                                    top_p=request.top_p, seed=seed + index,
                                    request_key=request_key(normalized),
                                    stop=tuple(request.stop_list()), constraint=constraint,
                                    knobs=knobs, ignore_eos=request.ignore_eos,
                                    stop_token_ids=tuple(request.stop_token_ids or ()),
                                    logprobs=logprobs, top_logprobs=top_logprobs,
                                    capture_activations=self.receipts is not None)
            samples.append(Sample(index, params, normalized,
                                  prompts[which] if len(prompts) > 1 else None))
        self._check_queue()  # no await from here until the engine (or the stream) takes it
        self._admitted += 1
        done = time.perf_counter()
        for stage, seconds in (("library", chosen - checked), ("tokenize", tokenized - chosen),
                               ("normalize", done - tokenized), ("prepare", done - started)):
            self.metrics.stages.labels(stage).observe(seconds)
        return Prepared(prompts[0], samples, started, release=self._release_admission)

    def _knobs(self, normalized: dict) -> Any:
        """The request's gym-sampler/2 knobs (None when all neutral); a 400 naming a token id
        outside the model's vocabulary."""
        from inference_node.sampler_knobs import from_normalized

        if not any(name in normalized for name in NORMALIZED_KEYS):
            return None  # gym-sampler/1
        vocab = self.engine.vocab_size
        for name, ids in (("logit_bias", [int(t) for t in normalized.get("logit_bias", {})]),
                          ("stop_token_ids", normalized.get("stop_token_ids", []))):
            bad = [t for t in ids if t >= vocab]
            if bad:
                raise APIError(400, f"{name} names token {bad[0]}, outside the model's "
                               f"vocabulary of {vocab}", param=name, code="invalid_value")
        if normalized.get("min_tokens", 0) > normalized["max_tokens"]:
            raise APIError(400, f"min_tokens ({normalized['min_tokens']}) is more than the "
                           f"completion's limit ({normalized['max_tokens']} tokens here)",
                           param="min_tokens", code="invalid_value")
        knobs = from_normalized(normalized, min_tokens_stop_ids(self.engine.eos_ids,
                                                                self.engine.tokenizer))
        return None if knobs.neutral else knobs

    def _release_admission(self) -> None:
        self._admitted -= 1

    async def _generate(self, route: str, prepared: Prepared, request_json: dict | None
                        ) -> list[Generation]:
        """Every choice's generation, signed; the choices run as separate engine requests at
        once (the engine batches them), and one failing cancels the others."""
        if len(prepared.samples) == 1:
            return [await self._generate_one(route, prepared, prepared.samples[0],
                                             request_json)]
        try:
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(self._generate_one(route, prepared, sample,
                                                              request_json))
                         for sample in prepared.samples]
        except* Exception as failed:  # the first failure, as one choice raises it  # noqa: BLE001
            raise failed.exceptions[0] from None
        return [task.result() for task in tasks]

    async def _generate_one(self, route: str, prepared: Prepared, sample: Sample,
                            request_json: dict | None) -> Generation:
        try:
            generation = await collect_generation(self._deltas(route, prepared, sample),
                                                  sample.params.logprobs)
        except EngineError as exc:
            raise APIError(500, str(exc), type="server_error", code="engine_error") from exc
        if generation is None:
            raise APIError(500, "the engine ended the request without a finish reason",
                           type="server_error", code="engine_error")
        await self.sign(prepared, sample, request_json, generation)
        return generation

    async def sign(self, prepared: Prepared, sample: Sample, request_json: dict | None,
                   result: Generation) -> None:
        """Issue, log and attach the receipt of ``result`` for choice ``sample`` (a no-op
        without a signer); ``APIError`` 500 when signing fails."""
        if self.receipts is None or request_json is None:
            return
        snapshot, params = prepared.snapshot, sample.params

        timings: dict[str, float] = {}

        def issue() -> tuple[ReceiptEntry, bytes, str]:
            receipt = self.receipts.issue(
                library=library_ref(snapshot.log_id, snapshot.size, snapshot.root),
                experience_ids=snapshot.experience_ids, request_json=sample.normalized,
                prompt_ids=prepared.prompt_of(sample).prompt.all_token_ids, text=result.text,
                completion_ids=result.token_ids, temperature=params.temperature,
                top_p=params.top_p, max_tokens=params.max_tokens, seed=params.seed,
                activations=result.activations, finish_reason=result.finish_reason,
                sampler=GYM_SAMPLER if params.knobs is None else params.knobs.sampler,
                timings=timings)
            data = encode_entry(receipt)
            cid = entry_cid(data)
            if self.receipt_log is not None:  # appended in the background, in batches
                began = time.perf_counter()
                self.receipt_log.submit_encoded(cid, data)
                timings["receipt_log"] = time.perf_counter() - began
            if self.bundles is not None:  # what a verifier needs beside the receipt
                began = time.perf_counter()
                self.bundles.put(cid, receipt=data, domain=self.receipts.domain.to_json(),
                                 request=sample.normalized, text=result.text,
                                 token_ids=result.token_ids)
                timings["bundle"] = time.perf_counter() - began
            return receipt, data, cid

        began = time.perf_counter()
        try:
            receipt, data, cid = await asyncio.to_thread(issue)
        except (LedgerError, ValueError, RuntimeError) as exc:
            raise APIError(500, f"cannot sign the receipt: {exc}", type="server_error",
                           code="receipt_error") from exc
        timings["receipt"] = time.perf_counter() - began
        for stage, seconds in timings.items():
            self.metrics.stages.labels(stage).observe(seconds)
        sample.receipt, sample.receipt_json = receipt, json.loads(data)
        sample.evidence = {"receipt_cid": cid,
                           "completion_token_ids": result.token_ids,
                           "domain": self.receipts.domain.to_json()}
        if self.bundles is not None:  # the client's right to read the bundle back
            sample.evidence["bundle_token"] = self.bundle_access.token(cid)
        if may_call(sample.normalized):  # the answer may show tool_calls, not the signed text
            sample.evidence["completion_text"] = result.text

    def receipt_bundle(self, cid: str, headers: Mapping[str, str]) -> dict:
        """The full bundle of receipt ``cid`` from the bundle store, with its inclusion proof
        when the receipt log has one (blocking: run it off the event loop), for a reader whose
        ``headers`` show the right to it (``inference_node.bundle_access``: 401/403
        otherwise); ``APIError`` 404 when the node keeps no bundles or not this one."""
        if self.bundles is None:
            raise APIError(404, "This node keeps no receipt bundles (it runs with "
                           "--bundle-retention 0 or signs no receipts).", code="not_found")
        try:
            self.bundle_access.check(cid, headers)
        except AccessError as exc:
            code = {401: "unauthorized", 403: "forbidden"}.get(exc.status, "busy")
            raise APIError(exc.status, str(exc), param="cid", code=code) from None
        stored = self.bundles.get(cid)
        if stored is None:
            raise APIError(404, f"No bundle for receipt {cid[:MAX_CID_CHARS]!r}: unknown, or no "
                           f"longer retained (this node keeps bundles "
                           f"{self.bundles.retention_s:g} s).", param="cid",
                           code="receipt_not_found")
        inclusion = None
        if self.receipt_log is not None:
            try:
                inclusion = self.receipt_log.proof(cid)
            except LedgerError:  # not appended yet, or the store fails: the bundle still helps
                inclusion = None
        return bundle_json(parse_receipt(stored.receipt), ReceiptDomain.from_json(stored.domain),
                           route=stored.request["route"], request=stored.request,
                           text=stored.text, completion_token_ids=stored.token_ids,
                           inclusion=inclusion)

    def _count_tokens(self, prompt_tokens: int, completion_tokens: int) -> None:
        self.metrics.prompt_tokens.inc(prompt_tokens)
        self.metrics.generation_tokens.inc(completion_tokens)

    async def _deltas(self, route: str, prepared: Prepared, sample: Sample):
        """One choice's engine deltas with TTFT, latency and token metrics recorded on the
        way."""
        first = True
        deltas = self.engine.stream(prepared.prompt_of(sample).prompt, sample.params)
        # The engine queues the request in the first step of `stream`, before it awaits
        # anything: handing the admission over here leaves no moment uncounted.
        prepared.handed_over()
        async for delta in deltas:
            if first:
                self.metrics.ttft.labels(route).observe(time.perf_counter() - prepared.started)
                first = False
            if delta.finish_reason is not None:
                self.metrics.latency.labels(route).observe(time.perf_counter() - prepared.started)
                self._count_tokens(delta.prompt_tokens, delta.completion_tokens)
            yield delta

    # ---------------------------------------------------------------- chat

    async def prepare_chat(self, request: ChatCompletionRequest) -> Prepared:
        has_tools = template_has_tools(self.engine.tokenizer)
        if request.tool_choice == "auto" and not has_tools:
            raise APIError(400, "tool_choice 'auto' (the default when tools are given) is not "
                           f"supported for `{self.model_name}`: its chat template does not "
                           "render tools (the node's operator can give it one: gym node serve "
                           "--enable-auto-tool-choice --tool-call-parser hermes, with "
                           "--chat-template FILE for a model the node ships none for); use "
                           "tool_choice 'required' or a named function ({\"type\": "
                           "\"function\", \"function\": {\"name\": …}}), or 'none'.",
                           param="tool_choice", code="unsupported_value")
        messages, tools = chat_messages(normalized_request("chat", request, max_tokens=1, seed=0),
                                        has_tools)
        limit = (("max_completion_tokens", request.max_completion_tokens)
                 if request.max_completion_tokens is not None
                 else ("max_tokens", request.max_tokens))
        text_bytes = sum(_string_bytes(m.get("content")) for m in messages) + _string_bytes(tools)
        return await self._prepare(
            request, lambda snapshot: [self.injector.chat(messages, snapshot, tools)], limit,
            request.logprobs, (request.top_logprobs or 0) if request.logprobs else 0,
            "messages", "chat", text_bytes)

    async def chat(self, request: ChatCompletionRequest, prepared: Prepared,
                   request_json: dict | None = None) -> ChatCompletionResponse:
        results = await self._generate("chat", prepared, request_json)
        choices = []
        for i, result in enumerate(results):
            content, calls = _answer(prepared.normalized, result.text, result.finish_reason)
            choices.append(ChatChoice(
                index=i, message=ChatMessageOut(content=content, tool_calls=calls),
                logprobs=_chat_logprobs(result.logprobs),
                # calls cut by the token limit keep "length"
                finish_reason="tool_calls" if calls and result.finish_reason == "stop"
                else result.finish_reason))
        return ChatCompletionResponse(
            model=self.model_name, system_fingerprint=fingerprint(prepared.snapshot),
            choices=choices, usage=_usage_of(results))

    async def _signed_deltas(self, route: str, prepared: Prepared, sample: Sample,
                             request_json: dict | None):
        """`_deltas`, collecting the answer; the finish delta is yielded once it is signed."""
        text, token_ids = [], []
        async for delta in self._deltas(route, prepared, sample):
            text.append(delta.text)
            token_ids.extend(delta.token_ids)
            if delta.finish_reason is not None:
                await self.sign(prepared, sample, request_json, Generation(
                    "".join(text), token_ids, None, delta.finish_reason, delta.prompt_tokens,
                    delta.completion_tokens, delta.activations))
            yield delta

    async def chat_stream(self, request: ChatCompletionRequest, prepared: Prepared,
                          request_json: dict | None = None) -> AsyncIterator[str]:
        chunk = ChatCompletionChunk(id=new_id("chatcmpl"), created=now(), model=self.model_name,
                                    system_fingerprint=fingerprint(prepared.snapshot),
                                    choices=[ChatChunkChoice(index=i, delta=DeltaMessage(
                                        role="assistant", content=""))
                                        for i in range(len(prepared.samples))])
        yield sse(chunk.model_dump_json(exclude_none=True))

        forced = forces_call(prepared.normalized)
        auto = not forced and may_call(prepared.normalized)
        texts = [""] * len(prepared.samples)  # each choice's text so far (forced or auto)
        sent = [0] * len(prepared.samples)  # auto: how much of it went out as content

        def chunk_of(index: int, delta: GenerationDelta) -> ChatCompletionChunk:
            message, finish = DeltaMessage(content=delta.text), delta.finish_reason
            if forced or auto:  # calls are sent whole with the finish reason
                texts[index] += delta.text
                text, message = texts[index], DeltaMessage()
                if finish is None:  # forced: nothing yet; auto: the text up to a call
                    upto = sendable_length(text) if auto else 0
                else:
                    content, calls = _answer(prepared.normalized, text, finish)
                    upto = len(text)
                    if calls:
                        message.tool_calls = [DeltaToolCall(index=j, **c.model_dump())
                                              for j, c in enumerate(calls)]
                        finish = "tool_calls" if finish == "stop" else finish
                        upto = len(content or "")
                if upto > sent[index]:
                    message.content = text[sent[index]:upto]
                    sent[index] = upto
            chunk.choices = [ChatChunkChoice(index=index, delta=message,
                                             logprobs=_chat_logprobs(delta.logprobs),
                                             finish_reason=finish)]
            return chunk

        def usage_chunk(usage: UsageInfo) -> ChatCompletionChunk:
            chunk.choices, chunk.usage = [], usage
            return chunk

        async for event in self._events("chat", request, prepared, request_json, chunk_of,
                                        usage_chunk):
            yield event

    async def _events(self, route: str, request: ChatCompletionRequest | CompletionRequest,
                      prepared: Prepared, request_json: dict | None,
                      chunk_of: Callable[[int, GenerationDelta], StreamChunk],
                      usage_chunk: Callable[[UsageInfo], StreamChunk]) -> AsyncIterator[str]:
        """The SSE events of a streamed answer: a chunk per delta that carries text, logprobs or
        the finish reason (each choice's last one signed; with one choice, the usage chunk
        instead when one follows), the usage chunk (summed over the choices) when
        `stream_options.include_usage` asks for it, then `[DONE]`. The choices' chunks
        interleave as the engine produces them. An engine or API error mid-stream becomes an
        error event."""
        include_usage = bool(request.stream_options and request.stream_options.include_usage)
        single = len(prepared.samples) == 1
        finished: dict[int, GenerationDelta] = {}
        try:
            async for sample, delta in _merged(
                    [(sample, self._signed_deltas(route, prepared, sample, request_json))
                     for sample in prepared.samples]):
                if not delta.text and delta.finish_reason is None and not delta.logprobs:
                    continue
                last = delta.finish_reason is not None
                signed = last and not (single and include_usage)
                yield prepared.chunk(chunk_of(sample.index, delta),
                                     signed=sample if signed else None)
                if last:
                    finished[sample.index] = delta
        except (EngineError, APIError) as exc:
            yield sse(_stream_error(exc))
        else:
            if include_usage and len(finished) == len(prepared.samples):
                usage = _usage_of([finished[i] for i in sorted(finished)],
                                  per_prompt=request.n if hasattr(request, "prompts") else None)
                yield prepared.chunk(usage_chunk(usage),
                                     signed=prepared.samples[0] if single else None)
        yield sse("[DONE]")

    # ---------------------------------------------------------------- completions

    async def prepare_completion(self, request: CompletionRequest) -> Prepared:
        texts = request.prompts()  # a list prompt: choice i answers prompt i // n
        return await self._prepare(
            request, lambda snapshot: [self.injector.completion(t, snapshot) for t in texts],
            ("max_tokens", request.max_tokens), request.logprobs is not None,
            request.logprobs or 0, "prompt", "completion", sum(len(t.encode()) for t in texts))

    async def completion(self, request: CompletionRequest, prepared: Prepared,
                         request_json: dict | None = None) -> CompletionResponse:
        results = await self._generate("completions", prepared, request_json)
        texts = request.prompts()
        choices = []
        for i, result in enumerate(results):
            echo = texts[i // request.n] if request.echo else ""
            choices.append(CompletionChoice(
                index=i, text=echo + result.text,
                logprobs=_completion_logprobs(result.logprobs, len(echo)),
                finish_reason=result.finish_reason))
        # each prompt's tokens counted once, whatever its n
        return CompletionResponse(
            model=self.model_name, system_fingerprint=fingerprint(prepared.snapshot),
            choices=choices, usage=_usage_of(results, per_prompt=request.n))

    async def completion_stream(self, request: CompletionRequest, prepared: Prepared,
                                request_json: dict | None = None) -> AsyncIterator[str]:
        response_id, created = new_id("cmpl"), now()
        offsets = [0] * len(prepared.samples)  # each choice's text offset so far

        def chunk_of(index: int, delta: GenerationDelta) -> CompletionResponse:
            chunk = CompletionResponse(
                id=response_id, created=created, model=self.model_name,
                system_fingerprint=fingerprint(prepared.snapshot),
                choices=[CompletionChoice(index=index, text=delta.text,
                                          logprobs=_completion_logprobs(delta.logprobs,
                                                                        offsets[index]),
                                          finish_reason=delta.finish_reason)])
            offsets[index] += sum(len(lp.token) for lp in delta.logprobs or ())
            return chunk

        def usage_chunk(usage: UsageInfo) -> CompletionResponse:
            return CompletionResponse(id=response_id, created=created, model=self.model_name,
                                      choices=[], usage=usage)

        async for event in self._events("completions", request, prepared, request_json,
                                        chunk_of, usage_chunk):
            yield event


async def _merged(streams: list[tuple[Sample, AsyncIterator[GenerationDelta]]]
                  ) -> AsyncIterator[tuple[Sample, GenerationDelta]]:
    """The deltas of several choices as they come; an error in one ends them all. A single
    stream is passed through (no task in between)."""
    if len(streams) == 1:
        sample, stream = streams[0]
        async for delta in stream:
            yield sample, delta
        return
    queue: asyncio.Queue = asyncio.Queue()
    done = object()

    async def pump(sample: Sample, stream: AsyncIterator[GenerationDelta]) -> None:
        try:
            async for delta in stream:
                await queue.put((sample, delta))
        except Exception as exc:  # handed to the consumer, which re-raises it  # noqa: BLE001
            await queue.put(exc)
        else:
            await queue.put(done)

    tasks = [asyncio.create_task(pump(sample, stream)) for sample, stream in streams]
    try:
        running = len(tasks)
        while running:
            item = await queue.get()
            if item is done:
                running -= 1
            elif isinstance(item, Exception):
                raise item
            else:
                yield item
    finally:
        for task in tasks:
            task.cancel()


def _answer(normalized: dict, text: str, finish_reason: str
            ) -> tuple[str | None, list[ToolCall] | None]:
    """A chat choice's `content` and `tool_calls` (`inference_node.tools.answer_of`)."""
    content, calls = answer_of(normalized, text, finish_reason)
    return content, None if calls is None else [ToolCall.model_validate(c) for c in calls]


def _usage_of(results: list, per_prompt: int | None = None) -> UsageInfo:
    """Usage of the choices (each a `Generation` or finish `GenerationDelta`): completion
    tokens summed, a shared prompt counted once, as OpenAI and vLLM count it (a list prompt:
    each of its prompts once, its choices ``per_prompt`` apart)."""
    step = per_prompt or len(results)
    return _usage(sum(r.prompt_tokens for r in results[::step]),
                  sum(r.completion_tokens for r in results))


def _usage(prompt_tokens: int, completion_tokens: int) -> UsageInfo:
    return UsageInfo(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                     total_tokens=prompt_tokens + completion_tokens)


def _chat_logprobs(logprobs: list[TokenLogprob] | None) -> ChoiceLogprobs | None:
    if logprobs is None:
        return None
    return ChoiceLogprobs(content=[
        ApiTokenLogprob(token=lp.token, logprob=lp.logprob, bytes=list(lp.token.encode()),
                        top_logprobs=[ApiTopLogprob(token=t, logprob=v, bytes=list(t.encode()))
                                      for t, v in lp.top])
        for lp in logprobs])


def _completion_logprobs(logprobs: list[TokenLogprob] | None, offset: int
                         ) -> CompletionLogprobs | None:
    if logprobs is None:
        return None
    offsets = []
    for lp in logprobs:
        offsets.append(offset)
        offset += len(lp.token)
    return CompletionLogprobs(tokens=[lp.token for lp in logprobs],
                              token_logprobs=[lp.logprob for lp in logprobs],
                              top_logprobs=[dict(lp.top) for lp in logprobs],
                              text_offset=offsets)


def _stream_error(exc: Exception) -> str:
    if isinstance(exc, APIError):
        return json.dumps(exc.body.model_dump())
    body = ErrorResponse(error=ErrorDetail(message=str(exc), type="server_error",
                                           code="engine_error"))
    return json.dumps(body.model_dump())
