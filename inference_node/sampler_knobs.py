"""The knobs ``gym-sampler/2`` adds to ``gym-sampler/1`` (``docs/sampling.md``, "gym-sampler/2"):
vLLM's logits processors, in vLLM's order, as exact float64 transforms a verifier replays.

Before temperature, on the row ``z`` converted to float64 (after the response-format mask):

1. ``min_tokens``: while the position is below it, ``z[s] = -inf`` for every id in
   ``min_tokens_ids`` (the model's end-of-sequence ids and the request's ``stop_token_ids``, as
   vLLM's ``all_stop_token_ids``);
2. ``logit_bias``: ``z[j] += bias[j]``;
3. ``repetition_penalty`` (``rp``): for every id in the prompt or the completion so far,
   ``z[j] / rp`` if ``z[j] > 0`` else ``z[j] * rp``;
4. ``frequency_penalty`` and ``presence_penalty``: ``z[j] -= f * count[j] + p * (count[j] > 0)``,
   with ``count`` the id's occurrences in the completion so far (not the prompt).

After temperature, on ``lp = log_softmax(z / T)``, before top-p (sampled rows only; greedy
ignores them, as vLLM's greedy path does):

5. ``min_p``: drop ``j`` with ``exp(lp[j]) < min_p * exp(max lp)``;
6. ``top_k``: keep ``j`` when fewer than ``k`` remaining candidates have a larger ``lp`` (ties
   at the k-th value are all kept);
7. if 5 or 6 dropped a candidate, ``lp = log_softmax`` over the remaining ones; top-p then works
   on that renormalized distribution, as vLLM's does after its top-k mask.

A ``Knobs()`` with every field neutral changes nothing: ``gym-sampler/2`` is then
``gym-sampler/1`` token for token, and the node names the older version in its receipt.
The verifier's tolerant test for rows with 5 or 6 is ``inference_node.sampling``'s
``_check_filtered``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import torch

from inference_node.errors import SamplingError
from inference_node.protocol import MAX_BIAS, MAX_BIASED_TOKENS, MAX_TOKEN_ID
from ledger.entries import GYM_SAMPLER
from ledger.entries import GYM_SAMPLER_2 as SAMPLER_V2


@dataclass(frozen=True)
class Knobs:
    """``gym-sampler/2``'s inputs beyond ``gym-sampler/1``'s; the defaults change nothing."""

    min_tokens: int = 0  # ids in min_tokens_ids are masked at positions below it
    min_tokens_ids: frozenset[int] = field(default_factory=frozenset)
    logit_bias: tuple[tuple[int, float], ...] = ()  # (id, bias), ids ascending, no zero bias
    repetition_penalty: float = 1.0  # in (0, 2]
    frequency_penalty: float = 0.0  # in [-2, 2]
    presence_penalty: float = 0.0  # in [-2, 2]
    min_p: float = 0.0  # in [0, 1]
    top_k: int = 0  # 0: off

    def __post_init__(self) -> None:
        def number(name: str, low: float, high: float, low_open: bool = False) -> None:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value) or not low <= value <= high \
                    or (low_open and value == low):
                raise SamplingError(f"{name} must be a number in {'(' if low_open else '['}"
                                    f"{low:g}, {high:g}], got {value!r}")

        number("repetition_penalty", 0.0, 2.0, low_open=True)
        number("frequency_penalty", -2.0, 2.0)
        number("presence_penalty", -2.0, 2.0)
        number("min_p", 0.0, 1.0)
        for name in ("min_tokens", "top_k"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise SamplingError(f"{name} must be an integer >= 0, got {value!r}")
        ids = [token for token, _ in self.logit_bias]
        if len(ids) > MAX_BIASED_TOKENS or ids != sorted(set(ids)) \
                or any(_bad_id(t) for t in ids) \
                or any(not isinstance(b, float) or not math.isfinite(b) or not b
                       or abs(b) > MAX_BIAS for _, b in self.logit_bias):
            raise SamplingError(f"logit_bias must be at most {MAX_BIASED_TOKENS} (id, non-zero "
                                f"float bias within +-{MAX_BIAS:g}) pairs, ids ascending")
        if any(_bad_id(t) for t in self.min_tokens_ids):
            raise SamplingError("min_tokens_ids must be token ids")

    @property
    def neutral(self) -> bool:
        """Every transform off (``min_tokens_ids`` alone changes nothing)."""
        return self.min_tokens == 0 and not self.logit_bias and self.repetition_penalty == 1 \
            and not self.frequency_penalty and not self.presence_penalty and not self.filters

    @property
    def reads_history(self) -> bool:
        """A penalty is on: step 3 or 4 reads the prompt and the completion so far."""
        return self.repetition_penalty != 1 or bool(self.frequency_penalty) \
            or bool(self.presence_penalty)

    @property
    def filters(self) -> bool:
        """Steps 5 or 6 are on (the verifier checks those rows with ``_check_filtered``)."""
        return self.min_p > 0 or self.top_k > 0

    @property
    def sampler(self) -> str:
        """The sampler version a receipt for these knobs names."""
        return GYM_SAMPLER if self.neutral else SAMPLER_V2

    @property
    def logit_scale(self) -> float:
        """How much steps 1-4 can stretch a logit difference: the repetition penalty's
        slope (the others add constants), so a verifier scales its tolerance by it."""
        return max(self.repetition_penalty, 1.0 / self.repetition_penalty)

    def to_wire(self) -> dict[str, Any]:
        """A MessagePack/JSON-safe dict (``from_wire`` reads it back): vLLM's extra_args."""
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        out["min_tokens_ids"] = sorted(self.min_tokens_ids)
        out["logit_bias"] = [[token, bias] for token, bias in self.logit_bias]
        return out

    @classmethod
    def from_wire(cls, wire: object) -> Knobs:
        if not isinstance(wire, dict) or set(wire) != {f.name for f in fields(cls)}:
            raise SamplingError(f"knobs must name exactly {[f.name for f in fields(cls)]}")
        try:
            return cls(**{**wire, "min_tokens_ids": frozenset(wire["min_tokens_ids"]),
                          "logit_bias": tuple((int(t), float(b)) for t, b in wire["logit_bias"])})
        except (TypeError, ValueError) as exc:
            raise SamplingError(f"malformed knobs: {exc}") from None


def _bad_id(token: object) -> bool:
    return isinstance(token, bool) or not isinstance(token, int) or not 0 <= token <= MAX_TOKEN_ID


def from_normalized(normalized: dict[str, Any], model_stop_ids: frozenset[int]) -> Knobs:
    """The knobs a normalized request (``inference_node.normalized_request``) sets, with the
    model's end-of-sequence ids (``generation_checks.min_tokens_stop_ids``) for ``min_tokens``."""
    bias = normalized.get("logit_bias", {})
    return Knobs(
        min_tokens=normalized.get("min_tokens", 0),
        min_tokens_ids=frozenset(model_stop_ids) | frozenset(normalized.get("stop_token_ids", ())),
        logit_bias=tuple(sorted((int(t), float(b)) for t, b in bias.items())),
        repetition_penalty=float(normalized.get("repetition_penalty", 1.0)),
        frequency_penalty=float(normalized.get("frequency_penalty", 0.0)),
        presence_penalty=float(normalized.get("presence_penalty", 0.0)),
        min_p=float(normalized.get("min_p", 0.0)), top_k=normalized.get("top_k", 0))


# ---------------------------------------------------------------------------------------------
# steps 1-4


class History:
    """What steps 1-4 read of a completion: the prompt's ids (a mask, built once) and the
    completion's ids so far (counts, grown one token at a time)."""

    def __init__(self, vocab: int, prompt_ids: Sequence[int], device: Any = None) -> None:
        self.vocab = vocab
        self.prompt_mask = torch.zeros(vocab, dtype=torch.bool, device=device)
        if len(prompt_ids):
            ids = torch.as_tensor(list(prompt_ids), dtype=torch.int64, device=device)
            if int(ids.min()) < 0 or int(ids.max()) >= vocab:
                raise SamplingError(f"a prompt token id is outside the vocabulary of {vocab}")
            self.prompt_mask[ids] = True
        self.counts = torch.zeros(vocab, dtype=torch.float64, device=device)
        self.length = 0

    def add(self, token: int) -> None:
        if not 0 <= token < self.vocab:
            raise SamplingError(f"token {token} is outside the vocabulary of {self.vocab}")
        self.counts[token] += 1
        self.length += 1

    def sync(self, output_ids: Sequence[int]) -> History:
        """Count the ids of the growing completion ``output_ids`` not counted yet (an engine
        keeps one History per request and calls this before each token)."""
        for token in output_ids[self.length:]:
            self.add(int(token))
        return self


def history(vocab: int, prompt_ids: Sequence[int], output_ids: Sequence[int],
            device: Any = None) -> History:
    return History(vocab, prompt_ids, device).sync(output_ids)


def pre_temperature(z: torch.Tensor, knobs: Knobs, position: int, past: History | None
                    ) -> torch.Tensor:
    """Steps 1-4 on one float64 row; ``past`` is needed when a penalty is on."""
    vocab = z.numel()
    if knobs.min_tokens and position < knobs.min_tokens and knobs.min_tokens_ids:
        ids = _ids(knobs.min_tokens_ids, vocab, "a min_tokens stop id", z.device)
        masked = z.clone()
        masked[ids] = float("-inf")
        if torch.isfinite(masked).any():  # never masks the last candidate (a grammar's EOS)
            z = masked
    if knobs.logit_bias:
        ids = _ids([t for t, _ in knobs.logit_bias], vocab, "a logit_bias id", z.device)
        z = z.clone()
        z[ids] += torch.tensor([b for _, b in knobs.logit_bias], dtype=z.dtype, device=z.device)
    penalties = (knobs.repetition_penalty != 1, bool(knobs.frequency_penalty),
                 bool(knobs.presence_penalty))
    if any(penalties):
        if past is None:
            raise SamplingError("penalties need the prompt and the completion so far")
        rp = knobs.repetition_penalty
        if penalties[0]:
            seen = past.prompt_mask | (past.counts > 0)
            z = torch.where(seen, torch.where(z > 0, z / rp, z * rp), z)
        if penalties[1] or penalties[2]:
            z = z - knobs.frequency_penalty * past.counts \
                - knobs.presence_penalty * (past.counts > 0).to(z.dtype)
    return z


def _ids(ids: Any, vocab: int, what: str, device: Any) -> torch.Tensor:
    ids = sorted(ids)
    if ids and ids[-1] >= vocab:
        raise SamplingError(f"{what} ({ids[-1]}) is outside the vocabulary of {vocab}")
    return torch.tensor(ids, dtype=torch.int64, device=device)


# ---------------------------------------------------------------------------------------------
# steps 5-7


def filtered(lp: torch.Tensor, knobs: Knobs) -> torch.Tensor:
    """Steps 5-7: ``lp`` with the dropped candidates at -inf, renormalized when any was."""
    kept = min_p_kept(lp, knobs.min_p) if knobs.min_p > 0 else torch.isfinite(lp)
    if knobs.top_k > 0:
        kept = top_k_kept(lp, kept, knobs.top_k)
    if bool((kept == torch.isfinite(lp)).all()):
        return lp
    return torch.log_softmax(lp.masked_fill(~kept, float("-inf")), dim=-1)


def min_p_kept(lp: torch.Tensor, min_p: float) -> torch.Tensor:
    probs = lp.exp()
    return torch.isfinite(lp) & ~(probs < min_p * probs.max())


def top_k_kept(lp: torch.Tensor, kept: torch.Tensor, k: int) -> torch.Tensor:
    values = lp[kept]
    if values.numel() <= k:
        return kept
    kth = torch.topk(values, k).values[-1]
    return kept & (lp >= kth)
