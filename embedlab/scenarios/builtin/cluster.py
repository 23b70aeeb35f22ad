"""The faults of a real cluster, through steady traffic: a host partition, an etcd restart, lease TTLs.

Each runs Dynamo on etcd (and the partition across hosts). Steady traffic, not a burst
as fast as possible, goes through the fault, while every worker's counter is polled, so
the timeline shows each host's share stop and resume. What Dynamo decides (failures,
hangs, how long a lost instance stays in dispatch) is reported; what embedlab controls,
that the deployment recovers and a same-model burst passes afterwards, is asserted.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from ...cluster.deployment import Deployment
from ...cluster.events import Event
from ...cluster.stack_registry import stack_class, stacks_with
from ...errors import ConfigError, DeploymentStoppedError, MetricsError
from ...evidence import clients
from ...evidence.clients import run_sync
from ...evidence.metrics import scrape
from ...evidence.traffic import BurstResult
from ...progress import LaunchProgress
from ...verdicts import Verdict
from ..burst import launched, serving, unread_events, workers_of
from ..params import with_knobs
from ..registry import Scenario
from ..result import Burst, ScenarioResult
from .cluster_figures import (
    RATE,
    EtcdRestartParams,
    FaultFigures,
    PartitionParams,
    TtlPoint,
    TtlSweepFigures,
    TtlSweepParams,
)
from .dispatch import same_model_load_balance
from .timeline import Watch, events_since, served_between, status_codes, steady_traffic

if TYPE_CHECKING:
    from ..plan import ScenarioPlan

__all__ = [
    "etcd_restart",
    "lease_ttl_sweep",
    "partition",
    "run_etcd_restart",
    "run_partition",
    "run_ttl_sweep",
]

LEAD_S = 2.0  # traffic before the fault begins
RECOVERY_WAIT_S = 30.0  # how long the recovery burst waits for every worker to serve again


def _recovered(deployment: Deployment, *, wait_s: float) -> ScenarioResult:
    """Once every worker that can serve again does (bounded by `wait_s`), a same-model burst: the
    assertion.

    Serving again: its process runs, its counter can be read and the frontend lists it (a
    dead worker's listing outlives it by up to a lease TTL). A worker that exited and that
    nothing restarts is not waited for. One still down when the burst reads it makes the burst
    inconclusive, naming it. A frontend that exited during the fault is a
    `DeploymentStoppedError`, from the first look.
    """
    deadline = time.monotonic() + wait_s
    with clients.client(timeout=2.0) as client:
        while time.monotonic() < deadline and not _all_back(deployment, client):
            time.sleep(0.1)
    return same_model_load_balance(deployment)


def _all_back(deployment: Deployment, client: httpx.Client) -> bool:
    target = deployment.target()
    try:
        listed = deployment.dispatchable_endpoints(client)
    except (httpx.HTTPError, ValueError):
        return False
    for index, proc in enumerate(list(deployment.workers)):
        if not proc.alive() and deployment.spec.workers[index].restart != "on-exit":
            continue  # it stays down: the burst reads it, and says so
        if not proc.alive() or deployment.endpoint(index) not in listed:
            return False
        try:
            scrape(target.system_urls[index], metric=target.metric, client=client, worker_index=index)
        except MetricsError:
            return False
    return True


def _judged(recovery: ScenarioResult) -> tuple[Verdict, list[str]]:
    """The fault's verdict, its recovery burst's: inconclusive where that decided nothing (a worker
    still down when it was read, a counter reset), not a failure."""
    if recovery.passed:
        return Verdict.PASSED, []
    reasons = [f"after recovery: {r}" for r in recovery.reasons] or [recovery.summary()]
    return (Verdict.INCONCLUSIVE if recovery.verdict == Verdict.INCONCLUSIVE else Verdict.FAILED), reasons


def _fault_run(
    deployment: Deployment,
    *,
    scenario: str,
    fault: str,
    victim: int | None,
    seconds: float,
    concurrency: int,
    progress: bool,
    begin: Callable[[], None],
    end: Callable[[], None],
    hold_s: float,
    params: dict[str, Any],
) -> ScenarioResult:
    """Steady traffic for `seconds`; `begin()` at LEAD_S, `end()` `hold_s` later (both in a thread)."""
    model, _ = serving(deployment, None, at_least=1)
    since = len(deployment.events)
    started = time.monotonic()

    async def run() -> tuple[BurstResult, Watch, float, float, float]:
        loop = asyncio.get_running_loop()
        origin = time.perf_counter()
        watch = Watch(deployment, origin)
        watcher = asyncio.create_task(watch.run())
        traffic = asyncio.create_task(steady_traffic(deployment, model, seconds, concurrency, progress)())
        await asyncio.sleep(LEAD_S)
        fault_at = time.perf_counter() - origin
        await loop.run_in_executor(None, begin)
        await asyncio.sleep(max(0.0, fault_at + hold_s - (time.perf_counter() - origin)))
        await loop.run_in_executor(None, end)
        end_at = time.perf_counter() - origin
        result = await traffic
        watch.done.set()
        await watcher
        return result, watch, origin, fault_at, end_at

    traffic, watch, origin, fault_at, end_at = run_sync(run())
    after: list[Burst] = []  # the recovery burst
    try:
        recovery = _recovered(deployment, wait_s=RECOVERY_WAIT_S)
        verdict, failure = _judged(recovery)
        after = recovery.bursts
    except DeploymentStoppedError as gone:  # its frontend exited during the fault
        where = f"; see {gone.log_path}" if gone.log_path else ""
        verdict, failure = Verdict.FAILED, [f"{gone.why} during the fault{where}"]
    left = back = None
    if victim is not None:
        endpoint = deployment.endpoint(victim)
        left = watch.left_dispatch(endpoint, fault_at)
        # Serving again: listed again after the fault ended, and its counter moved after that
        # (requests held in flight across a partition arrive when the link returns, before the
        # instance rejoins).
        relisted = watch.back_in_dispatch(endpoint, end_at)
        back = watch.served_again(victim, relisted) if relisted is not None else None
    else:
        back = next((r.started + r.latency for r in traffic.records if r.ok and r.started >= end_at), None)
    figures = FaultFigures(
        fault=fault,
        started_s=fault_at,
        ended_s=end_at,
        failed_requests=len(traffic.failures),
        status_codes=status_codes(traffic),
        longest_hang_s=max((r.latency for r in traffic.records), default=0.0),
        served_during_fault=served_between(traffic, fault_at, end_at),
        left_dispatch_after_s=None if left is None else left - fault_at,
        back_after_s=None if back is None else back - end_at,
        recovered=not failure,
        samples=tuple(watch.samples),
        not_judged=next((b.inconclusive for b in after if b.inconclusive), None),
        unread=tuple(b.unread for b in after if b.unread is not None),
    )
    steady = Burst(
        name=f"steady traffic through the {fault}", model=model, expected=frozenset(), traffic=traffic
    )
    return ScenarioResult(
        scenario=scenario,
        stack=deployment.spec.stack,
        params=params,
        workers=workers_of(deployment),
        bursts=[steady, *after],
        verdict=verdict,
        reasons=failure,
        wall_seconds=time.monotonic() - started,
        events=sorted(
            [*events_since(deployment, origin, since), *unread_events(after, origin)], key=lambda e: e.at
        ),
        figures=figures,
    )


def partition(
    deployment: Deployment, *, params: PartitionParams | None = None, progress: bool = False, **knobs: Any
) -> ScenarioResult:
    """Cut worker `victim`'s host off the network mid-traffic, heal it after 2 lease TTLs + 2 s.

    Dynamo's worker exits once it finds its lease gone; the deployment's restart policy
    (`restart="on-exit"`) brings it back on its host, and the recovery burst must pass. Its
    knobs (`PartitionParams`) come in `params`, or as keywords.
    """
    params = with_knobs(PartitionParams, params, knobs, scenario="partition")
    victim = params.victim
    host = deployment.host_of(victim)
    if host == 0:
        raise ConfigError(
            f"worker {victim} runs on host 0, the harness's own: place it on another host to partition it"
        )
    ttl = deployment.spec.lease_ttl
    hold = 2 * ttl + 2
    return _fault_run(
        deployment,
        scenario="partition",
        fault=f"partition of host {host}",
        victim=victim,
        seconds=LEAD_S + hold + max(15.0, 3 * ttl),
        concurrency=params.concurrency,
        progress=progress,
        begin=lambda: deployment.outages.partition(host),
        end=lambda: deployment.outages.heal(host),
        hold_s=hold,
        params={**asdict(params), "host": host, "lease_ttl": ttl, "partition_s": hold, "rate": RATE},
    )


def etcd_restart(
    deployment: Deployment, *, params: EtcdRestartParams | None = None, progress: bool = False, **knobs: Any
) -> ScenarioResult:
    """Stop etcd for `down_s` seconds mid-traffic and start it again on the same data dir. Its knobs
    (`EtcdRestartParams`) come in `params`, or as keywords."""
    params = with_knobs(EtcdRestartParams, params, knobs, scenario="etcd-restart")
    down_for = params.down_s
    if deployment.etcd_url is None:
        raise ConfigError("etcd-restart needs a deployment on etcd (discovery='etcd')")
    return _fault_run(
        deployment,
        scenario="etcd-restart",
        fault=f"etcd stop of {down_for:g} s",
        victim=None,
        seconds=LEAD_S + down_for + 8.0,
        concurrency=params.concurrency,
        progress=progress,
        begin=lambda: deployment.outages.restart_etcd(down_for=down_for),
        end=lambda: None,
        hold_s=0.0,
        params={**asdict(params), "lease_ttl": deployment.spec.lease_ttl, "rate": RATE},
    )


def lease_ttl_sweep(
    make: Callable[[float], Deployment],
    *,
    params: TtlSweepParams | None = None,
    progress: bool = False,
    **knobs: Any,
) -> ScenarioResult:
    """For each TTL, a fresh deployment (`make(ttl)`), a worker SIGKILLed mid-traffic, and how long
    the frontend kept dispatching to it. Reported: the relation to the TTL is Dynamo's. Its knobs
    (`TtlSweepParams`) come in `params`, or as keywords."""
    params = with_knobs(TtlSweepParams, params, knobs, scenario="lease-ttl-sweep")
    ttls, victim, concurrency = params.ttls, params.victim, params.concurrency
    points: list[TtlPoint] = []
    bursts: list[Burst] = []
    events: list[Event] = []
    started = time.monotonic()
    if not ttls:
        raise ConfigError("lease-ttl-sweep needs at least one TTL")
    stack, workers = "", []  # the first deployment's
    for ttl in ttls:
        with make(ttl) as deployment:
            stack, workers = deployment.spec.stack, workers_of(deployment)
            model, _ = serving(deployment, None)
            since = len(deployment.events)

            async def run(model: str = model, ttl: float = ttl) -> tuple[BurstResult, Watch, float, float]:
                origin = time.perf_counter()
                watch = Watch(deployment, origin)
                watcher = asyncio.create_task(watch.run())
                traffic = asyncio.create_task(
                    steady_traffic(deployment, model, LEAD_S + ttl + 4.0, concurrency, progress)()
                )
                await asyncio.sleep(LEAD_S)
                deployment.outages.kill_worker(victim, signal.SIGKILL)
                killed = time.perf_counter() - origin
                result = await traffic
                watch.done.set()
                await watcher
                return result, watch, origin, killed

            traffic, watch, origin, killed = run_sync(run())
            left = watch.left_dispatch(deployment.endpoint(victim), killed)
            points.append(
                TtlPoint(
                    ttl, None if left is None else left - killed, len(traffic.failures), status_codes(traffic)
                )
            )
            bursts.append(
                Burst(name=f"lease TTL {ttl:g} s", model=model, expected=frozenset(), traffic=traffic)
            )
            events += [
                replace(e, detail=f"TTL {ttl:g} s: {e.detail}")
                for e in events_since(deployment, origin, since)
            ]
    reasons = [
        f"TTL {p.lease_ttl_s:g} s: "
        + (
            "still dispatched at the end"
            if p.left_dispatch_after_s is None
            else f"out of dispatch after {p.left_dispatch_after_s:.1f} s"
        )
        + f", {p.failed_requests} failed"
        for p in points
    ]
    return ScenarioResult(
        scenario="lease-ttl-sweep",
        stack=stack,
        params={**asdict(params), "ttls": list(ttls), "rate": RATE},
        workers=workers,
        bursts=bursts,
        verdict=Verdict.REPORTED,
        reasons=reasons,
        wall_seconds=time.monotonic() - started,
        events=events,
        figures=TtlSweepFigures(points=tuple(points)),
    )


# -- as registered scenarios: run(target, plan) -------------------------------------------------


def run_partition(target: Any, plan: ScenarioPlan) -> ScenarioResult:
    return partition(
        launched(target, scenario="partition", changes="the cluster"),
        params=plan.params,
        progress=plan.progress,
    )


def run_etcd_restart(target: Any, plan: ScenarioPlan) -> ScenarioResult:
    return etcd_restart(
        launched(target, scenario="etcd-restart", changes="the cluster"),
        params=plan.params,
        progress=plan.progress,
    )


def run_ttl_sweep(target: Any, plan: ScenarioPlan) -> ScenarioResult:
    base = plan.deployment_spec()
    return lease_ttl_sweep(
        # One deployment per TTL, each in its own folder: etcd's data dir must not carry over.
        lambda ttl: Deployment(
            replace(base, lease_ttl=ttl),
            run_dir=Path(plan.run_dir) / f"ttl-{ttl:g}" if plan.run_dir else None,
            progress=LaunchProgress() if plan.progress else None,
        ),
        params=plan.params,
        progress=plan.progress,
    )


def _needs_etcd(plan: ScenarioPlan) -> None:
    if plan.attached:
        return
    if "etcd" not in stack_class(plan.stack).discoveries:
        having = ", ".join(stacks_with(lambda s: "etcd" in s.discoveries)) or "none registered"
        raise ConfigError(
            f"{plan.scenario} needs etcd discovery, which the {plan.stack} stack does not have (stacks with it: {having})"
        )
    if plan.discovery != "etcd":
        raise ConfigError(f"{plan.scenario} needs discovery='etcd' (--discovery etcd)")


def _needs_cluster(plan: ScenarioPlan) -> None:
    _needs_etcd(plan)
    if plan.hosts < 2:
        raise ConfigError(f"{plan.scenario} cuts a host off the network: it needs hosts >= 2 (--hosts 3)")


CLUSTER = {"restart": "on-exit", "lease_ttl": 5.0}  # the workers' leases lapse in the fault; they come back

PARTITION = Scenario(
    name="partition", run=run_partition, params=PartitionParams,
    launches=True, check=_needs_cluster, deployment=CLUSTER,
    help="a worker's host drops off the network mid-traffic, then comes back: failures, the longest hang "
    "and the times to leave and rejoin dispatch are reported; recovery is asserted",
)  # fmt: skip
ETCD_RESTART = Scenario(
    name="etcd-restart", run=run_etcd_restart, params=EtcdRestartParams,
    launches=True, check=_needs_etcd, deployment=CLUSTER,
    help="etcd stops mid-traffic and starts again: failures and whether dispatch went on are reported; "
    "recovery is asserted",
)  # fmt: skip
TTL_SWEEP = Scenario(
    name="lease-ttl-sweep", run=run_ttl_sweep, params=TtlSweepParams, deploys=True, check=_needs_etcd,
    help="a worker is SIGKILLed at each lease TTL: time to leave dispatch and failed requests against "
    "the TTL (reported)",
)  # fmt: skip
