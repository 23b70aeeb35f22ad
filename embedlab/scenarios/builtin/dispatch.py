"""Dispatch scenarios: does each request reach the right workers, in the right proportions?

with Deployment(DeploymentSpec.multi_model(["a", "b"])) as dep:
    result = multi_model_dispatch(dep)
result.ok, table(result), plot(result)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from ...cluster.deployment import Deployment
from ...defaults import FAIRNESS_ALPHA, KIND_PATHS, SPLIT_CONFIRM
from ...errors import ConfigError
from ...evidence.busy import (
    leak_requests,
    moving_requests,
    required_requests,
)
from ...evidence.clients import run_sync
from ...evidence.split import Split
from ...evidence.stats import still_chance
from ...evidence.target import Target, target_of
from ...evidence.traffic import Input, RequestRecord
from ...verdicts import Verdict
from ..burst import BurstSpec, judge, run_burst, served_models, serving, status_codes
from ..params import knob, with_knobs
from ..registry import Scenario
from ..result import Burst, ScenarioResult
from ..schedule import BusyKnobs, needs_schedule
from .placement import (
    DispatchFigures,
    Placement,
    SplitFigures,
    multi_model_power,
    placement_busy,
    same_model_busy,
    same_model_power,
    same_model_rule,
    still_note,
)

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
    kind: str = knob(
        "embeddings",
        "the request type: embeddings, completions or chat (a busy pool's schedule: embeddings)",
        choices=tuple(KIND_PATHS),
    )


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
    target = target_of(deployment)
    served_models(target.frontend_url)
    model, indices = serving(target, model)
    weights = (
        list(weights) if weights is not None else list(target.weights or [1.0] * len(target.system_urls))
    )
    own = [weights[i] for i in indices]
    requests = required_requests(own).requests if params.requests is None else params.requests
    recorded = {
        **asdict(params),
        "requests": requests,
        "model": model,
        "weights": weights,
        "fairness_alpha": fairness_alpha,
        "split": split,
    }
    placement = Placement("same-model", deployment, target, recorded, params.budget_s)
    if params.busy:
        return same_model_busy(placement, model, indices, weights, split, [])
    alpha = FAIRNESS_ALPHA if fairness_alpha is None else fairness_alpha
    still = still_chance(own, requests) if split is Split.WEIGHTS else None
    all_move = split is Split.EXACT or (still is not None and still.value < alpha)
    spec = BurstSpec(
        name=model,
        model=model,
        expected=frozenset(indices),
        requests=requests,
        concurrency=params.concurrency,
        inputs=inputs,
        min_total_delta=min_total_delta,
        weights=weights,
        fairness_alpha=fairness_alpha if split is Split.WEIGHTS else None,
        settle_seconds=settle_seconds,
        timeout=timeout,
        require_all=all_move,
        on_response=on_response,
        rule=same_model_rule(split, all_move=all_move, still=still, alpha=fairness_alpha, requests=requests),
    )
    burst = run_sync(run_burst(target, spec, progress=progress))
    if needs_schedule([burst]):
        return same_model_busy(placement, model, indices, weights, split, [burst])
    verdict, reasons = judge([burst], exact_total=True)
    bursts = [burst]
    if verdict == Verdict.FAILED and split is Split.WEIGHTS and _only_the_split(burst, reasons, spec):
        burst, verdict, reasons = _confirmed(target, spec, burst, progress)
        bursts.append(burst)
    deltas = [burst.delta(i) or 0.0 for i in indices]
    power, short = same_model_power(split, requests, own)
    if verdict == Verdict.PASSED:
        verdict, reasons = _by_policy(model, deltas, split, short if require_power else "", reasons)
    still_now = [i for i, d in zip(indices, deltas) if d <= 0]
    if verdict == Verdict.PASSED and still_now and still is not None:
        reasons = [*reasons, still_note(model, still_now, weights=own, requests=requests, still=still)]
    figures = SplitFigures(
        deltas=tuple(deltas), split=str(split), p_value=burst.check.p_value if burst.check else None
    )
    return placement.result(bursts, verdict, reasons, figures=figures, power=power)


def _by_policy(
    model: str, deltas: list[float], split: Split, short: str, reasons: list[str]
) -> tuple[Verdict, list[str]]:
    """A passed burst's split judged by the router's policy: round-robin's is even, a policy that
    decides (cache-aware) is reported, and a burst too small for the target power is inconclusive."""
    shown = "/".join(f"{d:.0f}" for d in deltas)
    if split is Split.EXACT and max(deltas) - min(deltas) > 1:
        return Verdict.FAILED, [f"{model}: round-robin split {shown} is not even"]
    if split is Split.REPORT:
        return Verdict.REPORTED, [f"{model}: split {shown} (the policy decides; not asserted)"]
    if short:
        return Verdict.INCONCLUSIVE, [f"{model}: {short}"]
    return Verdict.PASSED, reasons


def _only_the_split(burst: Burst, reasons: list[str], spec: BurstSpec) -> bool:
    """The burst failed on its split's p-value alone: every request answered and counted once."""
    check, alpha = burst.check, spec.fairness_alpha
    return (
        check is not None
        and alpha is not None
        and check.p_value is not None
        and check.p_value < alpha
        and len(check.reasons) == 1
        and len(reasons) == 1
    )


def _confirmed(
    target: Target, spec: BurstSpec, first: Burst, progress: bool
) -> tuple[Burst, Verdict, list[str]]:
    """A split unlikely under the weights, sent again `SPLIT_CONFIRM` times as large: the second
    burst's verdict is the check's, the first one's split said beside it. A correct random router
    fails both with probability alpha squared; the power sentence counts the second burst."""
    assert first.check is not None and first.check.p_value is not None
    requests = spec.requests * SPLIT_CONFIRM
    again = replace(spec, name=f"{spec.name} (confirming)", requests=requests)
    burst = run_sync(run_burst(target, again, progress=progress))
    verdict, reasons = judge([burst], exact_total=True)
    said = (
        f"{spec.name}: the split {first.check.reasons[0].removeprefix('split ')}; "
        f"a confirming burst of {requests} requests "
    )
    if verdict == Verdict.PASSED:
        return burst, verdict, [said + "fit the weights (a chance split, not a fault)"]
    if verdict == Verdict.INCONCLUSIVE:
        return burst, verdict, [said + "decided nothing", *reasons]
    return burst, verdict, [said + "did not fit either", *reasons]


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
    params = with_knobs(MultiModelParams, params, knobs, scenario="multi-model")
    target = target_of(deployment)
    served_models(target.frontend_url)
    replicas = _replicas(target, models)
    models = list(replicas)
    weights = list(target.weights) if target.weights else [1.0] * len(target.models)
    own = {m: [weights[i] for i in indices] for m, indices in replicas.items()}
    requests = params.requests
    if requests is None:
        requests = max([leak_requests(), *(moving_requests(w) for w in own.values())])
    recorded = {**asdict(params), "requests": requests, "models": models}
    placement = Placement("multi-model", deployment, target, recorded, params.budget_s)
    # The randomized schedule sends embeddings: a busy pool's generation requests stay inconclusive.
    scheduled = params.kind == "embeddings"
    if params.busy and not scheduled:
        raise ConfigError(
            f"busy: the randomized schedule sends embeddings; leave busy off for kind={params.kind}"
        )
    if params.busy:
        return placement_busy(placement, models, weights, [])
    specs = [
        BurstSpec(
            name=model,
            model=model,
            expected=frozenset(replicas[model]),
            # Several replicas of a model: each must move only where a correct router rarely leaves one still.
            require_all=still_chance(own[model], requests).value < FAIRNESS_ALPHA,
            requests=requests,
            concurrency=params.concurrency,
            inputs=inputs,
            min_total_delta=min_total_delta,
            weights=list(target.weights) if target.weights else None,
            settle_seconds=settle_seconds,
            timeout=timeout,
            on_response=on_response,
            rule=f"only the workers of '{model}' move, and they account for every request sent",
            kind=params.kind,
        )
        for model in models
    ]

    async def run_all() -> list[Burst]:
        return [await run_burst(target, spec, progress=progress) for spec in specs]

    bursts = run_sync(run_all())
    if scheduled and needs_schedule(bursts):
        return placement_busy(placement, models, weights, bursts)
    power, short = multi_model_power(requests, own)
    verdict, reasons = judge(bursts, exact_total=True)
    if verdict == Verdict.PASSED and short:
        verdict, reasons = Verdict.INCONCLUSIVE, short
    return placement.result(bursts, verdict, reasons, figures=_dispatch_figures(bursts), power=power)


def _replicas(target: Target, models: Sequence[str] | None) -> dict[str, list[int]]:
    """Each model's workers, by index: `models`, or every model the pool serves (two at least)."""
    if any(m is None for m in target.models):
        raise ConfigError(
            "multi-model needs to know which model each worker serves: --worker-models, one per system URL "
            "in their order (e.g. --worker-models A,A,B,B), or attach(..., models=[...]) from Python"
        )
    served = [m for m in target.models if m is not None]
    chosen = list(models) if models else list(dict.fromkeys(served))
    if len(chosen) < 2:
        raise ConfigError(f"multi-model needs at least two models, got {chosen}")
    missing = [m for m in chosen if m not in served]
    if missing:
        raise ConfigError(f"no worker serves {missing}; workers serve {served}")
    return {model: [i for i, m in enumerate(target.models) if m == model] for model in chosen}


def _dispatch_figures(bursts: list[Burst]) -> DispatchFigures:
    """What landed where it should not, of all the bursts counted, and the status codes."""
    rows = [(b, r) for b in bursts if b.check for r in b.check.rows]
    return DispatchFigures(
        wrong=sum(r.delta for b, r in rows if r.index not in b.expected),
        counted=sum(r.delta for _, r in rows),
        codes=status_codes(bursts),
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
