"""The verifiable sampler gym-sampler/1 (docs/sampling.md): known answers, bit-exact noise,
no hidden state, greedy/top-p/mask rules, the sampled distribution, and the verifier's check."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from inference_node import sampling
from inference_node.errors import InferenceNodeError, SamplingError
from inference_node.sampling import (
    GREEDY_BELOW,
    SAMPLER,
    check_completion,
    choose,
    position_key,
    uniforms,
)

KEY = bytes(range(32))  # the docs' request key
LOGITS = torch.tensor([2.0, 1.0, 0.5, 2.0, -1.0, 0.0, 1.5, -0.5])  # the docs' logits

# docs/sampling.md, "Test vectors": position -> (key, u_0..u_3, token at T=0 / T=0.8 / T=0.8 p=0.7)
VECTORS = {
    0: (0x14020C013E28C6AD, (0.036527574032506505, 0.35840485968128977, 0.8752420642475834,
                             0.007907831106085506), (0, 2, 0)),
    1: (0x9334E47F0642B67C, (0.7552404322230716, 0.5985987259010149, 0.8871281321640802,
                             0.4220183289171636), (0, 0, 0)),
    2: (0xBA03E6D0E25B0B5E, (0.5353143091265317, 0.26253488675018233, 0.8327422630924964,
                             0.1606925094092796), (0, 0, 0)),
    3: (0x10714E73BFDA898B, (0.811296188173649, 0.10404804029542214, 0.699092010199636,
                             0.8934154732105496), (0, 3, 3)),
}


def pick(logits, position=0, *, temperature=0.8, top_p=1.0, seed=42, request_key=KEY, **kw):
    return choose(logits, temperature=temperature, top_p=top_p, seed=seed,
                  request_key=request_key, position=position, **kw)


def splitmix64_stream(seed: int):
    """Textbook SplitMix64 on Python ints: the independent oracle."""
    state = seed
    while True:
        state = (state + 0x9E3779B97F4A7C15) % 2**64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) % 2**64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) % 2**64
        yield z ^ (z >> 31)


def numpy_uniforms(key: int, ids: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        x = (ids.astype(np.uint64) + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(key)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return ((x >> np.uint64(12)).astype(np.float64) + 0.5) / 2.0**52


# --------------------------------------------------------------------------- known answers


def test_sampler_name_and_constants():
    assert SAMPLER == "gym-sampler/1" and sampling.KEY_TAG == b"gym-sampler/1"
    assert GREEDY_BELOW == 1e-5 and sampling.DEFAULT_EPS == 1e-3


@pytest.mark.parametrize("position", sorted(VECTORS))
def test_docs_test_vectors(position):
    key, first_uniforms, (greedy, tempered, nucleus) = VECTORS[position]
    assert position_key(42, KEY, position) == key
    assert uniforms(key, torch.arange(4)).tolist() == list(first_uniforms)  # bit-exact
    assert pick(LOGITS, position, temperature=0).token == greedy
    assert pick(LOGITS, position, temperature=0.8).token == tempered
    assert pick(LOGITS, position, temperature=0.8, top_p=0.7).token == nucleus
    assert pick(LOGITS, position, temperature=0.8, top_p=0.7).kept == 3  # ids 0, 3, 6


def test_position_key_is_the_documented_sha256_layout():
    import hashlib

    seed, position = 2**64 - 1, 7
    message = b"gym-sampler/1" + seed.to_bytes(8, "big") + KEY + position.to_bytes(8, "big")
    assert len(message) == 13 + 8 + 32 + 8
    expected = int.from_bytes(hashlib.sha256(message).digest()[:8], "big")
    assert position_key(seed, KEY, position) == expected


def test_noise_is_the_standard_splitmix64_stream():
    stream = splitmix64_stream(0)
    assert next(stream) == 0xE220A8397B1DCDAF  # the published first output for seed 0
    for key in (0, 1, 2**63, 2**64 - 1, position_key(42, KEY, 0)):
        stream = splitmix64_stream(key)
        expected = [((next(stream) >> 12) + 0.5) / 2**52 for _ in range(64)]
        assert uniforms(key, torch.arange(64)).tolist() == expected


def test_uniforms_lie_on_the_documented_grid_strictly_inside_0_1():
    u = uniforms(position_key(1, KEY, 3), torch.arange(49152))
    assert u.dtype == torch.float64 and bool((u > 0).all()) and bool((u < 1).all())
    scaled = u * 2.0**52 - 0.5
    assert torch.equal(scaled, scaled.floor())  # an integer: the mapping is exact
    assert float(uniforms(0, torch.tensor([0]))[0]) == ((0xE220A8397B1DCDAF >> 12) + 0.5) / 2**52


@pytest.mark.parametrize("key", [0, 1, 2**63 - 1, 2**63, 2**64 - 1, 0x14020C013E28C6AD])
def test_torch_int64_noise_is_bit_exact_with_numpy_uint64_over_the_vocabulary(key):
    ids = np.arange(49152)
    expected = numpy_uniforms(key, ids)
    computed = uniforms(key, torch.arange(49152)).numpy()
    assert np.array_equal(computed.view(np.uint64), expected.view(np.uint64))
    subset = np.array([49151, 7, 0, 30000])  # any subset, any order: per-id, no stream state
    assert np.array_equal(uniforms(key, torch.from_numpy(subset)).numpy(), expected[subset])


# --------------------------------------------------------------------------- no hidden state


def test_same_inputs_same_token_whatever_ran_in_between():
    logits = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    first = [pick(logits, p, temperature=1.0, top_p=0.9) for p in range(20)]
    torch.manual_seed(123)
    np.random.seed(5)
    [pick(logits, p, seed=9) for p in range(50)]  # other requests in between
    again = [pick(logits, p, temperature=1.0, top_p=0.9) for p in reversed(range(20))][::-1]
    assert first == again


def test_noise_depends_on_seed_request_and_position():
    ids = torch.arange(256)
    base = uniforms(position_key(42, KEY, 5), ids)
    others = [position_key(43, KEY, 5), position_key(42, bytes(32), 5), position_key(42, KEY, 6)]
    for key in others:
        assert not bool((uniforms(key, ids) == base).any())
    flat = torch.zeros(50)  # equal logits: the token is the noise's choice
    tokens = {pick(flat, p, temperature=1.0).token for p in range(40)}
    assert len(tokens) > 20


# --------------------------------------------------------------------------- the rules


def test_greedy_is_argmax_with_lowest_id_on_ties_and_ignores_noise_inputs():
    logits = torch.tensor([0.5, 3.0, -1.0, 3.0, 2.5])
    for temperature in (0.0, GREEDY_BELOW / 2):
        for seed, position in ((0, 0), (7, 11), (2**64 - 1, 999)):
            got = pick(logits, position, temperature=temperature, top_p=0.1, seed=seed)
            assert got == sampling.Choice(token=1, margin=0.0, kept=5)
    assert pick(torch.tensor([1.0, 4.0, 2.5]), temperature=0).margin == 1.5
    assert pick(torch.tensor([1.0]), temperature=0).margin == math.inf
    assert pick(torch.tensor([0.0, 50.0]), temperature=GREEDY_BELOW).token == 1  # sampled


def test_top_p_keeps_everything_at_least_as_probable_as_the_threshold_token():
    # probabilities 0.4, 0.2, 0.2, 0.2 (T = 1): the cumsum reaches 0.5 at the 2nd token, whose
    # probability 0.2 is shared by two more: all three tied tokens are kept, whatever their ids
    probs = torch.tensor([0.2, 0.4, 0.2, 0.05, 0.2, 0.05, 0.0])
    logits = probs.log()
    assert pick(logits, temperature=1.0, top_p=0.5).kept == 4
    assert pick(logits, temperature=1.0, top_p=0.3).kept == 1
    assert pick(logits, temperature=1.0, top_p=0.9).kept == 4
    assert pick(logits, temperature=1.0, top_p=0.95).kept == 6
    assert pick(logits, temperature=1.0, top_p=1.0).kept == 6  # zero-probability token: -inf
    chosen = {pick(logits, p, temperature=1.0, top_p=0.5).token for p in range(300)}
    assert chosen == {0, 1, 2, 4}
    assert {pick(logits, p, temperature=1.0, top_p=0.3).token for p in range(50)} == {1}
    permuted = logits[[4, 2, 1, 0, 6, 5, 3]]  # the same set, tied ids in another order
    assert pick(permuted, temperature=1.0, top_p=0.5).kept == 4


def test_the_mask_hook_excludes_disallowed_tokens():
    logits = torch.tensor([5.0, 4.9, 0.0, 4.8, 1.0])
    allowed = torch.tensor([False, True, True, False, True])
    assert pick(logits, temperature=0, allowed=allowed).token == 1
    chosen = {pick(logits, p, temperature=5.0, allowed=allowed).token for p in range(300)}
    assert chosen == {1, 2, 4}
    assert pick(logits, temperature=5.0, allowed=allowed).kept == 3
    with pytest.raises(SamplingError, match="no token is allowed"):
        pick(logits, temperature=1.0, allowed=torch.zeros(5, dtype=torch.bool))


def chi_square(counts: np.ndarray, probs: np.ndarray) -> float:
    expected = probs * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())


def test_samples_follow_softmax_over_temperature_and_renormalised_top_p():
    logits = torch.tensor([1.0, 0.2, -0.5, 0.8, -1.5])
    temperature = 0.7
    probs = torch.softmax(logits.double() / temperature, 0).numpy()
    counts = np.bincount([pick(logits, p, temperature=temperature, seed=3).token
                          for p in range(20000)], minlength=5)
    assert chi_square(counts, probs) < 18.47  # chi-square, 4 dof, p = 0.001
    # top_p = 0.8 keeps tokens 0, 3, 1 (cumsum 0.38, 0.71, 0.87): renormalised over those
    kept = np.array([0, 3, 1])
    assert probs[kept[:2]].sum() < 0.8 <= probs[kept].sum()
    counts = np.bincount([pick(logits, p, temperature=temperature, top_p=0.8, seed=4).token
                          for p in range(10000)], minlength=5)
    assert counts[[2, 4]].sum() == 0
    assert chi_square(counts[kept], probs[kept] / probs[kept].sum()) < 13.82  # 2 dof, p = 0.001


# --------------------------------------------------------------------------- the verifier


def sample_completion(logits, **params):
    return [pick(row, i + params.pop("start", 0), **params).token
            for i, row in enumerate(logits)]


@pytest.mark.parametrize("temperature,top_p", [(0.0, 1.0), (0.8, 1.0), (0.8, 0.9), (1.3, 0.5)])
def test_check_accepts_the_samplers_tokens_and_names_the_first_changed_one(temperature, top_p):
    logits = torch.randn(24, 300, generator=torch.Generator().manual_seed(1)) * 3
    params = {"temperature": temperature, "top_p": top_p, "seed": 42, "request_key": KEY}
    tokens = [choose(row, position=5 + i, **params).token for i, row in enumerate(logits)]
    check = check_completion(logits, tokens, start_position=5, **params)
    assert check.ok and check.positions == 24 and check.sampler == SAMPLER
    assert check.tolerated == 0 and check.min_margin > check.tolerance
    # no margin is within tolerance; at most a top-p boundary one (here seed 1, T=1.3, p=0.5:
    # at row 16 the 6th and 7th most probable tokens are 0.2% apart and straddle the edge)
    assert check.near_ties == (1 if (temperature, top_p) == (1.3, 0.5) else 0)
    changed = list(tokens)
    changed[17] = int(torch.argmin(logits[17]))  # a token no sampler would pick
    changed[20] = (changed[20] + 1) % 300
    check = check_completion(logits, changed, start_position=5, **params)
    assert not check.ok
    assert check.mismatch == sampling.Mismatch(index=17, position=22, expected=tokens[17],
                                               actual=changed[17])
    shifted = check_completion(logits, tokens, start_position=6, **params)  # wrong positions
    assert temperature == 0 or not shifted.ok


def test_greedy_near_tie_is_counted_not_failed():
    logits = torch.tensor([[0.0, 3.0, 2.9995, 1.0], [5.0, 0.0, 0.0, 0.0], [1.0, 2.0, 2.0, 0.0]])
    params = {"temperature": 0.0, "top_p": 1.0, "seed": 0, "request_key": KEY}
    check = check_completion(logits, [1, 0, 1], **params)
    assert check.ok and (check.near_ties, check.tolerated) == (2, 0)
    assert check.min_margin == 0.0 and check.tolerance == 2e-3
    check = check_completion(logits, [2, 0, 2], **params)  # the other side of both ties
    assert check.ok and (check.near_ties, check.tolerated) == (2, 2)
    check = check_completion(logits, [2, 0, 2], eps=1e-4, **params)  # 5e-4 > 2 * eps
    assert check.mismatch == sampling.Mismatch(0, 0, 1, 2)


def race_tie(gap: float, position: int, temperature: float = 0.5):
    """Logits where tokens 0 and 1 finish the Gumbel race ``gap / T`` apart (1 ahead)."""
    g = -torch.log(-torch.log(uniforms(position_key(42, KEY, position), torch.arange(2))))
    return torch.tensor([0.0, temperature * float(g[0] - g[1]) + gap, -30.0, -30.0])


def test_sampled_near_tie_is_counted_within_2_eps_over_t_and_failed_beyond():
    temperature = 0.5
    params = {"temperature": temperature, "top_p": 1.0, "seed": 42, "request_key": KEY}
    logits = torch.stack([race_tie(4e-4, 0), race_tie(2.0, 1)])
    assert [pick(row, i, temperature=temperature).token for i, row in enumerate(logits)] == [1, 1]
    check = check_completion(logits, [0, 1], **params)  # token 0 lost by 8e-4 <= 4e-3
    assert check.ok and (check.near_ties, check.tolerated) == (1, 1)
    assert check.tolerance == pytest.approx(4e-3) and check.min_margin < 1e-3
    check = check_completion(logits, [0, 0], **params)
    assert check.mismatch == sampling.Mismatch(1, 1, 1, 0)
    assert not check_completion(logits, [0, 1], eps=1e-4, **params).ok


def test_top_p_boundary_within_tolerance_is_a_near_tie():
    # p(token 0) just above top_p = 0.5: the verifier keeps only token 0, but logits within eps
    # could put it below and keep token 1 as well; a position where token 1 wins that race
    params = {"temperature": 1.0, "seed": 42, "request_key": KEY}
    boundary = torch.tensor([math.log(0.5 + 1e-5), math.log(0.5 - 1e-5)])
    position = next(p for p in range(100) if pick(boundary, p, **params).token == 1)
    assert pick(boundary, position, top_p=0.5, **params).token == 0
    logits = boundary.unsqueeze(0)
    check = check_completion(logits, [1], top_p=0.5, start_position=position, **params)
    assert check.ok and (check.near_ties, check.tolerated) == (1, 1)
    clear = torch.tensor([[math.log(0.6), math.log(0.4)]])  # far from the boundary
    check = check_completion(clear, [1], top_p=0.5, start_position=position, **params)
    assert check.mismatch is not None and check.mismatch.expected == 0
    check = check_completion(clear, [0], top_p=0.5, start_position=position, **params)
    assert check.ok and check.near_ties == 0 and check.min_margin == math.inf


def test_check_with_the_mask_hook_fails_a_disallowed_token():
    logits = torch.tensor([[3.0, 2.9999, 0.0]])
    allowed = torch.tensor([[True, False, True]])
    params = {"temperature": 0.0, "top_p": 1.0, "seed": 0, "request_key": KEY}
    assert check_completion(logits, [1], **params).ok  # a near-tie without the mask
    assert check_completion(logits, [1], allowed=allowed, **params).mismatch.expected == 0


# --------------------------------------------------------------------------- validation


def test_sampling_error_is_a_node_error_and_a_value_error():
    assert issubclass(SamplingError, InferenceNodeError) and issubclass(SamplingError, ValueError)


@pytest.mark.parametrize("change,match", [
    ({"temperature": -0.1}, "temperature"), ({"temperature": math.nan}, "temperature"),
    ({"temperature": math.inf}, "temperature"), ({"temperature": "hot"}, "numbers"),
    ({"top_p": 0.0}, "top_p"), ({"top_p": 1.01}, "top_p"), ({"top_p": math.nan}, "top_p"),
    ({"seed": -1}, "seed"), ({"seed": 2**64}, "seed"), ({"seed": True}, "seed"),
    ({"seed": 1.0}, "seed"), ({"request_key": bytes(31)}, "request_key"),
    ({"request_key": "00" * 32}, "request_key"), ({"position": -1}, "position"),
    ({"logits": torch.ones(2, 4)}, "1-D"), ({"logits": torch.ones(4, dtype=torch.int64)}, "1-D"),
    ({"logits": torch.tensor([0.0, math.nan])}, "NaN"),
    ({"logits": torch.tensor([0.0, math.inf])}, r"\+inf"),
    ({"allowed": torch.ones(3, dtype=torch.bool)}, "allowed"),
    ({"allowed": torch.ones(4)}, "allowed"),
])
def test_choose_rejects_inputs_outside_the_spec(change, match):
    args = {"logits": torch.zeros(4), "temperature": 1.0, "top_p": 1.0, "seed": 0,
            "request_key": KEY, "position": 0, "allowed": None} | change
    with pytest.raises(SamplingError, match=match):
        choose(args.pop("logits"), **args)


@pytest.mark.parametrize("change,match", [
    ({"tokens": [0]}, "1 tokens for 2"), ({"tokens": [0, 4]}, "token"),
    ({"tokens": [0, -1]}, "token"), ({"eps": -1e-3}, "eps"), ({"eps": math.inf}, "eps"),
    ({"start_position": -1}, "position"), ({"start_position": 2**64 - 1}, "last position"),
    ({"logits": torch.zeros(4)}, "2-D"),
])
def test_check_completion_rejects_inputs_outside_the_spec(change, match):
    args = {"logits": torch.zeros(2, 4), "tokens": [0, 1], "temperature": 1.0, "top_p": 1.0,
            "seed": 0, "request_key": KEY} | change
    with pytest.raises(SamplingError, match=match):
        check_completion(args.pop("logits"), args.pop("tokens"), **args)


def test_noise_functions_reject_bad_keys_and_ids():
    with pytest.raises(SamplingError):
        uniforms(2**64, torch.arange(3))
    with pytest.raises(SamplingError):
        uniforms(0, torch.tensor([-1]))
    with pytest.raises(SamplingError):
        uniforms(0, torch.tensor([0.5]))
    with pytest.raises(SamplingError):
        position_key(0, KEY, 2**64)


# --------------------------------------------------------------------------- top-p on a prefix
# sampling._nucleus decides top-p on a top-k prefix when it can; these references sort the whole
# row, as docs/sampling.md states the rule, and every result must be the same bit for bit.


def reference_nucleus(logp: torch.Tensor, top_p: float):
    """Step 4 on the full stable sort: (sorted logp, order, probs, running sums, kept, finite)."""
    sorted_logp, order = torch.sort(logp, descending=True, stable=True)
    probs = sorted_logp.exp()
    cumsum = probs.cumsum(0)
    finite = int(torch.isfinite(logp).sum())
    reach = int(torch.searchsorted(cumsum, torch.tensor([top_p], dtype=torch.float64)))
    kept = finite if reach >= finite else min(int((probs >= probs[reach]).sum()), finite)
    return sorted_logp, order, probs, cumsum, kept, finite


def reference_choose(logp, nucleus, *, top_p, seed, position):
    """Steps 4 and 5 on the full sort ``nucleus`` of the tempered row ``logp``."""
    if top_p >= 1:
        ids = torch.nonzero(torch.isfinite(logp)).flatten()
    else:
        _, order, _, _, kept, _ = nucleus
        ids = torch.sort(order[:kept]).values
    scores = logp[ids] + sampling._gumbel(position_key(seed, KEY, position), ids)
    index = int(torch.argmax(scores))
    margin = math.inf if ids.numel() < 2 else \
        float(torch.topk(scores, 2).values[0]) - float(torch.topk(scores, 2).values[1])
    return sampling.Choice(int(ids[index]), margin, ids.numel()), ids


def reference_check_nucleus(nucleus, top_p, key, claimed, r):
    """The verifier's top-p rule (plus / minus prefixes) on the full sort."""
    sorted_logp, order, probs, cumsum, kept, finite = nucleus
    before = torch.cat([torch.zeros(1, dtype=torch.float64), cumsum])
    ascending = -sorted_logp
    candidates = sorted_logp[:finite]
    surely_above = before[torch.searchsorted(ascending, -(candidates + 2 * r), side="left")]
    plus = max(int((surely_above < top_p * math.exp(r)).sum()), kept)
    head = sorted_logp[:kept]
    low = head - 2 * r
    maybe_above = before[torch.searchsorted(ascending, -low, side="left")]
    maybe_above = maybe_above - torch.where(head > low, probs[:kept], 0.0)
    minus = min(int((math.exp(r) * maybe_above < top_p).sum()), kept)
    ids = order[:plus]
    scores = sorted_logp[:plus] + sampling._gumbel(key, ids)
    kept_ids, by_id = torch.sort(ids[:kept])
    kept_scores = scores[:kept][by_id]
    expected = int(kept_ids[int(torch.argmax(kept_scores))])
    top2 = torch.topk(kept_scores, min(2, kept)).values
    margin = math.inf if kept < 2 else float(top2[0]) - float(top2[1])
    floor = (float(scores[:minus].max()) if minus else -math.inf) - r
    passing = ids[scores >= floor]
    accepted = claimed == expected or bool((passing == claimed).any())
    return sampling._RowCheck(expected, margin, accepted, bool((passing != expected).any()))


def nucleus_rows(seed: int):
    """(logits, allowed or None) rows that stress the prefix: plain, tied at and around the
    threshold, flat, masked down to fewer or more candidates than the first prefix."""
    gen = torch.Generator().manual_seed(seed)
    first = sampling.FIRST_PREFIX
    for vocab in (300, 4000):
        yield torch.randn(vocab, generator=gen) * 3, None
        yield torch.randn(vocab, generator=gen) * 0.3, None  # flat: the sort decides
        yield torch.round(torch.randn(vocab, generator=gen) * 2), None  # many exact ties
        yield torch.round(torch.randn(vocab, generator=gen) * 8) / 4, None
        yield torch.zeros(vocab), None  # every token tied
        tied = torch.full((vocab,), -20.0)  # a head, then a tied block straddling the prefix
        tied[:10] = 3.0
        tied[10:10 + 2 * first] = 1.0
        yield tied[torch.randperm(vocab, generator=gen)], None
        logits = torch.randn(vocab, generator=gen) * 2
        for candidates in (1, first - 1, first, first + 1, vocab // 3):
            allowed = torch.zeros(vocab, dtype=torch.bool)
            allowed[torch.randperm(vocab, generator=gen)[:candidates]] = True
            yield logits, allowed
        masked = torch.randn(vocab, generator=gen) * 4
        masked[torch.randperm(vocab, generator=gen)[:vocab // 2]] = float("-inf")
        yield masked, None
    yield torch.randn(49152, generator=gen) * 3, None  # SmolLM2's vocabulary
    peaked = torch.randn(49152, generator=gen) * 2
    peaked[7] = 30.0
    yield peaked, None


TOP_PS = (1e-12, 0.05, 0.5, 0.9, 0.99, 0.999999, 1 - 2**-53, 1.0)
TEMPERATURES = (1e-5, 0.05, 0.7, 1.0, 20.0)


def test_cpu_cumsum_is_the_left_to_right_float64_sum():
    # the spec's running sum; a prefix's sums are then the full row's first sums
    gen = torch.Generator().manual_seed(0)
    p = torch.rand(49152, generator=gen, dtype=torch.float64) \
        * torch.exp(torch.randn(49152, generator=gen, dtype=torch.float64) * 10)
    running, sums = 0.0, []
    for value in p.tolist():
        running += value
        sums.append(running)
    assert p.cumsum(0).tolist() == sums
    assert p[:100].cumsum(0).tolist() == sums[:100]


@pytest.mark.parametrize("seed", [0, 1])
def test_top_p_prefix_equals_the_full_sort(seed):
    prefixes = complete = 0
    rows = list(nucleus_rows(seed))
    for index, (logits, allowed) in enumerate(rows):
        z = logits if allowed is None else logits.masked_fill(~allowed, float("-inf"))
        for temperature in TEMPERATURES:
            logp = torch.log_softmax(z.double() / temperature, -1)
            references = {}
            for top_p in TOP_PS[:-1]:
                n = sampling._nucleus(logp, top_p)
                sorted_logp, order, probs, cumsum, kept, finite = references[top_p] = \
                    reference_nucleus(logp, top_p)
                prefixes += not n.complete
                complete += n.complete
                assert n.kept == kept
                assert torch.equal(n.cumsum, cumsum[:n.size])  # bit for bit
                assert torch.equal(n.sorted_logp, sorted_logp[:n.size])
                assert torch.equal(n.probs, probs[:n.size])
                assert torch.equal(torch.sort(n.order[:kept]).values,
                                   torch.sort(order[:kept]).values)
                if n.all_in:
                    assert n.finite == finite
            for top_p in TOP_PS:
                params = {"temperature": temperature, "top_p": top_p, "seed": seed,
                          "position": index}
                want, want_ids = reference_choose(logp, references.get(top_p), top_p=top_p,
                                                  seed=seed, position=index)
                got = choose(logits, request_key=KEY, allowed=allowed, **params)
                assert got == want, (index, temperature, top_p)
                assert torch.equal(sampling._kept_ids(logp, top_p)[0], want_ids)
    assert prefixes > 100 and complete > 100  # both paths ran


def test_check_nucleus_on_a_prefix_equals_the_full_sort(seed=0):
    gen = torch.Generator().manual_seed(100 + seed)
    for index, (logits, allowed) in enumerate(nucleus_rows(seed)):
        z = logits if allowed is None else logits.masked_fill(~allowed, float("-inf"))
        for temperature in (0.05, 0.7, 20.0):
            logp = torch.log_softmax(z.double() / temperature, -1)
            key = position_key(seed, KEY, index)
            for top_p in (1e-12, 0.5, 0.9, 0.999999):
                nucleus = reference_nucleus(logp, top_p)
                order, kept = nucleus[1], nucleus[4]
                # claims: the tokens either side of the edge, a random token
                claims = {int(i) for i in order[max(0, kept - 2):kept + 2]}
                claims.add(int(torch.randint(z.numel(), (1,), generator=gen)))
                for eps in (0.0, 1e-3, 1.0):
                    r = 2 * eps / temperature
                    for claimed in claims:
                        want = reference_check_nucleus(nucleus, top_p, key, claimed, r)
                        got = sampling._check_nucleus(logp, top_p, key, claimed, r)
                        assert got == want, (index, temperature, top_p, eps, claimed)
