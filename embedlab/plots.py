"""Figures from scenario results. Each returns a Figure and never calls plt.show()."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from .scenarios import Burst, ScenarioResult
    from .traffic import RequestRecord

OBSERVED, EXPECTED, BAD = "#1f77b4", "#c7c7c7", "#d62728"


def _figure(width: float, height: float, ncols: int = 1) -> tuple["Figure", list]:  # type: ignore[type-arg]
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, list(axes)


# A frontend that names no serving worker (Dynamo's) gives one line for all responses.
ALL_RESPONSES = "all responses (the frontend names no worker)"


def _served_by(record: "RequestRecord") -> str:
    return record.worker.split("/")[0] if record.worker else ALL_RESPONSES


def _delta(burst: "Burst", index: int) -> float:
    row = burst.check.row(index) if burst.check else None
    return row.delta if row is not None else 0.0


def plot_deltas(result: "ScenarioResult") -> "Figure":
    """Grouped bars per burst: observed delta against expected, per worker.

    Workers expected to stay still are shaded and labelled "expected 0"; a bar that
    should not be there is drawn red.
    """
    n = max(1, len(result.bursts))
    fig, axes = _figure(max(4.0, 3.6 * n), 3.4, n)
    workers = [w["index"] for w in result.workers]
    x = np.arange(len(workers))
    for ax, burst in zip(axes, result.bursts):
        observed = [_delta(burst, i) for i in workers]
        expected = [burst.expected_count(i) for i in workers]
        colors = [OBSERVED if (i in burst.expected or observed[k] <= 0) else BAD for k, i in enumerate(workers)]
        ax.bar(x - 0.2, expected, 0.4, color=EXPECTED, label="expected")
        ax.bar(x + 0.2, observed, 0.4, color=colors, label="observed")
        top = max([*observed, *expected, 1.0])
        for k, i in enumerate(workers):
            if i not in burst.expected:
                ax.axvspan(k - 0.5, k + 0.5, color="#f2f2f2", zorder=0)
                ax.text(k, top * 1.04, "expected 0", ha="center", va="bottom", fontsize=8, color="#555555")
            ax.text(k + 0.2, observed[k], f"{observed[k]:g}", ha="center", va="bottom", fontsize=8)
        ax.set_xticks(x, [f"worker {i}\n{result.workers[i]['model'] or ''}" for i in workers], fontsize=8)
        ax.set_ylim(0, top * 1.18)
        verdict = "inconclusive" if burst.inconclusive else ("ok" if burst.check and burst.check.passed else "FAIL")
        title = f"burst '{burst.model}': {verdict}"
        if burst.check and burst.check.p_value is not None:
            title += f"\np = {burst.check.p_value:.3g}"
        ax.set_title(title, fontsize=9)
        ax.set_ylabel("requests counted (delta)")
    axes[0].legend(fontsize=8, loc="upper left")
    fig.suptitle(f"{result.scenario} on {result.stack}: {result.verdict.upper()}", fontsize=10)
    return fig


def plot_latency(result: "ScenarioResult") -> "Figure":
    """Latency over the run, coloured by serving worker, and its distribution per burst."""
    fig, (timeline, dist) = _figure(9.0, 3.2, 2)
    workers = sorted({_served_by(r) for b in result.bursts for r in b.traffic.records if r.ok})
    palette = {w: f"C{k % 10}" for k, w in enumerate(workers)}
    offset = 0.0
    for burst in result.bursts:
        records = burst.traffic.records
        for worker in workers:
            picked = [r for r in records if r.ok and _served_by(r) == worker]
            timeline.scatter(
                [offset + r.started for r in picked], [r.latency * 1000 for r in picked], s=8, color=palette[worker],
                label=worker if burst is result.bursts[0] else None,
            )
        failed = [r for r in records if not r.ok]
        if failed:
            timeline.scatter([offset + r.started for r in failed], [r.latency * 1000 for r in failed], s=14, marker="x", color=BAD, label="failed")
        offset += burst.traffic.wall_seconds
        values = np.sort([r.latency * 1000 for r in records if r.ok])
        if values.size:
            dist.step(values, np.arange(1, values.size + 1) / values.size, where="post", label=burst.model)
    timeline.set_xlabel("time since first burst (s)")
    timeline.set_ylabel("latency (ms)")
    timeline.legend(fontsize=7, loc="upper right")
    dist.set_xlabel("latency (ms)")
    dist.set_ylabel("fraction of requests")
    dist.legend(fontsize=7, loc="lower right")
    lat = result.latency_ms()
    fig.suptitle(f"latency: p50 {lat['p50']:.2f} ms, p99 {lat['p99']:.2f} ms", fontsize=10)
    return fig


def plot_timeline(result: "ScenarioResult") -> "Figure":
    """Responses by serving worker over time, with the kill marked: how failover looked."""
    fig, (ax,) = _figure(8.0, 3.4)
    burst = result.bursts[0]
    records = sorted(burst.traffic.records, key=lambda r: r.started + r.latency)
    workers = sorted({_served_by(r) for r in records if r.ok})
    for k, worker in enumerate(workers):
        done = [r.started + r.latency for r in records if r.ok and _served_by(r) == worker]
        ax.step(done, np.arange(1, len(done) + 1), where="post", color=f"C{k % 10}", label=worker)
    failed = [r.started + r.latency for r in records if not r.ok]
    if failed:
        ax.scatter(failed, np.zeros(len(failed)), marker="x", color=BAD, s=40, zorder=5, label=f"failed ({len(failed)})")
    killed = result.extra.get("killed_at_s")
    if killed is not None:
        ax.axvline(killed, color=BAD, linestyle="--", linewidth=1)
        ax.text(killed, ax.get_ylim()[1] * 0.95, f" worker {result.extra.get('victim')} killed", color=BAD, fontsize=8, va="top")
        excluded = result.extra.get("excluded_after_s")
        if excluded is not None:
            ax.axvspan(killed, killed + excluded, color=BAD, alpha=0.08, label=f"until out of dispatch ({excluded:.2f} s)")
    ax.set_xlabel("time since burst start (s)")
    ax.set_ylabel("responses (cumulative)")
    ax.legend(fontsize=7, loc="upper left")
    fig.suptitle(f"{result.scenario} on {result.stack}: {result.verdict.upper()}", fontsize=10)
    return fig
