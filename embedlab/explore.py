"""Explore routing on a live deployment: bursts, live weight changes, and how the split converges.

    dep = ScenarioPlan.from_params(scenario="same-model").deployment().start()
    explorer = Explorer(dep)
    explorer.burst(20)                    # counters before and after, judged against the weights
    explorer.set_weights([3, 1])          # live, on the embedded frontend
    explorer.burst(20, repeat=4)
    explorer.table, explorer.plot()       # per-worker deltas; cumulative split since the change
    sweep = explorer.sweep([[1, 1], [3, 1], [1, 3]], requests=60)
    sweep.table, sweep.plot(), sweep.passed
    dep.stop()

Every burst is a `same_model_load_balance` run, so each one is judged exactly as the
scenario notebooks judge theirs: every worker must move, the counters must account for
every request, and the split must fit the weights (fairness p-value above alpha).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from .errors import ConfigError
from .scenarios import DEFAULT_FAIRNESS_ALPHA, ScenarioResult, same_model_load_balance
from .verdicts import Verdict

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

    from .deployment import Deployment

__all__ = ["Explorer", "Step", "SweepResult", "cumulative_shares", "expected_shares", "weights_label"]


def expected_shares(weights: Sequence[float]) -> list[float]:
    """The share of requests each worker should get under weighted-random routing."""
    total = float(sum(weights))
    if not weights or total <= 0 or any(w <= 0 for w in weights):
        raise ConfigError(f"weights must be positive, got {list(weights)}")
    return [w / total for w in weights]


def cumulative_shares(deltas: Sequence[Sequence[float]]) -> list[list[float]]:
    """Per step, each worker's share of everything counted so far (NaN while nothing was)."""
    running: list[float] = []
    out: list[list[float]] = []
    for step in deltas:
        running = [a + b for a, b in zip(running, step)] if running else [float(x) for x in step]
        total = sum(running)
        out.append([x / total if total > 0 else float("nan") for x in running])
    return out


def weights_label(weights: Sequence[float]) -> str:
    return "w=" + ":".join(f"{w:g}" for w in weights)


@dataclass(frozen=True)
class Step:
    """One burst the explorer sent, under the weights that were live at the time."""

    index: int
    phase: int  # bumped by every weight change: convergence restarts there
    weights: tuple[float, ...]
    result: ScenarioResult

    @property
    def deltas(self) -> list[float]:
        burst = self.result.bursts[0]
        return [row.delta for row in burst.check.rows] if burst.check else [0.0] * len(self.weights)

    @property
    def requests(self) -> int:
        return self.result.bursts[0].traffic.n

    @property
    def p_value(self) -> float | None:
        return self.result.p_values.get(self.result.bursts[0].name)

    @property
    def observed_shares(self) -> list[float]:
        total = sum(self.deltas)
        return [d / total if total > 0 else float("nan") for d in self.deltas]

    @property
    def expected_shares(self) -> list[float]:
        return expected_shares(self.weights)


class Explorer:
    """A live deployment under a user's hands: send bursts, change weights, watch the split.

    `deployment` must be running; weight changes need the embedded stack. The explorer
    never starts or stops it: whoever started it stops it.
    """

    def __init__(
        self,
        deployment: "Deployment",
        *,
        model: str | None = None,
        concurrency: int = 4,
        fairness_alpha: float = DEFAULT_FAIRNESS_ALPHA,
    ) -> None:
        """`model`: the model to send (default: the one the workers serve); `fairness_alpha`:
        the p-value below which a burst's split counts as not fitting the weights."""
        self.deployment = deployment
        self.model = model
        self.concurrency = concurrency
        self.fairness_alpha = fairness_alpha
        self.steps: list[Step] = []
        self.phase = 0

    @property
    def weights(self) -> tuple[float, ...]:
        return tuple(w.weight for w in self.deployment.spec.workers)

    def set_weights(self, weights: Sequence[float]) -> None:
        """Change every worker's weight live; the convergence plot restarts from here."""
        expected_shares(weights)  # reject zero or negative weights before the frontend does
        self.deployment.set_weights([float(w) for w in weights])
        self.phase += 1

    def burst(self, requests: int = 20, *, repeat: int = 1) -> Step:
        """Send `repeat` bursts of `requests` each, judging each; returns the last one."""
        if repeat < 1:
            raise ConfigError(f"repeat must be at least 1, got {repeat}")
        for _ in range(repeat):
            result = same_model_load_balance(
                self.deployment, requests=requests, concurrency=self.concurrency, model=self.model,
                fairness_alpha=self.fairness_alpha,
            )
            self.steps.append(Step(index=len(self.steps), phase=self.phase, weights=self.weights, result=result))
        return self.steps[-1]

    def sweep(self, weight_sets: Sequence[Sequence[float]], *, requests: int = 40) -> "SweepResult":
        """For each weight vector: set it live, send one burst, compare the split with the weights."""
        if not weight_sets:
            raise ConfigError("a sweep needs at least one weight vector")
        points = []
        for weights in weight_sets:
            self.set_weights(weights)
            points.append(self.burst(requests))
        return SweepResult(points=points, fairness_alpha=self.fairness_alpha, stack=self.deployment.spec.stack)

    @property
    def table(self) -> "pd.DataFrame":
        """One row per burst and worker: delta, share, expected share, cumulative share in its phase."""
        return steps_table(self.steps)

    def plot(self) -> "Figure":
        return plot_convergence(self.steps)


def steps_table(steps: Sequence[Step]) -> "pd.DataFrame":
    import pandas as pd

    rows = []
    phases: dict[int, list[Step]] = {}
    for step in steps:
        phases.setdefault(step.phase, []).append(step)
    for phase_steps in phases.values():
        cumulative = cumulative_shares([s.deltas for s in phase_steps])
        for step, shares in zip(phase_steps, cumulative):
            expected = step.expected_shares
            observed = step.observed_shares
            for worker, delta in enumerate(step.deltas):
                rows.append(
                    {
                        "step": step.index, "phase": step.phase, "weights": weights_label(step.weights), "worker": worker,
                        "delta": delta, "share": round(observed[worker], 3), "expected_share": round(expected[worker], 3),
                        "cumulative_share": round(shares[worker], 3), "p_value": step.p_value,
                        "verdict": step.result.verdict,
                    }
                )
    return pd.DataFrame(rows).sort_values(["step", "worker"], ignore_index=True) if rows else pd.DataFrame(rows)


@dataclass
class SweepResult:
    """A weight sweep: one judged burst per weight vector, expected split against observed."""

    points: list[Step]
    fairness_alpha: float = DEFAULT_FAIRNESS_ALPHA
    stack: str = "embedded"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def verdict(self) -> Verdict:
        if not self.points:
            return Verdict.FAILED
        return Verdict.worst([Verdict(p.result.verdict) for p in self.points])

    @property
    def passed(self) -> bool:
        return self.verdict == Verdict.PASSED

    @property
    def reasons(self) -> list[str]:
        return [f"{weights_label(p.weights)}: {r}" for p in self.points for r in p.result.reasons]

    def summary(self) -> str:
        head = f"weight sweep on {self.stack} ({len(self.points)} weight settings): {self.verdict.upper()}"
        return head + (" (" + "; ".join(self.reasons) + ")" if self.reasons else "")

    def __str__(self) -> str:
        return self.summary()

    @property
    def p_values(self) -> dict[str, float | None]:
        return {weights_label(p.weights): p.p_value for p in self.points}

    def latency_ms(self) -> dict[str, float]:
        import numpy as np

        values = np.array([r.latency for p in self.points for b in p.result.bursts for r in b.traffic.records if r.ok])
        if values.size == 0:
            return {"p50": float("nan"), "p90": float("nan"), "p99": float("nan")}
        p50, p90, p99 = np.percentile(values * 1000.0, [50, 90, 99])
        return {"p50": float(p50), "p90": float(p90), "p99": float(p99)}

    @property
    def table(self) -> "pd.DataFrame":
        """One row per weight setting and worker: expected share against observed, and the p-value."""
        import pandas as pd

        rows = []
        for p in self.points:
            for worker, (delta, exp, obs) in enumerate(zip(p.deltas, p.expected_shares, p.observed_shares)):
                rows.append(
                    {
                        "weights": weights_label(p.weights), "worker": worker, "delta": delta,
                        "expected_delta": round(exp * p.requests, 2), "expected_share": round(exp, 3),
                        "observed_share": round(obs, 3), "p_value": p.p_value, "verdict": p.result.verdict,
                    }
                )
        return pd.DataFrame(rows)

    def plot(self) -> "Figure":
        return plot_sweep(self)

    def to_json(self) -> dict[str, Any]:
        """The same keys as a scenario's result (verdict, p_values, latency_ms, bursts), plus the points."""
        return {
            "scenario": "weight-sweep",
            "stack": self.stack,
            "verdict": self.verdict,
            "passed": self.passed,
            "reasons": self.reasons,
            "params": {"weights": [list(p.weights) for p in self.points], "fairness_alpha": self.fairness_alpha},
            "latency_ms": self.latency_ms(),
            "p_values": self.p_values,
            "bursts": [
                {
                    "name": weights_label(p.weights), "model": p.result.bursts[0].model,
                    "expected": sorted(p.result.bursts[0].expected), "deltas": p.deltas,
                    "expected_deltas": [s * p.requests for s in p.expected_shares],
                    "check": p.result.bursts[0].check.to_json() if p.result.bursts[0].check else None,
                    "traffic": p.result.bursts[0].traffic.to_json(),
                }
                for p in self.points
            ],
            "points": [
                {
                    "weights": list(p.weights), "expected_shares": p.expected_shares, "observed_shares": p.observed_shares,
                    "deltas": p.deltas, "p_value": p.p_value, "verdict": p.result.verdict,
                }
                for p in self.points
            ],
            "extra": self.extra,
        }

    def save_json(self, path: str | Path) -> Path:
        """Write `to_json()` to `path`: what `embedlab regress` collects."""
        from .report import write_json

        return write_json(path, self.to_json())


# -- figures (each returns a Figure and never calls plt.show()) --------------------------------


def plot_convergence(steps: Sequence[Step]) -> "Figure":
    """Each worker's cumulative share since the last weight change, against its expected share.

    The x axis counts requests sent; a dotted line marks each weight change, a dashed
    line each worker's expected share in that phase.
    """
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8.0, 3.4), layout="constrained")
    ax = fig.subplots()
    if not steps:
        ax.text(0.5, 0.5, "no bursts sent yet", ha="center", va="center", transform=ax.transAxes)
        return fig
    workers = len(steps[0].deltas)
    table = steps_table(steps)
    sent = 0
    ends: dict[int, int] = {}
    starts: dict[int, int] = {}
    for step in steps:
        starts.setdefault(step.phase, sent)
        sent += step.requests
        ends[step.index] = sent
    for worker in range(workers):
        rows = table[table.worker == worker]
        color = f"C{worker % 10}"
        for phase, group in rows.groupby("phase"):
            xs = [ends[i] for i in group.step]
            ax.plot(xs, group.cumulative_share, marker="o", ms=3, color=color, label=f"worker {worker}" if phase == rows.phase.min() else None)
            expected = group.expected_share.iloc[0]
            ax.hlines(expected, starts[phase], xs[-1], colors=color, linestyles="dashed", lw=1)
    for phase, start in starts.items():
        if phase != min(starts):
            label = weights_label(next(s.weights for s in steps if s.phase == phase))
            ax.axvline(start, color="#555555", ls=":", lw=1)
            ax.text(start, 1.02, label, fontsize=8, ha="left", va="bottom", color="#555555")
    ax.set_ylim(0, 1.1)
    ax.set_xlim(0, sent * 1.02)
    ax.set_xlabel("requests sent")
    ax.set_ylabel("cumulative share\n(since the last weight change)")
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title("split convergence: observed (solid) against the weights (dashed)", fontsize=10)
    return fig


def plot_sweep(sweep: SweepResult) -> "Figure":
    """Left: observed share per worker for each weight setting, with the expected share as a
    black tick. Right: expected against observed share, where a perfect router sits on the diagonal."""
    import numpy as np
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9.5, 3.6), layout="constrained")
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
        bars.hlines(expected, offsets - width * 0.45, offsets + width * 0.45, colors="black", lw=2,
                    label="expected" if worker == 0 else None)
        scatter.scatter(expected, observed, color=color, s=24, label=f"worker {worker}")
    labels = []
    for p in sweep.points:
        mark = "ok" if p.result.passed else p.result.verdict.upper()
        p_text = f"p={p.p_value:.2g}" if p.p_value is not None else "p=n/a"
        labels.append(f"{weights_label(p.weights)}\n{p_text} {mark}")
    bars.set_xticks(x, labels, fontsize=8)
    bars.set_ylim(0, 1.05)
    bars.set_ylabel("share of the burst's requests")
    bars.legend(fontsize=7, loc="upper right")
    bars.set_title("observed against expected share, per weight setting", fontsize=9)
    scatter.plot([0, 1], [0, 1], color="#888888", ls="--", lw=1)
    scatter.set_xlim(0, 1)
    scatter.set_ylim(0, 1)
    scatter.set_xlabel("expected share (from the weights)")
    scatter.set_ylabel("observed share (from the counters)")
    scatter.legend(fontsize=7, loc="upper left")
    scatter.set_title("expected against observed", fontsize=9)
    fig.suptitle(f"weight sweep on {sweep.stack}: {sweep.verdict.upper()}", fontsize=10)
    return fig
