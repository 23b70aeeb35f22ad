"""The units a busy check judges, their confidence sequences, and the rule that stops it.

Units, for each model m the schedule sends:
    placement  every replica of m, counted +1, and (where the schedule sends other models too)
               every replica of those, counted -1/(M-1): the dose of an arm is its requests of
               m minus the mean of its requests of the others. Under a correct router the
               effect is exactly the dose (theta = 1: a sharp null, tested exactly). A model k
               leaking a share q_k, wherever it lands, makes theta = 1 - q_m - sum_k q_(k->m)/(M-1)
               (worked out in docs/busy-method.md), so a lower bound L on theta bounds m's
               leak: q_m <= 1 - L. Counting the other replicas too uses both ends of a leak:
               with two models the test sees twice the shift for sqrt(2) times the noise. With
               two models both units are one (the second is the first negated), so one is kept.
    counted    every replica of m, counted +1, against m's requests alone: each request of m the
               check delivered must be counted exactly once on m's replicas (theta = 1, sharp,
               tested on both sides). A router that serves a share s of m's requests twice (a
               timeout retry whose first attempt still counts, hedging) makes theta = 1 + s; one
               that answers a share without any replica (a response cache, a drop answered 200)
               or sends it elsewhere makes it smaller. The placement unit tells where requests
               went, not how often each was counted; this one does. Where the router's own
               per-model admissions are read beside the workers' (`others`), the unit (and the
               placement unit) is read net of them: the other clients' traffic to m is then known,
               not estimated, and the bet sees almost no noise.
    replica    each replica of m, where m has two or more: its share of m's requests, expected
               weight / (sum of the replicas' weights). Its counter is read net of a
               covariate: c - beta (C - n), with C the counters of all m's replicas and n the
               check's requests of m in the window (covariance adjustment; Rosenbaum, Stat. Sci.
               17(3), 2002). C - n is the other clients' traffic to m wherever every request of
               m lands on m's replicas once (what the placement unit tests exactly), so it does
               not depend on the order, and any beta fixed before the block keeps the bet fair:
               beta is c's regression on C over earlier blocks' off windows (the expected share
               before there are any). It takes out the swings a burst's edge puts into a block,
               and it is the router's real share of the other clients' requests, so a starved
               replica still reads 0. Simulated on 16 replicas at 1x bursty traffic, a
               correct pool passed in a median 21 s with it, 35 s without; faults were caught
               as fast (docs/busy-method.md).

The decision after each block; each one-sided test at level alpha / (2 x units) (Bonferroni):
    failed   some unit's expected share is ruled out, from above or below (a leak, an idle or
             skewed replica, a request counted twice or not at all)
    passed   nothing failed, every unit moved (zero ruled out from above), every 0.9/0.1 skew
             between two replicas is ruled out (the high share from below or the low one from
             above), with two models or more theta = 1 - `leak` is ruled out from above, and
             every model's requests were counted once within `surplus` (1 + surplus ruled out
             from below, 1 - surplus from above)
    neither  the check goes on (to its budget, then ends inconclusive)

A pass is a statement about faults, not only the absence of a failure: a router with a ruled-out
fault passes with probability at most `alpha`. Decisions read only thetas that were tested
(each fault's value is on its unit's grid); the bounds shown are the grid's hull, widened to
the next value tested.

Everything is vectorised over a leading batch shape, so one code path serves one real check
(batch `()`) and thousands of simulated ones (simulate.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import ConfigError
from .constants import BUSY_CHECK_ALPHA, LEAK, SKEW, SKEWED_STRICTER, SKEWNESS, SURPLUS
from .schedule import Schedule
from .sequential import Betting, RandomizationCS, orders

__all__ = ["COUNTED", "PLACEMENT", "REPLICA", "BlockEngine", "Decision", "Unit"]

# What a unit judges (Unit.kind).
PLACEMENT, REPLICA, COUNTED = "placement", "replica", "counted"

# Thetas tested, as multiples of a unit's expected share: fine up to twice the share, then
# geometric up to "every request of a 64-replica model on one replica".
_RELATIVE = np.concatenate([np.linspace(0.0, 2.0, 401), np.geomspace(2.05, 100.0, 48)])


@dataclass(frozen=True)
class Unit:
    name: str
    model: str
    workers: tuple[int, ...]
    expected: float
    kind: str  # PLACEMENT, REPLICA or COUNTED

    @property
    def placement(self) -> bool:
        return self.kind == PLACEMENT

    @property
    def replica(self) -> bool:
        return self.kind == REPLICA

    @property
    def counted(self) -> bool:
        return self.kind == COUNTED


@dataclass(frozen=True)
class Decision:
    """The state after the last block, as arrays of shape batch (+ units)."""

    failed: np.ndarray
    passed: np.ndarray
    misfit: np.ndarray  # per unit: its expected share ruled out
    moved: np.ndarray  # per unit: zero ruled out
    leak_ruled_out: np.ndarray  # per unit (True where not asked)
    skews_ruled_out: np.ndarray  # per unit: every skew with it as the high or the low replica
    counted_once: (
        np.ndarray
    )  # per unit: a surplus and a shortfall of `surplus` ruled out (True where not asked)
    low: np.ndarray  # per unit, the confidence sequence's hull (NaN: empty)
    high: np.ndarray
    estimate: np.ndarray


def units_for(
    models: Sequence[str | None], weights: Sequence[float], sent: Sequence[str]
) -> tuple[Unit, ...]:
    """The units for a pool (worker index -> model, weight; None: a worker left out, in no unit)
    and the models a schedule sends."""
    units = []
    for n, model in enumerate(sent):
        replicas = tuple(i for i, m in enumerate(models) if m == model)
        if not replicas:
            raise ConfigError(f"no worker serves '{model}', which the schedule sends")
        units.append(Unit(f"'{model}' counted once", model, replicas, 1.0, COUNTED))
        if len(sent) > 1 and (len(sent) != 2 or n == 0):
            name = f"'{model}' replicas" if len(sent) != 2 else f"'{sent[0]}' and '{sent[1]}' replicas"
            units.append(Unit(name, model, replicas, 1.0, PLACEMENT))
        total = sum(weights[i] for i in replicas)
        if len(replicas) >= 2:
            units += [Unit(f"worker {i}", model, (i,), weights[i] / total, REPLICA) for i in replicas]
    return tuple(units)


class BlockEngine:
    def __init__(
        self,
        doses: dict[str, Sequence[int]],
        models: Sequence[str | None],
        weights: Sequence[float] | None = None,
        *,
        alpha: float = BUSY_CHECK_ALPHA,
        skew: float = SKEW,
        leak: float = LEAK,
        surplus: float = SURPLUS,
        batch: tuple[int, ...] = (),
        betting: Betting | None = None,
        resolution: str = "full",
    ) -> None:
        """`doses`: model -> requests each arm plans per window (by arm index); `models`: each worker's
        model (None: a worker left out of every unit, such as one that died). `surplus`: the share of
        requests counted twice (or not at all) a pass must rule out. `resolution` "decisions" tests
        only the thetas the decision reads (the same decisions, no bounds worth showing): for
        simulations."""
        weights = list(weights) if weights is not None else [1.0] * len(models)
        if len(weights) != len(models) or min(weights) <= 0:
            raise ConfigError(f"{len(models)} workers need as many positive weights, got {weights}")
        self.models_sent = tuple(doses)
        self.units = units_for(models, weights, self.models_sent)
        self.alpha, self.skew, self.leak, self.surplus = alpha, skew, leak, surplus
        self.arms = len(next(iter(doses.values())))
        table = orders(self.arms)
        n_units, n_workers = len(self.units), len(models)
        # Each unit's counts and doses are fixed combinations of the workers' deltas and the models' requests.
        self._member = np.zeros((n_units, n_workers))
        self._dose = np.zeros((n_units, len(self.models_sent)))
        # A replica's covariate: its model's counters less the check's requests of that model (its
        # dose). The other units' is the router's count of the other clients' requests (`others`),
        # where it is read: the same combination of models as the unit's dose.
        self._cov_member = np.zeros((n_units, n_workers))
        self._prior = np.zeros(n_units)
        self._replica = np.array([u.replica for u in self.units])
        contrast = np.zeros((n_units, len(table), self.arms))
        others = len(self.models_sent) - 1
        for u, unit in enumerate(self.units):
            m = self.models_sent.index(unit.model)
            self._member[u, list(unit.workers)] = 1.0
            self._dose[u, m] = 1.0
            if unit.replica:
                self._cov_member[u, [i for i, x in enumerate(models) if x == unit.model]] = 1.0
            self._prior[u] = unit.expected
            if unit.placement and others:
                for k, other in enumerate(self.models_sent):
                    if k != m:
                        self._member[u, [i for i, x in enumerate(models) if x == other]] = -1.0 / others
                        self._dose[u, k] = -1.0 / others
            d = self._dose[u] @ np.array([doses[x] for x in self.models_sent], dtype=float)
            contrast[u] = d[table] - d.mean()
        self._contrast = contrast
        self.asks_leak = len({m for m in models if m is not None}) > 1
        self._trust_above, self._trust_below = _trusted_sides(self.units, doses)
        self._build_grid(resolution)
        self.cs = RandomizationCS(self.grid, batch=batch, betting=betting)
        self._num = np.zeros((*batch, n_units))
        self._den = np.zeros((*batch, n_units))
        self._sxy = np.zeros((*batch, n_units))  # over earlier off windows: counter x covariate
        self._sxx = np.zeros((*batch, n_units))  # and covariate squared

    @classmethod
    def of(
        cls,
        schedule: Schedule,
        models: Sequence[str | None],
        weights: Sequence[float] | None = None,
        **kw: Any,
    ) -> BlockEngine:
        """The engine of `schedule`'s arms: the one way a check (the one-shot monitor's, each of the
        watch's staggered tests) turns its schedule into the units it judges."""
        return cls({m: schedule.doses(m) for m in schedule.models}, models, weights, **kw)

    def _build_grid(self, resolution: str) -> None:
        specials: list[list[float]] = [[0.0, u.expected] for u in self.units]
        self._pairs: list[tuple[int, int, float, float]] = []  # (high unit, low unit, high theta, low theta)
        for u, a in enumerate(self.units):
            if a.placement and self.asks_leak:
                specials[u].append(1.0 - self.leak)
            if a.counted:
                specials[u] += [1.0 - self.surplus, 1.0 + self.surplus]
            for i, b in enumerate(self.units):
                if i != u and a.replica and b.replica and a.model == b.model:
                    both = a.expected + b.expected
                    self._pairs.append((u, i, self.skew * both, (1.0 - self.skew) * both))
                    specials[u].append(self.skew * both)
                    specials[i].append((1.0 - self.skew) * both)
        base = {"full": _RELATIVE, "decisions": np.zeros(0)}[resolution]
        values = [np.unique(np.concatenate([base * u.expected, s])) for u, s in zip(self.units, specials)]
        width = max(len(v) for v in values)
        self.grid = np.stack([np.pad(v, (0, width - len(v)), mode="edge") for v in values])
        self._i_expected = np.array([self._at(u, x.expected) for u, x in enumerate(self.units)])
        self._i_zero = np.zeros(len(self.units), dtype=np.int64)
        self._i_leak = np.array(
            [
                self._at(u, 1.0 - self.leak) if x.placement and self.asks_leak else -1
                for u, x in enumerate(self.units)
            ]
        )
        self._i_short = np.array(
            [self._at(u, 1.0 - self.surplus) if x.counted else -1 for u, x in enumerate(self.units)]
        )
        self._i_surplus = np.array(
            [self._at(u, 1.0 + self.surplus) if x.counted else -1 for u, x in enumerate(self.units)]
        )
        self._p_high = np.array(
            [(u, self._at(u, hi)) for u, _, hi, _ in self._pairs], dtype=np.int64
        ).reshape(-1, 2)
        self._p_low = np.array([(i, self._at(i, lo)) for _, i, _, lo in self._pairs], dtype=np.int64).reshape(
            -1, 2
        )

    def _at(self, u: int, theta: float) -> int:
        """Where `theta` falls in unit u's grid of tested shares."""
        return int(np.searchsorted(self.grid[u], theta))

    @property
    def blocks(self) -> int:
        return self.cs.blocks

    @property
    def stricter(self) -> dict[str, str]:
        """The units whose share accuses from one side only at a stricter level, and that side
        ("below": a share too small; "above": too large)."""
        return {
            u.name: "below" if self._trust_above[i] else "above"
            for i, u in enumerate(self.units)
            if not (self._trust_above[i] and self._trust_below[i])
        }

    def add_block(
        self, deltas: np.ndarray, sent: np.ndarray, observed: np.ndarray, others: np.ndarray | None = None
    ) -> None:
        """deltas: batch + (workers, arms): each worker's counter delta per window of the block, in
        window order; sent: batch + (models sent, arms): the check's requests answered per window;
        observed: batch-shaped index of the block's order in `sequential.orders(arms)`; others,
        where the router's own counts are read: batch + (models sent, arms), the requests of each
        model the router admitted in each window less the check's own (the other clients').

        A covariate must not depend on the block's order, and the other clients' requests do not
        (what the test assumes of them anyway), whoever counts them; so any coefficient fixed
        before the block keeps the bet fair, even where the router's count is wrong."""
        raw = np.einsum("uw,...wt->...ut", self._member, deltas)
        doses = np.einsum("um,...mt->...ut", self._dose, sent)
        replica = self._replica[:, None]
        covariate = np.where(replica, np.einsum("uw,...wt->...ut", self._cov_member, deltas) - doses, 0.0)
        if others is not None:
            covariate = np.where(replica, covariate, np.einsum("um,...mt->...ut", self._dose, others))
        # The coefficient comes from earlier blocks only, so each bet stays fair whatever it is.
        with np.errstate(divide="ignore", invalid="ignore"):
            beta = np.where(self._sxx > 0, self._sxy / self._sxx, self._prior)
        counts = raw - beta[..., None] * covariate
        off = (doses == 0) & (replica | (others is not None))
        self._sxy += (off * raw * covariate).sum(axis=-1)
        self._sxx += (off * covariate * covariate).sum(axis=-1)
        self.cs.update(self._contrast, counts, doses, np.asarray(observed))
        weight = np.take(self._contrast, np.asarray(observed), axis=1)  # units, batch..., arms
        weight = np.moveaxis(weight, 0, -2)
        self._num += (weight * counts).sum(axis=-1)
        self._den += (weight * doses).sum(axis=-1)

    def keep(self, rows: np.ndarray) -> None:
        """Keep only these rows of the batch."""
        self.cs.keep(rows)
        self._num, self._den = self._num[rows], self._den[rows]
        self._sxy, self._sxx = self._sxy[rows], self._sxx[rows]

    def decide(self) -> Decision:
        level = self.alpha / (2 * len(self.units))
        above, below = self.cs.rejected(level, side="above"), self.cs.rejected(level, side="below")
        units = np.arange(len(self.units))
        # theta = 0 is sharp (an idle replica gets exactly nothing; a replica's covariate is exact
        # where placement is): read as it is.
        moved = above[..., units, self._i_zero]
        # A skewed replica's leaning side accuses only at a stricter level (_trusted_sides); most
        # pools have none, and decide runs after every block, so the stricter reads are skipped there.
        if not self._trust_above.all():
            strict_above = self.cs.rejected(level / SKEWED_STRICTER, side="above")
            above = np.where(self._trust_above[:, None], above, strict_above)
        if not self._trust_below.all():
            strict_below = self.cs.rejected(level / SKEWED_STRICTER, side="below")
            below = np.where(self._trust_below[:, None], below, strict_below)
        misfit = above[..., units, self._i_expected] | below[..., units, self._i_expected]
        leak = np.ones_like(moved)
        asked = self._i_leak >= 0
        leak[..., asked] = above[..., units[asked], self._i_leak[asked]]
        pair_ok = (
            below[..., self._p_high[:, 0], self._p_high[:, 1]]
            | above[..., self._p_low[:, 0], self._p_low[:, 1]]
        )
        skews = np.ones_like(moved)
        for p, (u, i, _, _) in enumerate(self._pairs):
            skews[..., u] &= pair_ok[..., p]
            skews[..., i] &= pair_ok[..., p]
        low, high = _hull(self.grid, ~above, ~below)
        once = np.ones_like(moved)
        counted = self._i_short >= 0
        once[..., counted] = (
            above[..., units[counted], self._i_short[counted]]
            & below[..., units[counted], self._i_surplus[counted]]
        )
        low, high = _hull(self.grid, ~above, ~below)
        failed = misfit.any(axis=-1)
        passed = ~failed & moved.all(axis=-1) & leak.all(axis=-1) & skews.all(axis=-1) & once.all(axis=-1)
        with np.errstate(divide="ignore", invalid="ignore"):
            estimate = np.where(self._den > 0, self._num / self._den, np.nan)
        return Decision(failed, passed, misfit, moved, leak, skews, once, low, high, estimate)


def _trusted_sides(units: Sequence[Unit], doses: dict[str, Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Per unit, whether its rejections from above and from below stand at the check's level. A
    replica's share under a random router is not sharp: the router's binomial split of a window's n
    requests adds noise of skewness (1 - 2p) / sqrt(n p (1 - p)) to the on windows alone, and the
    clipped bet then leans away from the long tail: for a small share (p < 1/2, a long right tail)
    the bet that the effect falls short wins without a fault (simulated: 1-2.8 % false alarms on 16
    replicas at 5 requests a window, 0.3 a replica). Where that skewness passes `SKEWNESS`, the
    side it leans to stands only at a level `SKEWED_STRICTER` times stricter. The placement units
    are sharp: both sides stand."""
    above, below = np.ones(len(units), dtype=bool), np.ones(len(units), dtype=bool)
    for u, unit in enumerate(units):
        n, p = max(doses[unit.model]), unit.expected
        if not unit.replica or not 0.0 < p < 1.0 or n <= 0:
            continue
        skewness = (1.0 - 2.0 * p) / np.sqrt(n * p * (1.0 - p))
        if skewness > SKEWNESS:
            below[u] = False
        elif skewness < -SKEWNESS:
            above[u] = False
    return above, below


def _hull(grid: np.ndarray, not_above: np.ndarray, not_below: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The accepted thetas' hull per unit, widened to the next value tested on each side: the low
    end from the lower bounds' side, the high end from the upper bounds'."""
    accepted = not_above & not_below
    g = np.broadcast_to(grid, accepted.shape)
    size = grid.shape[-1]
    first = np.argmax(accepted, axis=-1)
    last = size - 1 - np.argmax(accepted[..., ::-1], axis=-1)
    lo = np.take_along_axis(g, np.maximum(first - 1, 0)[..., None], axis=-1)[..., 0]
    lo = np.where(first == 0, 0.0, lo)
    hi = np.take_along_axis(g, np.minimum(last + 1, size - 1)[..., None], axis=-1)[..., 0]
    hi = np.where(last >= size - 1, np.inf, hi)
    empty = ~accepted.any(axis=-1)
    return np.where(empty, np.nan, lo), np.where(empty, np.nan, hi)
