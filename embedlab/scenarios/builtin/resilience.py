"""A worker killed mid-burst: does the frontend stop sending to it, and how much is lost?

Failover needs a deployment embedlab launched: it kills a process. A dead worker cannot be scraped, so its row in the failover table comes
from the requests attributed to it, not from its counter.
"""

from __future__ import annotations

import asyncio
import signal
import time
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

import httpx

from ...cluster.deployment import Deployment
from ...cluster.events import Event
from ...cluster.stack import SwitchesRetries, capable
from ...cluster.stack_registry import get_stack
from ...errors import ConfigError, CounterResetError, ScrapeError
from ...evidence import clients
from ...evidence.counters import evaluate
from ...evidence.metrics import ascrape, ascrape_all
from ...evidence.target import Target
from ...evidence.traffic import RequestRecord, asend_burst, default_inputs, run_sync
from ...verdicts import Verdict
from ..burst import (
    launched,
    mark_unread,
    read_router_counts,
    router_moved,
    served_models,
    serving,
    status_codes,
    unread_events,
    unread_of,
    workers_of,
)
from ..params import knob, with_knobs
from ..registry import Scenario
from ..result import Burst, DataFigures, ScenarioResult, worker_label

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
class FailoverParams:
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
    urls = deployment.system_urls
    endpoint = deployment.endpoint(victim)
    ttl = deployment.spec.lease_ttl
    watch_limit = stack.failover_watch_s(deployment.spec)
    target = deployment.target()
    served_models(deployment.frontend_url)
    started = time.monotonic()

    async def run() -> tuple[Any, ...]:
        state: dict[str, float | None] = {"killed": None, "excluded": None}
        responses = 0

        def on_response(record: RequestRecord) -> None:
            nonlocal responses
            responses += 1
            if responses == kill_after:
                deployment.outages.kill_worker(victim, sig)
                state["killed"] = time.perf_counter()

        async with clients.scrape_client(timeout=5.0) as client:
            before = after = victim_before = unread = None
            try:
                before = await ascrape_all(
                    [urls[i] for i in survivors], metric=target.metric, client=client, indices=survivors
                )
                victim_before = await ascrape(
                    urls[victim], metric=target.metric, client=client, worker_index=victim
                )
            except ScrapeError as exc:  # sent all the same, as every burst is: the kill is the finding
                unread = unread_of(exc, "before the burst")
            router_before = await read_router_counts(target)

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
            traffic = await asend_burst(
                deployment.frontend_url,
                model,
                requests,
                concurrency=params.concurrency,
                inputs=default_inputs(requests),
                timeout=timeout,
                progress=progress,
                on_response=on_response,
            )
            await watcher
            if unread is None:
                try:
                    after = await ascrape_all(
                        [urls[i] for i in survivors], metric=target.metric, client=client, indices=survivors
                    )
                except ScrapeError as exc:  # a survivor down or restarting: its delta is unknown
                    unread = unread_of(exc, "after the burst")
            router_after = await read_router_counts(target)
        moved = (
            None
            if router_before is None or router_after is None
            else router_moved(router_before, router_after)
        )
        return traffic, before, after, victim_before, state, moved, unread

    traffic, before, after, victim_before, state, router_deltas, unread = run_sync(run())
    killed_at = state["killed"] - traffic.origin if state["killed"] is not None else None
    excluded_after = (
        state["excluded"] - state["killed"]
        if state["excluded"] is not None and state["killed"] is not None
        else None
    )
    failed = traffic.failures
    after_kill = [r for r in traffic.records if killed_at is not None and r.started + r.latency >= killed_at]
    workers = workers_of(deployment)
    figures = FailoverFigures(
        victim=victim,
        kill_after_responses=kill_after,
        requests=requests,
        killed_at_s=killed_at,
        excluded_after_s=excluded_after,
        lease_ttl_s=stack.lease_ttl_s(deployment.spec),
        failed_requests=len(failed),
        codes=status_codes([Burst(name=model, model=model, expected=frozenset(), traffic=traffic)]),
        responses_after_kill=len(after_kill),
        errors_window_s=max(r.started + r.latency for r in failed) - killed_at
        if failed and killed_at is not None
        else 0.0,
        asserted=strict,
        victim_counter_before=None if victim_before is None else victim_before.value,
        served_by={worker_label(workers, w): n for w, n in traffic.served_by().items()},
        router_counted_victim=None if router_deltas is None else router_deltas.get(victim, 0.0),
    )
    events = (
        [] if killed_at is None else [Event(killed_at, "kill", f"worker {victim} {signal.Signals(sig).name}")]
    )
    if killed_at is not None and excluded_after is not None:
        events.append(Event(killed_at + excluded_after, "out of dispatch", f"worker {victim}"))
    burst = Burst(
        name=model,
        model=model,
        expected=frozenset(survivors),
        traffic=traffic,
        expected_shares={i: 1 / len(survivors) for i in survivors},
        router_deltas=router_deltas,  # the dead worker's count stands beside no counter of its own
    )
    if unread is not None:
        mark_unread(burst, unread)
        events = sorted([*events, *unread_events([burst], traffic.origin)], key=lambda e: e.at)
    else:
        try:
            burst.check = evaluate(
                [urls[i] for i in survivors], before, after, set(survivors), indices=survivors
            )
        except CounterResetError as exc:
            burst.inconclusive = f"counter reset on worker {exc.worker_index}"
    verdict, reasons = _failover_verdict(burst, figures, requests=requests, ttl=ttl)
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
    )


def _failover_verdict(
    burst: Burst, figures: FailoverFigures, *, requests: int, ttl: float
) -> tuple[Verdict, list[str]]:
    if burst.inconclusive:
        return Verdict.INCONCLUSIVE, [f"{burst.name}: {burst.inconclusive}"]
    excluded = figures.excluded_after_s
    if not figures.asserted:
        # Nothing asserted: the figures are the result, and the summary line carries them.
        shown = "not within the watch" if excluded is None else f"{excluded * 1000:.0f} ms after the kill"
        return Verdict.REPORTED, [
            f"{figures.failed_requests} of {requests} requests failed",
            f"out of dispatch {shown}",
        ]
    reasons: list[str] = []
    failed = burst.traffic.failures
    if failed:
        reasons.append(f"{len(failed)} of {requests} requests failed after the kill ({failed[0].error})")
    if excluded is None or excluded > 2 * ttl:
        shown = "never" if excluded is None else f"after {excluded:.2f} s"
        reasons.append(f"the dead instance left dispatch {shown}, not within 2 TTLs ({2 * ttl:g} s)")
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
