"""The pure-Python p-values agree with scipy's."""

from __future__ import annotations

import pytest
from scipy import stats  # a required dependency: missing, it must fail, not skip

from embedlab.evidence.stats import binom_two_sided, chisquare_p


@pytest.mark.parametrize("n", [1, 2, 7, 20, 40, 101, 400])
@pytest.mark.parametrize("p", [0.5, 0.25, 0.75, 0.9])
def test_binomial_matches_scipy(n: int, p: float) -> None:
    for k in sorted({0, 1, n // 3, n // 2, n - 1, n}):
        assert binom_two_sided(k, n, p) == pytest.approx(stats.binomtest(k, n, p).pvalue, rel=1e-9, abs=1e-15)


@pytest.mark.parametrize(
    "observed",
    [[10, 10, 10], [30, 0, 0], [12, 8, 10, 10], [100, 90, 110, 95, 105], [1, 2, 3], [400, 380, 420, 10]],
)
def test_chisquare_matches_scipy(observed: list[int]) -> None:
    total = sum(observed)
    expected = [total / len(observed)] * len(observed)
    assert chisquare_p(observed, expected) == pytest.approx(
        stats.chisquare(observed, expected).pvalue, rel=1e-9, abs=1e-300
    )
