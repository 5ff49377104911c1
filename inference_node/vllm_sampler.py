"""``gym-sampler/1`` inside vLLM: a V1 logits processor that forces the sampler's token.

vLLM's own sampling cannot be reproduced outside vLLM (a stateful per-request generator whose
draws depend on the batch, and different kernels on CPU and GPU), so `VLLMEngine` does not use
it. It sends every request to vLLM as greedy (temperature 0, top_p 1, no seed) with the
sampler's real inputs in ``SamplingParams.extra_args[EXTRA_ARGS_KEY]`` (`sampler_args`), and
vLLM runs `GymSampler` on every row of every step: the row's token is
``inference_node.sampling.choose`` on the row's float32 logits (before temperature, penalties
and top-p, after vLLM's allowed-token and bad-word masks, which the node does not use), at
position ``len(output_token_ids)``; the row is then set to ``-inf`` everywhere but that token
(``0``), so vLLM's greedy argmax picks it. Logprobs are unaffected: vLLM computes them from the
raw logits before any processor (``logprobs_mode="raw_logprobs"``, its default).

The processor is registered by name (``vllm_engine.SAMPLER_PROCESSOR``, an
``AsyncEngineArgs.logits_processors`` entry) and instantiated in vLLM's engine-core process,
which imports this module. It imports vLLM, so only `inference_node.vllm_engine` imports it,
lazily. Requests without the extra argument are left alone. Bad inputs are refused by
``validate_params``, which vLLM runs when it admits a request, so they fail that request alone.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from vllm import SamplingParams
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor
from vllm.v1.sample.logits_processor.builtin import process_dict_updates

from inference_node.sampling import REQUEST_KEY_BYTES, SamplingError, choose

log = logging.getLogger(__name__)

EXTRA_ARGS_KEY = "gym_sampler"


def sampler_args(temperature: float, top_p: float, seed: int, request_key: bytes
                 ) -> dict[str, Any]:
    """The ``extra_args`` entry for one request. vLLM ships extra_args with MessagePack, whose
    integers stop at 64 bits, so the seed and the key travel as hex strings."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise SamplingError(f"seed must be an integer, got {seed!r}")
    if not isinstance(request_key, bytes):
        raise SamplingError(f"request_key must be bytes, got {request_key!r}")
    return {EXTRA_ARGS_KEY: {"temperature": float(temperature), "top_p": float(top_p),
                             "seed": format(seed, "x"), "key": request_key.hex()}}


class _Row:
    """One request's sampler inputs and its live list of output token ids."""

    __slots__ = ("key", "output_ids", "seed", "temperature", "top_p")

    def __init__(self, temperature: float, top_p: float, seed: int, key: bytes,
                 output_ids: list[int]) -> None:
        self.temperature, self.top_p, self.seed, self.key = temperature, top_p, seed, key
        self.output_ids = output_ids


def _parse(params: SamplingParams) -> tuple[float, float, int, bytes] | None:
    """The sampler inputs in ``params.extra_args`` (None without them), checked against the
    sampler's domain: ValueError (a `SamplingError`) if outside it."""
    extra = params.extra_args or {}
    if EXTRA_ARGS_KEY not in extra:
        return None
    args = extra[EXTRA_ARGS_KEY]
    if not isinstance(args, dict) or set(args) != {"temperature", "top_p", "seed", "key"}:
        raise SamplingError(f"extra_args[{EXTRA_ARGS_KEY!r}] must hold exactly temperature, "
                            f"top_p, seed and key, got {args!r}")
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
    return float(temperature), float(top_p), seed, key


class GymSampler(LogitsProcessor):
    """Forces ``gym-sampler/1``'s token on the rows of requests that carry `sampler_args`."""

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams) -> None:
        _parse(sampling_params)  # SamplingError is a ValueError: vLLM refuses the request

    def __init__(self, vllm_config: Any, device: torch.device, is_pin_memory: bool) -> None:
        self.rows: dict[int, _Row] = {}  # batch row -> request

    def is_argmax_invariant(self) -> bool:
        return False  # it decides the argmax: vLLM must apply it before greedy sampling

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        def new_row(params: SamplingParams, _prompt: list[int] | None,
                    output_ids: list[int]) -> _Row | None:
            inputs = _parse(params)
            return None if inputs is None else _Row(*inputs, output_ids)

        process_dict_updates(self.rows, batch_update, new_row)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        for index, row in self.rows.items():
            # `output_ids` is vLLM's running list: its length is the position being sampled.
            position = len(row.output_ids)
            try:
                token = choose(logits[index], temperature=row.temperature, top_p=row.top_p,
                               seed=row.seed, request_key=row.key, position=position).token
            except Exception:
                # Nothing here can fail one request alone: vLLM's engine core stops and every
                # request fails with an error; say which row did it.
                log.exception("gym-sampler/1 failed on batch row %d at position %d", index,
                              position)
                raise
            logits[index].fill_(float("-inf"))
            logits[index, token] = 0.0
        return logits
