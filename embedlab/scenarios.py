"""Scenarios: bursts wrapped in dispatch checks, returning a result with a table and figures.

    with Deployment(DeploymentSpec.multi_model(["a", "b"])) as dep:
        result = multi_model_dispatch(dep)
    result.passed, result.table, result.plot()
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import httpx

from . import clients
from .checks import CheckResult, DispatchCheck
from .deployment import Deployment, Target, target_of
from .errors import ConfigError, CounterResetError, TrafficError
from .traffic import BurstResult, Input, RequestRecord, asend_burst, default_inputs, run_sync
from .verdicts import Verdict

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

DEFAULT_FAIRNESS_ALPHA = 0.001
# The smallest same-model burst at which the fairness test catches a 90/10 skew of a
# 50/50 pool 99% of the time at DEFAULT_FAIRNESS_ALPHA (bench/verification_power.py).
DEFAULT_SAME_MODEL_REQUESTS = 40
PASSED, FAILED, INCONCLUSIVE, REPORTED = Verdict.PASSED, Verdict.FAILED, Verdict.INCONCLUSIVE, Verdict.REPORTED


@dataclass
class Burst:
    """One burst: what was sent, what moved, and the check's verdict."""

    name: str
    model: str
    expected: frozenset[int]
    traffic: BurstResult
    check: CheckResult | None = None
    inconclusive: str | None = None
    expected_shares: dict[int, float] = field(default_factory=dict)

    def expected_count(self, index: int) -> float:
        return self.traffic.n * self.expected_shares.get(index, 0.0)


@dataclass
class ScenarioResult:
    """What a scenario found. `passed` is True only for a clean pass; `ok` also for a report.

    A `reported` verdict asserted nothing: its `reasons` are the figures it shows.
    """

    scenario: str
    stack: str
    params: dict[str, Any]
    workers: list[dict[str, Any]]
    bursts: list[Burst]
    verdict: Verdict
    reasons: list[str]
    wall_seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.verdict == PASSED

    @property
    def ok(self) -> bool:
        """Nothing asserted failed: passed, or reported (figures shown, not asserted)."""
        return Verdict(self.verdict).ok

    def summary(self) -> str:
        head = f"{self.scenario} on {self.stack}: {self.verdict.upper()}"
        if self.reasons:
            head += " (" + "; ".join(self.reasons) + ")"
        return head

    def __str__(self) -> str:
        return self.summary()

    @property
    def table(self) -> "pd.DataFrame":
        """One row per burst and worker: before, after, delta, and what was expected."""
        import pandas as pd

        rows = []
        for burst in self.bursts:
            for w in self.workers:
                i = w["index"]
                row = burst.check.row(i) if burst.check else None
                rows.append(
                    {
                        "burst": burst.name, "model": burst.model, "worker": i, "worker_model": w["model"],
                        "before": row.before if row else None, "after": row.after if row else None,
                        "delta": row.delta if row else None, "expected_to_move": i in burst.expected,
                        "expected_delta": round(burst.expected_count(i), 2), "ok": row.ok if row else None,
                    }
                )
        return pd.DataFrame(rows)

    def latency_ms(self) -> dict[str, float]:
        import numpy as np

        values = np.array([r.latency for b in self.bursts for r in b.traffic.records if r.ok]) * 1000.0
        if values.size == 0:
            return {"p50": float("nan"), "p99": float("nan")}
        p50, p90, p99 = np.percentile(values, [50, 90, 99])
        return {"p50": float(p50), "p90": float(p90), "p99": float(p99)}

    @property
    def p_values(self) -> dict[str, float | None]:
        return {b.name: (b.check.p_value if b.check else None) for b in self.bursts}

    def plot(self) -> "Figure":
        """The scenario's main figure: delta bars, or for failover the timeline."""
        from .plots import plot_deltas, plot_timeline

        return plot_timeline(self) if self.scenario == "failover" else plot_deltas(self)

    def plot_latency(self) -> "Figure":
        from .plots import plot_latency

        return plot_latency(self)

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "stack": self.stack,
            "verdict": self.verdict,
            "passed": self.passed,
            "ok": self.ok,
            "reasons": self.reasons,
            "params": self.params,
            "workers": self.workers,
            "wall_seconds": self.wall_seconds,
            "latency_ms": self.latency_ms(),
            "p_values": self.p_values,
            "bursts": [
                {
                    "name": b.name, "model": b.model, "expected": sorted(b.expected),
                    "check": b.check.to_json() if b.check else None, "inconclusive": b.inconclusive,
                    "traffic": b.traffic.to_json(),
                    "deltas": [r.delta for r in b.check.rows] if b.check else None,
                }
                for b in self.bursts
            ],
            "extra": self.extra,
        }

    def failover_summary(self) -> "pd.DataFrame":
        """Failover's figures as a two-column table: when the victim died, when it left dispatch."""
        import pandas as pd

        x = self.extra
        if self.scenario != "failover":
            raise ValueError(f"{self.scenario} has no failover figures")
        excluded = x["excluded_after_s"]
        rows = [
            ("victim", f"worker {x['victim']}"),
            ("killed at", f"{x['killed_at_s']:.3f} s into the burst, after {x['kill_after_responses']} responses"),
            ("out of dispatch", "never seen" if excluded is None else f"{excluded * 1000:.0f} ms after the kill"),
            ("lease TTL", f"{x['lease_ttl_s']:g} s (limit: 2 TTLs)" if x["lease_ttl_s"] else "Dynamo's own discovery (file backend)"),
            ("failed requests", str(x["failed_requests"])),
            ("errors seen for", f"{x['errors_window_s']:.2f} s after the kill"),
            ("responses after the kill", str(x["responses_after_kill"])),
        ]
        served = sorted(self.bursts[0].traffic.served_by().items())
        rows += [(f"served by {w.split('/')[0]}", str(n)) for w, n in served] or [
            ("served by", "not named: this frontend marks no response with its worker")
        ]
        rows.append(("verdict", "asserted" if x["asserted"] else "reported, not asserted"))
        return pd.DataFrame(rows, columns=["figure", "value"])

    def save_json(self, path: str | Path) -> Path:
        """Write `to_json()` to `path` (parents created): what `embedlab regress` collects."""
        from .report import write_json

        return write_json(path, self.to_json())


def _workers(target: Target) -> list[dict[str, Any]]:
    weights = target.weights or (1.0,) * len(target.system_urls)
    return [
        {"index": i, "system_url": url, "model": model, "weight": weights[i]}
        for i, (url, model) in enumerate(zip(target.system_urls, target.models))
    ]


def _served_models(frontend_url: str) -> list[str]:
    """The frontend's /v1/models: also the preflight that it is reachable at all."""
    url = frontend_url.rstrip("/") + "/v1/models"
    try:
        with clients.client(timeout=5.0) as client:
            response = client.get(url)
            response.raise_for_status()
            return [m["id"] for m in response.json().get("data", [])]
    except (httpx.HTTPError, ValueError, KeyError, AttributeError) as exc:
        raise TrafficError(f"cannot list models at {url}: {exc.__class__.__name__}: {exc}") from exc


async def _run_burst(
    target: Target,
    *,
    name: str,
    model: str,
    expected: frozenset[int],
    requests: int,
    concurrency: int,
    inputs: Sequence[Input] | None,
    min_total_delta: float | None,
    weights: Sequence[float] | None,
    fairness_alpha: float | None,
    settle_seconds: float,
    timeout: float,
    progress: bool,
    on_response: Callable[[RequestRecord], None] | None = None,
) -> Burst:
    check = DispatchCheck(
        target.system_urls, expected, min_total_delta=min_total_delta, settle_seconds=settle_seconds,
        metric=target.metric, weights=weights, fairness_alpha=fairness_alpha, raise_on_failure=False,
    )
    async with clients.async_client(timeout=10.0) as scrape_client:
        # The baseline is in hand before the first request of the burst leaves.
        await check.abegin(scrape_client)
        traffic = await asend_burst(
            target.frontend_url, model, requests, concurrency=concurrency, inputs=inputs, timeout=timeout,
            progress=progress, on_response=on_response,
        )
        share_of = weights if weights is not None else [1.0] * len(target.system_urls)
        total = sum(share_of[i] for i in expected) or 1.0
        shares = {i: share_of[i] / total for i in expected}
        burst = Burst(name=name, model=model, expected=expected, traffic=traffic, expected_shares=shares)
        try:
            burst.check = await check.aend(scrape_client)
        except CounterResetError as exc:
            burst.inconclusive = f"counter reset on worker {exc.worker_index}"
    return burst


def _verdict(bursts: Sequence[Burst], *, exact_total: bool) -> tuple[str, list[str]]:
    reasons: list[str] = []
    for burst in bursts:
        if burst.inconclusive:
            return INCONCLUSIVE, [f"{burst.name}: {burst.inconclusive}"]
    for burst in bursts:
        failed = burst.traffic.failures
        if failed:
            reasons.append(f"{burst.name}: {len(failed)} of {burst.traffic.n} requests failed ({failed[0].error})")
        assert burst.check is not None
        reasons += [f"{burst.name}: {r}" for r in burst.check.reasons]
        if exact_total and not failed and burst.check.total_delta != burst.traffic.n:
            reasons.append(f"{burst.name}: counters moved {burst.check.total_delta:g} for {burst.traffic.n} requests sent")
    return (FAILED if reasons else PASSED), reasons


def same_model_load_balance(
    deployment: Deployment | Target,
    *,
    requests: int = DEFAULT_SAME_MODEL_REQUESTS,
    concurrency: int = 4,
    model: str | None = None,
    weights: Sequence[float] | None = None,
    fairness_alpha: float | None = DEFAULT_FAIRNESS_ALPHA,
    min_total_delta: float | None = None,
    settle_seconds: float = 0.0,
    inputs: Sequence[Input] | None = None,
    timeout: float = 60.0,
    progress: bool = False,
    on_response: Callable[[RequestRecord], None] | None = None,
) -> ScenarioResult:
    """Two or more workers serve one model: every one must move, and the split must fit the weights.

    The verdict fails if a worker stays still, if the counters moved by other than the
    requests sent, or if the split's p-value against the weights is below `fairness_alpha`.
    """
    target = target_of(deployment)
    known = {m for m in target.models if m is not None}
    served = _served_models(target.frontend_url)
    if model is None:
        candidates = sorted(known) or served
        if len(candidates) != 1:
            raise ConfigError(f"same-model needs one model; this deployment serves {candidates}: pass model=")
        model = candidates[0]
    expected = frozenset(i for i, m in enumerate(target.models) if m in (model, None))
    if len(expected) < 2:
        raise ConfigError(f"same-model needs at least two workers serving '{model}', found {len(expected)}")
    weights = list(weights) if weights is not None else list(target.weights or [1.0] * len(target.system_urls))
    params = {"requests": requests, "concurrency": concurrency, "model": model, "weights": weights, "fairness_alpha": fairness_alpha}
    started = time.monotonic()
    burst = run_sync(
        _run_burst(
            target, name=model, model=model, expected=expected, requests=requests, concurrency=concurrency,
            inputs=inputs or default_inputs(requests), min_total_delta=requests if min_total_delta is None else min_total_delta,
            weights=weights, fairness_alpha=fairness_alpha, settle_seconds=settle_seconds, timeout=timeout, progress=progress,
            on_response=on_response,
        )
    )
    verdict, reasons = _verdict([burst], exact_total=True)
    return ScenarioResult(
        scenario="same-model", stack=target.stack, params=params, workers=_workers(target), bursts=[burst],
        verdict=verdict, reasons=reasons, wall_seconds=time.monotonic() - started,
    )


def multi_model_dispatch(
    deployment: Deployment | Target,
    models: Sequence[str] | None = None,
    *,
    requests_per_burst: int = 10,
    concurrency: int = 4,
    min_total_delta: float | None = None,
    settle_seconds: float = 0.0,
    inputs: Sequence[Input] | None = None,
    timeout: float = 60.0,
    progress: bool = False,
    on_response: Callable[[RequestRecord], None] | None = None,
) -> ScenarioResult:
    """One burst per model, one snapshot pair per burst: only that model's workers may move."""
    target = target_of(deployment)
    _served_models(target.frontend_url)
    if any(m is None for m in target.models):
        raise ConfigError("multi-model needs to know which model each worker serves (attach(..., models=[...]))")
    served = [m for m in target.models if m is not None]
    models = list(models) if models else list(dict.fromkeys(served))
    if len(models) < 2:
        raise ConfigError(f"multi-model needs at least two models, got {models}")
    missing = [m for m in models if m not in served]
    if missing:
        raise ConfigError(f"no worker serves {missing}; workers serve {served}")
    params = {"requests_per_burst": requests_per_burst, "concurrency": concurrency, "models": models}
    started = time.monotonic()

    async def run_all() -> list[Burst]:
        bursts = []
        for model in models:
            expected = frozenset(i for i, m in enumerate(target.models) if m == model)
            bursts.append(
                await _run_burst(
                    target, name=model, model=model, expected=expected, requests=requests_per_burst,
                    concurrency=concurrency, inputs=inputs or default_inputs(requests_per_burst),
                    min_total_delta=requests_per_burst if min_total_delta is None else min_total_delta,
                    weights=list(target.weights) if target.weights else None, fairness_alpha=None,
                    settle_seconds=settle_seconds, timeout=timeout, progress=progress, on_response=on_response,
                )
            )
        return bursts

    bursts = run_sync(run_all())
    verdict, reasons = _verdict(bursts, exact_total=True)
    return ScenarioResult(
        scenario="multi-model", stack=target.stack, params=params, workers=_workers(target), bursts=bursts,
        verdict=verdict, reasons=reasons, wall_seconds=time.monotonic() - started,
    )
