"""``gym-sampler/1`` and ``/2`` inside vLLM: a V1 logits processor that forces the sampler's
token.

vLLM's own sampling cannot be reproduced outside vLLM (a stateful per-request generator whose
draws depend on the batch, and different kernels on CPU and GPU), so `VLLMEngine` does not use
it. It sends every request to vLLM as greedy (temperature 0, top_p 1, no seed) with the
sampler's real inputs in ``SamplingParams.extra_args[EXTRA_ARGS_KEY]`` (`sampler_args`), and
vLLM runs `GymSampler` on every row of every step: the row's token is
``inference_node.sampling.choose`` on the row's float32 logits (before temperature, penalties
and top-p, after vLLM's allowed-token and bad-word masks, which the node does not use), at
position ``len(output_token_ids)`` (a step's plain greedy rows in one batched argmax,
``greedy_tokens``, which picks what ``choose`` picks); the row is then set to ``-inf`` everywhere but that token
(``0``), so vLLM's greedy argmax picks it. With gym-sampler/2's knobs (``extra_args``'
``knobs``, ``sampler_knobs.Knobs.to_wire``) the row's penalties read the prompt ids vLLM hands
the processor and the live output ids; vLLM's own penalties, bias, min_p and top_k are never
set (the request is greedy), and its min_tokens processor masks the same stop ids before this
one does (``serving`` passes the ids the node's sampler masks). Logprobs are unaffected: vLLM
computes them from the raw logits before any processor (``logprobs_mode="raw_logprobs"``, its default).

The processor is registered by name (``vllm_engine.SAMPLER_PROCESSOR``, an
``AsyncEngineArgs.logits_processors`` entry) and instantiated in vLLM's engine-core process,
which imports this module. It imports vLLM, so only `inference_node.vllm_engine` imports it,
lazily. Requests without the extra argument are left alone. Bad inputs are refused by
``validate_params``, which vLLM runs when it admits a request, so they fail that request alone.

Structured outputs: a request with a response format or a tool choice also carries its
constraint's text (``extra_args[GRAMMAR_ARGS_KEY]``, `grammar_args`): a JSON schema's, or for
``tool_choice: "auto"`` the text-or-calls structural tag's (``inference_node.tools``). The
processor keeps one ``trainer.grammar.TokenMask`` per such row, from one ``Grammars`` built (on
first use) for the model's tokenizer, the logits' width and the model's EOS ids, exactly as
`TransformersEngine` and the verifier build it, so the masks are the same and the verifier's
replay holds. The row's token is ``choose(..., allowed=mask.allowed())``. vLLM appends the
token it sampled to the row's ``output_ids`` after the step, so the mask is advanced lazily: at
the next ``apply`` it accepts the ids in ``output_ids`` past those already accepted (which also
rebuilds a row that vLLM preempted and re-added, from its whole output). vLLM's own
structured-output backend is not used: its grammar options differ from ``gym-grammar/1`` and a
verifier could not replay them.
"""

from __future__ import annotations

import logging
import os
import re
import struct
from typing import Any

import torch
from vllm import SamplingParams
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor
from vllm.v1.sample.logits_processor.builtin import process_dict_updates

from inference_node.response_format import Constraint, FormatError
from inference_node.sampler_knobs import History, Knobs
from inference_node.sampling import GREEDY_BELOW, REQUEST_KEY_BYTES, SamplingError, choose
from trainer.grammar import GrammarError, Grammars, TokenMask, grammar_text

log = logging.getLogger(__name__)

EXTRA_ARGS_KEY = "gym_sampler"
_ARG_NAMES = {"temperature", "top_p", "seed", "key", "knobs"}
GRAMMAR_ARGS_KEY = "gym_grammar"
# Activation capture: ``extra_args[CAPTURE_ARGS_KEY]`` names the request's file (32 hex digits)
# in the directory ``CAPTURE_DIR_ENV`` names (set by the node before vLLM starts, inherited by
# its engine core; the node creates the file, the processor never does); each decode position's
# final hidden state is appended there as a record ``uint32 position (little-endian) ||
# bfloat16 state``.
CAPTURE_ARGS_KEY = "gym_capture"
CAPTURE_DIR_ENV = "GYM_VLLM_CAPTURE_DIR"
CAPTURE_HEAD = struct.Struct("<I")
_CAPTURE_NAME = re.compile(r"[0-9a-f]{32}")


def sampler_args(temperature: float, top_p: float, seed: int, request_key: bytes,
                 knobs: Knobs | None = None) -> dict[str, Any]:
    """The ``extra_args`` entry for one request. vLLM ships extra_args with MessagePack, whose
    integers stop at 64 bits, so the seed and the key travel as hex strings; gym-sampler/2's
    ``knobs`` (when not all neutral) as ``Knobs.to_wire``."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise SamplingError(f"seed must be an integer, got {seed!r}")
    if not isinstance(request_key, bytes):
        raise SamplingError(f"request_key must be bytes, got {request_key!r}")
    args: dict[str, Any] = {"temperature": float(temperature), "top_p": float(top_p),
                            "seed": format(seed, "x"), "key": request_key.hex()}
    if knobs is not None and not knobs.neutral:
        args["knobs"] = knobs.to_wire()
    return {EXTRA_ARGS_KEY: args}


def grammar_args(constraint: Constraint) -> dict[str, str]:
    """The ``extra_args`` entry of a constrained request: its constraint's text (a schema's
    compact JSON text, or a structural tag's)."""
    return {GRAMMAR_ARGS_KEY: constraint.schema_json}


class _Row:
    """One request's sampler inputs, its live list of output token ids and, for a constrained
    request, its mask and how many of ``output_ids`` the mask has accepted; with ``capture``
    (a file path), where its decode states go."""

    __slots__ = ("_file", "_past", "accepted", "capture", "key", "knobs", "mask", "output_ids",
                 "prompt_ids", "seed", "temperature", "top_p")

    def __init__(self, temperature: float, top_p: float, seed: int, key: bytes,
                 knobs: Knobs | None, output_ids: list[int], prompt_ids: list[int],
                 mask: TokenMask | None = None, capture: str | None = None) -> None:
        self.temperature, self.top_p, self.seed, self.key = temperature, top_p, seed, key
        self.knobs = knobs
        self.output_ids, self.prompt_ids = output_ids, prompt_ids
        self.mask = mask
        self.accepted = 0
        self._past: History | None = None
        self.capture, self._file = capture, None

    def record(self, position: int, state: torch.Tensor) -> None:
        """Append the final hidden state that chose the token at ``position`` (a state
        recorded again for a position, by a preempted and recomputed request or a chunked
        prefill's earlier chunk, is superseded by the later record)."""
        if self._file is None:
            try:  # the node made the file; gone, the request was abandoned: nothing to keep
                fd = os.open(self.capture, os.O_WRONLY | os.O_APPEND)
            except FileNotFoundError:
                self.capture = None
                return
            self._file = os.fdopen(fd, "ab", buffering=0)
        data = state.to(torch.bfloat16).view(torch.int16).cpu().numpy().tobytes()
        self._file.write(CAPTURE_HEAD.pack(position) + data)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def past(self, vocab: int, device: torch.device) -> History | None:
        """What the penalties read: the prompt and the completion so far (None without
        penalties); built once, then grown with the ids vLLM appended since."""
        if self.knobs is None or not self.knobs.reads_history:
            return None
        if self._past is None:
            self._past = History(vocab, self.prompt_ids, device)
        return self._past.sync(self.output_ids)

    def allowed(self) -> torch.Tensor | None:
        """The mask over the next token, after accepting the tokens vLLM appended since."""
        if self.mask is None:
            return None
        for token in self.output_ids[self.accepted:]:
            if not self.mask.accept(token):  # -1 too: a placeholder of async scheduling
                raise SamplingError(f"the grammar refused token {token} at position "
                                    f"{self.accepted}")
            self.accepted += 1
        return self.mask.allowed()


def _parse(params: SamplingParams) -> tuple[float, float, int, bytes, Knobs | None] | None:
    """The sampler inputs in ``params.extra_args`` (None without them), checked against the
    sampler's domain: ValueError (a `SamplingError`) if outside it."""
    extra = params.extra_args or {}
    if EXTRA_ARGS_KEY not in extra:
        return None
    args = extra[EXTRA_ARGS_KEY]
    if not isinstance(args, dict) or \
            not {"temperature", "top_p", "seed", "key"} <= set(args) <= _ARG_NAMES:
        raise SamplingError(f"extra_args[{EXTRA_ARGS_KEY!r}] must hold temperature, top_p, seed, "
                            f"key and optionally knobs, got {args!r}")
    try:
        seed = int(args["seed"], 16)
        key = bytes.fromhex(args["key"])
    except (TypeError, ValueError):
        raise SamplingError(f"seed and key must be hex strings, got {args['seed']!r}, "
                            f"{args['key']!r}") from None
    if len(key) != REQUEST_KEY_BYTES:
        raise SamplingError(f"request_key must be {REQUEST_KEY_BYTES} bytes, got {len(key)}")
    temperature, top_p = args["temperature"], args["top_p"]
    # The sampler's own checks (types and ranges of every input), on a one-token row.
    choose(torch.zeros(1), temperature=temperature, top_p=top_p, seed=seed, request_key=key,
           position=0)
    knobs = Knobs.from_wire(args["knobs"]) if "knobs" in args else None
    return float(temperature), float(top_p), seed, key, knobs


def _parse_capture(params: SamplingParams) -> str | None:
    """The file this row's decode states are appended to (None: not captured)."""
    name = (params.extra_args or {}).get(CAPTURE_ARGS_KEY)
    if name is None:
        return None
    folder = os.environ.get(CAPTURE_DIR_ENV)
    if not isinstance(name, str) or not _CAPTURE_NAME.fullmatch(name) or not folder:
        raise SamplingError(f"extra_args[{CAPTURE_ARGS_KEY!r}] must be 32 hex digits, and "
                            f"{CAPTURE_DIR_ENV} set in the engine's environment")
    return os.path.join(folder, name)


_last_states: list[torch.Tensor | None] = [None]  # what the LM head last read


def install_capture() -> None:
    """Make vLLM's LM head (``LogitsProcessor.forward``, which ``compute_logits`` calls with
    the final hidden states of the positions being sampled, one row per request in batch
    order) keep a reference to those states for ``GymSampler.apply`` of the same step."""
    from vllm.model_executor.layers.logits_processor import LogitsProcessor as Head

    if getattr(Head.forward, "gym_capture", False):
        return
    original = Head.forward

    def forward(self: Any, lm_head: Any, hidden_states: torch.Tensor, *args: Any,
                **kwargs: Any) -> Any:
        _last_states[0] = hidden_states
        return original(self, lm_head, hidden_states, *args, **kwargs)

    forward.gym_capture = True  # type: ignore[attr-defined]
    Head.forward = forward


def _parse_constraint(params: SamplingParams) -> Constraint | None:
    """The constraint in ``params.extra_args`` (None without one); ValueError (a
    ``FormatError``) when its schema does not compile to a grammar."""
    extra = params.extra_args or {}
    if GRAMMAR_ARGS_KEY not in extra:
        return None
    if EXTRA_ARGS_KEY not in extra:
        raise SamplingError(f"extra_args[{GRAMMAR_ARGS_KEY!r}] needs "
                            f"extra_args[{EXTRA_ARGS_KEY!r}]")
    schema = extra[GRAMMAR_ARGS_KEY]
    if not isinstance(schema, str):
        raise SamplingError(f"extra_args[{GRAMMAR_ARGS_KEY!r}] must be a constraint's text (a "
                            "JSON schema's, or a structural tag's)")
    try:
        grammar_text(schema)  # the tokenizer-free half of compiling
    except GrammarError as exc:
        raise FormatError(str(exc)) from None
    return Constraint(schema)


class GymSampler(LogitsProcessor):
    """Forces ``gym-sampler/1``'s token on the rows of requests that carry `sampler_args`."""

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams) -> None:
        _parse(sampling_params)  # SamplingError is a ValueError: vLLM refuses the request
        _parse_constraint(sampling_params)  # FormatError is one too
        _parse_capture(sampling_params)

    def __init__(self, vllm_config: Any, device: torch.device, is_pin_memory: bool) -> None:
        self.rows: dict[int, _Row] = {}  # batch row -> request
        self._model_config = vllm_config.model_config
        self._grammars: Grammars | None = None
        install_capture()

    def grammars(self) -> Grammars:
        """The grammar compiler for the model's tokenizer (built on the first constrained
        request), as the node and the verifier build it."""
        if self._grammars is None:
            self._grammars = model_grammars(self._model_config)
        return self._grammars

    def is_argmax_invariant(self) -> bool:
        return False  # it decides the argmax: vLLM must apply it before greedy sampling

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        def new_row(params: SamplingParams, prompt: list[int] | None,
                    output_ids: list[int]) -> _Row | None:
            inputs = _parse(params)
            if inputs is None:
                return None
            constraint = _parse_constraint(params)
            mask = None if constraint is None else self.grammars().mask(constraint.schema_json)
            return _Row(*inputs, output_ids, list(prompt or ()), mask, _parse_capture(params))

        before = list(self.rows.values())
        process_dict_updates(self.rows, batch_update, new_row)
        kept = {id(row) for row in self.rows.values()}
        for row in before:  # finished, aborted or preempted (re-added as a new row)
            if id(row) not in kept:
                row.close()

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        states, _last_states[0] = _last_states[0], None
        if states is not None and states.shape[0] != logits.shape[0]:
            states = None  # not this step's rows: nothing is captured (the node re-computes)
        greedy = greedy_tokens(logits, [index for index, row in self.rows.items()
                                        if row.temperature < GREEDY_BELOW and row.knobs is None
                                        and row.mask is None])
        for index, row in self.rows.items():
            # `output_ids` is vLLM's running list: its length is the position being sampled.
            position = len(row.output_ids)
            try:
                token = greedy.get(index)
                if token is None:
                    allowed = row.allowed()
                    if allowed is not None:
                        allowed = allowed.to(logits.device)
                    token = choose(logits[index], temperature=row.temperature, top_p=row.top_p,
                                   seed=row.seed, request_key=row.key, position=position,
                                   allowed=allowed, knobs=row.knobs,
                                   past=row.past(logits.shape[1], logits.device)).token
            except Exception:
                # Nothing here can fail one request alone: vLLM's engine core stops and every
                # request fails with an error; say which row did it.
                log.exception("gym-sampler failed on batch row %d at position %d", index,
                              position)
                raise
            if row.capture is not None and states is not None:
                try:
                    row.record(position, states[index])
                except OSError:  # a full disk: the node re-computes what is missing
                    log.warning("could not record the decode state of batch row %d", index)
            logits[index].fill_(float("-inf"))
            logits[index, token] = 0.0
        return logits


def greedy_tokens(logits: torch.Tensor, rows: list[int]) -> dict[int, int]:
    """``choose``'s token for each of ``rows`` that it would take greedily (temperature below
    ``GREEDY_BELOW``, no knobs, no mask: the row's first maximum), in one batched argmax
    instead of one call per row (1 ms a row on a 49k vocabulary here, which a batch of 32
    paid every step). A row holding NaN or +inf, or nothing finite, is left out: ``choose``
    then refuses it with its own error."""
    if len(rows) < 2:
        return {}
    picked = logits.index_select(0, torch.tensor(rows, device=logits.device))
    sound = ~(torch.isnan(picked).any(dim=1) | torch.isposinf(picked).any(dim=1)) \
        & torch.isfinite(picked).any(dim=1)
    tokens = picked.argmax(dim=1)  # torch.argmax returns the first maximum, as choose does
    return {row: token for row, token, ok in zip(rows, tokens.tolist(), sound.tolist(),
                                                  strict=True) if ok}


def model_grammars(model_config: Any) -> Grammars:
    """A ``Grammars`` for a vLLM ``ModelConfig``: its tokenizer, its vocabulary size (the width
    of the logits, as the transformers model's output embedding) and the EOS ids
    ``generation_checks.eos_token_ids`` gives the transformers model of the same directory."""
    from transformers import AutoTokenizer

    from inference_node.generation_checks import model_dir_eos_token_ids

    tokenizer = AutoTokenizer.from_pretrained(
        model_config.tokenizer, revision=model_config.tokenizer_revision,
        trust_remote_code=model_config.trust_remote_code)
    return Grammars(tokenizer, model_config.get_vocab_size(),
                    model_dir_eos_token_ids(model_config.model, tokenizer))
