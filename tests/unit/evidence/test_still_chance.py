"""The chance that a correct weighted-random router leaves some worker still: exact where it can be."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from embedlab.evidence.stats import EXACT_STILL_TERMS, still_chance


def brute_force(weights: list[int], requests: int) -> Fraction:
    """Every assignment of the requests to workers, with its probability, summed where one worker got none."""
    total = sum(weights)
    chance = Fraction(0)
    for assignment in itertools.product(range(len(weights)), repeat=requests):
        if len(set(assignment)) < len(weights):
            chance += math.prod(Fraction(weights[i], total) for i in assignment)
    return chance


def every_subset(weights: list[float], requests: int) -> Fraction:
    """Inclusion-exclusion over every set of workers, one by one, in exact fractions."""
    shares = [Fraction(w) / sum(map(Fraction, weights)) for w in weights]
    return sum(
        (
            (-1) ** (size + 1) * (1 - sum(chosen)) ** requests
            for size in range(1, len(shares) + 1)
            for chosen in itertools.combinations(shares, size)
        ),
        Fraction(0),
    )


def equal_weights_exact(workers: int, requests: int) -> Fraction:
    """1 - K! S(n, K) / K^n, the surjections counted in integers: no rounding anywhere."""
    onto = sum((-1) ** j * math.comb(workers, j) * (workers - j) ** requests for j in range(workers + 1))
    return 1 - Fraction(onto, workers**requests)


@pytest.mark.parametrize(
    "weights, requests",
    [([1, 1, 1, 1], 4), ([1, 1, 1, 1], 7), ([3, 1], 6), ([3, 1, 1], 6), ([1, 2, 3], 7), ([1, 1, 2, 2], 6)],
)
def test_the_chance_is_exact_against_every_assignment(weights: list[int], requests: int) -> None:
    found = still_chance(weights, requests)
    assert found.exact
    assert found.value == pytest.approx(float(brute_force(weights, requests)), abs=1e-12)


def test_four_workers_four_requests_is_90_6_percent_not_the_capped_union_bound() -> None:
    found = still_chance([1, 1, 1, 1], 4)
    assert found.value == pytest.approx(1 - math.factorial(4) / 4**4) and found.exact
    assert found.of_the_time() == "90.6% of the time"
    # What the union bound said: 4 * (3/4)^4 = 1.27, capped at 1.
    assert 4 * (3 / 4) ** 4 > 1


@pytest.mark.parametrize("workers, requests", [(30, 100), (64, 400), (200, 2000)])
def test_large_equal_pools_are_one_group_and_exact(workers: int, requests: int) -> None:
    found = still_chance([1.0] * workers, requests)
    assert found.exact
    assert found.value == pytest.approx(float(equal_weights_exact(workers, requests)), abs=1e-9)


def test_fewer_requests_than_workers_leave_one_still_for_certain() -> None:
    assert still_chance([1, 5, 1], 2).value == 1.0 and still_chance([1, 5, 1], 2).exact


def test_one_worker_is_never_still() -> None:
    assert still_chance([2.0], 1).value == 0.0


def test_beyond_the_exact_terms_it_is_the_union_bound_and_says_so() -> None:
    weights = [float(w) for w in range(1, 14)]  # 13 distinct weights: 2**13 groups of terms
    assert 2**13 > EXACT_STILL_TERMS
    found = still_chance(weights, 100)
    total = sum(weights)
    assert not found.exact
    assert found.value == pytest.approx(min(1.0, sum((1 - w / total) ** 100 for w in weights)))
    assert found.of_the_time().startswith("at most ") and found.of_the_time().endswith("(the union bound)")
    # One weight fewer fits: exact, and under the bound.
    fewer = still_chance(weights[:-1], 100)
    assert fewer.exact and fewer.value <= sum((1 - w / sum(weights[:-1])) ** 100 for w in weights[:-1])


@pytest.mark.parametrize(
    "weights, requests",
    [([0.1, 0.2, 0.7], 40), ([0.1, 0.2, 0.7], 400), ([1.5, 0.5, 0.5], 30), ([1, 1, 1, 2, 2, 3], 25)],
)
def test_fractional_weights_in_integers_or_floats_agree_with_every_subset(
    weights: list[float], requests: int
) -> None:
    # 0.1 is 3602879701896397 / 2**55 exactly: at 400 requests the terms are summed in floats.
    found = still_chance(weights, requests)
    assert found.exact
    assert found.value == pytest.approx(float(every_subset(weights, requests)), rel=1e-9, abs=1e-15)


def test_at_64_replicas_it_agrees_with_simulation_and_names_the_burst_the_planner_takes() -> None:
    rng = np.random.default_rng(0)
    draws = rng.multinomial(400, [1 / 64] * 64, size=20_000)
    simulated = (draws.min(axis=1) == 0).mean()
    exact = still_chance([1] * 64, 400).value
    assert abs(simulated - exact) < 4 * np.sqrt(exact * (1 - exact) / 20_000), (simulated, exact)
    # The burst that first brings a 64-replica pool's chance under 0.1 %.
    assert still_chance([1] * 64, 703).value < 0.001 <= still_chance([1] * 64, 702).value
