"""Exact binomial and chi-square tail probabilities, and the chance of a still worker, in pure Python.

The fairness check needs two p-values; importing scipy.stats for them costs about half
a second of every cold verdict. `still_chance` says whether a burst is large enough to
assert that every worker moves.
"""

from __future__ import annotations

import itertools
import math
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction


def percent(x: float) -> str:
    """A probability or share in words, as every power sentence writes it: `99.5 %`; `any` for
    an unbounded share, `?` for one not known yet."""
    if math.isnan(x):
        return "?"
    return "any" if math.isinf(x) else f"{100 * x:.3g} %"


def log_binom_pmf(k: int, n: int, p: float) -> float:
    """log P(X = k) for X ~ Binomial(n, p); -inf where k cannot happen (p of 0 or 1)."""
    if p <= 0.0:
        return 0.0 if k == 0 else -math.inf
    if p >= 1.0:
        return 0.0 if k == n else -math.inf
    return (
        math.lgamma(n + 1)
        - math.lgamma(k + 1)
        - math.lgamma(n - k + 1)
        + k * math.log(p)
        + (n - k) * math.log1p(-p)
    )


def binom_two_sided(k: int, n: int, p: float) -> float:
    """Two-sided exact binomial test: the probability of outcomes no likelier than `k`."""
    if not 0 <= k <= n:
        raise ValueError(f"k={k} outside [0, {n}]")
    observed = log_binom_pmf(k, n, p)
    # The small relative slack keeps outcomes tied with the observed one (scipy does the same).
    threshold = observed + 1e-7
    total = sum(math.exp(lp) for lp in (log_binom_pmf(i, n, p) for i in range(n + 1)) if lp <= threshold)
    return min(1.0, total)


def binom_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), summed exactly in floating point."""
    return math.fsum(math.exp(log_binom_pmf(i, n, p)) for i in range(k + 1))


def binom_acceptance(n: int, p: float, alpha: float) -> tuple[int, int]:
    """The counts k of n whose two-sided binomial p-value (as `binom_two_sided`) is at least
    `alpha`: the range a correct router's count falls in, as (lowest, highest)."""
    logs = [log_binom_pmf(k, n, p) for k in range(n + 1)]
    # p(k) = the mass of every outcome no likelier than k: accumulate from the least likely up.
    order = sorted(range(n + 1), key=lambda k: logs[k])
    tail, running, i = [0.0] * (n + 1), 0.0, 0
    while i <= n:
        j, level = i, logs[order[i]] + 1e-7
        while j <= n and logs[order[j]] <= level:
            running += math.exp(logs[order[j]])
            j += 1
        for k in order[i:j]:
            tail[k] = min(1.0, running)
        i = j
    kept = [k for k in range(n + 1) if tail[k] >= alpha]
    return (min(kept), max(kept)) if kept else (0, n)


def gamma_q(a: float, x: float) -> float:
    """Regularised upper incomplete gamma Q(a, x)."""
    if x <= 0:
        return 1.0
    if x < a + 1:  # series for P, then Q = 1 - P
        term = total = 1.0 / a
        ap = a
        for _ in range(10_000):
            ap += 1
            term *= x / ap
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        return max(0.0, 1.0 - total * math.exp(-x + a * math.log(x) - math.lgamma(a)))
    # Lentz's continued fraction for Q.
    tiny = 1e-300
    b = x + 1 - a
    c = 1 / tiny
    d = 1 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        step = d * c
        h *= step
        if abs(step - 1) < 1e-15:
            break
    return math.exp(-x + a * math.log(x) - math.lgamma(a)) * h


def chisquare_p(observed: Sequence[float], expected: Sequence[float]) -> float:
    """Pearson's chi-square goodness of fit: P(X^2 >= statistic) with k-1 degrees of freedom."""
    statistic = sum((o - e) ** 2 / e for o, e in zip(observed, expected))
    return gamma_q((len(observed) - 1) / 2, statistic / 2)


# The most inclusion-exclusion terms `still_chance` sums: 2**12 take 0.04 s here at 100 requests,
# 0.12 s at 1,000 (12 workers of distinct weights; an equal-weight pool of any size is one group, and
# as many terms as workers; 6 workers of each of 4 weights, 7**4 terms).
EXACT_STILL_TERMS = 1 << 12
# Up to this many bits in (sum of weights)^requests the terms are summed as integers, with no
# rounding at all (a power of 8,000 bits takes 10 us here; 80,000 bits, 3 ms).
EXACT_STILL_BITS = 8_000


@dataclass(frozen=True)
class StillChance:
    """The chance that a correct weighted-random router leaves some worker with nothing over a
    burst, or (`exact` False) an upper bound on it."""

    value: float
    exact: bool

    def of_the_time(self) -> str:
        """In words, for a rule: `90.6% of the time`, or `at most 75.7% of the time (the union bound)`."""
        if self.exact:
            return f"{self.value:.1%} of the time"
        return f"at most {self.value:.1%} of the time (the union bound)"


def still_chance(weights: Sequence[float], requests: int) -> StillChance:
    """The chance that some worker gets none of `requests` under weighted-random routing.

    Exact by inclusion-exclusion: P = sum over nonempty sets S of workers of
    (-1)^(|S|+1) (1 - share_S)^n. Workers of equal weight are one group (choosing j of its
    m workers is C(m, j) equal terms), so an equal-weight pool of any size takes K terms.
    With the weights scaled to integers W_i (their sum W), each term is an integer over
    W^n, summed without rounding up to `EXACT_STILL_BITS`; beyond, in floats, unless the
    terms are so large that their rounding could move the answer by 1e-9. Where the groups
    would need more than `EXACT_STILL_TERMS` terms, or the floats would round, the union
    bound sum_i (1 - share_i)^n, capped at 1, stands in and says it is a bound. Fewer
    requests than workers leave one still for certain. 4 equal workers, 4 requests:
    1 - 4!/4^4 = 90.6% (the union bound says 4 * (3/4)^4 = 127%, capped at 100%).
    """
    if sum(weights) <= 0 or requests < len(weights):
        return StillChance(1.0, exact=True)
    exact = [Fraction(w) for w in weights]  # a float's exact value: 0.1 is 3602879701896397 / 2**55
    scale = math.lcm(*(f.denominator for f in exact))
    groups = Counter(int(f * scale) for f in exact)  # integer weight -> workers that have it
    total = sum(w * m for w, m in groups.items())
    union = sum(m * ((total - w) / total) ** requests for w, m in groups.items())
    bound = StillChance(min(1.0, union), exact=False)
    if math.prod(m + 1 for m in groups.values()) > EXACT_STILL_TERMS:
        return bound
    whole = requests * total.bit_length() <= EXACT_STILL_BITS
    counted, terms = 0, []
    for chosen in itertools.product(*(range(m + 1) for m in groups.values())):
        size = sum(chosen)
        if size == 0:
            continue
        left = total - sum(j * w for j, w in zip(chosen, groups))
        ways = (-1) ** (size + 1) * math.prod(math.comb(m, j) for m, j in zip(groups.values(), chosen))
        if whole:
            counted += ways * left**requests
        else:
            terms.append(ways * (left / total) ** requests)
    if whole:
        return StillChance(counted / total**requests, exact=True)  # int / int rounds once, correctly
    # The terms alternate in sign, and each carries a relative error of about n ulps.
    if math.fsum(map(abs, terms)) * (requests + 2) * sys.float_info.epsilon > 1e-9:
        return bound
    return StillChance(min(1.0, max(0.0, math.fsum(terms))), exact=True)
