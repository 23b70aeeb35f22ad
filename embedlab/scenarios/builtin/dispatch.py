"""Dispatch scenarios: does each request reach the right workers, in the right proportions?

with Deployment(DeploymentSpec.multi_model(["a", "b"])) as dep:
    result = multi_model_dispatch(dep)
result.ok, table(result), plot(result)
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from ...cluster.deployment import Deployment
from ...defaults import FAIRNESS_ALPHA
from ...errors import ConfigError
from ...evidence.busy import (
    ProvenBy,
    leak_power,
    leak_requests,
    moving_requests,
    quiet_power,
    required_requests,
)
from ...evidence.busy.constants import POWER
from ...evidence.split import Split
from ...evidence.stats import StillChance, still_chance
from ...evidence.target import Target, target_of
from ...evidence.traffic import Input, RequestRecord, default_inputs, run_sync
from ...verdicts import Verdict
from ..burst import BurstSpec, judge, run_burst, served_models, serving, status_codes, workers_of
from ..params import knob, with_knobs
from ..registry import Scenario
from ..result import Burst, DataFigures, ScenarioResult, ScheduleRun
from ..schedule import BusyKnobs, busy_outcome, needs_schedule, run_schedule, schedule_for

if TYPE_CHECKING:
    from ..plan import ScenarioPlan

__all__ = [
    "DispatchFigures",
    "MultiModelParams",
    "SameModelParams",
    "SplitFigures",
    "multi_model_dispatch",
    "run_multi_model",
    "run_same_model",
    "same_model_load_balance",
]


@dataclass(frozen=True, kw_only=True)
class SameModelParams(BusyKnobs):
    # None: the smallest burst that catches an idle replica and a 0.9/0.1 skew with 99 % at this
    # pool's size and weights (power.required_requests: 40 for two equal replicas, 690 for 16).
    requests: int | None = knob(
        None,
        "requests in the burst; None: enough to catch an idle replica and a 0.9/0.1 skew with 99 %",
        min=1,
    )
    concurrency: int = knob(4, "requests in flight at once", min=1)


@dataclass(frozen=True, kw_only=True)
class MultiModelParams(BusyKnobs):
    # None: 44 per model, the fewest in which a leak of 1 in 10 shows with 99 %, or more where a
    # model's replicas must each move (power.moving_requests).
    requests: int | None = knob(
        None,
        "requests per burst, one burst per model; None: enough to catch a 1-in-10 leak with 99 %",
        min=1,
    )
    concurrency: int = knob(4, "requests in flight at once", min=1)


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


def same_model_load_balance(
    deployment: Deployment | Target,
    *,
    params: SameModelParams | None = None,
    model: str | None = None,
    weights: Sequence[float] | None = None,
    fairness_alpha: float | None = FAIRNESS_ALPHA,
    min_total_delta: float | None = None,
    settle_seconds: float = 0.0,
    inputs: Sequence[Input] | None = None,
    timeout: float = 60.0,
    progress: bool = False,
    on_response: Callable[[RequestRecord], None] | None = None,
    split: Split = Split.WEIGHTS,
    require_power: bool = True,
    **knobs: Any,
) -> ScenarioResult:
    """Two or more workers serve one model: every one must move, and the split must fit the policy.

    Its knobs (`SameModelParams`: `requests`, `concurrency`, `busy`, `budget_s`) come in `params`,
    or as keywords.

    The verdict fails if a worker stays still, if the counters moved by other than the
    requests sent, or if the split does not fit `split`, the router's policy: `weights`
    (random: the split's p-value against the weights is at least `fairness_alpha`),
    `exact` (round-robin: every worker within one request of the others), or `report` (a
    policy that may pick one worker, such as cache-aware: the split is reported, not
    asserted, and a still worker is no failure).
    Under `weights`, "every worker moves" is asserted only where a correct router would
    leave some worker still less often than `fairness_alpha` (1:4 over 20 requests does
    1.2% of the time): otherwise the split's p-value alone judges, and the burst's rule says so.

    `requests` None sizes the burst from the pool (`power.required_requests`); a burst that
    cannot catch an idle replica and a 0.9/0.1 skew with 99 % ends inconclusive, never passed,
    and the verdict's power sentence says what it would have caught (`require_power` False: the
    sentence only, for the Explorer's bursts, sized by hand to watch a split). Where the quiet windows
    see traffic embedlab did not send and no response names its worker, or with `busy`, the
    check runs the randomized on/off schedule up to `budget_s` instead, and its verdict is the
    schedule's.
    """
    if split not in tuple(Split):
        raise ConfigError(f"split must be one of {', '.join(Split)}, got {split!r}")
    split = Split(split)
    params = with_knobs(SameModelParams, params, knobs, scenario="same-model")
    requests = params.requests
    target = target_of(deployment)
    served_models(target.frontend_url)
    model, indices = serving(target, model)
    weights = (
        list(weights) if weights is not None else list(target.weights or [1.0] * len(target.system_urls))
    )
    own = [weights[i] for i in indices]
    if requests is None:
        requests = required_requests(own).requests
    alpha = FAIRNESS_ALPHA if fairness_alpha is None else fairness_alpha
    still = still_chance([weights[i] for i in indices], requests) if split is Split.WEIGHTS else None
    all_move = split is Split.EXACT or (still is not None and still.value < alpha)
    recorded = {
        **asdict(params),
        "requests": requests,
        "model": model,
        "weights": weights,
        "fairness_alpha": fairness_alpha,
        "split": split,
    }
    started = time.monotonic()
    power, short = _same_model_power(split, requests, own)
    if params.busy:
        return _same_model_busy(
            deployment, target, model, indices, weights, split, [], started, recorded, params.budget_s
        )
    spec = BurstSpec(
        name=model,
        model=model,
        expected=frozenset(indices),
        requests=requests,
        concurrency=params.concurrency,
        inputs=inputs or default_inputs(requests),
        min_total_delta=min_total_delta,
        weights=weights,
        fairness_alpha=fairness_alpha if split is Split.WEIGHTS else None,
        settle_seconds=settle_seconds,
        timeout=timeout,
        require_all=all_move,
        on_response=on_response,
        rule=_same_model_rule(split, all_move=all_move, still=still, alpha=fairness_alpha, requests=requests),
    )
    burst = run_sync(run_burst(target, spec, progress=progress))
    if needs_schedule([burst]):
        return _same_model_busy(
            deployment, target, model, indices, weights, split, [burst], started, recorded, params.budget_s
        )
    verdict, reasons = judge([burst], exact_total=True)
    deltas = [burst.delta(i) or 0.0 for i in indices]
    shown = "/".join(f"{d:.0f}" for d in deltas)
    if verdict == Verdict.PASSED and split is Split.EXACT and max(deltas) - min(deltas) > 1:
        verdict, reasons = Verdict.FAILED, [f"{model}: round-robin split {shown} is not even"]
    elif verdict == Verdict.PASSED and split is Split.REPORT:
        verdict, reasons = Verdict.REPORTED, [f"{model}: split {shown} (the policy decides; not asserted)"]
    elif verdict == Verdict.PASSED and short and require_power:
        verdict, reasons = Verdict.INCONCLUSIVE, [f"{model}: {short}"]
    return ScenarioResult(
        scenario="same-model",
        stack=target.stack,
        params=recorded,
        workers=workers_of(deployment),
        bursts=[burst],
        verdict=verdict,
        reasons=reasons,
        wall_seconds=time.monotonic() - started,
        figures=SplitFigures(
            deltas=tuple(deltas), split=str(split), p_value=burst.check.p_value if burst.check else None
        ),
        power=power,
        proven_by=ProvenBy.ATTRIBUTION if burst.proven_by else ProvenBy.QUIET,
    )


def _same_model_power(split: Split, requests: int, weights: Sequence[float]) -> tuple[str, str]:
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
    if q.require_all and q.idle >= POWER and q.skew >= POWER:
        return q.sentence, ""
    needed = required_requests(weights).requests
    return q.sentence, (
        f"{requests} requests cannot catch an idle replica and a 0.9/0.1 skew with {POWER:.0%} probability "
        f"over {k} replicas ({q.sentence}); {needed} can, the default"
    )


def _same_model_busy(
    deployment: Deployment | Target,
    target: Target,
    model: str,
    indices: list[int],
    weights: list[float],
    split: Split,
    bursts: list[Burst],
    started: float,
    params: dict[str, Any],
    budget_s: float,
) -> ScenarioResult:
    """same-model on a busy pool: the randomized on/off schedule's verdict."""
    if split is Split.REPORT:
        reason = f"{model}: the pool is busy, and the router's policy decides the split: nothing to test it against"
        verdict, reasons, power, run = Verdict.INCONCLUSIVE, [reason], "", None
    else:
        models = [m if m is not None else model for m in target.models]
        run = run_sync(
            run_schedule(
                target,
                schedule_for([model], workers=len(indices)),
                models=models,
                weights=weights,
                budget_s=budget_s,
            )
        )
        verdict, reasons, power = _busy_outcome(run, bursts)
    return ScenarioResult(
        scenario="same-model",
        stack=target.stack,
        params=params,
        workers=workers_of(deployment),
        bursts=bursts,
        verdict=verdict,
        reasons=reasons,
        wall_seconds=time.monotonic() - started,
        figures=_busy_split(run, indices, split),
        power=power,
        proven_by=ProvenBy.SCHEDULE,
        schedule=run,
    )


def _busy_outcome(run: ScheduleRun, bursts: Sequence[Burst]) -> tuple[Verdict, list[str], str]:
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


def _busy_split(run: ScheduleRun | None, indices: Sequence[int], split: Split) -> SplitFigures:
    moved = run.on_minus_off() if run is not None else {}
    return SplitFigures(deltas=tuple(moved.get(i, 0.0) for i in indices), split=str(split), p_value=None)


def _same_model_rule(
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


def multi_model_dispatch(
    deployment: Deployment | Target,
    models: Sequence[str] | None = None,
    *,
    params: MultiModelParams | None = None,
    min_total_delta: float | None = None,
    settle_seconds: float = 0.0,
    inputs: Sequence[Input] | None = None,
    timeout: float = 60.0,
    progress: bool = False,
    on_response: Callable[[RequestRecord], None] | None = None,
    **knobs: Any,
) -> ScenarioResult:
    """One burst per model, one snapshot pair per burst: only that model's workers may move.

    Its knobs (`MultiModelParams`: `requests` per burst, `concurrency`, `busy`, `budget_s`) come in
    `params`, or as keywords. `requests` None: 44 per model (a leak of 1 in 10 shows with 99 %), more
    where a model's replicas must each move. A burst too small for its replicas' moving to be asserted
    ends inconclusive, never passed. A busy pool (or `busy`) runs the randomized schedule, one arm per
    model, up to `budget_s`, and its verdict is the schedule's.
    """
    if "requests_per_burst" in knobs:  # its name before the knob's own (issue 29)
        warnings.warn(
            "multi_model_dispatch(requests_per_burst=) is deprecated: use requests=",
            DeprecationWarning,
            stacklevel=2,
        )
        knobs["requests"] = knobs.pop("requests_per_burst")
    params = with_knobs(MultiModelParams, params, knobs, scenario="multi-model")
    requests = params.requests
    target = target_of(deployment)
    served_models(target.frontend_url)
    if any(m is None for m in target.models):
        raise ConfigError(
            "multi-model needs to know which model each worker serves (attach(..., models=[...]))"
        )
    served = [m for m in target.models if m is not None]
    models = list(models) if models else list(dict.fromkeys(served))
    if len(models) < 2:
        raise ConfigError(f"multi-model needs at least two models, got {models}")
    missing = [m for m in models if m not in served]
    if missing:
        raise ConfigError(f"no worker serves {missing}; workers serve {served}")
    replicas = {model: [i for i, m in enumerate(target.models) if m == model] for model in models}
    weights = list(target.weights) if target.weights else [1.0] * len(target.models)
    if requests is None:
        requests = max(
            [leak_requests(), *(moving_requests([weights[i] for i in replicas[m]]) for m in models)]
        )
    recorded = {**asdict(params), "requests": requests, "models": models}
    power, short = _multi_model_power(requests, {m: [weights[i] for i in replicas[m]] for m in models})
    started = time.monotonic()
    if params.busy:
        return placement_busy(
            "multi-model", deployment, target, models, weights, [], started, recorded, params.budget_s
        )
    specs = [
        BurstSpec(
            name=model,
            model=model,
            expected=frozenset(replicas[model]),
            # Several replicas of a model: each must move only where a correct router rarely leaves one still.
            require_all=still_chance([weights[i] for i in replicas[model]], requests).value < FAIRNESS_ALPHA,
            requests=requests,
            concurrency=params.concurrency,
            inputs=inputs or default_inputs(requests),
            min_total_delta=min_total_delta,
            weights=list(target.weights) if target.weights else None,
            settle_seconds=settle_seconds,
            timeout=timeout,
            on_response=on_response,
            rule=f"only the workers of '{model}' move, and they account for every request sent",
        )
        for model in models
    ]

    async def run_all() -> list[Burst]:
        return [await run_burst(target, spec, progress=progress) for spec in specs]

    bursts = run_sync(run_all())
    if needs_schedule(bursts):
        return placement_busy(
            "multi-model", deployment, target, models, weights, bursts, started, recorded, params.budget_s
        )
    verdict, reasons = judge(bursts, exact_total=True)
    if verdict == Verdict.PASSED and short:
        verdict, reasons = Verdict.INCONCLUSIVE, short
    rows = [(b, r) for b in bursts if b.check for r in b.check.rows]
    figures = DispatchFigures(
        wrong=sum(r.delta for b, r in rows if r.index not in b.expected),
        counted=sum(r.delta for _, r in rows),
        codes=status_codes(bursts),
    )
    return ScenarioResult(
        scenario="multi-model",
        stack=target.stack,
        params=recorded,
        workers=workers_of(deployment),
        bursts=bursts,
        verdict=verdict,
        reasons=reasons,
        wall_seconds=time.monotonic() - started,
        figures=figures,
        power=power,
        proven_by=ProvenBy.ATTRIBUTION if any(b.proven_by for b in bursts) else ProvenBy.QUIET,
    )


def _multi_model_power(requests: int, pool: dict[str, list[float]]) -> tuple[str, list[str]]:
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


def placement_busy(
    scenario: str,
    deployment: Deployment | Target,
    target: Target,
    models: list[str],
    weights: list[float],
    bursts: list[Burst],
    started: float,
    params: dict[str, Any],
    budget_s: float,
    figures: Any = None,
) -> ScenarioResult:
    """multi-model and mixed on a busy pool: the schedule's verdict, one arm per model."""
    pool = [m for m in target.models if m is not None]
    run = run_sync(
        run_schedule(
            target,
            schedule_for(models, workers=max(pool.count(m) for m in models)),
            models=pool,
            weights=weights,
            budget_s=budget_s,
        )
    )
    verdict, reasons, power = _busy_outcome(run, bursts)
    moved = run.on_minus_off()
    return ScenarioResult(
        scenario=scenario,
        stack=target.stack,
        params=params,
        workers=workers_of(deployment),
        bursts=bursts,
        verdict=verdict,
        reasons=reasons,
        wall_seconds=time.monotonic() - started,
        figures=figures
        or DispatchFigures(wrong=math.nan, counted=sum(moved.values()), codes=status_codes(bursts)),
        power=power,
        proven_by=ProvenBy.SCHEDULE,
        schedule=run,
    )


# -- as registered scenarios: run(target, plan), the plan's knobs as they are ---------------------


def run_same_model(target: Deployment | Target, plan: ScenarioPlan) -> ScenarioResult:
    # The split is judged by the router's policy: the stack knows what its modes mean.
    split = (
        target.stack.split_for(target.spec.router_mode) if isinstance(target, Deployment) else Split.WEIGHTS
    )
    return same_model_load_balance(
        target,
        params=plan.params,
        model=plan.models[0] if plan.models else None,
        weights=plan.weights or None,
        progress=plan.progress,
        split=split,
    )


def run_multi_model(target: Deployment | Target, plan: ScenarioPlan) -> ScenarioResult:
    return multi_model_dispatch(
        target,
        plan.resolved_models()[0] if not plan.attached or plan.models else None,
        params=plan.params,
        progress=plan.progress,
    )


SAME_MODEL = Scenario(
    name="same-model", run=run_same_model, params=SameModelParams,
    help="several workers of one model: every one moves, the counters account for every request, "
    "and the split fits the weights",
)  # fmt: skip
MULTI_MODEL = Scenario(
    name="multi-model", run=run_multi_model, params=MultiModelParams, layout="per-model",
    help="one burst per model: only that model's workers move",
)  # fmt: skip
