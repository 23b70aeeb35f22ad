"""Figures from results. Each returns a Figure and never calls plt.show().

Workers are named by index everywhere ("worker 0"); legends sit outside the axes, so
they never cover a bar or its label.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ...defaults import FAIRNESS_ALPHA
from ...evidence.stats import binom_acceptance
from ...scenarios.battery import ConformanceTable
from ...scenarios.explore import Step, SweepResult, weights_label
from ...scenarios.result import Burst, ScenarioResult
from ...verdicts import Verdict

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from ...evidence.traffic import RequestRecord

__all__ = [
    "ALL_RESPONSES",
    "BAD",
    "OBSERVED",
    "figure",
    "legend_outside",
    "new_figure",
    "plot_convergence",
    "plot_deltas",
    "plot_latency",
    "plot_matrix",
    "plot_sweep",
    "served_by",
]

OBSERVED, EXPECTED, BAD = "#1f77b4", "#c7c7c7", "#d62728"
# A frontend that names no serving worker (Dynamo's) gives one line for all responses.
ALL_RESPONSES = "all responses (the frontend names no worker)"


def new_figure(width: float, height: float) -> Figure:
    """An empty figure that shows in a notebook at 2x, with alt text (`embedlab.notebook.views.inline`)."""
    from .inline import NotebookFigure

    return NotebookFigure(figsize=(width, height), layout="constrained")


def figure(width: float, height: float, ncols: int = 1) -> tuple[Figure, list[Axes]]:
    fig = new_figure(width, height)
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, list(axes)


def legend_outside(ax: Axes, **options: object) -> None:
    """A legend right of the axes: it never covers data, whatever the data does."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, **options)


def served_by(result: ScenarioResult, record: RequestRecord) -> str:
    return result.worker_label(record.worker) if record.worker else ALL_RESPONSES


def plot_deltas(result: ScenarioResult) -> Figure:
    """Grouped bars per burst: observed delta against expected, per worker.

    Workers expected to stay still are shaded and labelled "expected 0"; a bar that
    should not be there is drawn red. A single burst whose split was tested against the
    weights gets a second panel: each worker's share against the range a correct router
    falls in at the test's alpha, the pass rule drawn.
    """
    from matplotlib.ticker import MaxNLocator  # here: the CLI imports this module, and draws nothing

    tested = [b for b in result.bursts if b.check is not None and b.check.p_value is not None]
    shares = len(result.bursts) == 1 and bool(tested)
    n = max(1, len(result.bursts))
    fig, axes = figure(9.6 if shares else max(6.0, 3.6 * n + 1.6), 3.4, n + int(shares))
    workers = [w.index for w in result.workers]
    x = np.arange(len(workers))
    # One y scale for every burst's panel: bursts are compared side by side.
    top = max(
        [1.0, *(v for b in result.bursts for i in workers for v in (b.delta(i) or 0.0, b.expected_count(i)))]
    )
    for ax, burst in zip(axes, result.bursts):
        if ax is not axes[0]:
            ax.sharey(axes[0])
        observed = [burst.delta(i) or 0.0 for i in workers]
        expected = [burst.expected_count(i) for i in workers]
        colors = [
            OBSERVED if (i in burst.expected or observed[k] <= 0) else BAD for k, i in enumerate(workers)
        ]
        ax.bar(x - 0.2, expected, 0.4, color=EXPECTED, label="expected")
        ax.bar(x + 0.2, observed, 0.4, color=colors, label="observed")
        for k, i in enumerate(workers):
            if i not in burst.expected:
                ax.axvspan(k - 0.5, k + 0.5, color="#f2f2f2", zorder=0)
                ax.text(k, top * 1.04, "expected 0", ha="center", va="bottom", fontsize=8, color="#555555")
            ax.text(k + 0.2, observed[k], f"{observed[k]:.0f}", ha="center", va="bottom", fontsize=8)
        ax.set_xticks(x, [f"{w.label}\n{w.model or ''}" for w in result.workers], fontsize=8)
        ax.set_ylim(0, top * 1.18)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # requests are counted whole
        title = f"burst '{burst.name}': {_burst_verdict(result, burst)}"
        if burst.model not in burst.name:  # a burst named for its send order: which models it sent
            title += f"\n{burst.model.replace('+', ', ')}"
        if burst.check and burst.check.p_value is not None:
            title += f"\np = {burst.check.p_value:.3g}"
        ax.set_title(title, fontsize=9)
        if ax is axes[0]:
            ax.set_ylabel("requests counted (delta)")
    legend_outside(axes[n - 1])
    if shares:
        _plot_share_ranges(axes[-1], result, tested[0])
    fig.suptitle(f"{result.scenario} on {result.where}: {result.verdict.upper()}", fontsize=10)
    return fig


def _burst_verdict(result: ScenarioResult, burst: Burst) -> str:
    """A burst's word under its result's: a burst that broke no rule of a result that could not
    decide (too few requests to judge, say) is never titled ok under an INCONCLUSIVE verdict."""
    if burst.inconclusive:
        return "inconclusive"
    if not (burst.check and burst.check.passed):
        return "FAIL"
    return "no fault seen, inconclusive" if result.verdict == Verdict.INCONCLUSIVE else "ok"


def plot_schedule(result: ScenarioResult) -> Figure:
    """A busy check's schedule and what it found: the on and off windows over time (top; a block
    set aside for a late answer is faded), each worker's on-minus-off count (bottom) with the
    range its share's confidence sequence allows at the verdict (and the share its weight
    expects, grey), and the verdict's power as a sentence under both."""
    run = result.schedule
    assert run is not None
    fig = new_figure(9.6, 4.6)
    top, bottom = fig.subplots(2, 1, height_ratios=[1, 2.4])
    arms = list(dict.fromkeys(w.arm for w in run.windows))
    palette = {a: ("#bdbdbd" if a == "off" else f"C{k}") for k, a in enumerate(arms)}
    for window in run.windows:
        top.broken_barh(
            [(window.start_s, window.end_s - window.start_s)],
            (0, 1),
            color=palette[window.arm],
            alpha=1.0 if window.kept else 0.25,
        )
    for a in arms:
        top.bar(0, 0, color=palette[a], label=a if a == "off" else f"on: {a}" if a != "on" else "on")
    if run.set_aside:
        top.bar(0, 0, color="#bdbdbd", alpha=0.25, label="set aside (late answer)")
    top.set_yticks([])
    top.set_xlabel("seconds from the schedule's start", fontsize=8)
    how = run.verdict.how if run.verdict else run.why
    top.set_title(f"schedule: {how}", fontsize=8)
    legend_outside(top)
    kept = [window for window in run.windows if window.kept]
    sent: dict[str, float] = {}
    for window in kept:
        for m, k in window.sent.items():
            sent[m] = sent.get(m, 0.0) + k
    moved = run.on_minus_off()
    workers = result.workers
    x = np.arange(len(workers))
    bottom.bar(x, [moved.get(w.index, 0.0) for w in workers], 0.6, color=OBSERVED, label="on minus off")
    estimates = run.verdict.replicas + run.verdict.placement if run.verdict else ()
    for k, w in enumerate(workers):
        share = next((e for e in estimates if e.workers == (w.index,)), None)
        if share is None or np.isnan(share.low):
            continue
        total = sent.get(share.model, 0.0)
        high = min(share.high, 10.0) * total  # an unbounded range is drawn to ten times the requests
        bottom.errorbar(
            k, (share.low * total + high) / 2, yerr=(high - share.low * total) / 2, color="black", capsize=4
        )
        bottom.plot([k - 0.3, k + 0.3], [share.expected * total] * 2, color=EXPECTED, linewidth=3)
    bottom.errorbar([], [], yerr=[], color="black", capsize=4, label="its share's range at the verdict")
    bottom.plot([], [], color=EXPECTED, linewidth=3, label="expected by its weight")
    bottom.set_xticks(x, [f"{w.label}\n{w.model or ''}" for w in workers], fontsize=8)
    bottom.set_ylabel("requests counted:\non minus off windows", fontsize=8)
    legend_outside(bottom)
    fig.suptitle(f"{result.scenario} on {result.where}: {result.verdict.upper()}", fontsize=10)
    fig.supxlabel(textwrap.fill(f"Power: {result.power}", 160), fontsize=7)
    return fig


def _plot_share_ranges(ax: Axes, result: ScenarioResult, burst: Burst) -> None:
    """Each expected worker's observed share, its expected share, and the range of shares a
    correct router produces at p >= alpha (the binomial test, one worker against the rest)."""
    assert burst.check is not None
    alpha = float(result.params.get("fairness_alpha") or FAIRNESS_ALPHA)
    order = sorted(burst.expected)
    total = sum(burst.delta(i) or 0.0 for i in order)
    n = int(round(total))
    for row, index in enumerate(order):
        share = burst.expected_shares.get(index, 0.0)
        lo, hi = binom_acceptance(n, share, alpha) if n > 0 else (0, 0)
        observed = (burst.delta(index) or 0.0) / total if total > 0 else 0.0
        inside = n > 0 and lo <= (burst.delta(index) or 0.0) <= hi
        ax.barh(
            row,
            (hi - lo) / max(n, 1),
            left=lo / max(n, 1),
            height=0.5,
            color="#e3f2e3",
            label=f"range at p >= {alpha:g}" if row == 0 else None,
        )
        ax.plot(
            [share, share],
            [row - 0.3, row + 0.3],
            color="black",
            lw=2,
            label="expected" if row == 0 else None,
        )
        ax.plot(
            [observed],
            [row],
            marker="o",
            color=OBSERVED if inside else BAD,
            ms=7,
            label="observed" if row == 0 else None,
        )
    ax.set_yticks(range(len(order)), [f"worker {i}" for i in order], fontsize=8)
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of the burst's requests")
    ax.invert_yaxis()
    p_value = burst.check.p_value
    ax.set_title(f"the rule: p >= {alpha:g} (here p = {p_value:.3g})", fontsize=9)
    legend_outside(ax)


def plot_latency(result: ScenarioResult) -> Figure:
    """Latency over the run, coloured by serving worker, and its distribution per burst."""
    fig, (timeline, dist) = figure(10.0, 3.2, 2)
    records = [r for b in result.bursts for r in b.traffic.records]
    workers = sorted({served_by(result, r) for r in records if r.ok})
    palette = {w: f"C{k % 10}" for k, w in enumerate(workers)}
    offset = 0.0
    for burst in result.bursts:
        for worker in workers:
            picked = [r for r in burst.traffic.records if r.ok and served_by(result, r) == worker]
            timeline.scatter(
                [offset + r.started for r in picked],
                [r.latency * 1000 for r in picked],
                s=8,
                color=palette[worker],
                label=worker if burst is result.bursts[0] else None,
            )
        failed = [r for r in burst.traffic.records if not r.ok]
        if failed:
            timeline.scatter(
                [offset + r.started for r in failed],
                [r.latency * 1000 for r in failed],
                s=14,
                marker="x",
                color=BAD,
                label="failed",
            )
        offset += burst.traffic.wall_seconds
        values = np.sort([r.latency * 1000 for r in burst.traffic.records if r.ok])
        if values.size:
            dist.step(values, np.arange(1, values.size + 1) / values.size, where="post", label=burst.name)
    timeline.set_xlabel("time since first burst (s)")
    timeline.set_ylabel("latency (ms)")
    legend_outside(timeline)
    dist.set_xlabel("latency (ms)")
    dist.set_ylabel("fraction of requests")
    legend_outside(dist)
    lat = result.latency_ms()
    fig.suptitle(f"latency: p50 {lat['p50']:.2f} ms, p99 {lat['p99']:.2f} ms", fontsize=10)
    return fig


def plot_convergence(steps: Sequence[Step]) -> Figure:
    """Each worker's cumulative share since the last weight change, against its expected share.

    The x axis counts bursts; each phase (the bursts under one set of weights) is a band
    labelled with its weights, the first one too; a dashed line is each worker's expected
    share in that phase, dashed in turn with the other workers' where they coincide. A
    burst that did not pass is a red cross, its reason written under the axes.
    """
    fig, (ax,) = figure(9.6, 3.8)
    if not steps:
        ax.text(0.5, 0.5, "no bursts sent yet", ha="center", va="center", transform=ax.transAxes)
        return fig
    workers = len(steps[0].deltas)
    phases: dict[int, list[Step]] = {}
    for step in steps:
        phases.setdefault(step.phase, []).append(step)
    for band, members in enumerate(phases.values()):
        first, last = members[0].number - 0.5, members[-1].number + 0.5
        if band % 2:
            ax.axvspan(first, last, color="#f4f4f4", zorder=0)
        if band:
            ax.axvline(first, color="#555555", ls=":", lw=1)
        ax.text(
            (first + last) / 2,
            1.03,
            weights_label(members[0].weights),
            fontsize=8,
            ha="center",
            va="bottom",
            color="#333333",
        )
        for worker in range(workers):
            # Equal expected shares would hide each other: each worker's dashes fall in the others' gaps.
            dash = (worker * 3.0, (3.0, 3.0 * (workers - 1) + 0.001))
            ax.hlines(
                members[0].expected_shares[worker],
                first,
                last,
                colors=f"C{worker % 10}",
                linestyles=dash,
                lw=1.4,
            )
    for worker in range(workers):
        for phase, members in phases.items():
            ax.plot(
                [s.number for s in members],
                [
                    s.cumulative_shares[worker] if s.cumulative_shares else s.observed_shares[worker]
                    for s in members
                ],
                marker="o",
                ms=3,
                color=f"C{worker % 10}",
                label=f"worker {worker}" if phase == min(phases) else None,
            )
    failed = [s for s in steps if not s.result.passed]
    for step in failed:
        ax.plot(
            [step.number],
            [1.0],
            marker="x",
            color=BAD,
            ms=9,
            mew=2,
            label="burst not passed" if step is failed[0] else None,
        )
    if failed:
        notes = [
            f"burst {s.number}: {s.result.verdict.upper()} ({'; '.join(s.result.reasons)})" for s in failed
        ]
        fig.text(0.01, 0.01, "\n".join(notes[:4]), fontsize=7, color=BAD, va="bottom", ha="left")
    ax.set_ylim(0, 1.12)
    ax.set_xlim(0.5, steps[-1].number + 0.5)
    ax.set_xticks([s.number for s in steps])
    ax.set_xlabel("burst")
    ax.set_ylabel("cumulative share\n(since the weights were set)")
    legend_outside(ax)
    ax.set_title("split convergence: observed (solid) against the weights (dashed)", fontsize=10, pad=16)
    return fig


def plot_sweep(sweep: SweepResult) -> Figure:
    """Left: observed share per worker for each weight setting, with the expected share as a
    black tick. Right: expected against observed share, where a perfect router sits on the diagonal."""
    fig = new_figure(11.0, 3.6)
    bars, scatter = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.6, 1]})
    if not sweep.points:
        return fig
    workers = len(sweep.points[0].deltas)
    width = 0.8 / workers
    x = np.arange(len(sweep.points))
    for worker in range(workers):
        color = f"C{worker % 10}"
        offsets = x - 0.4 + width * (worker + 0.5)
        observed = [p.observed_shares[worker] for p in sweep.points]
        expected = [p.expected_shares[worker] for p in sweep.points]
        bars.bar(offsets, observed, width * 0.9, color=color, label=f"worker {worker} observed")
        bars.hlines(
            expected,
            offsets - width * 0.45,
            offsets + width * 0.45,
            colors="black",
            lw=2,
            label="expected" if worker == 0 else None,
        )
        scatter.scatter(expected, observed, color=color, s=24, label=f"worker {worker}")
    labels = []
    for p in sweep.points:
        mark = "ok" if p.result.passed else p.result.verdict.upper()
        p_text = f"p={p.p_value:.2g}" if p.p_value is not None else "p=n/a"
        labels.append(f"{weights_label(p.weights)}\n{p_text} {mark}")
    bars.set_xticks(x, labels, fontsize=8)
    bars.set_ylim(0, 1.05)
    bars.set_ylabel("share of the burst's requests")
    legend_outside(bars)
    bars.set_title("observed against expected share, per weight setting", fontsize=9)
    scatter.plot([0, 1], [0, 1], color="#888888", ls="--", lw=1)
    scatter.set_xlim(0, 1)
    scatter.set_ylim(0, 1)
    scatter.set_xlabel("expected share (from the weights)")
    scatter.set_ylabel("observed share (from the counters)")
    legend_outside(scatter)
    scatter.set_title("expected against observed", fontsize=9)
    fig.suptitle(f"weight sweep on {sweep.where}: {sweep.verdict.upper()}", fontsize=10)
    return fig


def plot_matrix(matrix: ConformanceTable) -> Figure:
    """The router x check grid: each cell coloured by its verdict, with its figure in small print."""
    import textwrap

    from matplotlib.patches import Rectangle

    colours = {
        "passed": "#c8e6c9",
        "failed": "#ffcdd2",
        "reported": "#cfd8dc",
        "unsupported": "#eeeeee",
        "inconclusive": "#ffe0b2",
        "error": "#e1bee7",
    }
    fig = new_figure(2.3 * len(matrix.checks) + 1.6, 1.25 * len(matrix.stacks) + 0.8)
    ax = fig.subplots()
    for row, stack in enumerate(matrix.stacks):
        for col, check in enumerate(matrix.checks):
            cell = matrix.cell(stack, check)
            verdict = cell.verdict if cell else "error"
            ax.add_patch(
                Rectangle(
                    (col, row), 1, 1, facecolor=colours.get(verdict, "#ffffff"), edgecolor="white", lw=2
                )
            )
            text = str(verdict).upper() + (
                "\n" + "\n".join(textwrap.wrap(cell.text, 28)[:4]) if cell and cell.text else ""
            )
            ax.text(col + 0.5, row + 0.5, text, ha="center", va="center", fontsize=6.5)
    ax.set_xlim(0, len(matrix.checks))
    ax.set_ylim(len(matrix.stacks), 0)
    ax.set_xticks([c + 0.5 for c in range(len(matrix.checks))], matrix.checks, fontsize=8)
    ax.set_yticks(
        [r + 0.5 for r in range(len(matrix.stacks))],
        [f"{s}\n{matrix.versions.get(s, '')}" for s in matrix.stacks],
        fontsize=8,
    )
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.xaxis.tick_top()
    fig.suptitle("conformance: every check against every stack", fontsize=10)
    return fig
