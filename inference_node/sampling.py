"""The verifiable sampler ``gym-sampler/1`` and ``/2``: every token is a deterministic function
of the model's logits and public inputs (temperature, top-p, seed, a 32-byte request key, the
token's position; with ``/2`` also vLLM's penalties, logit bias, min_p, top_k and min_tokens,
``inference_node.sampler_knobs``). The wire-level spec is ``docs/sampling.md``; this module is
its reference.

- ``position_key`` / ``uniforms``: stateless counter-based noise (SHA-256 key per position,
  SplitMix64 per token id); integer-only, so bit-exact on any device.
- ``choose``: one token from one logits row (the engines' side).
- ``check_completion``: every token of a completion against the logits of one prefill (the
  verifier's side), up to a float tolerance; near-ties are counted, not failed.

Inputs outside the spec's domain raise ``SamplingError``.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from inference_node.errors import SamplingError
from inference_node.sampler_knobs import (
    History,
    Knobs,
    filtered,
    min_p_kept,
    pre_temperature,
    top_k_kept,
)
from ledger.entries import GYM_SAMPLER

SAMPLER = GYM_SAMPLER  # "gym-sampler/1": the name and version a v2 receipt records
KEY_TAG = b"gym-sampler/1"  # first bytes hashed into every position key (in /2 too)
GREEDY_BELOW = 1e-5  # temperature < GREEDY_BELOW: greedy argmax, no noise
DEFAULT_EPS = 1e-3  # logit tolerance for fp32 engines (max |logit difference| assumed)
REQUEST_KEY_BYTES = 32

# SplitMix64 (Steele, Lea, Flood 2014), as in java.util.SplittableRandom
GOLDEN_GAMMA = 0x9E3779B97F4A7C15
MIX_1 = 0xBF58476D1CE4E5B9
MIX_2 = 0x94D049BB133111EB
MASK_64 = (1 << 64) - 1
UNIFORM_BITS = 52  # u = ((x >> 12) + 0.5) / 2**52: exact in float64, never 0 or 1


def _signed(value: int) -> int:
    """The int64 that has the same 64 bits as ``value`` (0 <= value < 2**64)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _shift_right(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 bit patterns (torch's ``>>`` is arithmetic)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


# ---------------------------------------------------------------------------------------------
# validation


def _check_int(name: str, value: object, upper: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < upper:
        raise SamplingError(f"{name} must be an integer in [0, {upper}), got {value!r}")
    return value


def _check_params(temperature: object, top_p: object, seed: object, request_key: object,
                  position: object) -> tuple[float, float]:
    try:
        temperature, top_p = float(temperature), float(top_p)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise SamplingError(f"temperature and top_p must be numbers, got {temperature!r}, "
                            f"{top_p!r}") from None
    if not (math.isfinite(temperature) and temperature >= 0):
        raise SamplingError(f"temperature must be finite and >= 0, got {temperature!r}")
    if not 0 < top_p <= 1:
        raise SamplingError(f"top_p must be in (0, 1], got {top_p!r}")
    _check_int("seed", seed, 1 << 64)
    if not isinstance(request_key, bytes) or len(request_key) != REQUEST_KEY_BYTES:
        raise SamplingError(f"request_key must be {REQUEST_KEY_BYTES} bytes, got {request_key!r}")
    _check_int("position", position, 1 << 64)
    return temperature, top_p


def _check_logits(logits: torch.Tensor, dims: int, allowed: torch.Tensor | None) -> torch.Tensor:
    """``logits`` with disallowed entries at -inf (the response-format mask hook)."""
    if not isinstance(logits, torch.Tensor) or logits.dim() != dims \
            or not logits.is_floating_point() or logits.shape[-1] == 0:
        raise SamplingError(f"logits must be a {dims}-D floating-point tensor with a non-empty "
                            f"vocabulary, got {getattr(logits, 'shape', type(logits))}")
    if torch.isnan(logits).any() or torch.isposinf(logits).any():
        raise SamplingError("logits contain NaN or +inf")
    if allowed is not None:
        if not isinstance(allowed, torch.Tensor) or allowed.dtype != torch.bool \
                or allowed.shape != logits.shape:
            raise SamplingError(f"allowed must be a bool tensor of shape {tuple(logits.shape)}")
        logits = logits.masked_fill(~allowed.to(logits.device), float("-inf"))
    if not torch.isfinite(logits).any(dim=-1).all():
        raise SamplingError("no token is allowed: every logit is -inf or masked out")
    return logits


# ---------------------------------------------------------------------------------------------
# noise


def position_key(seed: int, request_key: bytes, position: int) -> int:
    """The 64-bit key of one position: the first 8 bytes (big-endian) of
    SHA-256(KEY_TAG || seed as 8 bytes BE || request_key (32 bytes) || position as 8 bytes BE)."""
    _check_int("seed", seed, 1 << 64)
    if not isinstance(request_key, bytes) or len(request_key) != REQUEST_KEY_BYTES:
        raise SamplingError(f"request_key must be {REQUEST_KEY_BYTES} bytes, got {request_key!r}")
    _check_int("position", position, 1 << 64)
    digest = hashlib.sha256(KEY_TAG + seed.to_bytes(8, "big") + request_key
                            + position.to_bytes(8, "big")).digest()
    return int.from_bytes(digest[:8], "big")


def uniforms(key: int, token_ids: torch.Tensor) -> torch.Tensor:
    """u_j in (0, 1), float64, for each token id j: output number j (counting from 0) of the
    SplitMix64 stream seeded with ``key``, x = mix(key + (j + 1) * GOLDEN_GAMMA mod 2**64),
    mapped as ((x >> 12) + 0.5) / 2**52. Integer-only up to the exact final conversion."""
    _check_int("key", key, 1 << 64)
    ids = torch.as_tensor(token_ids)
    if ids.dtype.is_floating_point or ids.dtype == torch.bool or (ids < 0).any():
        raise SamplingError("token_ids must be non-negative integers")
    x = ids.to(torch.int64) * _signed(GOLDEN_GAMMA) + _signed((key + GOLDEN_GAMMA) & MASK_64)
    x = (x ^ _shift_right(x, 30)) * _signed(MIX_1)
    x = (x ^ _shift_right(x, 27)) * _signed(MIX_2)
    x = x ^ _shift_right(x, 31)
    top = _shift_right(x, 64 - UNIFORM_BITS)
    return (top.to(torch.float64) + 0.5) * 2.0 ** -UNIFORM_BITS


def _gumbel(key: int, token_ids: torch.Tensor) -> torch.Tensor:
    return -torch.log(-torch.log(uniforms(key, token_ids)))


# ---------------------------------------------------------------------------------------------
# one row


@dataclass(frozen=True)
class Choice:
    """The sampler's token for one row. ``margin``: best minus second-best score among the kept
    tokens (greedy: the gap between the two largest logits; inf with one candidate).
    ``kept``: how many tokens the choice was made among (greedy: every allowed token)."""

    token: int
    margin: float
    kept: int


def _best(ids: torch.Tensor, scores: torch.Tensor) -> tuple[int, float]:
    """Highest score, lowest id among equals (``ids`` ascending), and the margin to the next."""
    index = int(torch.argmax(scores))  # torch.argmax returns the first maximum
    if scores.numel() < 2:
        return int(ids[index]), math.inf
    top2 = torch.topk(scores, 2).values
    return int(ids[index]), float(top2[0]) - float(top2[1])


FIRST_PREFIX = 64  # top-p: the sorted prefix tried first; grown 4x while it cannot decide
PREFIX_GROWTH = 4


@dataclass(frozen=True)
class _Nucleus:
    """A tempered row's top-p, on the first ``size`` entries of its descending order (all of
    them when ``complete``): log-probabilities sorted descending, their ids, probabilities and
    running sums (float64, left to right, on the CPU), and how many of them top-p keeps.

    A prefix is returned only when it decides the kept set exactly: the threshold probability
    ``probs[reach]`` is strictly greater than the prefix's last one, so every token outside the
    prefix is less probable and dropped, and the prefix's running sums are those of the full
    order (the sorted values, hence their left-to-right sums, do not depend on how equal values
    are ordered). ``finite``: candidates in the prefix; ``all_in``: the prefix holds every
    candidate."""

    sorted_logp: torch.Tensor
    order: torch.Tensor
    probs: torch.Tensor
    cumsum: torch.Tensor
    kept: int
    finite: int
    complete: bool
    all_in: bool

    @property
    def size(self) -> int:
        return self.sorted_logp.numel()


def _log_probs(row: torch.Tensor, temperature: float) -> torch.Tensor:
    return torch.log_softmax(row.to(torch.float64) / temperature, dim=-1)


def _nucleus(logp: torch.Tensor, top_p: float, size: int = FIRST_PREFIX) -> _Nucleus:
    """Top-p on the shortest prefix (at least ``size`` long, else the full sort) that decides
    it. Same ``kept``, same running sums, same kept ids as sorting the whole row."""
    vocab = logp.numel()
    while True:
        complete = size * PREFIX_GROWTH > vocab
        if complete:  # a prefix this long costs about as much as the sort
            sorted_logp, order = torch.sort(logp, descending=True, stable=True)
        else:
            sorted_logp, order = torch.topk(logp, size)  # descending; ties in any order
        sorted_logp, order = sorted_logp.cpu(), order.cpu()
        probs = sorted_logp.exp()
        cumsum = probs.cumsum(0)  # CPU: a sequential left-to-right float64 sum
        reach = int(torch.searchsorted(cumsum, torch.tensor([top_p], dtype=cumsum.dtype)))
        finite = int(torch.isfinite(sorted_logp).sum()) if complete \
            or not math.isfinite(float(sorted_logp[-1])) else size
        if complete:
            if reach >= finite:  # the candidates' mass never reaches top_p (rounding): keep all
                kept = finite
            else:
                kept = min(int((probs >= probs[reach]).sum()), finite)
            return _Nucleus(sorted_logp, order, probs, cumsum, kept, finite, True, True)
        if math.isfinite(float(sorted_logp[0])) and reach < size \
                and float(probs[reach]) > float(probs[-1]):
            kept = int((probs >= probs[reach]).sum())  # probs[reach] > 0: all candidates
            return _Nucleus(sorted_logp, order, probs, cumsum, kept, finite, False,
                            finite < size)
        size *= PREFIX_GROWTH


def _kept_ids(logp: torch.Tensor, top_p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Ids (ascending) of the tokens top-p keeps, every allowed token when top_p == 1, and
    their log-probabilities."""
    if top_p >= 1:
        ids = torch.nonzero(torch.isfinite(logp)).flatten()
        return ids, logp[ids]
    nucleus = _nucleus(logp, top_p)
    ids, by_id = torch.sort(nucleus.order[:nucleus.kept])
    return ids, nucleus.sorted_logp[:nucleus.kept][by_id]


def choose(logits_row: torch.Tensor, *, temperature: float, top_p: float, seed: int,
           request_key: bytes, position: int, allowed: torch.Tensor | None = None,
           knobs: Knobs | None = None, past: History | None = None) -> Choice:
    """The sampler's token for one logits row (``docs/sampling.md``): mask, then ``knobs``'
    steps before temperature (``past``: the prompt and the completion so far, for penalties),
    then greedy below ``GREEDY_BELOW``, else log_softmax(z / T) in float64, min_p and top_k,
    top-p, Gumbel-max; lowest id wins ties."""
    temperature, top_p = _check_params(temperature, top_p, seed, request_key, position)
    z = _check_logits(logits_row.detach(), 1, allowed)
    if knobs is not None and not knobs.neutral:
        z = pre_temperature(z.to(torch.float64), knobs, position, past)
    if temperature < GREEDY_BELOW:
        ids = torch.arange(z.numel(), device=z.device)
        token, margin = _best(ids, z)
        return Choice(token, margin, int(torch.isfinite(z).sum()))
    logp = _log_probs(z, temperature)
    if knobs is not None and knobs.filters:
        logp = filtered(logp, knobs)
    ids, kept_logp = _kept_ids(logp, top_p)
    scores = kept_logp + _gumbel(position_key(seed, request_key, position), ids)
    token, margin = _best(ids, scores)
    return Choice(token, margin, ids.numel())


# ---------------------------------------------------------------------------------------------
# a completion against one prefill


@dataclass(frozen=True)
class Mismatch:
    """The first token the sampler could not have produced. ``index``: row of the logits;
    ``position``: the sampler position (start_position + index); ``expected``: the sampler's
    choice on the verifier's logits; ``actual``: the completion's token."""

    index: int
    position: int
    expected: int
    actual: int


@dataclass(frozen=True)
class SamplingCheck:
    """The result of ``check_completion``.

    - ``mismatch``: the first token outside tolerance, or None (then ``ok``).
    - ``near_ties``: positions, up to the first mismatch, where a token other than the
      sampler's choice would also have been accepted (margin <= tolerance, or a top-p boundary
      within tolerance); every tolerated token is at such a position.
    - ``tolerated``: of those, positions where the completion's token is not the verifier's
      choice (accepted as a near-tie).
    - ``min_margin``: the smallest ``Choice.margin`` over the positions checked (inf if none).
    - ``tolerance``: the score tolerance used: 2 * eps (greedy) or 2 * eps / T.
    """

    sampler: str
    positions: int
    mismatch: Mismatch | None
    near_ties: int
    tolerated: int
    min_margin: float
    tolerance: float

    @property
    def ok(self) -> bool:
        return self.mismatch is None


@dataclass(frozen=True)
class _RowCheck:
    expected: int
    margin: float
    accepted: bool  # the completion's token passes
    near_tie: bool  # some token other than ``expected`` would pass


def _check_greedy(z: torch.Tensor, claimed: int, tolerance: float) -> _RowCheck:
    expected, margin = _best(torch.arange(z.numel(), device=z.device), z)
    floor = float(z[expected]) - tolerance
    accepted = claimed == expected or (math.isfinite(float(z[claimed]))
                                       and float(z[claimed]) >= floor)
    return _RowCheck(expected, margin, accepted, margin <= tolerance)


def _check_full(logp: torch.Tensor, key: int, claimed: int, tolerance: float) -> _RowCheck:
    ids = torch.nonzero(torch.isfinite(logp)).flatten()
    scores = logp[ids] + _gumbel(key, ids)
    expected, margin = _best(ids, scores)
    accepted = claimed == expected
    if not accepted and math.isfinite(float(logp[claimed])):
        noise = _gumbel(key, torch.tensor([claimed], device=logp.device))
        claimed_score = float(logp[claimed] + noise[0])
        accepted = claimed_score >= float(scores.max()) - tolerance
    return _RowCheck(expected, margin, accepted, margin <= tolerance)


def _nucleus_bounds(n: _Nucleus, top_p: float, r: float) -> tuple[int, int] | None:
    """``plus`` and ``minus`` (``_check_nucleus``) on the prefix ``n``, or None when the
    prefix is too short to decide them exactly."""
    before = torch.cat([torch.zeros(1, dtype=n.cumsum.dtype), n.cumsum])
    ascending = -n.sorted_logp  # ascending, +inf for masked tokens
    finite = n.sorted_logp[:n.finite]
    # possibly kept: mass of tokens surely more probable (log p > log p_i + 2r) < top_p * e^r.
    # That mass only counts tokens before i, so it is exact on the prefix; it grows along the
    # order, so once the prefix's last candidate fails, every later one fails too.
    possibly = before[torch.searchsorted(ascending, -(finite + 2 * r), side="left")] \
        < top_p * math.exp(r)
    if not n.all_in and bool(possibly[-1]):
        return None
    plus = max(int(possibly.sum()), n.kept)
    # certainly kept: e^r * mass of the others that may be more probable (> log p_i - 2r) < top_p;
    # exact on the prefix when nothing after it is above the lowest kept log p - 2r
    head = n.sorted_logp[:n.kept]
    low = head - 2 * r
    if not n.all_in and not float(n.sorted_logp[-1]) <= float(low[-1]):
        return None
    maybe_above = before[torch.searchsorted(ascending, -low, side="left")]
    maybe_above = maybe_above - torch.where(head > low, n.probs[:n.kept], 0.0)  # not itself
    minus = min(int((math.exp(r) * maybe_above < top_p).sum()), n.kept)
    return plus, minus


def _check_nucleus(logp: torch.Tensor, top_p: float, key: int, claimed: int,
                   tolerance: float) -> _RowCheck:
    """Top-p < 1. With r = tolerance (a bound on how far every log-probability and every score
    difference can move), three prefixes of the sorted order: ``minus`` (kept for certain),
    ``kept`` (kept on these logits), ``plus`` (possibly kept). A token passes if it is possibly
    kept and its score is within r of the best certainly-kept score (docs/sampling.md)."""
    r = tolerance
    size = FIRST_PREFIX
    while True:
        n = _nucleus(logp, top_p, size)
        bounds = _nucleus_bounds(n, top_p, r)
        if bounds is not None:
            break
        size = n.size * PREFIX_GROWTH  # never None on the complete order
    plus, minus = bounds

    ids = n.order[:plus]
    scores = n.sorted_logp[:plus] + _gumbel(key, ids)
    kept_ids, by_id = torch.sort(ids[:n.kept])
    expected, margin = _best(kept_ids, scores[:n.kept][by_id])
    floor = (float(scores[:minus].max()) if minus else -math.inf) - r
    passing = ids[scores >= floor]
    accepted = claimed == expected or bool((passing == claimed).any())
    near_tie = bool((passing != expected).any())
    return _RowCheck(expected, margin, accepted, near_tie)


def _check_filtered(lp: torch.Tensor, knobs: Knobs, top_p: float, gumbel: Callable, claimed: int,
                    r: float) -> _RowCheck:
    """The verifier's test for a sampled row with min_p or top_k (``lp``: the tempered
    log-probabilities after steps 1-4; ``gumbel(ids)``: the position's noise; ``r``: the score
    tolerance). Three sets, as ``gym-sampler/1``'s top-p check: *possibly kept* under some
    logits within tolerance, *certainly kept* under all of them, and kept on these logits. A
    token passes if it is possibly kept and its score is within ``r`` of the best certainly-kept
    score. Every set is widened or narrowed by ``2r`` in log-probability (a difference of two
    log-probabilities moves by at most ``r``). Whole-row work is a few comparisons and top-k
    calls; sorting and masses only touch the possibly-kept tokens."""
    d = 2 * r
    candidate = torch.isfinite(lp)
    kept_m = min_p_kept(lp, knobs.min_p) if knobs.min_p > 0 else candidate
    kept = top_k_kept(lp, kept_m, knobs.top_k) if knobs.top_k > 0 else kept_m
    renormalized = lp if bool((kept == candidate).all()) else \
        torch.log_softmax(lp.masked_fill(~kept, float("-inf")), dim=-1)
    kept_ids, kept_lp = _kept_ids(renormalized, top_p)  # the engine's choice, as ``choose``
    expected, margin = _best(kept_ids, kept_lp + gumbel(kept_ids))

    possibly, certainly = candidate, kept  # the filters' sets, then top-p's
    if knobs.min_p > 0:
        gap, edge = lp - lp.max(), math.log(knobs.min_p)
        possibly = kept_m | (candidate & (gap >= edge - d))
        certainly = kept_m & (gap >= edge + d)
    if knobs.top_k > 0:
        k = knobs.top_k
        # possibly: fewer than k certainly-kept tokens above lp + d, i.e. lp >= their k-th - d;
        # certainly: at most k possibly-kept ones (itself included) at or above lp - d
        sure, maybe = lp[certainly], lp[possibly]
        kth = torch.topk(sure, k).values[-1] if sure.numel() >= k else -math.inf
        after = torch.topk(maybe, k + 1).values[-1] if maybe.numel() > k else -math.inf
        possibly = possibly & (kept | (lp >= kth - d))
        certainly = certainly & kept & (lp > after + d)
    ids = torch.nonzero(possibly).flatten()  # ascending; kept ones among them
    lp_in, sure_in = lp[ids], certainly[ids]
    if top_p < 1:
        kept_in = torch.isin(ids, kept_ids)
        # the filters' sets bound the renormalizing mass: F_certain <= F <= F_possible
        probs = (lp_in - lp_in.max()).exp()  # relative masses: only ratios matter
        surely_above = _mass_above(lp_in, probs, sure_in, lp_in + d)
        maybe_above = _mass_above(lp_in, probs, torch.ones_like(sure_in), lp_in - d) \
            - torch.where(lp_in > lp_in - d, probs, 0.0)  # not itself
        passes = kept_in | (math.exp(-d) * surely_above < top_p * probs.sum())
        sure_in = sure_in & kept_in & (math.exp(d) * maybe_above < top_p * probs[sure_in].sum())
        ids, lp_in, sure_in = ids[passes], lp_in[passes], sure_in[passes]
    scores = lp_in + gumbel(ids)  # unnormalized: a shift changes no difference
    floor = (float(scores[sure_in].max()) if bool(sure_in.any()) else -math.inf) - r
    passing = ids[scores >= floor]
    accepted = claimed == expected or bool((passing == claimed).any())
    return _RowCheck(expected, margin, accepted, bool((passing != expected).any()))


def _mass_above(lp: torch.Tensor, probs: torch.Tensor, members: torch.Tensor,
                threshold: torch.Tensor) -> torch.Tensor:
    """For each entry: the total of ``probs`` over ``members`` with ``lp`` > its
    ``threshold``."""
    values, order = torch.sort(lp[members])  # ascending
    cumulative = torch.cat([torch.zeros(1, dtype=probs.dtype, device=probs.device),
                            probs[members][order].cumsum(0)])
    below = torch.searchsorted(values, threshold, right=True)
    return cumulative[-1] - cumulative[below]


def check_completion(logits: torch.Tensor, tokens: list[int], *, temperature: float,
                     top_p: float, seed: int, request_key: bytes, start_position: int = 0,
                     eps: float = DEFAULT_EPS, allowed: torch.Tensor | None = None,
                     knobs: Knobs | None = None, prompt_ids: list[int] | None = None
                     ) -> SamplingCheck:
    """Check that ``tokens[i]`` is the sampler's choice on ``logits[i]`` (the prefill's LM-head
    row that produced it; sampler position ``start_position + i``), up to ``eps``: a token is
    accepted if the sampler could choose it from some logits within ``eps`` (max absolute
    difference) of these. Stops at the first token that fails. With ``knobs`` (``/2``),
    ``prompt_ids`` are the prompt's token ids (the repetition penalty reads them) and ``eps``
    is scaled by how much the penalties can stretch a logit difference."""
    temperature, top_p = _check_params(temperature, top_p, seed, request_key, start_position)
    try:
        eps = float(eps)
    except (TypeError, ValueError):
        raise SamplingError(f"eps must be a number, got {eps!r}") from None
    if not (math.isfinite(eps) and eps >= 0):
        raise SamplingError(f"eps must be finite and >= 0, got {eps!r}")
    z = _check_logits(logits.detach(), 2, allowed)
    vocab = z.shape[1]
    if len(tokens) != z.shape[0]:
        raise SamplingError(f"{len(tokens)} tokens for {z.shape[0]} logits rows")
    for token in tokens:
        _check_int("token", token, vocab)
    _check_int("last position", start_position + len(tokens), 1 << 64)
    greedy = temperature < GREEDY_BELOW
    knobs = None if knobs is None or knobs.neutral else knobs
    past = None
    if knobs is not None:
        eps *= knobs.logit_scale
        past = History(vocab, prompt_ids or [], z.device)
    tolerance = 2 * eps if greedy else 2 * eps / temperature

    near_ties = tolerated = 0
    min_margin = math.inf
    mismatch = None
    for index, claimed in enumerate(tokens):
        position = start_position + index
        row_z = z[index]
        if past is not None:
            row_z = pre_temperature(row_z.to(torch.float64), knobs, position, past)
            past.add(claimed)
        if greedy:
            row = _check_greedy(row_z, claimed, tolerance)
        else:
            logp = _log_probs(row_z, temperature)
            key = position_key(seed, request_key, position)
            if knobs is not None and knobs.filters:
                row = _check_filtered(logp, knobs, top_p, lambda ids, key=key: _gumbel(key, ids),
                                claimed, tolerance)
            elif top_p >= 1:
                row = _check_full(logp, key, claimed, tolerance)
            else:
                row = _check_nucleus(logp, top_p, key, claimed, tolerance)
        min_margin = min(min_margin, row.margin)
        if not row.accepted:
            mismatch = Mismatch(index, position, row.expected, claimed)
            break
        near_ties += row.near_tie
        tolerated += claimed != row.expected
    return SamplingCheck(SAMPLER if knobs is None else knobs.sampler, len(tokens), mismatch,
                         near_ties, tolerated, min_margin, tolerance)
