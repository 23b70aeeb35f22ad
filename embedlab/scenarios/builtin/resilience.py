"""A worker killed mid-burst: does the frontend stop sending to it, and how much is lost?

Failover needs a deployment embedlab launched: it kills a process. A dead worker cannot be scraped, so its row in the failover table comes
from the requests attributed to it, not from its counter.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

import httpx

from ...cluster.deployment import Deployment
from ...cluster.events import Event
from ...cluster.stack import SwitchesRetries, capable
from ...cluster.stack_registry import get_stack
from ...errors import ConfigError, ScrapeError
from ...evidence import clients
from ...evidence.busy import ProvenBy, schedule_for
from ...evidence.clients import run_sync
from ...evidence.metrics import ascrape
from ...evidence.target import Target
from ...evidence.traffic import RequestRecord, probes
from ...verdicts import Verdict
from ..burst import (
    BurstSpec,
    launched,
    mark_unread,
    run_burst,
    served_models,
    serving,
    status_codes,
    unread_events,
    unread_of,
    workers_of,
)
from ..params import knob, with_knobs
from ..registry import Scenario
from ..result import Burst, ScenarioResult, ScheduleRun, worker_label
from ..schedule import BusyKnobs, busy_outcome, needs_schedule, run_schedule
from .resilience_figures import FailoverFigures

if TYPE_CHECKING:
    from ..plan import ScenarioPlan

__all__ = [
    "FailoverFigures",
    "FailoverParams",
    "failover",
    "run_failover",
    "run_failover_without_retries",
]


@dataclass(frozen=True, kw_only=True)
class FailoverParams(BusyKnobs):
    requests: int = knob(200, "requests in the burst", min=2)
    concurrency: int = knob(8, "requests in flight at once", min=1)
    kill_after: int = knob(50, "the victim is SIGKILLed after this many responses", min=1)
    victim: int = knob(1, "the index of the worker that dies", min=0)

    def describe(self) -> str:
        return (
            f"{self.requests} requests at concurrency {self.concurrency}, worker {self.victim} SIGKILLed "
            f"after {self.kill_after} responses"
        )


async def _dispatchable(client: httpx.AsyncClient, deployment: Deployment, endpoint: str) -> bool:
    """Whether the frontend would still dispatch to `endpoint`."""
    health = (await client.get(deployment.health_url, timeout=2.0)).json()
    return endpoint in deployment.read_dispatchable(health)


@dataclass
class _Kill:
    """The kill, on the burst's clock (`time.perf_counter`): when it came, and when the frontend
    stopped listing the victim (None: not yet, or never seen)."""

    victim: int
    after: int  # responses
    sig: int
    killed: float | None = None
    excluded: float | None = None
    responses: int = 0

    def on_response(self, deployment: Deployment) -> Callable[[RequestRecord], None]:
        def counted(record: RequestRecord) -> None:
            self.responses += 1
            if self.responses == self.after:
                deployment.outages.kill_worker(self.victim, self.sig)
                self.killed = time.perf_counter()

        return counted

    async def watch(self, client: httpx.AsyncClient, deployment: Deployment, limit_s: float) -> None:
        """From the kill, poll the frontend's listing until the victim leaves it (up to `limit_s`)."""
        endpoint = deployment.endpoint(self.victim)
        while self.killed is None:
            await asyncio.sleep(0.005)
        while time.perf_counter() - self.killed < limit_s:
            try:
                if not await _dispatchable(client, deployment, endpoint):
                    self.excluded = time.perf_counter()
                    return
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            await asyncio.sleep(0.01)


async def _killing_burst(
    deployment: Deployment, target: Target, spec: BurstSpec, kill: _Kill, *, progress: bool
) -> tuple[Burst, float | None]:
    """The burst that kills its victim, the victim's listing watched meanwhile; with the victim's
    counter before it (None where it could not be read, which marks the burst unread)."""
    victim = kill.victim
    victim_before = unread = None
    async with clients.scrape_client(timeout=5.0) as client:
        try:
            url = target.system_urls[victim]
            victim_before = (
                await ascrape(url, metric=target.metric, client=client, worker_index=victim)
            ).value
        except ScrapeError as exc:  # sent all the same, as every burst is: the kill is the finding
            unread = unread_of(exc, "before the burst")
        watcher = asyncio.create_task(
            kill.watch(client, deployment, deployment.stack.failover_watch_s(deployment.spec))
        )
        try:
            burst = await run_burst(target, spec, progress=progress)
        finally:
            if kill.killed is None:  # no kill (the burst failed early): nothing to watch for
                watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
    if unread is not None and burst.unread is None:
        mark_unread(burst, unread)
    return burst, victim_before


def _survivors_schedule(
    target: Target, burst: Burst, params: FailoverParams, model: str, victim: int, workers: int
) -> ScheduleRun | None:
    """Where the pool is busy: the survivors' counters judged by the randomized on/off schedule
    (the victim, dead, left out of it); None where the burst's own pair of reads judges."""
    if burst.unread is not None or not workers or not (params.busy or needs_schedule([burst])):
        return None
    pool = [None if i == victim else (m if m is not None else model) for i, m in enumerate(target.models)]
    return run_sync(
        run_schedule(
            target,
            schedule_for([model], workers=workers),
            models=pool,
            weights=list(target.weights or [1.0] * len(pool)),
            budget_s=params.budget_s,
        )
    )


def _figures(
    deployment: Deployment,
    burst: Burst,
    kill: _Kill,
    params: FailoverParams,
    victim_before: float | None,
    strict: bool,
) -> FailoverFigures:
    traffic = burst.traffic
    killed_at = kill.killed - traffic.origin if kill.killed is not None else None
    excluded_after = (
        kill.excluded - kill.killed if kill.excluded is not None and kill.killed is not None else None
    )
    failed = traffic.failures
    after_kill = [r for r in traffic.records if killed_at is not None and r.started + r.latency >= killed_at]
    workers = workers_of(deployment)
    router_deltas = burst.router_deltas  # the dead worker's count stands beside no counter of its own
    return FailoverFigures(
        victim=kill.victim,
        kill_after_responses=kill.after,
        requests=params.requests,
        killed_at_s=killed_at,
        excluded_after_s=excluded_after,
        lease_ttl_s=deployment.stack.lease_ttl_s(deployment.spec),
        failed_requests=len(failed),
        codes=status_codes([burst]),
        responses_after_kill=len(after_kill),
        errors_window_s=max(r.started + r.latency for r in failed) - killed_at
        if failed and killed_at is not None
        else 0.0,
        asserted=strict,
        victim_counter_before=victim_before,
        served_by={worker_label(workers, w): n for w, n in traffic.served_by().items()},
        router_counted_victim=None if router_deltas is None else router_deltas.get(kill.victim, 0.0),
    )


def _events(burst: Burst, figures: FailoverFigures, kill: _Kill) -> list[Event]:
    killed_at, excluded_after = figures.killed_at_s, figures.excluded_after_s
    events = (
        []
        if killed_at is None
        else [Event(killed_at, "kill", f"worker {kill.victim} {signal.Signals(kill.sig).name}")]
    )
    if killed_at is not None and excluded_after is not None:
        events.append(Event(killed_at + excluded_after, "out of dispatch", f"worker {kill.victim}"))
    if burst.unread is not None:
        events = sorted([*events, *unread_events([burst], burst.traffic.origin)], key=lambda e: e.at)
    return events


def failover(
    deployment: Deployment,
    *,
    params: FailoverParams | None = None,
    model: str | None = None,
    sig: int = signal.SIGKILL,
    assert_zero_loss: bool | None = None,
    timeout: float = 60.0,
    progress: bool = False,
    **knobs: Any,
) -> ScenarioResult:
    """Kill worker `victim` after `kill_after` responses of a same-model burst.

    Its knobs (`FailoverParams`) come in `params`, or as keywords: `failover(dep, kill_after=20)`.

    Where the stack asserts failover (`asserts_failover`: the embedded stack) the verdict
    asserts zero failed requests and that the dead instance leaves dispatch within 2 lease
    TTLs. Elsewhere (`assert_zero_loss=False`, the default there) the same figures are
    reported, not asserted.

    The burst is the burst path's (`run_burst`), reading every worker but the victim: quiet
    windows around it, the `x-embedlab-worker` header where the stack names the serving worker
    (believed only where the survivors' counters agree with it). Where the quiet windows see
    traffic embedlab did not send and no response names its worker, or with `busy`, the
    survivors' counters are judged by the randomized on/off schedule after the burst (the
    victim left out) instead of the burst's before/after pair: with the victim dead, the
    survivors must take every request of the check's.
    """
    params = with_knobs(FailoverParams, params, knobs, scenario="failover")
    requests, victim = params.requests, params.victim
    deployment = launched(deployment, scenario="failover")
    model, indices = serving(deployment, model)
    if victim not in indices:
        raise ConfigError(f"worker {victim} does not serve '{model}'")
    if not 0 < params.kill_after < requests:
        raise ConfigError("kill_after must fall inside the burst")
    strict = deployment.stack.asserts_failover if assert_zero_loss is None else assert_zero_loss
    survivors = [i for i in indices if i != victim]
    target = deployment.target()
    served_models(deployment.frontend_url)
    started = time.monotonic()
    kill = _Kill(victim=victim, after=params.kill_after, sig=sig)
    spec = BurstSpec(
        name=model,
        model=model,
        expected=frozenset(survivors),
        requests=requests,
        concurrency=params.concurrency,
        inputs=probes().take(requests),
        # The victim served some of them and is not read: the survivors' total is not the burst's.
        min_total_delta=0.0,
        timeout=timeout,
        read=survivors,
        on_response=kill.on_response(deployment),
        rule="every survivor moves; the dead worker's share comes from the responses naming it",
    )
    burst, victim_before = run_sync(_killing_burst(deployment, target, spec, kill, progress=progress))
    busy = _survivors_schedule(target, burst, params, model, victim, len(survivors))
    figures = _figures(deployment, burst, kill, params, victim_before, strict)
    ttl = deployment.spec.lease_ttl
    verdict, reasons = _failover_verdict(burst, figures, requests=requests, ttl=ttl, busy=busy)
    return ScenarioResult(
        scenario="failover",
        stack=deployment.spec.stack,
        params={**asdict(params), "model": model, "signal": signal.Signals(sig).name},
        workers=workers_of(deployment),
        bursts=[burst],
        verdict=verdict,
        reasons=reasons,
        wall_seconds=time.monotonic() - started,
        events=_events(burst, figures, kill),
        figures=figures,
        power=busy_outcome(busy)[2] if busy is not None else "",
        proven_by=(
            ProvenBy.SCHEDULE
            if busy is not None
            else ProvenBy.ATTRIBUTION
            if burst.proven_by
            else ProvenBy.QUIET
        ),
        schedule=busy,
    )


def _failover_verdict(
    burst: Burst, figures: FailoverFigures, *, requests: int, ttl: float, busy: ScheduleRun | None = None
) -> tuple[Verdict, list[str]]:
    """The failover verdict. `busy`: the schedule that judged the survivors' counters in place of the
    burst's before/after pair (a busy pool), whose verdict stands for that pair's."""
    if burst.inconclusive and busy is None:
        return Verdict.INCONCLUSIVE, [f"{burst.name}: {burst.inconclusive}"]
    excluded = figures.excluded_after_s
    scheduled: tuple[Verdict, list[str]] | None = None
    if busy is not None:
        verdict, said, _ = busy_outcome(busy)
        scheduled = verdict, [f"{burst.name}, the survivors after the kill: {r}" for r in said]
    if not figures.asserted:
        # Nothing asserted: the figures are the result, and the summary line carries them.
        shown = "not within the watch" if excluded is None else f"{excluded * 1000:.0f} ms after the kill"
        reported = [f"{figures.failed_requests} of {requests} requests failed", f"out of dispatch {shown}"]
        if scheduled is not None:
            reported.append(f"the survivors after the kill, on a busy pool: {scheduled[0].value}")
        return Verdict.REPORTED, reported
    reasons: list[str] = []
    failed = burst.traffic.failures
    if failed:
        reasons.append(f"{len(failed)} of {requests} requests failed after the kill ({failed[0].error})")
    if excluded is None or excluded > 2 * ttl:
        shown = "never" if excluded is None else f"after {excluded:.2f} s"
        reasons.append(f"the dead instance left dispatch {shown}, not within 2 TTLs ({2 * ttl:g} s)")
    if scheduled is not None:
        verdict, said = scheduled
        if verdict is Verdict.FAILED:
            return Verdict.FAILED, [*reasons, *said]
        if verdict is not Verdict.PASSED and not reasons:
            return Verdict.INCONCLUSIVE, said
    else:
        assert burst.check is not None
        reasons += list(burst.check.reasons)
    return (Verdict.FAILED if reasons else Verdict.PASSED), reasons


# -- as registered scenarios: run(target, plan) -------------------------------------------------


def run_failover_without_retries(target: None, plan: ScenarioPlan) -> ScenarioResult:
    """Failover with the frontend's retries switched off, where it has a switch."""
    from ..plan import run_scenario  # the plan it launches is a failover's

    switch = capable(get_stack(plan.stack), SwitchesRetries).without_retries(plan.deployment_spec())
    failed = replace(plan, scenario="failover", frontend_args=(*plan.frontend_args, *switch))
    result = run_scenario(failed)
    result.params["frontend_args"] = list(failed.frontend_args)
    return result


def run_failover(target: Deployment | Target, plan: ScenarioPlan) -> ScenarioResult:
    return failover(
        launched(target, scenario="failover"),
        params=plan.params,
        model=plan.models[0] if plan.models else None,
        progress=plan.progress,
    )


FAILOVER = Scenario(
    name="failover", run=run_failover, params=FailoverParams, launches=True,
    help="a worker is SIGKILLed mid-burst: lost requests and time out of dispatch "
    "(asserted where the stack's own frontend promises it, reported elsewhere)",
)  # fmt: skip
FAILOVER_NO_RETRIES = Scenario(
    name="failover-no-retries", run=run_failover_without_retries, params=FailoverParams, deploys=True,
    help="failover with the frontend's retries switched off (where it has a switch): what clients see",
)  # fmt: skip
