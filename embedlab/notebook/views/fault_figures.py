"""Figures of what a fault did: failover's responses by worker, a cluster fault's counters per
host and latencies, the lease-TTL sweep. Each returns a Figure and never calls plt.show()."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...scenarios.builtin.cluster_figures import FaultFigures, TtlSweepFigures
from ...scenarios.builtin.resilience_figures import FailoverFigures
from ...scenarios.result import Burst, ScenarioResult
from .figures import BAD, OBSERVED, figure, legend_outside, new_figure, served_by

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["plot_fault_timeline", "plot_timeline", "plot_ttl_sweep"]


def plot_timeline(result: ScenarioResult) -> Figure:
    """Responses by serving worker over time, with the run's events marked: how failover looked."""
    fig, (ax,) = figure(9.0, 3.4)
    burst: Burst = result.bursts[0]
    records = sorted(burst.traffic.records, key=lambda r: r.started + r.latency)
    workers = sorted({served_by(result, r) for r in records if r.ok})
    for k, worker in enumerate(workers):
        done = [r.started + r.latency for r in records if r.ok and served_by(result, r) == worker]
        ax.step(done, np.arange(1, len(done) + 1), where="post", color=f"C{k % 10}", label=worker)
    failed = [r.started + r.latency for r in records if not r.ok]
    if failed:
        ax.scatter(
            failed,
            np.zeros(len(failed)),
            marker="x",
            color=BAD,
            s=40,
            zorder=5,
            label=f"failed ({len(failed)})",
        )
    top = ax.get_ylim()[1]
    for event in result.events:
        ax.axvline(event.at, color=BAD, linestyle="--", linewidth=1)
        ax.text(
            event.at,
            top * 0.95,
            f" {event.kind}: {event.detail}",
            color=BAD,
            fontsize=8,
            va="top",
            rotation=90,
        )
    figures = result.figures if isinstance(result.figures, FailoverFigures) else None
    if figures is not None and figures.killed_at_s is not None and figures.excluded_after_s is not None:
        ax.axvspan(
            figures.killed_at_s,
            figures.killed_at_s + figures.excluded_after_s,
            color=BAD,
            alpha=0.08,
            label=f"until out of dispatch ({figures.excluded_after_s:.2f} s)",
        )
    ax.set_xlabel("time since burst start (s)")
    ax.set_ylabel("responses (cumulative)")
    legend_outside(ax)
    fig.suptitle(f"{result.scenario} on {result.where}: {result.verdict.upper()}", fontsize=10)
    return fig


def _per_host_counts(result: ScenarioResult) -> dict[int, tuple[list[float], list[float]]]:
    """Requests counted per host over time, summed over its workers; a restarted worker's counter
    continues from where the old one stopped, and an unreadable sample leaves a gap (NaN)."""
    by_worker: dict[int, list[tuple[float, float | None]]] = {}
    samples = result.figures.samples if isinstance(result.figures, FaultFigures) else ()
    for sample in samples:
        by_worker.setdefault(sample.worker, []).append((sample.at_s, sample.value))
    series: dict[int, dict[float, float]] = {}
    host_of = {w.index: w.host for w in result.workers}
    for worker, points in by_worker.items():
        offset, last, first = 0.0, None, None
        for at, value in points:
            total = series.setdefault(host_of.get(worker, 0), {})
            if value is None:
                total[at] = float("nan")
                continue
            if last is not None and value < last:
                offset += last  # a new process counts from zero
            last = value
            first = value if first is None else first
            total[at] = total.get(at, 0.0) + offset + value - first
    return {host: (list(points), list(points.values())) for host, points in sorted(series.items())}


def plot_fault_timeline(result: ScenarioResult) -> Figure:
    """Top: requests counted per host through the fault (a gap: the host could not be read).
    Bottom: every request's latency, failed ones in red. The fault is shaded, events marked."""
    fig = new_figure(10.0, 5.2)
    counts, latency = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [1.3, 1]})
    for host, (xs, ys) in _per_host_counts(result).items():
        on_host = [w.label for w in result.workers if w.host == host]
        counts.plot(xs, ys, marker=".", ms=3, lw=1.2, label=f"host {host} ({', '.join(on_host)})")
    traffic = result.bursts[0].traffic
    ok = [r for r in traffic.records if r.ok]
    failed = [r for r in traffic.records if not r.ok]
    latency.scatter(
        [r.started for r in ok], [r.latency for r in ok], s=6, color=OBSERVED, label=f"answered ({len(ok)})"
    )
    if failed:
        latency.scatter(
            [r.started for r in failed],
            [r.latency for r in failed],
            s=22,
            marker="x",
            color=BAD,
            label=f"failed ({len(failed)})",
        )
    latency.set_yscale("log")
    fault = result.figures if isinstance(result.figures, FaultFigures) else None
    for ax in (counts, latency):
        if fault is not None:
            ax.axvspan(
                fault.started_s,
                fault.ended_s if fault.ended_s is not None else fault.started_s,
                color=BAD,
                alpha=0.08,
            )
        for event in result.events:
            ax.axvline(event.at, color="#555555", ls=":", lw=1)
    top = counts.get_ylim()[1]
    for event in result.events:
        counts.text(event.at, top, f" {event.kind}", rotation=90, fontsize=7, va="top", color="#555555")
    counts.set_ylabel("requests counted")
    latency.set_ylabel("latency (s)")
    latency.set_xlabel("seconds since the traffic began (request start)")
    legend_outside(counts)
    legend_outside(latency)
    title = f" ({fault.fault})" if fault is not None and fault.fault != result.scenario else ""
    fig.suptitle(f"{result.scenario}{title} on {result.where}: {result.verdict.upper()}", fontsize=10)
    return fig


def plot_ttl_sweep(result: ScenarioResult) -> Figure:
    """Time out of dispatch and failed requests against the lease TTL; the dashed line is one TTL."""
    fig, (left, right) = figure(10.0, 3.6, 2)
    points = result.figures.points if isinstance(result.figures, TtlSweepFigures) else ()
    ttls = [p.lease_ttl_s for p in points]
    left.plot(
        ttls,
        [p.left_dispatch_after_s if p.left_dispatch_after_s is not None else np.nan for p in points],
        marker="o",
        color=OBSERVED,
        label="measured",
    )
    span = [0.0, max(ttls, default=1.0) * 1.1]
    left.plot(span, span, ls="--", color="#888888", lw=1, label="one TTL")
    for p in points:
        if p.left_dispatch_after_s is None:
            left.annotate("never left", (p.lease_ttl_s, 0), fontsize=8, color=BAD)
    left.set_xlabel("lease TTL (s)")
    left.set_ylabel("SIGKILL to out of dispatch (s)")
    legend_outside(left)
    right.bar(
        [str(int(t)) if float(t).is_integer() else str(t) for t in ttls],
        [p.failed_requests for p in points],
        color=BAD,
    )
    for k, p in enumerate(points):
        right.text(k, p.failed_requests, str(p.failed_requests), ha="center", va="bottom", fontsize=8)
    right.set_xlabel("lease TTL (s)")
    right.set_ylabel("failed requests")
    fig.suptitle(f"lease TTL sweep on {result.where}: {result.verdict.upper()} (not asserted)", fontsize=10)
    return fig
