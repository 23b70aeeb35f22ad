"""Explore routing on a live deployment: bursts, live weight changes, and how the split converges.

    plan = ScenarioPlan.from_params(scenario="same-model")
    check_explore(plan, new_weights=[3, 1], bursts=4, sweep_weights=[[1, 1], [3, 1]], sweep_requests=60)
    dep = start_deployment(plan)          # this notebook's one live deployment
    explorer = Explorer(dep)
    step = explorer.burst(20)             # counters before and after, judged against the weights
    table(step)                           # that burst: one row per worker
    explorer.set_weights([3, 1])          # live, on the embedded frontend
    explorer.burst(20, repeat=4)
    table(explorer), plot(explorer)       # every burst so far; cumulative split since the change
    sweep = explorer.sweep([[1, 1], [3, 1], [1, 3]], requests=60)
    table(sweep), plot(sweep), sweep.ok
    dep.stop()

Every burst is a `same_model_load_balance` run, so each one is judged exactly as the
scenario notebooks judge theirs: every worker must move, the counters must account for
every request, and the split must fit the weights (fairness p-value above alpha).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..cluster.stack import LiveWeights
from ..cluster.stack_registry import stack_class, stacks_with
from ..defaults import FAIRNESS_ALPHA
from ..errors import ConfigError
from ..freshness import check_fresh, guarded, made
from ..verdicts import Verdict
from .builtin.dispatch import same_model_load_balance
from .result import DataFigures, ScenarioResult

if TYPE_CHECKING:
    from ..cluster.deployment import Deployment
    from .plan import ScenarioPlan

__all__ = [
    "Explorer",
    "Step",
    "SweepResult",
    "check_explore",
    "cumulative_shares",
    "weight_shares",
    "weights_label",
]


def weight_shares(weights: Sequence[float]) -> list[float]:
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


def check_explore(
    plan: ScenarioPlan,
    *,
    new_weights: Sequence[float],
    bursts: int,
    sweep_weights: Sequence[Sequence[float]],
    sweep_requests: int,
) -> None:
    """The explore notebook's own parameters, checked against its plan before anything starts.

    Raises `ConfigError` for a weight vector that does not give each worker one positive
    weight, a count below 1, or live weights on a stack without them.
    """
    workers = plan.resolved().workers
    if not issubclass(stack_class(plan.stack), LiveWeights):
        live = ", ".join(stacks_with(lambda s: issubclass(s, LiveWeights)))
        raise ConfigError(f"live weight changes need a stack with live weights ({live}), not {plan.stack!r}")
    for name, value in (("bursts", bursts), ("sweep_requests", sweep_requests)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name} must be a whole number of at least 1, got {value!r}")
    if not sweep_weights:
        raise ConfigError("sweep_weights needs at least one weight vector")
    for name, weights in [("new_weights", new_weights), *(("sweep_weights", w) for w in sweep_weights)]:
        if len(weights) != workers:
            raise ConfigError(f"{name}: {workers} workers but {len(weights)} weights ({list(weights)})")
        if any(isinstance(w, bool) or not isinstance(w, (int, float)) or w <= 0 for w in weights):
            raise ConfigError(f"{name}: weights must be positive numbers, got {list(weights)}")


@dataclass(frozen=True)
class Step:
    """One burst the explorer sent, under the weights that were live at the time.

    `cumulative_shares`: each worker's share of every request counted since the last
    weight change, this burst included.
    """

    index: int
    phase: int  # bumped by every weight change: convergence restarts there
    weights: tuple[float, ...]
    result: ScenarioResult
    cumulative_shares: tuple[float, ...] = ()

    @property
    def number(self) -> int:
        """The burst's number as people count: the first burst is burst 1."""
        return self.index + 1

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
        return weight_shares(self.weights)


@dataclass(frozen=True)
class SweepFigures(DataFigures):
    """Per weight setting: its expected and observed shares, the p-value and the verdict."""

    settings: tuple[dict[str, Any], ...]

    def rows(self) -> list[tuple[str, str]]:
        return [(s["label"], _setting(s)) for s in self.settings]

    def key_figures(self) -> dict[str, Any]:
        return {s["label"]: _setting(s) for s in self.settings}


def _setting(s: dict[str, Any]) -> str:
    p = "p n/a" if s["p_value"] is None else f"p {s['p_value']:.3g}"
    return f"split {'/'.join(f'{d:.0f}' for d in s['deltas'])}, {p}, {s['verdict']}"


@dataclass
class SweepResult(ScenarioResult):
    """A weight sweep: one judged burst per weight vector, named by its weights.

    A `ScenarioResult` whose bursts are the sweep's points, so its verdict, JSON, latency
    and tables are a scenario's; `points` keeps each step with the weights it ran under.
    """

    points: list[Step] = field(default_factory=list)
    fairness_alpha: float = FAIRNESS_ALPHA

    @classmethod
    def of(cls, points: Sequence[Step], *, stack: str, fairness_alpha: float) -> SweepResult:
        bursts = [replace(p.result.bursts[0], name=weights_label(p.weights)) for p in points]
        verdict = Verdict.worst([p.result.verdict for p in points]) if points else Verdict.FAILED
        return cls(
            scenario="weight-sweep",
            stack=stack,
            params={"weights": [list(p.weights) for p in points], "fairness_alpha": fairness_alpha},
            workers=points[0].result.workers if points else [],
            bursts=bursts,
            verdict=verdict,
            reasons=[f"{weights_label(p.weights)}: {r}" for p in points for r in p.result.reasons],
            wall_seconds=sum(p.result.wall_seconds for p in points),
            points=list(points),
            fairness_alpha=fairness_alpha,
            figures=SweepFigures(settings=tuple(_settings(points))),
        )

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "points": _settings(self.points)}

    def summary(self) -> str:
        settings = len(self.points)
        head = f"weight sweep on {self.where}, {settings} weight setting{'' if settings == 1 else 's'}: {self.verdict.upper()}"
        return head + (" (" + "; ".join(self.reasons) + ")" if self.reasons else "")


def _settings(points: Sequence[Step]) -> list[dict[str, Any]]:
    return [
        {
            "weights": list(p.weights),
            "label": weights_label(p.weights),
            "expected_shares": p.expected_shares,
            "observed_shares": p.observed_shares,
            "deltas": p.deltas,
            "p_value": p.p_value,
            "verdict": str(p.result.verdict),
        }
        for p in points
    ]


class Explorer:
    """A live deployment under a user's hands: send bursts, change weights, watch the split.

    `deployment` must be running; weight changes need a stack with live weights (the
    embedded one). The explorer never starts or stops it: whoever started it stops it.
    `steps` holds the bursts sent with `burst()`, in phases that a weight change starts;
    a `sweep()` is kept apart, in the `SweepResult` it returns.
    """

    def __init__(
        self,
        deployment: Deployment,
        *,
        model: str | None = None,
        concurrency: int = 4,
        fairness_alpha: float = FAIRNESS_ALPHA,
        progress: bool = False,
    ) -> None:
        """`model`: the model to send (default: the one the workers serve); `fairness_alpha`:
        the p-value below which a burst's split counts as not fitting the weights;
        `progress`: a bar per burst."""
        check_fresh(deployment)
        self.deployment = deployment
        self.model = model
        self.concurrency = concurrency
        self.fairness_alpha = fairness_alpha
        self.progress = progress
        self.steps: list[Step] = []
        self.phase = 0
        made(self, "explorer", parents=(deployment,))

    @property
    def weights(self) -> tuple[float, ...]:
        return tuple(w.weight for w in self.deployment.spec.workers)

    def set_weights(self, weights: Sequence[float]) -> None:
        """Change every worker's weight live; the convergence plot restarts from here."""
        check_fresh(self)
        weight_shares(weights)  # reject zero or negative weights before the frontend does
        changed = tuple(float(w) for w in weights) != self.weights
        self.deployment.steering.set_weights([float(w) for w in weights])
        if changed:
            self.phase += 1

    @guarded("step")
    def burst(self, requests: int = 20, *, repeat: int = 1) -> Step:
        """Send `repeat` bursts of `requests` each, judging each; returns the last one."""
        if repeat < 1:
            raise ConfigError(f"repeat must be at least 1, got {repeat}")
        for _ in range(repeat):
            step = self._measure(requests, index=len(self.steps), phase=self.phase)
            in_phase = [s.deltas for s in self.steps if s.phase == self.phase] + [step.deltas]
            self.steps.append(replace(step, cumulative_shares=tuple(cumulative_shares(in_phase)[-1])))
        return self.steps[-1]

    @guarded("sweep")
    def sweep(self, weight_sets: Sequence[Sequence[float]], *, requests: int = 40) -> SweepResult:
        """For each weight vector: set it live, send one burst, compare the split with the weights.

        Then the weights live before the sweep are set again: a sweep measures, and the
        bursts a user sends after it run under the weights they chose, in the same phase.
        The sweep's bursts are its own: `steps` (and `table(explorer)`) never show them.
        """
        if not weight_sets:
            raise ConfigError("a sweep needs at least one weight vector")
        for weights in weight_sets:
            weight_shares(weights)
        before = self.weights
        points = []
        try:
            for number, weights in enumerate(weight_sets):
                self.deployment.steering.set_weights([float(w) for w in weights])
                points.append(self._measure(requests, index=number, phase=number))
        finally:
            self.deployment.steering.set_weights(list(before))
        return SweepResult.of(points, stack=self.deployment.spec.stack, fairness_alpha=self.fairness_alpha)

    def _measure(self, requests: int, *, index: int, phase: int) -> Step:
        result = same_model_load_balance(
            self.deployment,
            requests=requests,
            concurrency=self.concurrency,
            model=self.model,
            fairness_alpha=self.fairness_alpha,
            progress=self.progress,
            # An exploration's bursts are sized by hand to watch the split move: their power is
            # stated (result.power), not required of them.
            require_power=False,
        )
        return Step(index=index, phase=phase, weights=self.weights, result=result)
