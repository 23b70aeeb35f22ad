"""A worker killed mid-burst: does the frontend stop sending to it, and how much is lost?

Failover needs a deployment embedlab launched: it kills a process. A dead worker cannot be scraped, so its row in the failover table comes
from the requests attributed to it, not from its counter.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

import httpx

from ...cluster.deployment import Deployment
from ...cluster.events import Event
from ...cluster.stack import SwitchesRetries, capable
from ...cluster.stack_registry import get_stack
from ...errors import ConfigError, ScrapeError
from ...evidence import clients
from ...evidence.busy import ProvenBy
from ...evidence.metrics import ascrape
from ...evidence.target import Target
from ...evidence.traffic import RequestRecord, default_inputs, run_sync
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
from ..result import Burst, DataFigures, ScenarioResult, ScheduleRun, Unread, worker_label
from ..schedule import BusyKnobs, busy_outcome, needs_schedule, run_schedule, schedule_for

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


@dataclass(frozen=True)
class FailoverFigures(DataFigures):
    """What failover measured around the kill. Asserted on some stacks, reported on others."""

    victim: int
    kill_after_responses: int
    requests: int
    killed_at_s: float | None  # seconds into the burst
    excluded_after_s: float | None  # from the kill until the frontend stopped dispatching to it
    lease_ttl_s: (
        float | None
    )  # the stack's own lease where embedlab's frontend keeps it; None: the stack decides
    failed_requests: int
    codes: dict[str, int]  # HTTP status of the failed requests; "0": no answer
    responses_after_kill: int
    errors_window_s: float  # from the kill until the last failed response
    asserted: bool
    victim_counter_before: float | None  # None: it could not be read before the burst
    served_by: dict[str, int]  # responses per worker, by label, where the frontend names them
    # What the router's own counters say it sent the victim over the burst (None: it keeps
    # none): beside the responses that named the victim, sends that died with it show.
    router_counted_victim: float | None = None

    def rows(self) -> list[tuple[str, str]]:
        killed = (
            "never"
            if self.killed_at_s is None
            else f"{self.killed_at_s:.3f} s into the burst, after {self.kill_after_responses} responses"
        )
        out = (
            "never seen"
            if self.excluded_after_s is None
            else f"{self.excluded_after_s * 1000:.0f} ms after the kill"
        )
        ttl = (
            f"{self.lease_ttl_s:g} s (limit: 2 TTLs)"
            if self.lease_ttl_s
            else "the stack's own discovery decides"
        )
        rows = [
            ("victim", f"worker {self.victim}"),
            ("killed at", killed),
            ("out of dispatch", out),
            ("lease TTL", ttl),
            ("failed requests", str(self.failed_requests)),
            ("errors seen for", f"{self.errors_window_s:.2f} s after the kill"),
            ("responses after the kill", str(self.responses_after_kill)),
        ]
        rows += [(f"served by {w}", str(n)) for w, n in sorted(self.served_by.items())] or [
            ("served by", "not named: this frontend marks no response with its worker")
        ]
        if self.router_counted_victim is not None:
            rows.append((f"the router counted for worker {self.victim}", f"{self.router_counted_victim:g}"))
        return rows + [("verdict", "asserted" if self.asserted else "reported, not asserted")]

    def key_figures(self) -> dict[str, Any]:
        shown = f" (HTTP {', '.join(sorted(self.codes))})" if self.codes else ""
        out = (
            "not seen"
            if self.excluded_after_s is None
            else f"{self.excluded_after_s * 1000:.0f} ms after the kill"
        )
        figures = {"lost": f"{self.failed_requests} of {self.requests}{shown}", "out of dispatch": out}
        answered = self.served_by.get(f"worker {self.victim}")
        if self.router_counted_victim is not None and answered is not None:
            # Sends that died with the worker, or were retried elsewhere, count here and answered nothing.
            figures["dead worker"] = (
                f"router counted {self.router_counted_victim:g} sends, {answered} answered"
            )
        return figures


async def _dispatchable(client: httpx.AsyncClient, deployment: Deployment, endpoint: str) -> bool:
    """Whether the frontend would still dispatch to `endpoint`."""
    health = (await client.get(deployment.health_url, timeout=2.0)).json()
    return endpoint in deployment.read_dispatchable(health)


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
    requests, kill_after, victim = params.requests, params.kill_after, params.victim
    deployment = launched(deployment, scenario="failover")
    model, indices = serving(deployment, model)
    if victim not in indices:
        raise ConfigError(f"worker {victim} does not serve '{model}'")
    if not 0 < kill_after < requests:
        raise ConfigError("kill_after must fall inside the burst")
    stack = deployment.stack
    strict = stack.asserts_failover if assert_zero_loss is None else assert_zero_loss
    survivors = [i for i in indices if i != victim]
    endpoint = deployment.endpoint(victim)
    ttl = deployment.spec.lease_ttl
    watch_limit = stack.failover_watch_s(deployment.spec)
    target = deployment.target()
    served_models(deployment.frontend_url)
    started = time.monotonic()
    state: dict[str, float | None] = {"killed": None, "excluded": None}
    responses = 0

    def on_response(record: RequestRecord) -> None:
        nonlocal responses
        responses += 1
        if responses == kill_after:
            deployment.outages.kill_worker(victim, sig)
            state["killed"] = time.perf_counter()

    spec = BurstSpec(
        name=model,
        model=model,
        expected=frozenset(survivors),
        requests=requests,
        concurrency=params.concurrency,
        inputs=default_inputs(requests),
        # The victim served some of them and is not read: the survivors' total is not the burst's.
        min_total_delta=0.0,
        timeout=timeout,
        read=survivors,
        on_response=on_response,
        rule="every survivor moves; the dead worker's share comes from the responses naming it",
    )

    async def run() -> tuple[Burst, float | None, Unread | None]:
        victim_before = unread = None
        async with clients.scrape_client(timeout=5.0) as client:
            try:
                victim_before = (
                    await ascrape(
                        target.system_urls[victim], metric=target.metric, client=client, worker_index=victim
                    )
                ).value
            except ScrapeError as exc:  # sent all the same, as every burst is: the kill is the finding
                unread = unread_of(exc, "before the burst")

            async def watch() -> None:
                while state["killed"] is None:
                    await asyncio.sleep(0.005)
                while time.perf_counter() - state["killed"] < watch_limit:
                    try:
                        if not await _dispatchable(client, deployment, endpoint):
                            state["excluded"] = time.perf_counter()
                            return
                    except (httpx.HTTPError, ValueError, KeyError):
                        pass
                    await asyncio.sleep(0.01)

            watcher = asyncio.create_task(watch())
            try:
                burst = await run_burst(target, spec, progress=progress)
            finally:
                if state["killed"] is None:  # no kill (the burst failed early): nothing to watch for
                    watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher
        return burst, victim_before, unread

    burst, victim_before, unread = run_sync(run())
    traffic = burst.traffic
    if unread is not None and burst.unread is None:
        mark_unread(burst, unread)
    busy = None
    if burst.unread is None and (params.busy or needs_schedule([burst])) and survivors:
        # The victim is dead: left out of the schedule, which reads and judges the survivors alone.
        pool = [None if i == victim else (m if m is not None else model) for i, m in enumerate(target.models)]
        busy = run_sync(
            run_schedule(
                target,
                schedule_for([model], workers=len(survivors)),
                models=pool,
                weights=list(target.weights or [1.0] * len(pool)),
                budget_s=params.budget_s,
            )
        )
    killed_at = state["killed"] - traffic.origin if state["killed"] is not None else None
    excluded_after = (
        state["excluded"] - state["killed"]
        if state["excluded"] is not None and state["killed"] is not None
        else None
    )
    failed = traffic.failures
    after_kill = [r for r in traffic.records if killed_at is not None and r.started + r.latency >= killed_at]
    workers = workers_of(deployment)
    router_deltas = burst.router_deltas  # the dead worker's count stands beside no counter of its own
    figures = FailoverFigures(
        victim=victim,
        kill_after_responses=kill_after,
        requests=requests,
        killed_at_s=killed_at,
        excluded_after_s=excluded_after,
        lease_ttl_s=stack.lease_ttl_s(deployment.spec),
        failed_requests=len(failed),
        codes=status_codes([burst]),
        responses_after_kill=len(after_kill),
        errors_window_s=max(r.started + r.latency for r in failed) - killed_at
        if failed and killed_at is not None
        else 0.0,
        asserted=strict,
        victim_counter_before=victim_before,
        served_by={worker_label(workers, w): n for w, n in traffic.served_by().items()},
        router_counted_victim=None if router_deltas is None else router_deltas.get(victim, 0.0),
    )
    events = (
        [] if killed_at is None else [Event(killed_at, "kill", f"worker {victim} {signal.Signals(sig).name}")]
    )
    if killed_at is not None and excluded_after is not None:
        events.append(Event(killed_at + excluded_after, "out of dispatch", f"worker {victim}"))
    if burst.unread is not None:
        events = sorted([*events, *unread_events([burst], traffic.origin)], key=lambda e: e.at)
    verdict, reasons = _failover_verdict(burst, figures, requests=requests, ttl=ttl, busy=busy)
    return ScenarioResult(
        scenario="failover",
        stack=deployment.spec.stack,
        params={**asdict(params), "model": model, "signal": signal.Signals(sig).name},
        workers=workers,
        bursts=[burst],
        verdict=verdict,
        reasons=reasons,
        wall_seconds=time.monotonic() - started,
        events=events,
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
