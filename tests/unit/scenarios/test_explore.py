"""The arithmetic behind the explore notebook: expected shares and convergence."""

from __future__ import annotations

import math

import pytest

from embedlab import ConfigError
from embedlab.scenarios.explore import cumulative_shares, weight_shares, weights_label


def test_expected_shares_follow_the_weights() -> None:
    assert weight_shares([3, 1]) == [0.75, 0.25]
    assert weight_shares([1, 1, 2]) == [0.25, 0.25, 0.5]


@pytest.mark.parametrize("weights", [[], [1, 0], [2, -1]])
def test_weights_that_cannot_route_are_refused(weights: list[float]) -> None:
    with pytest.raises(ConfigError, match="positive"):
        weight_shares(weights)


def test_cumulative_shares_accumulate_over_steps() -> None:
    shares = cumulative_shares([[14, 6], [12, 8], [16, 4]])
    assert shares[0] == [0.7, 0.3]
    assert shares[1] == [26 / 40, 14 / 40]
    assert shares[2] == [42 / 60, 18 / 60]


def test_cumulative_shares_before_anything_moved_are_nan_not_zero() -> None:
    first, second = cumulative_shares([[0, 0], [1, 3]])
    assert all(math.isnan(x) for x in first)
    assert second == [0.25, 0.75]


def test_weights_label() -> None:
    assert weights_label([3.0, 1.0]) == "w=3:1"
    assert weights_label([0.5, 2]) == "w=0.5:2"
