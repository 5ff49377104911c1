"""gym-sampler/2 (docs/sampling.md): vLLM's knobs as exact transforms, the verifier's tolerant
check on them, and gym-sampler/1 unchanged when every knob is neutral."""

from __future__ import annotations

import pytest
import torch

from inference_node.errors import SamplingError
from inference_node.sampler_knobs import (
    SAMPLER_V2,
    Knobs,
    filtered,
    from_normalized,
    history,
    pre_temperature,
)
from inference_node.sampling import SAMPLER, check_completion, choose

KEY = bytes(range(32))
VOCAB = 512


def _logits(rows: int, seed: int = 0) -> torch.Tensor:
    """Random rows where a few ids (0-11, the prompt's 3, 5, 7, 11 among them) lead, so answers
    repeat tokens and the penalties have something to act on."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, VOCAB, generator=g) * 3
    logits[:, :12] += 6
    return logits


def _generate(logits: torch.Tensor, prompt: list[int], knobs: Knobs | None, **params
              ) -> list[int]:
    """What an engine does: one choose per row, the completion so far as the history."""
    tokens: list[int] = []
    for position, row in enumerate(logits):
        past = history(VOCAB, prompt, tokens)
        tokens.append(choose(row, seed=7, request_key=KEY, position=position, knobs=knobs,
                             past=past, **params).token)
    return tokens


KNOBS = {
    "penalties": Knobs(repetition_penalty=1.3, frequency_penalty=0.7, presence_penalty=0.5),
    "rp below 1": Knobs(repetition_penalty=0.6),
    "logit_bias": Knobs(logit_bias=((3, 100.0), (5, -100.0), (9, 2.5))),
    "min_p": Knobs(min_p=0.05),
    "top_k": Knobs(top_k=5),
    "all": Knobs(min_tokens=3, min_tokens_ids=frozenset({1, 2}), logit_bias=((4, 1.5),),
                 repetition_penalty=1.2, frequency_penalty=0.3, presence_penalty=-0.4,
                 min_p=0.02, top_k=20),
}
PARAMS = [{"temperature": 0.0, "top_p": 1.0}, {"temperature": 1.0, "top_p": 1.0},
          {"temperature": 0.7, "top_p": 0.9}, {"temperature": 1.3, "top_p": 0.5}]


@pytest.mark.parametrize("params", PARAMS, ids=lambda p: f"T{p['temperature']}-p{p['top_p']}")
@pytest.mark.parametrize("name", list(KNOBS))
def test_the_check_accepts_what_the_engine_chose_on_nearby_logits(name: str, params: dict
                                                                   ) -> None:
    knobs = KNOBS[name]
    logits = _logits(24)
    prompt = [3, 5, 7, 11, 300]
    tokens = _generate(logits, prompt, knobs, **params)
    noisy = logits + (torch.rand(logits.shape, generator=torch.Generator().manual_seed(1))
                      - 0.5) * 1e-3  # within eps = 1e-3
    result = check_completion(noisy, tokens, seed=7, request_key=KEY, knobs=knobs,
                              prompt_ids=prompt, **params)
    assert result.ok, result
    assert result.sampler == SAMPLER_V2


@pytest.mark.parametrize("params", PARAMS, ids=lambda p: f"T{p['temperature']}-p{p['top_p']}")
@pytest.mark.parametrize("name", list(KNOBS))
def test_the_check_fails_an_answer_sampled_without_the_knobs(name: str, params: dict) -> None:
    """A node that ignores the knobs it signed is caught: the same logits without them give
    other tokens, and the check fails at or before the first one. (Greedy ignores min_p and
    top_k, as vLLM's greedy path does: there the tokens are the same and pass.)"""
    knobs = KNOBS[name]
    logits = _logits(24, seed=2)
    prompt = [3, 5, 7, 11, 300]
    honest = _generate(logits, prompt, knobs, **params)
    ignored = _generate(logits, prompt, None, **params)
    result = check_completion(logits, ignored, seed=7, request_key=KEY, knobs=knobs,
                              prompt_ids=prompt, **params)
    if name in ("min_p", "top_k") and params["temperature"] == 0:
        assert honest == ignored and result.ok
        return
    assert honest != ignored
    first = next(i for i, (a, b) in enumerate(zip(honest, ignored, strict=True)) if a != b)
    assert not result.ok and result.mismatch.index <= first


@pytest.mark.parametrize("params", PARAMS, ids=lambda p: f"T{p['temperature']}-p{p['top_p']}")
def test_neutral_knobs_are_gym_sampler_1(params: dict) -> None:
    logits = _logits(16, seed=3)
    assert _generate(logits, [1, 2], Knobs(), **params) == _generate(logits, [1, 2], None,
                                                                     **params)
    assert Knobs().sampler == SAMPLER == "gym-sampler/1"
    result = check_completion(logits, _generate(logits, [1, 2], None, **params), seed=7,
                              request_key=KEY, knobs=Knobs(), **params)
    assert result.ok and result.sampler == SAMPLER


def test_min_tokens_masks_the_stop_ids_until_its_position() -> None:
    logits = torch.zeros(6, VOCAB)
    logits[:, 2] = 50.0  # EOS would win every greedy row
    knobs = Knobs(min_tokens=4, min_tokens_ids=frozenset({2}))
    tokens = _generate(logits, [], knobs, temperature=0.0, top_p=1.0)
    assert 2 not in tokens[:4] and tokens[4:] == [2, 2]
    # a grammar that allows only the stop id keeps it: the mask never empties a row
    only_eos = torch.full((VOCAB,), float("-inf"), dtype=torch.float64)
    only_eos[2] = 0.0
    assert torch.equal(pre_temperature(only_eos, knobs, 0, None), only_eos)


def test_filters_keep_what_vllm_keeps() -> None:
    """min_p against max probability, top_k keeping ties at the k-th value, then renormalized."""
    lp = torch.log_softmax(torch.tensor([2.0, 2.0, 1.0, 1.0, 1.0, -3.0], dtype=torch.float64), 0)
    kept = torch.isfinite(filtered(lp, Knobs(top_k=3)))
    assert kept.tolist() == [True, True, True, True, True, False]  # 3rd value tied three ways
    probs = lp.exp()
    kept = torch.isfinite(filtered(lp, Knobs(min_p=0.3)))
    assert kept.tolist() == (probs >= 0.3 * probs.max()).tolist()
    assert torch.isclose(filtered(lp, Knobs(top_k=2)).exp().sum(), torch.tensor(1.0,
                         dtype=torch.float64))


def test_penalties_match_vllms_own_implementation() -> None:
    """Steps 2-4 against vLLM's apply_penalties and logit bias on the same rows (vLLM is the
    model the spec follows; its code is the oracle)."""
    pytest.importorskip("vllm")
    from vllm.model_executor.layers.utils import apply_penalties

    logits = _logits(3, seed=5)
    prompts = [[1, 2, 3, 3], [7], [9, 9, 10]]
    outputs = [[3, 4, 4, 4], [7, 7, 8], []]
    knobs = [Knobs(repetition_penalty=1.4, frequency_penalty=0.3, presence_penalty=0.2),
             Knobs(repetition_penalty=0.8, frequency_penalty=-0.5, presence_penalty=1.0),
             Knobs(repetition_penalty=1.9)]
    pad = VOCAB
    width_p, width_o = max(map(len, prompts)), max(map(len, outputs))
    theirs = apply_penalties(
        logits.clone(),
        torch.tensor([p + [pad] * (width_p - len(p)) for p in prompts]),
        torch.tensor([o + [pad] * (width_o - len(o)) for o in outputs]),
        torch.tensor([k.presence_penalty for k in knobs]),
        torch.tensor([k.frequency_penalty for k in knobs]),
        torch.tensor([k.repetition_penalty for k in knobs]))
    for row, (prompt, output, k) in enumerate(zip(prompts, outputs, knobs, strict=True)):
        ours = pre_temperature(logits[row].double(), k, len(output),
                               history(VOCAB, prompt, output))
        assert torch.allclose(ours, theirs[row].double(), atol=1e-5), row


def test_knobs_outside_their_domain_are_refused() -> None:
    for bad in ({"repetition_penalty": 0.0}, {"repetition_penalty": 2.5},
                {"presence_penalty": 3.0}, {"frequency_penalty": float("nan")},
                {"min_p": 1.5}, {"top_k": -1}, {"min_tokens": True},
                {"logit_bias": ((5, 1.0), (3, 1.0))}, {"logit_bias": ((3, 101.0),)},
                {"logit_bias": ((3, 0.0),)}):
        with pytest.raises(SamplingError):
            Knobs(**bad)
    with pytest.raises(SamplingError, match="outside the vocabulary"):
        choose(torch.zeros(8), temperature=0.0, top_p=1.0, seed=0, request_key=KEY, position=0,
               knobs=Knobs(logit_bias=((8, 1.0),)))


def test_wire_and_normalized_forms_round_trip() -> None:
    knobs = KNOBS["all"]
    assert Knobs.from_wire(knobs.to_wire()) == knobs
    normalized = {"min_tokens": 3, "logit_bias": {"4": 1.5}, "repetition_penalty": 1.2,
                  "frequency_penalty": 0.3, "presence_penalty": -0.4, "min_p": 0.02,
                  "top_k": 20, "stop_token_ids": [1]}
    assert from_normalized(normalized, frozenset({2})) == knobs
    with pytest.raises(SamplingError):
        Knobs.from_wire({**knobs.to_wire(), "extra": 1})
