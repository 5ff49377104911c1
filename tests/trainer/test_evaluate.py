"""Mean@k and Pass@k arithmetic, and the paired evaluation of library and adapter arms."""

import pytest

from ledger.evaluations import mean_at_k, pass_at_k, pass_rate
from trainer.backends import Usage, derive_seed
from trainer.evaluate import evaluate_arms, evaluate_library
from trainer.tfgrpo_prompts import LIBRARY_INTRO, Experience
from trainer.verifiers import exact_match


def test_pass_at_k_estimator():
    assert pass_at_k(5, 0, 1) == 0.0
    assert pass_at_k(5, 5, 3) == 1.0
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2) = 1 - 3/6
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(4, 3, 2) == 1.0  # only one wrong sample: any 2 include a correct one
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)


def test_mean_and_pass_over_problems():
    rewards = [[1, 0, 0, 1], [0, 0, 0, 0], [1, 1, 1, 1]]
    assert mean_at_k(rewards) == pytest.approx((0.5 + 0 + 1) / 3)
    assert pass_rate(rewards, 4) == pytest.approx(2 / 3)
    assert pass_rate(rewards, 1) == pytest.approx((0.5 + 0 + 1) / 3)


class SeededCoin:
    """Right with probability 0.3 without a library and 0.8 with one, decided by the row seed."""

    def __init__(self):
        self.usage = Usage()
        self.seen: list[tuple[int, int]] = []

    def generate(self, prompts, n=1, temperature=0.7, top_p=1.0, max_new_tokens=256, seed=0):
        out = []
        for i, prompt in enumerate(prompts):
            p = 0.8 if LIBRARY_INTRO in prompt[0]["content"] else 0.3
            row = []
            for j in range(n):
                u = derive_seed(seed, i, j) % 1000 / 1000
                row.append("Answer: 1" if u < p else "Answer: 2")
                self.seen.append((seed, derive_seed(seed, i, j)))
            out.append(row)
        return out


def test_both_arms_share_prompts_and_seeds():
    backend = SeededCoin()
    problems = [{"problem": f"q{i}", "answer": "1"} for i in range(20)]
    result = evaluate_library(backend, problems, [Experience("a", "Be careful.")], exact_match,
                              k=4, seeds=(0, 1, 2))
    assert result["seeds"] == [0, 1, 2] and result["k"] == 4
    for arm in ("baseline", "library"):
        s = result[arm]["mean_at_k"]
        assert len(s["values"]) == 3 and s["min"] <= s["mean"] <= s["max"] and s["std"] >= 0
    assert result["library"]["mean_at_k"]["mean"] > result["baseline"]["mean_at_k"]["mean"]
    # Each seed's rows are drawn twice, once per arm, with identical seeds.
    per_arm = len(backend.seen) // 2
    assert backend.seen[:80] == backend.seen[80:160] and per_arm == 240


class Biased(SeededCoin):
    """SeededCoin whose odds are raised by `boost` (a stand-in for a model with an adapter)."""

    def __init__(self, boost: float):
        super().__init__()
        self.boost = boost

    def generate(self, prompts, n=1, temperature=0.7, top_p=1.0, max_new_tokens=256, seed=0):
        out = []
        for i, prompt in enumerate(prompts):
            p = (0.8 if LIBRARY_INTRO in prompt[0]["content"] else 0.3) + self.boost
            out.append(["Answer: 1" if derive_seed(seed, i, j) % 1000 / 1000 < p else "Answer: 2"
                        for j in range(n)])
            self.seen.extend((seed, derive_seed(seed, i, j)) for j in range(n))
        return out


def test_adapter_arms_share_prompts_and_seeds_with_the_base():
    base, tuned = Biased(0.0), Biased(0.15)
    problems = [{"problem": f"q{i}", "answer": "1"} for i in range(30)]
    library = [Experience("a", "Be careful.")]
    result = evaluate_arms({"baseline": (base, []), "library": (base, library),
                            "adapter": (tuned, []), "adapter+library": (tuned, library)},
                           problems, exact_match, k=4, seeds=(0, 1))
    assert result["arms"] == ["baseline", "library", "adapter", "adapter+library"]
    mean = {arm: result[arm]["mean_at_k"]["mean"] for arm in result["arms"]}
    assert mean["baseline"] < mean["adapter"] < mean["library"] < mean["adapter+library"]
    assert base.seen == tuned.seen  # the same rows, with the same seeds, in every arm
    assert result["library_size"] == 1
