"""DispatchCheck: per-burst counter deltas by worker index, with bite.

The baseline is taken before the first request of a burst is sent (the seed scraped it
after the first response, which under concurrency misses a leak at the very start of
a burst), and the deltas after the last response plus `settle_seconds`. The check passes
only if the set of workers whose counter moved EQUALS the expected set, so a single
leaked request fails it, and the total moved is at least `min_total_delta`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import httpx

from ..errors import CheckFailedError, ConfigError
from . import clients
from .metrics import DEFAULT_METRIC, MetricQuery, Snapshot, ascrape_all, scrape, scrape_all
from .stats import binom_two_sided, chisquare_p


class CounterSource(Protocol):
    """Where a check reads its counters, other than each worker's /metrics (None: there):
    Prometheus' API (evidence/prom_source.py), its snapshots aligned to its scrapes."""

    async def aread(
        self,
        urls: Sequence[str],
        indices: Sequence[int],
        metric: MetricQuery = ...,
        *,
        moment: str = "",
        client: httpx.AsyncClient | None = None,
    ) -> list[Snapshot]: ...

    def sentence(self) -> str: ...

    def fits_s(self) -> tuple[float, float]:
        """After a read: how long a window opened now may send before the next scrapes, and how
        long it then lasts, read to read (the busy schedule stretches its windows to fill it)."""
        ...

    windows: str  # what the busy schedule made of that, for the sentence


if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class WorkerRow:
    index: int
    url: str
    before: float
    after: float
    delta: float
    expected: bool
    # Whether the check asserts this worker's part: False for an expected worker that may stay
    # still (a correct router leaves one still too often at this burst's size).
    asserted: bool = True

    @property
    def expectation(self) -> str:
        """What the check expects of this worker, in a word: `moves`, `may move` (not asserted) or
        `stays`; the tables show it, so that nothing unasserted reads as expected."""
        if not self.expected:
            return "stays"
        return "moves" if self.asserted else "may move"

    @property
    def ok(self) -> bool | None:
        """Moved if expected, still if not; None where the check asserts nothing of it (it stayed
        still, and was allowed to)."""
        if self.expected and self.delta <= 0 and not self.asserted:
            return None
        return (self.delta > 0) == self.expected


@dataclass(frozen=True)
class CheckResult:
    """The verdict of one burst, and the per-worker table behind it."""

    passed: bool
    rows: tuple[WorkerRow, ...]
    expected: frozenset[int]
    moved: frozenset[int]
    total_delta: float
    min_total_delta: float | None
    reasons: tuple[str, ...] = ()
    p_value: float | None = None
    expected_shares: tuple[float, ...] | None = None

    def row(self, index: int) -> WorkerRow | None:
        return next((r for r in self.rows if r.index == index), None)

    def table_text(self) -> str:
        lines = [f"{'worker':>6} {'before':>10} {'after':>10} {'delta':>8} {'expected':>9}  {'':2} url"]
        for r in self.rows:
            mark = {True: "ok", False: "!!", None: "--"}[r.ok]
            lines.append(
                f"{r.index:>6} {r.before:>10g} {r.after:>10g} {r.delta:>+8g} {r.expectation:>9}  {mark:2} {r.url}"
            )
        lines.append(
            f"total delta {self.total_delta:g}"
            + (f" (min {self.min_total_delta:g})" if self.min_total_delta is not None else "")
        )
        if self.p_value is not None:
            lines.append(
                f"fairness p-value {self.p_value:.4g} against shares {', '.join(f'{s:.3f}' for s in self.expected_shares or ())}"
            )
        return "\n".join(lines)

    def summary(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        moved = sorted(self.moved)
        return (
            f"{verdict}: workers that moved {moved}, expected {sorted(self.expected)}, total {self.total_delta:g}"
            + ("" if self.passed else f" ({'; '.join(self.reasons)})")
        )

    def to_frame(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(
            [
                {
                    "worker": r.index,
                    "url": r.url,
                    "before": r.before,
                    "after": r.after,
                    "delta": r.delta,
                    "expected": r.expectation,
                    "ok": r.ok,
                }
                for r in self.rows
            ]
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "expected": sorted(self.expected),
            "moved": sorted(self.moved),
            "total_delta": self.total_delta,
            "min_total_delta": self.min_total_delta,
            "reasons": list(self.reasons),
            "p_value": self.p_value,
            "rows": [
                {
                    "worker": r.index,
                    "url": r.url,
                    "before": r.before,
                    "after": r.after,
                    "delta": r.delta,
                    "expected": r.expected,
                    "asserted": r.asserted,
                }
                for r in self.rows
            ],
        }

    def raise_for_failure(self) -> None:
        if not self.passed:
            raise CheckFailedError(
                f"dispatch check failed: {'; '.join(self.reasons)}\n{self.table_text()}",
                table=self.table_text(),
            )


def fairness_p_value(observed: Sequence[float], weights: Sequence[float]) -> float | None:
    """Two-sided p-value of the observed split against the weights' shares.

    Exact binomial for two workers, chi-square goodness of fit for more. None when
    nothing moved or there is only one worker.
    """
    total = sum(observed)
    if total <= 0 or len(observed) < 2:
        return None
    share = [w / sum(weights) for w in weights]
    if len(observed) == 2:
        return binom_two_sided(int(round(observed[0])), int(round(total)), share[0])
    return chisquare_p(observed, [s * total for s in share])


def evaluate(
    urls: Sequence[str],
    before: Sequence[Snapshot],
    after: Sequence[Snapshot],
    expected: Iterable[int],
    *,
    min_total_delta: float | None = None,
    weights: Sequence[float] | None = None,
    fairness_alpha: float | None = None,
    indices: Sequence[int] | None = None,
    require_all: bool = True,
    must_move: Iterable[int] | None = None,
) -> CheckResult:
    """The pure part of a check: two snapshot lists in, a verdict out.

    `indices` names the workers when only some of a deployment's are judged (a dead
    worker cannot be scraped); by default they are 0..n-1. Without `require_all`, an
    expected worker may stay still (a policy that picks one, reported, not asserted); a
    leak onto a worker outside the set still fails. `must_move` names the expected workers
    that must move where only some must (a pool of several models, each judged by its own
    odds of leaving a replica still); it takes the place of `require_all`.
    """
    expected_set = frozenset(expected)
    if must_move is not None:
        required = expected_set & frozenset(must_move)
    else:
        required = expected_set if require_all else frozenset()
    indices = list(indices) if indices is not None else list(range(len(urls)))
    rows = []
    for index, url, b, a in zip(indices, urls, before, after):
        delta = b.delta(a, worker_index=index)
        rows.append(
            WorkerRow(
                index=index,
                url=url,
                before=b.value,
                after=a.value,
                delta=delta,
                expected=index in expected_set,
                asserted=index not in expected_set or index in required,
            )
        )
    by_index = {r.index: r for r in rows}
    moved = frozenset(r.index for r in rows if r.delta > 0)
    total = float(sum(r.delta for r in rows))
    reasons: list[str] = []
    if moved != expected_set:
        unexpected = sorted(moved - expected_set)
        silent = sorted(required - moved)
        if unexpected:
            reasons.append(
                "traffic leaked onto " + ", ".join(f"worker {i} (+{by_index[i].delta:g})" for i in unexpected)
            )
        if silent:
            reasons.append("no traffic reached " + ", ".join(f"worker {i}" for i in silent))
    if min_total_delta is not None and total < min_total_delta:
        reasons.append(f"total delta {total:g} is below the minimum {min_total_delta:g}")
    p_value = None
    shares = None
    if weights is not None and len(expected_set) >= 2:
        order = sorted(expected_set)
        w = [weights[i] for i in order]
        shares = tuple(x / sum(w) for x in w)
        p_value = fairness_p_value([by_index[i].delta for i in order], w)
        if fairness_alpha is not None and p_value is not None and p_value < fairness_alpha:
            observed = ", ".join(f"{by_index[i].delta:g}" for i in order)
            reasons.append(
                f"split {observed} is unlikely under weights {w} (p={p_value:.2g} < {fairness_alpha:g})"
            )
    return CheckResult(
        passed=not reasons,
        rows=tuple(rows),
        expected=expected_set,
        moved=moved,
        total_delta=total,
        min_total_delta=min_total_delta,
        reasons=tuple(reasons),
        p_value=p_value,
        expected_shares=shares,
    )


@dataclass
class DispatchCheck:
    """Snapshot every worker before a burst and after it; judge the deltas by worker index.

        with DispatchCheck(dep.system_urls, {1}, min_total_delta=5) as check:
            send_burst(dep.frontend_url, "model-b", n=10)
        check.result.passed

    Leaving the `with` block raises `CheckFailedError` (with the table) when the check
    fails, unless `raise_on_failure=False`.
    """

    system_urls: Sequence[str]
    expected_worker_indices_with_delta: Iterable[int]
    min_total_delta: float | None = None
    settle_seconds: float = 0.0
    metric: MetricQuery | str = DEFAULT_METRIC
    weights: Sequence[float] | None = None
    fairness_alpha: float | None = None
    require_all: bool = True  # every expected worker must move
    must_move: Iterable[int] | None = None  # in place of require_all: those that must move
    raise_on_failure: bool = True
    timeout: float = 5.0
    client: httpx.Client | None = None  # for the sync path, one worker after another; None: all at once
    # `system_urls[k]` is worker `indices[k]` (default k): some of a deployment's workers, by their own
    # indices (failover reads none of the worker it kills); `expected` and `weights` go by them too.
    indices: Sequence[int] | None = None
    # Where the counters are read, where not from each worker's /metrics (Prometheus' API).
    source: CounterSource | None = None
    result: CheckResult | None = field(default=None, init=False)
    before: list[Snapshot] | None = field(default=None, init=False)
    after: list[Snapshot] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.system_urls = list(self.system_urls)
        self.expected = frozenset(self.expected_worker_indices_with_delta)
        self._indices = list(self.indices) if self.indices is not None else list(range(len(self.system_urls)))
        if len(self._indices) != len(self.system_urls):
            raise ConfigError(f"{len(self.system_urls)} system URLs but {len(self._indices)} worker indices")
        bad = sorted(i for i in self.expected if i not in self._indices)
        if bad:
            raise ConfigError(
                f"expected worker indices {bad} are out of range for {len(self.system_urls)} workers"
                if self.indices is None
                else f"expected workers {bad} are not among the workers read ({self._indices})"
            )
        if isinstance(self.metric, str):
            self.metric = MetricQuery.parse(self.metric)
        workers = len(self.system_urls) if self.indices is None else max(self._indices, default=-1) + 1
        if self.weights is not None and (
            len(self.weights) != workers if self.indices is None else len(self.weights) < workers
        ):
            raise ConfigError(f"{workers} workers but {len(self.weights)} weights")

    def delta_of(self, index: int) -> float | None:
        """Worker `index`'s counter delta between the baseline and the end (None: it was not read)."""
        if self.before is None or self.after is None or index not in self._indices:
            return None
        k = self._indices.index(index)
        return self.before[k].delta(self.after[k], worker_index=index)

    # -- sync -------------------------------------------------------------------------

    def begin(self) -> list[Snapshot]:
        """Take the baseline. Call it before the burst's first request is sent."""
        self.before = self._scrape_sync("before the burst")
        self.result = None
        return self.before

    def _scrape_sync(self, moment: str = "") -> list[Snapshot]:
        if self.source is not None:
            return clients.run_sync(self._scrape_all(None, moment))
        if self.client is not None:
            # The caller's own sync client (a transport it controls): one worker after the other.
            return [
                scrape(u, metric=self.metric, client=self.client, worker_index=i)
                for i, u in zip(self._indices, self.system_urls)
            ]
        return scrape_all(self.system_urls, metric=self.metric, timeout=self.timeout, indices=self._indices)

    def end(self) -> CheckResult:
        """Take the deltas (after `settle_seconds`) and judge them."""
        if self.before is None:
            raise ConfigError("DispatchCheck.end() was called before begin()")
        if self.settle_seconds:
            time.sleep(self.settle_seconds)
        self.after = self._scrape_sync("after the burst")
        return self._judge()

    def __enter__(self) -> DispatchCheck:
        self.begin()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is not None:
            return
        self.end()
        if self.raise_on_failure:
            assert self.result is not None
            self.result.raise_for_failure()

    # -- async ------------------------------------------------------------------------

    async def abegin(self, client: httpx.AsyncClient | None = None) -> list[Snapshot]:
        self.before = await self._scrape_all(client, "before the burst")
        self.result = None
        return self.before

    async def aend(self, client: httpx.AsyncClient | None = None) -> CheckResult:
        if self.before is None:
            raise ConfigError("DispatchCheck.aend() was called before abegin()")
        if self.settle_seconds:
            await asyncio.sleep(self.settle_seconds)
        self.after = await self._scrape_all(client, "after the burst")
        return self._judge()

    async def asnapshot(self, client: httpx.AsyncClient | None = None) -> list[Snapshot]:
        """Every worker's counter now, by index, without touching the check's baseline or result:
        the quiet windows around a burst, where nothing embedlab sent is in flight."""
        return await self._scrape_all(client, "in a quiet window")

    async def __aenter__(self) -> DispatchCheck:
        await self.abegin()
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is not None:
            return
        await self.aend()
        if self.raise_on_failure:
            assert self.result is not None
            self.result.raise_for_failure()

    async def _scrape_all(self, client: httpx.AsyncClient | None, moment: str = "") -> list[Snapshot]:
        assert isinstance(self.metric, MetricQuery)
        if self.source is not None:  # its own client: the workers' keep-alive connections are not its
            return await self.source.aread(self.system_urls, self._indices, self.metric, moment=moment)
        # All workers at once; the first failure by index is raised (the same error every run).
        return await ascrape_all(
            self.system_urls, metric=self.metric, client=client, timeout=self.timeout, indices=self._indices
        )

    def judge_attributed(self, served: Mapping[int, int]) -> CheckResult:
        """The same judgement from per-request attribution instead of the counters' deltas:
        worker index -> the responses that named it. For a burst whose counters also carry
        traffic the check did not send; the rows show each worker's baseline plus its share."""
        assert self.before is not None
        after = [b.plus(served.get(i, 0)) for i, b in zip(self._indices, self.before)]
        return self._judge(after=after)

    def _judge(self, *, after: Sequence[Snapshot] | None = None) -> CheckResult:
        after = self.after if after is None else after
        assert self.before is not None and after is not None
        self.result = evaluate(
            self.system_urls,
            self.before,
            after,
            self.expected,
            min_total_delta=self.min_total_delta,
            weights=self.weights,
            fairness_alpha=self.fairness_alpha,
            require_all=self.require_all,
            must_move=self.must_move,
            indices=self._indices,
        )
        return self.result
