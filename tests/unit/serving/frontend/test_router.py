from __future__ import annotations

import math
from collections import Counter

import pytest

from embedlab.serving.frontend.dispatch import make_policy
from embedlab.serving.frontend.instances import Instance


def instances(*weights: float) -> list[Instance]:
    return [
        Instance(instance_id=f"i{k}", endpoint=f"ns.w{k}.ep", model="m", url="http://x", weight=w)
        for k, w in enumerate(weights)
    ]


@pytest.mark.parametrize("weights", [(1.0, 1.0), (3.0, 1.0)])
def test_weighted_split_within_binomial_tolerance(weights: tuple[float, float]) -> None:
    n = 2000
    policy = make_policy("weighted-random", seed=1234)
    pool = instances(*weights)
    counts = Counter(policy.pick("m", pool).instance_id for _ in range(n))
    p = weights[0] / sum(weights)
    sigma = math.sqrt(n * p * (1 - p))
    # 4 sigma: a correct router fails this about once in 16,000 seeds; a 1:1 router
    # under 3:1 weights is off by ~23 sigma.
    assert abs(counts["i0"] - n * p) < 4 * sigma, counts


def test_seed_makes_choices_reproducible() -> None:
    pool = instances(1, 1, 1)
    first = make_policy("weighted-random", seed=7)
    second = make_policy("weighted-random", seed=7)
    assert [first.pick("m", pool).instance_id for _ in range(50)] == [
        second.pick("m", pool).instance_id for _ in range(50)
    ]


def test_round_robin_cycles_per_model() -> None:
    policy = make_policy("round-robin")
    pool = instances(1, 1, 1)
    assert [policy.pick("m", pool).instance_id for _ in range(6)] == ["i0", "i1", "i2", "i0", "i1", "i2"]


def test_least_inflight_prefers_idle_and_breaks_ties_at_random() -> None:
    policy = make_policy("least-inflight", seed=3)
    pool = instances(1, 1, 1)
    pool[0].inflight = 2
    picks = Counter(policy.pick("m", pool).instance_id for _ in range(600))
    assert picks["i0"] == 0
    assert picks["i1"] > 200 and picks["i2"] > 200, "ties must not always go to the first instance"


def test_unknown_mode_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown router mode"):
        make_policy("fastest")
