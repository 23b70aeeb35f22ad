"""Anytime-valid randomization tests over a schedule of windows, and the confidence sequences they give.

The design (schedule.py) puts windows in blocks; each block is one window per arm, in an
order drawn uniformly from all orders. A *unit* is a set of workers (one replica, or every
replica of a model) and the counter of a unit is the sum of theirs. A null hypothesis H(theta)
says that every request of model m the check delivered in a window added `theta` to the
unit's counter in that window. It is *sharp*: given the block's counts, it says what the
counts would have been under every other order. Subtracting `theta` times the delivered
requests leaves the counts of the other clients, `B_t`, which under H(theta) do not depend
on the order at all, whatever their shape over time (Fisher's randomization test; Imbens
and Rubin, *Causal Inference*, 2015, ch. 5). So for the contrast

    T(order) = sum_t (d[order_t] - mean d) * B_t,      d[arm]: requests of m the arm plans,

every order of the block is equally likely under H(theta), and the observed order's place
among them is evidence against H(theta) that the other clients cannot fake.

Sequential and anytime-valid. Each block turns that place into a bet that pays
`1 + lambda * (g(T_obs) - mean over orders of g(T))`, with `g` a clipped, rescaled `T`
and `lambda` chosen from the blocks before (the bet is fair under H(theta), so the running
product is a nonnegative martingale; Ville's inequality then bounds by `alpha` the chance
that it *ever* reaches `1/alpha`, at any stopping time, over an unbounded horizon). Two
bets run per theta: one with lambda >= 0 (the effect exceeds theta) and one with lambda <= 0
(it falls short); each rejection is one-sided, and a confidence sequence takes both. This is
the capital process of Waudby-Smith and Ramdas, *Estimating means of bounded random
variables by betting*, JRSS-B 86(1), 2024 (their aGRAPA bet, here on the
randomization-centred statistic), in the game-theoretic frame of Ramdas, Grünwald, Vovk
and Shafer, *Game-theoretic statistics and safe anytime-valid inference*, Stat. Sci. 2023.
Rescaling by a predictable scale and clipping makes each bet bounded, so no bound on the
other clients' counts is needed (counts are unbounded; a betting CS on raw differences
would need one). With two arms the bet is a sign-flip: at most a doubling per block, so a
level of 1e-3 needs at least 10 blocks whatever the signal.

Inverting H(theta) over a grid of theta gives a confidence sequence: the thetas whose
capital never reached `1/alpha`. For a replica's share that is exact only where the
router's own split of the check's requests is fixed (round-robin); a random router adds
binomial noise to each window's effect, which the test treats as part of the other
clients' noise: the clipped bet stays fair while no clipping is active (the noise is
independent of the order and has mean zero). Where the noise is skewed (few requests a replica)
the clipped bet leans, and engine.py judges that side at a stricter level (docs/busy-method.md). Over an unbounded horizon (a continuous
watch) that small bias could add up; the sharp tests below have none. The placement tests (every
request of m counted on m's replicas: theta = 1) are sharp, so exact; so are the moved tests
(theta = 0: an idle replica gets exactly nothing) wherever placement holds, since engine.py reads
a replica net of the other clients' traffic to its model, which placement pins down.

Why not a library. savvi 0.3.1 (Lindon and Malek, NeurIPS 2022; Lindon et al., KDD 2022)
removes a time-varying rate shared *multiplicatively* by arms that are randomized per unit;
here the check's traffic adds to the other clients', and the windows, not the requests, are
randomized, so its conditional-multinomial test does not apply (and it needs scipy and
cvxpy). confseq 0.0.11 builds a C++ extension and requires scipy, pandas and pytest at run
time; expectation 0.6.1 is a Rust wheel for Python >= 3.12. The method fits in numpy.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

__all__ = ["Betting", "RandomizationCS", "orders"]


def orders(arms: int) -> np.ndarray:
    """Every order of `arms` arms in a block, one row each: row[t] is the arm in window t."""
    return np.array(list(itertools.permutations(range(arms))), dtype=np.int64)


@dataclass(frozen=True)
class Betting:
    """How each block's bet is sized (the aGRAPA bet with one pseudo-observation of prior).

    `scale` multiplies the predictable scale of the contrast before clipping at 1; `spread`
    picks that scale: "median" (of the last `history` blocks' randomization spreads, the
    current block's included: it is the same under every order), "mean" or "rms" (of all
    blocks). The median keeps a burst of the other clients' traffic from shrinking every later
    bet: simulated at 1x bursty traffic, two models, a correct router passed within 60 s 100 %
    of the time with it and 95 % with the mean; at 1x steady it passed a 2-replica pool in 12 s
    where a geometric mean took 13 s and lost 6 points at 4x. `prior_mean` and
    `prior_second` are the pseudo-observation's centred bet and its square; `max_bet` keeps
    every outcome's capital above `1 - max_bet` of what it was. Tuned on the simulations of
    tests/unit/evidence/busy/test_busy_simulation.py; any values keep the test valid.
    """

    scale: float = 1.25
    spread: str = "median"
    history: int = 32
    prior_mean: float = 0.15
    prior_second: float = 0.25
    max_bet: float = 0.9
    flat: float = 1.0  # the payoff is the rescaled contrast up to 1, flat to `flat`, then falls
    zero: float = 1.0  # to 0 at `zero` (Hampel's redescending shape); flat = zero: a plain clip

    def payoff(self, x: np.ndarray) -> np.ndarray:
        """An odd function of the rescaled contrast, in [-1, 1]: odd, so the bet is fair under H(theta)."""
        clipped = np.clip(x, -1.0, 1.0)
        if self.zero <= self.flat:
            return np.asarray(clipped)
        fall = np.clip((self.zero - np.abs(x)) / (self.zero - self.flat), 0.0, 1.0)
        return np.asarray(clipped * fall)


class RandomizationCS:
    """Per unit and per grid value of theta, the capital of one-sided bets against H(theta).

    `up` bets that the effect exceeds theta (its rejections are lower confidence bounds),
    `down` that it falls short (upper bounds). `grid` has shape (units, G): the thetas tested
    for each unit; each theta's bets depend on that theta alone, so a grid of only the values a
    decision reads gives the same decisions. `batch` is a leading shape (simulated runs);
    production uses `()`.
    """

    def __init__(
        self, grid: np.ndarray, *, batch: tuple[int, ...] = (), betting: Betting | None = None
    ) -> None:
        self.grid = np.asarray(grid, dtype=float)
        if self.grid.ndim != 2:
            raise ValueError("grid must have shape (units, G)")
        self.betting = betting or Betting()
        if self.betting.spread not in ("median", "mean", "rms"):
            raise ValueError(f"unknown spread {self.betting.spread!r}")
        shape = (*batch, *self.grid.shape)
        self.log_up = np.zeros(shape)
        self.log_down = np.zeros(shape)
        self.best_up = np.zeros(shape)  # running maxima (log): a rejection stays a rejection
        self.best_down = np.zeros(shape)
        self._sum_y = np.zeros(shape)
        self._sum_y2 = np.zeros(shape)
        self._spreads: list[np.ndarray] = []  # the last `history` blocks' spreads, for the median
        self._sum_spread = np.zeros(shape)
        self._sum_spread2 = np.zeros(shape)
        self.blocks = 0

    def _scale(self, spread: np.ndarray) -> np.ndarray:
        rule, n = self.betting.spread, self.blocks + 1
        if rule == "mean":
            return np.asarray((self._sum_spread + spread) / n)
        if rule == "rms":
            return np.asarray(np.sqrt((self._sum_spread2 + spread * spread) / n))
        return np.asarray(np.median(np.stack([*self._spreads, spread]), axis=0))

    def update(
        self, contrast: np.ndarray, counts: np.ndarray, doses: np.ndarray, observed: np.ndarray
    ) -> None:
        """Take one block.

        contrast: (units, P, M), the contrast weight of window t under order p (planned doses, centred);
        counts: batch + (units, M), each unit's counter delta per window of the block;
        doses: batch + (units, M), requests of the unit's model delivered in each window;
        observed: batch-shaped int, the index in `orders(M)` of the order that ran.
        """
        bet = self.betting
        a = np.einsum("upt,...ut->...up", contrast, counts)
        b = np.einsum("upt,...ut->...up", contrast, doses)
        observed = np.asarray(observed)
        if contrast.shape[1] == 2:
            # Two arms: the other order flips the contrast's sign, so the bet is on a sign.
            pick = np.broadcast_to(observed[..., None, None], (*a.shape[:-1], 1))
            t = np.take_along_axis(a, pick, -1) - self.grid * np.take_along_axis(
                b, pick, -1
            )  # batch, units, G
            spread = np.abs(t)
            s = bet.scale * self._scale(spread)
            with np.errstate(divide="ignore", invalid="ignore"):
                y = bet.payoff(np.where(s > 0, t / s, 0.0))
            low, high = -np.abs(y), np.abs(y)
        else:
            t = a[..., None, :] - self.grid[..., None] * b[..., None, :]  # batch, units, G, P
            spread = t.std(axis=-1)  # the same under every order while H(theta) holds
            s = bet.scale * self._scale(spread)[..., None]
            with np.errstate(divide="ignore", invalid="ignore"):
                g = bet.payoff(np.where(s > 0, t / s, 0.0))
            centred = g - g.mean(axis=-1, keepdims=True)
            index = np.broadcast_to(observed[..., None, None, None], (*centred.shape[:-1], 1))
            y = np.take_along_axis(centred, index, axis=-1)[..., 0]
            low, high = centred.min(axis=-1), centred.max(axis=-1)
        k = 1.0  # pseudo-observations
        second = (k * bet.prior_second + self._sum_y2) / (self.blocks + k)
        up = (k * bet.prior_mean + self._sum_y) / (self.blocks + k) / second
        down = (-k * bet.prior_mean + self._sum_y) / (self.blocks + k) / second
        with np.errstate(divide="ignore"):
            cap_up = np.minimum(bet.max_bet, np.where(low < 0, bet.max_bet / -low, np.inf))
            cap_down = np.minimum(bet.max_bet, np.where(high > 0, bet.max_bet / high, np.inf))
        self.log_up += np.log1p(np.clip(up, 0.0, cap_up) * y)
        self.log_down += np.log1p(np.clip(down, -cap_down, 0.0) * y)
        np.maximum(self.best_up, self.log_up, out=self.best_up)
        np.maximum(self.best_down, self.log_down, out=self.best_down)
        self._sum_y += y
        self._sum_y2 += y * y
        self._sum_spread += spread
        self._sum_spread2 += spread * spread
        if self.betting.spread == "median":
            self._spreads = [*self._spreads[-(self.betting.history - 1) :], spread]
        self.blocks += 1

    def keep(self, rows: np.ndarray) -> None:
        """Keep only these rows of the batch (a simulation drops the checks that have decided)."""
        for name in (
            "log_up",
            "log_down",
            "best_up",
            "best_down",
            "_sum_y",
            "_sum_y2",
            "_sum_spread",
            "_sum_spread2",
        ):
            setattr(self, name, getattr(self, name)[rows])
        self._spreads = [h[rows] for h in self._spreads]

    def rejected(self, alpha: float | np.ndarray, *, side: str) -> np.ndarray:
        """Where H(theta) has been rejected at level `alpha` at some block so far: side "above"
        (the effect exceeds theta: a lower confidence bound) or "below" (it falls short)."""
        level = -np.log(np.asarray(alpha, dtype=float))
        capital = {"above": self.best_up, "below": self.best_down}[side]
        return np.asarray(capital >= level)
