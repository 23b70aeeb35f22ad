"""Quiet-pool power: the pure-Python figures agree with scipy, with brute force and with simulation."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats  # a required dependency: missing, it must fail, not skip

from embedlab.errors import ConfigError
from embedlab.evidence.busy import leak_power, quiet_power, required_requests
from embedlab.evidence.busy.power import _chi2_critical, _ncx2_sf


def test_two_replica_power_is_the_exact_binomial_of_the_verification_doc() -> None:
    # docs/verification.md, "Burst size for the fairness test": power against skew:0.9.
    for n, power in [(20, 0.6769), (30, 0.9268), (36, 0.9765), (40, 0.9949), (50, 0.9997)]:
        assert quiet_power(n, [1, 1], smallest=False).skew == pytest.approx(power, abs=5e-5)
    assert quiet_power(37, [1, 1]).skew >= 0.99 > quiet_power(38, [1, 1]).skew  # the binomial wobbles
    assert required_requests([1, 1]).requests == 40  # the smallest from which every larger burst holds


def test_the_chi_square_pieces_agree_with_scipy() -> None:
    for df in (2, 3, 7, 15, 63):
        assert _chi2_critical(df, 0.001) == pytest.approx(stats.chi2.isf(0.001, df), rel=1e-9)
        for nc in (0.0, 3.0, 40.0, 200.0):
            x = stats.chi2.isf(0.001, df)
            assert _ncx2_sf(x, df, nc) == pytest.approx(
                stats.ncx2.sf(x, df, nc) if nc else stats.chi2.sf(x, df), rel=1e-7
            )


@pytest.mark.parametrize("replicas", [4, 8])
def test_the_required_burst_catches_the_skew_in_simulation(replicas: int) -> None:
    """Pearson's test at the burst `required_requests` names, under a 0.9/0.1 skew of two replicas."""
    plan = required_requests([1] * replicas)
    rng = np.random.default_rng(replicas)
    fault = np.full(replicas, 1 / replicas)
    fault[0], fault[1] = 0.9 * 2 / replicas, 0.1 * 2 / replicas
    draws = rng.multinomial(plan.requests, fault, size=20_000)
    expected = plan.requests / replicas
    p = stats.chi2.sf(((draws - expected) ** 2 / expected).sum(axis=1), replicas - 1)
    caught = ((p < 0.001) | (draws.min(axis=1) == 0)).mean()
    assert plan.skew >= 0.99 and caught >= 0.985, (plan.requests, caught)


def test_required_requests_grow_with_the_pool_and_meet_every_target() -> None:
    sizes = {k: required_requests([1] * k) for k in (2, 3, 8, 16, 64)}
    assert [sizes[k].requests for k in (2, 3, 8, 16, 64)] == [40, 83, 284, 690, 4350]
    for plan in sizes.values():
        assert plan.require_all and plan.still < 0.001 and plan.idle >= 0.99 and plan.skew >= 0.99
    unequal = required_requests([1, 1, 2, 4])
    assert unequal.requests > sizes[3].requests and unequal.skew >= 0.99


def test_the_sentence_names_the_faults_and_their_odds() -> None:
    sentence = quiet_power(40, [1, 1]).sentence
    assert sentence.startswith(
        "40 requests over 2 replicas: a correct router leaves a replica still with probability 1.8e-12"
    )
    assert (
        "an idle replica is caught with 100 %" in sentence
        and "0.9/0.1 skew between two replicas with 99.5 %" in sentence
    )
    assert "the smallest skew caught with 99 % is 0.89/0.11" in sentence
    assert "so moving is not asserted" in quiet_power(20, [1] * 16).sentence


def test_leak_bounds_are_clopper_pearson() -> None:
    for n, k in [(10, 0), (919, 0), (50, 2), (200, 7)]:
        found = leak_power(n, leaked=k)
        assert found.bound == pytest.approx(stats.beta.ppf(0.99, k + 1, n - k), rel=1e-6)
        assert found.caught == pytest.approx(1 - 0.01 ** (1 / n))
    assert "1 in 200" in leak_power(919).sentence  # "at most 1 request in 200 at 99 % confidence"
    with pytest.raises(ConfigError):
        leak_power(5, leaked=6)
