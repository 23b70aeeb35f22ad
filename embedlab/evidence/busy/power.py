"""How many requests a check needs, and the smallest fault a check of a given size catches.

Quiet pool (the counters move only for the check's requests; checks.evaluate judges):
    (stats.still_chance(weights, n) is the chance that a correct weighted-random router leaves
    some replica with none of n requests: the judge and the planner read the same figure)
    quiet_power(n, weights)         an idle replica's and a 0.9/0.1 skew's chance of being
                                    caught, the smallest skew caught at 99 %, in one sentence
    required_requests(weights)      the smallest burst for which every replica's moving can be
                                    asserted and both faults are caught with 99 %
    leak_power(n)                   the smallest leak a burst of n catches, and the bound that
                                    a burst without a leaked request puts on the leak rate
Busy pool: no closed form fits the randomization bets well enough to plan by (a normal
approximation was off by 3x against simulation); simulate.simulate answers "how long, at this
rate and background" in about 0.3 s for a small pool, with the real decision code.

The fault models are the embedded frontend's (embedlab/serving/frontend/faults.py): an idle replica gets
nothing and the others share its requests by weight; a skew between two replicas splits their
combined share 0.9/0.1; a leak sends a share of a model's requests to other models' replicas.
The quiet fairness test is checks.fairness_p_value: the exact binomial for two replicas, Pearson's
chi-square for more, at `alpha`. Two-replica figures are exact; for more, the chi-square test's
power is the non-central chi-square approximation (Pearson's statistic under a fixed alternative,
Patnaik 1949), checked against simulation in tests/unit/evidence/busy/test_busy_power.py.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from ...defaults import FAIRNESS_ALPHA, SPLIT_CONFIRM
from ...errors import ConfigError
from ..stats import binom_acceptance, binom_cdf, gamma_q, log_binom_pmf, percent, still_chance
from .constants import LEAK, POWER, SKEW

__all__ = [
    "LeakPower",
    "QuietPower",
    "leak_power",
    "leak_requests",
    "moving_requests",
    "quiet_power",
    "required_requests",
]


def _shares(weights: Sequence[float]) -> list[float]:
    if len(weights) < 1 or min(weights) <= 0:
        raise ConfigError(f"weights must be positive, got {list(weights)}")
    total = float(sum(weights))
    return [w / total for w in weights]


@functools.lru_cache(maxsize=256)
def _chi2_critical(df: int, alpha: float) -> float:
    lo, hi = 0.0, df + 50.0 * math.sqrt(2 * df) + 100.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if gamma_q(df / 2, mid / 2) > alpha else (lo, mid)
    return hi


def _ncx2_sf(x: float, df: int, nc: float) -> float:
    """P(X > x) for a non-central chi-square: a Poisson(nc/2) mixture of central tails Q(df/2 + j, x/2),
    the tails by the recurrence Q(a + 1, y) = Q(a, y) + y^a e^-y / Gamma(a + 1)."""
    half, y = nc / 2, x / 2
    a = df / 2
    tail = gamma_q(a, y)
    total, j = 0.0, 0
    while True:
        weight = math.exp(-half + j * math.log(half) - math.lgamma(j + 1)) if half > 0 else float(j == 0)
        total += weight * tail
        if j > half and weight < 1e-16:
            return min(1.0, total)
        tail = min(1.0, tail + math.exp(a * math.log(y) - y - math.lgamma(a + 1)))
        a += 1
        j += 1


def _detection(
    n: int, expected: Sequence[float], fault: Sequence[float], alpha: float, require_all: bool
) -> float:
    """The chance that a burst of n under `fault` (shares) fails the quiet check: a split unlikely
    under `expected`, or (with `require_all`) a replica left still (of that, only the likeliest
    replica's chance is counted: a lower bound)."""
    if len(expected) == 2:
        lo, hi = binom_acceptance(n, expected[0], alpha)
        if require_all:
            lo, hi = max(lo, 1), min(hi, n - 1)
        p = fault[0]
        inside = sum(math.exp(log_binom_pmf(k, n, p)) for k in range(lo, hi + 1))
        return max(0.0, 1.0 - inside)
    df = len(expected) - 1
    nc = n * sum((f - e) ** 2 / e for f, e in zip(fault, expected))
    chi = _ncx2_sf(_chi2_critical(df, alpha), df, nc)
    still = (1 - min(fault)) ** n if require_all else 0.0
    return max(chi, still)


def _representatives(shares: Sequence[float]) -> list[int]:
    """Up to two replicas of each distinct share: faults that differ only by which of several
    equal-weight replicas they hit are judged alike, so one of each kind is enough."""
    seen: dict[float, list[int]] = {}
    for i, s in enumerate(shares):
        if len(seen.setdefault(s, [])) < 2:
            seen[s].append(i)
    return sorted(i for group in seen.values() for i in group)


def _idle_faults(shares: Sequence[float]) -> list[list[float]]:
    out = []
    for j in _representatives(shares):
        rest = 1 - shares[j]
        out.append([0.0 if i == j else s / rest for i, s in enumerate(shares)])
    return out


def _skew_faults(shares: Sequence[float], skew: float) -> list[list[float]]:
    out = []
    for i, j in itertools.permutations(_representatives(shares), 2):
        both = shares[i] + shares[j]
        if skew * both <= shares[i]:
            continue  # not a skew towards i at all
        fault = list(shares)
        fault[i], fault[j] = skew * both, (1 - skew) * both
        out.append(fault)
    return out


@dataclass(frozen=True)
class QuietPower:
    """What a quiet-pool same-model burst of `requests` over replicas with `weights` catches."""

    requests: int
    weights: tuple[float, ...]
    still: float  # a correct router leaves some replica still
    require_all: bool  # so the check may assert that every replica moves
    idle: float  # worst case over which replica is idle
    skew: float  # worst case over which two replicas, at `skew_share`
    skew_share: float
    smallest_skew: float  # the smallest skew caught with `power` (1.0: none below a total skew)
    power: float
    alpha: float

    @property
    def sentence(self) -> str:
        k = len(self.weights)
        still = (
            f"a correct router leaves a replica still with probability {self.still:.2g}, so every replica must move"
            if self.require_all
            else f"a correct router leaves a replica still {100 * self.still:.3g} % of the time, so moving is not asserted"
        )
        smallest = "" if math.isnan(self.smallest_skew) else f"; {self.smallest_skew_words()}"
        return (
            f"{self.requests} requests over {k} replicas: {still}; an idle replica is caught with "
            f"{percent(self.idle)} probability, a {self.skew_share:g}/{1 - self.skew_share:.2g} skew between two "
            f"replicas with {percent(self.skew)}{smallest} (fairness test at alpha {self.alpha:g}, a split that "
            f"does not fit confirmed by a burst {SPLIT_CONFIRM}x as large)"
        )

    def smallest_skew_words(self) -> str:
        """The smallest skew caught with the target power, or that none is: a total skew (1.00/0.00)
        is an idle replica, so it is never named as a skew that is caught when it is not."""
        if self.smallest_skew >= 1.0:  # none found below a total skew
            return f"no skew is caught with {percent(self.power)}"
        low = 1 - self.smallest_skew
        return f"the smallest skew caught with {percent(self.power)} is {self.smallest_skew:.2f}/{low:.2f}"


def quiet_power(
    n: int,
    weights: Sequence[float],
    *,
    alpha: float = FAIRNESS_ALPHA,
    skew: float = SKEW,
    power: float = POWER,
    smallest: bool = True,
) -> QuietPower:
    """The faults a quiet-pool same-model burst of n requests catches, at the fairness level `alpha`
    (`smallest`: also search the smallest skew caught with `power`; NaN where not searched)."""
    shares = _shares(weights)
    if len(shares) < 2:
        raise ConfigError("a fairness check needs two replicas or more")
    still = still_chance(weights, n).value
    require_all = still < alpha

    def caught(fault: Sequence[float]) -> float:
        # A split that does not fit fails only once its confirming burst does not fit either
        # (independent, SPLIT_CONFIRM times as large); a still replica fails at once, so the
        # product is a lower bound.
        first = _detection(n, shares, fault, alpha, require_all)
        return first * _detection(SPLIT_CONFIRM * n, shares, fault, alpha, require_all)

    idle = min(caught(f) for f in _idle_faults(shares))

    def skew_power(s: float) -> float:
        return min((caught(f) for f in _skew_faults(shares, s)), default=1.0)

    found = math.nan
    if smallest:
        lo, hi = 0.5, 1.0
        if skew_power(hi) < power:
            found = 1.0
        else:
            for _ in range(20):
                mid = (lo + hi) / 2
                lo, hi = (lo, mid) if skew_power(mid) >= power else (mid, hi)
            found = hi
    weights_ = tuple(float(w) for w in weights)
    return QuietPower(n, weights_, still, require_all, idle, skew_power(skew), skew, found, power, alpha)


def required_requests(
    weights: Sequence[float], *, alpha: float = FAIRNESS_ALPHA, skew: float = SKEW, power: float = POWER
) -> QuietPower:
    """The smallest same-model burst over `weights` whose "every replica moved" can be asserted
    (a correct router leaves one still with probability below `alpha`) and that catches an idle
    replica and a `skew` split between any two replicas with probability `power` or more."""

    def enough(n: int) -> bool:
        q = quiet_power(n, weights, alpha=alpha, skew=skew, power=power, smallest=False)
        return q.require_all and q.idle >= power and q.skew >= power

    hi = max(2, len(weights))
    while not enough(hi):
        hi *= 2
        if hi > 1 << 22:
            raise ConfigError(
                f"no burst of up to {hi} requests reaches {power:.0%} power for {list(weights)}"
            )
    lo = hi // 2
    while hi - lo > 1:  # the exact two-replica power wobbles with n: then scan the last stretch
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid, hi)
    if len(weights) == 2:
        hi = next(n for n in range(max(2, hi - 20), hi + 1) if all(enough(m) for m in range(n, hi + 1)))
    return quiet_power(hi, weights, alpha=alpha, skew=skew, power=power)


@dataclass(frozen=True)
class LeakPower:
    """What a quiet-pool multi-model burst of `requests` per model says about leaks."""

    requests: int
    caught: float  # the smallest leak rate shown with `power` (random leaking, each request alike)
    bound: float  # a burst with `leaked` leaked requests bounds the rate by this, at `confidence`
    leaked: int
    power: float
    confidence: float

    @property
    def sentence(self) -> str:
        seen = "no leaked request" if self.leaked == 0 else f"{self.leaked} leaked requests"
        return (
            f"{self.requests} requests per model: a leak of {_rate(self.caught)} or more shows with {percent(self.power)} "
            f"probability; {seen} bounds the leak at {_rate(self.bound)} ({percent(self.confidence)} confidence)"
        )


def leak_power(n: int, *, leaked: int = 0, power: float = POWER, confidence: float = POWER) -> LeakPower:
    """For n requests of a model: the smallest leak shown at least once with `power`, and the
    Clopper-Pearson upper bound on the leak rate after `leaked` of them were seen leaking."""
    if n < 1 or not 0 <= leaked <= n:
        raise ConfigError(f"leak_power needs 0 <= leaked <= n and n >= 1, got n={n}, leaked={leaked}")
    caught = 1 - (1 - power) ** (1 / n)
    lo, hi = leaked / n, 1.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if binom_cdf(leaked, n, mid) > 1 - confidence else (lo, mid)
    return LeakPower(n, caught, hi if leaked < n else 1.0, leaked, power, confidence)


def leak_requests(leak: float = LEAK, *, power: float = POWER) -> int:
    """The fewest requests of a model in which a random leak of `leak` shows at least once with
    `power` (a quiet burst's counters catch every leaked request): 44 for 1 in 10 at 99 %."""
    return math.ceil(math.log(1 - power) / math.log(1 - leak) - 1e-9)


def moving_requests(weights: Sequence[float], *, alpha: float = FAIRNESS_ALPHA) -> int:
    """The smallest burst over `weights` for which a correct router leaves some replica still with
    probability below `alpha`, so that "every replica moved" may be asserted (an idle replica is
    then caught for certain); 1 for a single replica."""
    if len(weights) < 2:
        return 1
    hi = len(weights)
    while still_chance(weights, hi).value >= alpha:
        hi *= 2
    lo = hi // 2
    while hi - lo > 1:  # leaving one still only gets rarer with more requests
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if still_chance(weights, mid).value < alpha else (mid, hi)
    return hi


def _rate(x: float) -> str:
    return f"1 in {1 / x:.3g}" if 0 < x < 0.5 else f"{100 * x:.3g} %"
