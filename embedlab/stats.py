"""Exact binomial and chi-square tail probabilities, in pure Python.

The fairness check needs two p-values; importing scipy.stats for them costs about half
a second of every cold verdict.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def _log_binom_pmf(k: int, n: int, p: float) -> float:
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
    observed = _log_binom_pmf(k, n, p)
    # The small relative slack keeps outcomes tied with the observed one (scipy does the same).
    threshold = observed + 1e-7
    total = sum(math.exp(lp) for lp in (_log_binom_pmf(i, n, p) for i in range(n + 1)) if lp <= threshold)
    return min(1.0, total)


def binom_acceptance(n: int, p: float, alpha: float) -> tuple[int, int]:
    """The counts k of n whose two-sided binomial p-value (as `binom_two_sided`) is at least
    `alpha`: the range a correct router's count falls in, as (lowest, highest)."""
    logs = [_log_binom_pmf(k, n, p) for k in range(n + 1)]
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


def _gamma_q(a: float, x: float) -> float:
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
    return _gamma_q((len(observed) - 1) / 2, statistic / 2)
