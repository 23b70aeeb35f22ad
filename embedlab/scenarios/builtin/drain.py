"""A worker drained, as in a rolling restart: it keeps serving but must receive nothing.

Drain needs a deployment embedlab launched: each stack drains a worker its own way.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from ...cluster.deployment import Deployment
from ...errors import ConfigError
from ...evidence.clients import run_sync
from ...evidence.target import Target
from ...evidence.traffic import probes
from ..burst import BurstSpec, judge, launched, run_burst, serving, workers_of
from ..params import knob, with_knobs
from ..registry import Scenario
from ..result import DataFigures, ScenarioResult

if TYPE_CHECKING:
    from ..plan import ScenarioPlan

__all__ = ["DrainFigures", "DrainParams", "drain", "run_drain"]


@dataclass(frozen=True, kw_only=True)
class DrainParams:
    requests: int = knob(20, "requests in the burst sent while the victim is drained", min=1)
    concurrency: int = knob(4, "requests in flight at once", min=1)
    victim: int = knob(1, "the index of the worker that is drained", min=0)


@dataclass(frozen=True)
class DrainFigures(DataFigures):
    """What drain measured: the drained worker's delta during the burst, and whether it came back."""

    victim: int
    victim_delta: float | None
    resumed: bool

    def rows(self) -> list[tuple[str, str]]:
        return [
            ("drained", f"worker {self.victim}"),
            (
                "its delta while drained",
                "not read" if self.victim_delta is None else f"{self.victim_delta:.0f}",
            ),
            ("registered again after", "yes" if self.resumed else "no (left drained)"),
        ]

    def key_figures(self) -> dict[str, Any]:
        counted = None if self.victim_delta is None else round(self.victim_delta)
        return {"drained worker counted": counted}


def drain(
    deployment: Deployment,
    *,
    params: DrainParams | None = None,
    model: str | None = None,
    resume: bool = True,
    progress: bool = False,
    **knobs: Any,
) -> ScenarioResult:
    """Take worker `victim` out of dispatch while it keeps serving, then check it receives nothing.

    Each stack drains its own way: embedlab's worker deregisters, vllm-router and
    sglang-router remove it through their worker APIs. With `resume` it is put back
    afterwards, so the deployment can be reused. Its knobs (`DrainParams`) come in `params`, or as keywords.
    """
    params = with_knobs(DrainParams, params, knobs, scenario="drain")
    victim, requests = params.victim, params.requests
    deployment = launched(deployment, scenario="drain")
    model, indices = serving(deployment, model)
    if victim not in indices:
        raise ConfigError(f"worker {victim} does not serve '{model}'")
    target = deployment.target()
    spec = BurstSpec(
        name=f"{model} (worker {victim} drained)",
        model=model,
        expected=frozenset(i for i in indices if i != victim),
        requests=requests,
        concurrency=params.concurrency,
        inputs=probes().take(requests),
    )
    started = time.monotonic()
    since = len(deployment.events)
    deployment.steering.drain(victim)  # the stack's own way (UnsupportedError where it has none)
    try:
        burst = run_sync(run_burst(target, spec, progress=progress))
    finally:
        if resume:
            deployment.steering.resume(victim)
    verdict, reasons = judge([burst], exact_total=True)
    origin = burst.traffic.origin
    events = [e.after(origin) for e in deployment.events[since:]]
    return ScenarioResult(
        scenario="drain",
        stack=deployment.spec.stack,
        params={**asdict(params), "model": model},
        workers=workers_of(deployment),
        bursts=[burst],
        verdict=verdict,
        reasons=reasons,
        wall_seconds=time.monotonic() - started,
        events=events,
        figures=DrainFigures(victim=victim, victim_delta=burst.delta(victim), resumed=resume),
    )


# -- as a registered scenario: run(target, plan) ------------------------------------------------


def run_drain(target: Deployment | Target, plan: ScenarioPlan) -> ScenarioResult:
    return drain(
        launched(target, scenario="drain"),
        params=plan.params,
        model=plan.models[0] if plan.models else None,
        progress=plan.progress,
    )


DRAIN = Scenario(
    name="drain", run=run_drain, params=DrainParams, launches=True,
    help="a worker is taken out of dispatch while it keeps serving (the stack's own way): it must get "
    "nothing, and come back after",
)  # fmt: skip
