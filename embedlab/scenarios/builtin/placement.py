"""The skeleton of a placement check, what it can prove, and its busy half.

`Placement` holds what same-model, multi-model and mixed share: the knobs as run, the clock, the
hand-over to the busy half, and the result; each scenario keeps only the bursts it sends and how
it judges them.

A quiet burst proves placement by the counters' deltas; how much it can prove is said in
words beside the verdict (`same_model_power`, `multi_model_power`: an idle replica, a
0.9/0.1 skew, a 1-in-10 leak, each caught with 99 % or not, and how many requests would).
On a busy pool the randomized on/off schedule decides instead (`same_model_busy`,
`placement_busy`, for multi-model and mixed). The figures a placement result carries
(`SplitFigures`, `DispatchFigures`) live here too, as both halves make them. The
scenarios themselves are in `dispatch` (same-model, multi-model) and `mixed`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ...cluster.deployment import Deployment
from ...evidence.busy import (
    ProvenBy,
    QuietPower,
    leak_power,
    moving_requests,
    quiet_power,
    required_requests,
    schedule_for,
)
from ...evidence.busy.constants import POWER
from ...evidence.clients import run_sync
from ...evidence.split import Split
from ...evidence.stats import StillChance, percent
from ...evidence.target import Target
from ...verdicts import Verdict
from ..burst import status_codes, workers_of
from ..result import Burst, DataFigures, ScenarioResult, ScheduleRun
from ..schedule import busy_outcome, run_schedule

__all__ = [
    "DispatchFigures",
    "Placement",
    "SplitFigures",
    "busy_split",
    "busy_verdict",
    "multi_model_power",
    "placement_busy",
    "same_model_busy",
    "same_model_power",
    "same_model_rule",
    "still_note",
    "too_few",
]


@dataclass(frozen=True)
class SplitFigures(DataFigures):
    """How one model's burst split over its workers, and how the policy says to judge it."""

    deltas: tuple[float, ...]  # per expected worker, in index order
    split: str  # the Split that judged it
    p_value: float | None

    def rows(self) -> list[tuple[str, str]]:
        p = "not tested" if self.p_value is None else f"{self.p_value:.3g}"
        return [
            ("split", "/".join(f"{d:.0f}" for d in self.deltas)),
            ("judged by", self.split),
            ("p-value", p),
        ]

    def key_figures(self) -> dict[str, Any]:
        return {"split": "/".join(f"{d:.0f}" for d in self.deltas), "judged": self.split}


@dataclass(frozen=True)
class DispatchFigures(DataFigures):
    """Requests counted on a worker of another model, over every burst."""

    wrong: float
    counted: float
    codes: dict[str, int]  # HTTP status of the failed requests; "0": no answer

    def rows(self) -> list[tuple[str, str]]:
        return [("counted on another model's worker", self._wrong())] + [
            (f"failed with HTTP {c}" if c != "0" else "failed without an answer", str(n))
            for c, n in sorted(self.codes.items())
        ]

    def key_figures(self) -> dict[str, Any]:
        shown = f" (HTTP {', '.join(sorted(self.codes))})" if self.codes else ""
        return {"counted on another model's worker": f"{self._wrong()}{shown}"}

    def _wrong(self) -> str:
        # NaN: a busy pool, where no request is counted one by one (the schedule's bound says it).
        if math.isnan(self.wrong):
            return "not counted one by one on a busy pool (the schedule bounds it)"
        return f"{self.wrong:.0f} of {self.counted:.0f}"


def same_model_rule(
    split: Split, *, all_move: bool, still: StillChance | None, alpha: float | None, requests: int
) -> str:
    """What the burst asserts, in words: the table and the report show it beside the figures."""
    parts = ["the counters account for every request sent"]
    if all_move:
        parts.insert(0, "every worker moves")
    elif still is not None:
        parts.append(
            f"a still worker is not asserted (a correct router leaves one still {still.of_the_time()} "
            f"at {requests} requests)"
        )
    if split is Split.WEIGHTS and alpha is not None:
        parts.append(f"the split fits the weights (p >= {alpha:g})")
    elif split is Split.EXACT:
        parts.append("round-robin: every worker within one request of the others")
    else:
        parts.append("the split is reported, not asserted (the policy decides)")
    return "; ".join(parts)


def still_note(
    model: str, still_workers: Sequence[int], *, weights: Sequence[float], requests: int, still: StillChance
) -> str:
    """Why a burst that left a worker still passed: a correct router does that often enough at this
    size that it is not asserted, and how many requests would assert it."""
    names = ", ".join(f"worker {i}" for i in still_workers)
    shown = ":".join(f"{w:g}" for w in weights)
    return (
        f"{model}: {names} got none of the {requests} requests; a correct router leaves one still "
        f"{still.of_the_time()} at weights {shown} over {requests} requests, so a still worker is not "
        f"asserted here ({required_requests(weights).requests} requests would be)"
    )


def same_model_power(split: Split, requests: int, weights: Sequence[float]) -> tuple[str, str]:
    """The faults a quiet burst of `requests` over replicas with `weights` catches, in words, and
    why it falls short of the target ("": it does not): an idle replica and a 0.9/0.1 skew caught
    with 99 % (round-robin: any replica more than one request off the even split)."""
    k = len(weights)
    if split is Split.REPORT:
        return (
            f"{requests} requests over {k} replicas: the split is reported, not asserted, so no fault of it is ruled out",
            "",
        )
    if split is Split.EXACT:
        # An idle replica leaves the others requests/(k-1) each, two or more off its share of none.
        enough = requests >= 2 * (k - 1)
        said = (
            f"{requests} requests over {k} replicas, round-robin: a replica more than one request off the even "
            f"split fails, so an idle replica and a 0.9/0.1 skew are {'caught for certain' if enough else 'not always caught'}"
        )
        return (
            said,
            "" if enough else f"{requests} requests cannot show an idle replica of {k}; {2 * (k - 1)} can",
        )
    q = quiet_power(requests, weights)
    return q.sentence, too_few(q)


def too_few(q: QuietPower) -> str:
    """Why a burst is too small to judge its replicas, fix first, then the odds in words ("": it is
    not): a correct router may leave one still, or an idle replica or a 0.9/0.1 skew is caught
    less often than the target."""
    if q.require_all and q.idle >= POWER and q.skew >= POWER:
        return ""
    k, n = len(q.weights), q.requests
    needed = required_requests(q.weights).requests
    still = "" if q.require_all else f"; a correct router leaves one still {percent(q.still)} of the time"
    return (
        f"{n} requests are too few to judge {k} replicas: send {needed} or more. At {n}, an idle replica "
        f"is caught {percent(q.idle)} of the time and a {q.skew_share:g}/{1 - q.skew_share:.2g} skew "
        f"{percent(q.skew)}, short of the {percent(POWER)} asked{still}"
    )


def multi_model_power(requests: int, pool: dict[str, list[float]]) -> tuple[str, list[str]]:
    """What a quiet multi-model check of `requests` per model catches, and why it falls short of
    the target (an idle replica caught for certain: every replica must move) where it does."""
    parts, short = [leak_power(requests).sentence], []
    for model, weights in pool.items():
        if len(weights) < 2:
            continue
        needed = moving_requests(weights)
        if requests >= needed:
            parts.append(f"every replica of '{model}' must move, so an idle one is caught")
        else:
            short.append(
                f"{model}: {requests} requests cannot assert that each of its {len(weights)} replicas moves "
                f"(a correct router leaves one still too often); {needed} can"
            )
            parts.append(f"an idle replica of '{model}' is not caught at {requests} requests")
    return "; ".join(parts), short


@dataclass
class Placement:
    """One placement check under way, the steps same-model, multi-model and mixed share: what it
    records, its clock, the busy half it hands over to, and the result it returns."""

    scenario: str
    deployment: Deployment | Target
    target: Target
    params: dict[str, Any]  # the knobs as run (sizes filled in)
    budget_s: float
    started: float = field(default_factory=time.monotonic)

    def result(
        self,
        bursts: list[Burst],
        verdict: Verdict,
        reasons: list[str],
        *,
        figures: Any,
        power: str,
        proven_by: str | None = None,
        schedule: ScheduleRun | None = None,
    ) -> ScenarioResult:
        """The result; placement proven by the bursts (a response header, else the counters on a
        quiet pool) unless `proven_by` says otherwise."""
        if proven_by is None:
            proven_by = ProvenBy.ATTRIBUTION if any(b.proven_by for b in bursts) else ProvenBy.QUIET
        return ScenarioResult(
            scenario=self.scenario,
            stack=self.target.stack,
            params=self.params,
            workers=workers_of(self.deployment),
            bursts=bursts,
            verdict=verdict,
            reasons=reasons,
            wall_seconds=time.monotonic() - self.started,
            figures=figures,
            power=power,
            proven_by=proven_by,
            schedule=schedule,
        )

    def scheduled(
        self,
        run: ScheduleRun | None,
        bursts: list[Burst],
        *,
        figures: Any,
        decided: tuple[Verdict, list[str], str] | None = None,
    ) -> ScenarioResult:
        """The result on a busy pool: the schedule's verdict (or one `decided` before any schedule
        ran), its power, and how placement was proven."""
        if decided is None:
            assert run is not None, "a schedule ran, or the verdict was decided without one"
            decided = busy_verdict(run, bursts)
        verdict, reasons, power = decided
        proven = run.verdict.proven_by if run is not None and run.verdict else ProvenBy.SCHEDULE
        return self.result(
            bursts, verdict, reasons, figures=figures, power=power, proven_by=proven, schedule=run
        )


def same_model_busy(
    placement: Placement,
    model: str,
    indices: list[int],
    weights: list[float],
    split: Split,
    bursts: list[Burst],
) -> ScenarioResult:
    """same-model on a busy pool: the randomized on/off schedule's verdict."""
    if split is Split.REPORT:
        reason = f"{model}: the pool is busy, and the router's policy decides the split: nothing to test it against"
        return placement.scheduled(
            None,
            bursts,
            figures=busy_split(None, indices, split),
            decided=(Verdict.INCONCLUSIVE, [reason], ""),
        )
    target = placement.target
    models = [m if m is not None else model for m in target.models]
    run = _run_schedule(target, [model], len(indices), models, weights, placement.budget_s)
    return placement.scheduled(run, bursts, figures=busy_split(run, indices, split))


def placement_busy(
    placement: Placement, models: list[str], weights: list[float], bursts: list[Burst], figures: Any = None
) -> ScenarioResult:
    """multi-model and mixed on a busy pool: the schedule's verdict, one arm per model."""
    target = placement.target
    pool = [m for m in target.models if m is not None]
    run = _run_schedule(target, models, max(pool.count(m) for m in models), pool, weights, placement.budget_s)
    moved = run.on_minus_off()
    return placement.scheduled(
        run,
        bursts,
        figures=figures
        or DispatchFigures(wrong=math.nan, counted=sum(moved.values()), codes=status_codes(bursts)),
    )


def _run_schedule(
    target: Target,
    models: list[str],
    workers: int,
    pool: Sequence[str | None],
    weights: Sequence[float],
    budget_s: float,
) -> ScheduleRun:
    """The randomized on/off schedule, one arm per model of `models`, over the pool's workers."""
    return run_sync(
        run_schedule(
            target, schedule_for(models, workers=workers), models=pool, weights=weights, budget_s=budget_s
        )
    )


def busy_verdict(run: ScheduleRun, bursts: Sequence[Burst]) -> tuple[Verdict, list[str], str]:
    """The schedule's verdict; a quiet burst before it that failed a request still fails the check."""
    verdict, reasons, power = busy_outcome(run)
    failed = [
        f"{b.name}: {len(b.traffic.failures)} of {b.traffic.n} requests failed ({b.traffic.failures[0].error})"
        for b in bursts
        if b.traffic.failures
    ]
    if failed and verdict != Verdict.FAILED:
        return Verdict.FAILED, [*failed, *reasons], power
    return verdict, [*failed, *reasons], power


def busy_split(run: ScheduleRun | None, indices: Sequence[int], split: Split) -> SplitFigures:
    moved = run.on_minus_off() if run is not None else {}
    return SplitFigures(deltas=tuple(moved.get(i, 0.0) for i in indices), split=str(split), p_value=None)
