"""The trainer's nucleus filter: found among the best 1,024 tokens, the same nucleus as sorting
the whole vocabulary (which it falls back to when the nucleus is wider)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from trainer import backends
from trainer.backends import _top_p_filter


def nucleus_by_sorting(scores, top_p):
    """The definition: the fewest best tokens whose probabilities reach top_p."""
    kept = torch.zeros_like(scores, dtype=torch.bool)
    probs = scores.softmax(-1)
    for row in range(len(scores)):
        order = scores[row].argsort(descending=True, stable=True)
        before = probs[row][order].cumsum(-1) - probs[row][order]
        kept[row, order[before <= top_p]] = True
    return kept


@pytest.mark.parametrize("scale", [0.3, 2.0, 8.0, 40.0])  # flat (past 1,024 tokens) to peaked
@pytest.mark.parametrize("top_p", [0.1, 0.9, 0.999])
def test_the_nucleus_is_the_one_sorting_finds(scale, top_p):
    generator = torch.Generator().manual_seed(int(scale * 10) + int(top_p * 1000))
    scores = torch.randn(6, 49152, generator=generator) * scale
    filtered = _top_p_filter(scores, top_p)
    kept = filtered != -float("inf")
    assert torch.equal(kept, nucleus_by_sorting(scores, top_p))
    assert torch.equal(filtered[kept], scores[kept])  # kept scores are unchanged
    assert kept[torch.arange(6), scores.argmax(-1)].all()  # the best token always stays


def test_a_wide_nucleus_sorts_the_row_and_agrees(monkeypatch):
    scores = torch.randn(3, 5000, generator=torch.Generator().manual_seed(1)) * 0.5
    monkeypatch.setattr(backends, "TOP_P_CANDIDATES", 16)  # every row needs the fallback
    narrow = _top_p_filter(scores, 0.9)
    monkeypatch.setattr(backends, "TOP_P_CANDIDATES", 10**6)  # one topk over the whole row
    assert torch.equal(narrow, _top_p_filter(scores, 0.9))
