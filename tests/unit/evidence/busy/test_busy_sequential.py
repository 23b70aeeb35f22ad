"""The randomization bets are fair whatever the other clients do: their false-rejection rate holds.

The null here is sharp (the check's requests add exactly theta each), so the bound is exact:
backgrounds are chosen to break tests that assume Poisson or stationary traffic.
"""

from __future__ import annotations

import numpy as np
import pytest

from embedlab.evidence.busy.sequential import Betting, RandomizationCS, orders

RUNS, BLOCKS, ALPHA = 2000, 40, 0.05


def _backgrounds(rng: np.random.Generator, arms: int):
    return {
        # Heavy-tailed counts: no variance to speak of.
        "cauchy": lambda b: np.round(np.abs(rng.standard_cauchy((RUNS, arms))) * 10),
        # A ramp that climbs across each block too.
        "trend": lambda b: np.full((RUNS, arms), b * 5.0) + np.arange(arms) * 3.0 * b,
        # Rare huge bursts in the first window of a block, always the same position.
        "burst": lambda b: (
            np.where(rng.random((RUNS, 1)) < 0.2, 1000.0, 0.0) * (np.arange(arms) == 0)
            + rng.poisson(5, (RUNS, arms))
        ),
    }


def _rejections(arms: int, background, rng: np.random.Generator, theta: float, effect: float) -> np.ndarray:
    table = orders(arms)
    dose = np.zeros(arms)
    dose[0] = 20.0
    contrast = (dose[table] - dose.mean())[None]
    cs = RandomizationCS(np.array([[theta]]), batch=(RUNS,))
    for b in range(BLOCKS):
        observed = rng.integers(len(table), size=RUNS)
        delivered = dose[table[observed]]
        counts = background(b) + effect * delivered
        cs.update(contrast, counts[:, None, :], delivered[:, None, :], observed)
    return cs.rejected(ALPHA, side="above")[:, 0, 0] | cs.rejected(ALPHA, side="below")[:, 0, 0]


@pytest.mark.parametrize("arms", [2, 3])
@pytest.mark.parametrize("shape", ["cauchy", "trend", "burst"])
def test_a_true_null_is_rejected_at_most_alpha_of_the_time(arms: int, shape: str) -> None:
    rng = np.random.default_rng(11)
    rate = _rejections(arms, _backgrounds(rng, arms)[shape], rng, theta=0.5, effect=0.5).mean()
    # Each side at ALPHA: at most 2 * ALPHA in all, plus three standard errors of the estimate.
    assert rate <= 2 * ALPHA + 3 * np.sqrt(2 * ALPHA / RUNS), rate


def test_a_false_null_is_rejected() -> None:
    rng = np.random.default_rng(12)
    poisson = lambda b: rng.poisson(10, (RUNS, 2)).astype(float)  # noqa: E731
    assert _rejections(2, poisson, rng, theta=0.0, effect=0.5).mean() == 1.0
    assert _rejections(2, poisson, rng, theta=1.0, effect=0.5).mean() == 1.0


def test_a_rejection_stays_a_rejection_and_rows_can_be_dropped() -> None:
    cs = RandomizationCS(np.array([[0.0, 1.0]]), batch=(3,))
    contrast = np.array([[[10.0, -10.0], [-10.0, 10.0]]])
    for _ in range(30):
        cs.update(
            contrast, np.array([[[20.0, 0.0]]] * 3), np.array([[[20.0, 0.0]]] * 3), np.zeros(3, dtype=int)
        )
    before = cs.rejected(0.001, side="above").copy()
    assert before[:, 0, 0].all() and not before[:, 0, 1].any()  # 0 ruled out, the true 1 kept
    for _ in range(30):  # the evidence turns: the running maximum keeps what was shown
        cs.update(
            contrast, np.array([[[0.0, 20.0]]] * 3), np.array([[[20.0, 0.0]]] * 3), np.zeros(3, dtype=int)
        )
    assert cs.rejected(0.001, side="above")[:, 0, 0].all()
    cs.keep(np.array([True, False, True]))
    assert cs.rejected(0.001, side="above").shape == (2, 1, 2)


def test_payoffs_are_odd_and_bounded() -> None:
    x = np.linspace(-10, 10, 201)
    for bet in (Betting(), Betting(flat=2.0, zero=4.0)):
        y = bet.payoff(x)
        assert np.allclose(y, -bet.payoff(-x)) and np.abs(y).max() <= 1.0
