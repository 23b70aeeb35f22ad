"""The piece every scenario is made of: one burst between two counter snapshots, judged.

spec = BurstSpec(name="m", model="m", expected=frozenset({0, 1}), requests=40)
found = burst_of(target, spec)  # run_burst, awaited, from synchronous code
verdict, reasons = judge([found], exact_total=True)
"""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from ..cluster.deployment import Deployment
from ..cluster.events import Event
from ..cluster.spec import WorkerSpec
from ..cluster.worker_server import server_of
from ..defaults import QUIET_WINDOW_S, WORKER_HEADER
from ..errors import ConfigError, CounterResetError, ScrapeError, TrafficError
from ..evidence import clients
from ..evidence.counters import DispatchCheck
from ..evidence.dynamo_log import SELECTED, FrontendLog, attributed, instances, instances_from_health
from ..evidence.metrics import Snapshot
from ..evidence.target import Target, target_of
from ..evidence.traffic import BurstResult, Input, RequestRecord, asend_burst, probes
from ..verdicts import Verdict
from .result import Burst, Unread, WorkerInfo

__all__ = [
    "BurstSpec",
    "burst_of",
    "judge",
    "launched",
    "mark_unread",
    "read_router_counts",
    "router_moved",
    "run_burst",
    "served_models",
    "serving",
    "status_codes",
    "unread_events",
    "unread_of",
    "workers_of",
]


@dataclass(frozen=True, kw_only=True)
class BurstSpec:
    """One burst and how to judge it.

    `min_total_delta` None means exactly the requests sent must be counted; `weights`
    (one per worker) with `fairness_alpha` adds the test of the split.
    """

    name: str
    model: str
    expected: frozenset[int]
    requests: int
    concurrency: int = 4
    inputs: Sequence[Input] | None = None
    min_total_delta: float | None = None
    weights: Sequence[float] | None = None
    fairness_alpha: float | None = None
    settle_seconds: float = 0.0
    timeout: float = 60.0
    require_all: bool = True  # every expected worker must move
    must_move: frozenset[int] | None = None  # in place of require_all: those that must move
    rule: str = ""  # what the burst asserts, in words, for tables and reports
    models: Sequence[str] | None = None  # one per request, for a burst that interleaves models
    quiet_s: float = QUIET_WINDOW_S  # each quiet window's length; 0: none
    # The workers it reads, by index (None: all): failover leaves out the one it kills mid-burst.
    read: Sequence[int] | None = None
    kind: str = "embeddings"  # or completions, chat (defaults.KIND_PATHS): each input a prompt
    on_response: Callable[[RequestRecord], None] | None = field(default=None, compare=False)


def workers_of(deployment: Deployment | Target) -> list[WorkerInfo]:
    """Each worker by index, with its model, weight and (where launched) endpoint."""
    target = target_of(deployment)
    weights = target.weights or (1.0,) * len(target.system_urls)
    launched = deployment if isinstance(deployment, Deployment) else None
    return [
        WorkerInfo(
            index=i,
            system_url=url,
            model=model,
            weight=weights[i],
            endpoint=launched.endpoint(i) if launched else None,
            host=launched.host_of(i) if launched else 0,
            engine=_engine(launched.spec.workers[i]) if launched else None,
        )
        for i, (url, model) in enumerate(zip(target.system_urls, target.models))
    ]


def _engine(spec: WorkerSpec) -> str:
    """What computes a worker's embeddings: its engine, or the worker kind that brings its own."""
    return spec.engine if server_of(spec).runs_engine else spec.server


def served_models(frontend_url: str) -> list[str]:
    """The frontend's /v1/models: also the preflight that it is reachable at all."""
    url = frontend_url.rstrip("/") + "/v1/models"
    try:
        with clients.client(timeout=5.0) as client:
            response = client.get(url)
            response.raise_for_status()
            return [m["id"] for m in response.json().get("data", [])]
    except (httpx.HTTPError, ValueError, KeyError, AttributeError) as exc:
        raise TrafficError(f"cannot list models at {url}: {exc.__class__.__name__}: {exc}") from exc


def launched(target: Deployment | Target, *, scenario: str, changes: str = "a worker") -> Deployment:
    """`target` as a deployment embedlab launched: the scenarios that kill or reconfigure need one."""
    if not isinstance(target, Deployment):
        raise ConfigError(
            f"{scenario} changes {changes}: it needs a deployment embedlab launched, not an attached one"
        )
    return target


def serving(
    deployment: Deployment | Target, model: str | None, *, at_least: int = 2
) -> tuple[str, list[int]]:
    """The model to send (default: the only one served) and the indices of the workers serving it."""
    target = target_of(deployment)
    known = [m for m in target.models if m is not None]
    if model is None:
        candidates = sorted(set(known)) or served_models(target.frontend_url)
        if len(candidates) != 1:
            raise ConfigError(
                f"this scenario needs one model; this deployment serves {candidates}: pass model="
            )
        model = candidates[0]
    indices = [i for i, m in enumerate(target.models) if m in (model, None)]
    if len(indices) < at_least:
        raise ConfigError(
            f"this scenario needs at least {at_least} workers serving '{model}', found {len(indices)}"
        )
    return model, indices


async def run_burst(target: Target, spec: BurstSpec, *, progress: bool = False) -> Burst:
    """Snapshot every worker, send the burst, snapshot again, judge the deltas by worker index."""
    read = list(spec.read) if spec.read is not None else list(range(len(target.system_urls)))
    check = DispatchCheck(
        [target.system_urls[i] for i in read],
        spec.expected,
        indices=read,
        min_total_delta=spec.requests if spec.min_total_delta is None else spec.min_total_delta,
        settle_seconds=spec.settle_seconds,
        metric=target.metric,
        weights=spec.weights,
        fairness_alpha=spec.fairness_alpha,
        require_all=spec.require_all,
        must_move=spec.must_move,
        raise_on_failure=False,
        source=target.counters,
    )
    # One keep-alive connection per worker, shared by the burst's four snapshots.
    async with clients.scrape_client(timeout=10.0) as scrape_client:
        opening = router_before = unread = None
        try:
            opening = await _quiet_window(check, scrape_client, spec.quiet_s, first=True)
            router_before = await read_router_counts(target)
            # The baseline is in hand before the first request of the burst leaves.
            await check.abegin(scrape_client)
        except ScrapeError as exc:
            # Sent all the same: what the requests met while a worker was down is the finding.
            unread = unread_of(exc, "before the burst")
        log = FrontendLog(Path(target.dynamo_log)) if target.dynamo_log else None
        since, ids = (log.mark(), f"embedlab-{secrets.token_hex(6)}-") if log else (0, None)
        traffic = await asend_burst(
            target.frontend_url,
            spec.model,
            spec.requests,
            concurrency=spec.concurrency,
            inputs=spec.inputs or probes().take(spec.requests),
            timeout=spec.timeout,
            progress=progress,
            on_response=spec.on_response,
            models=spec.models,
            request_ids=ids,
            kind=spec.kind,
        )
        share_of = spec.weights if spec.weights is not None else [1.0] * len(target.system_urls)
        total = sum(share_of[i] for i in spec.expected) or 1.0
        burst = Burst(
            name=spec.name,
            model=spec.model,
            expected=spec.expected,
            traffic=traffic,
            expected_shares={i: share_of[i] / total for i in spec.expected},
            rule=spec.rule,
            replayed=probes().replayed,
        )
        if unread is not None:
            mark_unread(burst, unread, detail=target.counters is not None)
            return burst
        try:
            burst.check = await check.aend(scrape_client)
            router_after = await read_router_counts(target)
            if router_before is not None and router_after is not None:
                burst.router_deltas = {
                    i: router_after.get(i, 0.0) - router_before.get(i, 0.0)
                    for i in {*router_before, *router_after}
                }
            closing = await _quiet_window(check, scrape_client, spec.quiet_s, first=False)
            moved = {**_moved(opening, check.before, read), **_moved(check.after, closing, read)}
            if moved:
                burst.other_traffic = moved
                served, how = _attributed(target, traffic), f"the {WORKER_HEADER} header"
                if served is None and log is not None and ids is not None:
                    served = await _logged(target.frontend_url, log, since, ids, traffic, check.before, read)
                    how = f"Dynamo's frontend log ('{SELECTED}' by x-request-id)"
                if served is None:
                    burst.inconclusive = _unsent(moved, 2 * spec.quiet_s)
                else:
                    burst.check = _counters_agree(check.judge_attributed(served), check, served)
                    burst.proven_by = f"{how} on {sum(served.values())} of its {traffic.n} responses"
        except CounterResetError as exc:
            burst.inconclusive = f"counter reset on worker {exc.worker_index}"
        except ScrapeError as exc:
            # A worker that answered before the burst and not after it (it died, or is still
            # restarting): its delta is unknown, so the burst decides nothing.
            mark_unread(burst, unread_of(exc, "after the burst"), detail=target.counters is not None)
    return burst


def _counters_agree(judged: Any, check: DispatchCheck, served: dict[int, int]) -> Any:
    """`judged` (the header's verdict), failed where some worker's counter rose by less than the
    responses naming it: a header the counters contradict proves nothing (a replayed or rewritten
    response). Other clients only add to a counter, so "at least" is what the counters can say. A
    worker the burst did not read (failover's victim, dead by its end) can neither agree nor refute."""
    assert check.before is not None and check.after is not None
    short = []
    for i, named in sorted(served.items()):
        rose = check.delta_of(i)
        if rose is not None and rose < named:
            short.append(
                f"worker {i}'s counter rose by {rose:g} while {named} responses named it "
                f"(the {WORKER_HEADER} header is contradicted by the counters)"
            )
    if not short:
        return judged
    return dataclasses.replace(judged, passed=False, reasons=(*judged.reasons, *short))


def unread_of(exc: ScrapeError, when: str) -> Unread:
    """The worker `exc` could not read (`when`: "before the burst", "after the burst"), now."""
    return Unread(worker=exc.worker_index, when=when, at=time.perf_counter(), error=str(exc))


def mark_unread(burst: Burst, unread: Unread, *, detail: bool = False) -> None:
    """`burst` decides nothing: one of its workers could not be read (down, restarting or
    unreachable). The one way every scenario makes a burst inconclusive for a worker it could not read.
    `detail`: the read's own words follow (through Prometheus: which scrape was stale, and why)."""
    burst.unread = unread
    burst.inconclusive = f"{unread.reason}: {unread.error}" if detail else unread.reason


def unread_events(bursts: Sequence[Burst], origin: float) -> list[Event]:
    """An `unreadable` event for each burst that could not read a worker, on a timeline from `origin`."""
    return [b.unread.event(origin, b.name) for b in bursts if b.unread is not None]


async def _quiet_window(
    check: DispatchCheck, client: Any, seconds: float, *, first: bool
) -> list[Snapshot] | None:
    """Counters at one end of a quiet window: before the baseline (`first`) or after the end
    snapshot. None where the burst has no windows."""
    if seconds <= 0:
        return None
    if first:
        found = await check.asnapshot(client)
        await asyncio.sleep(seconds)
        return found
    await asyncio.sleep(seconds)
    return await check.asnapshot(client)


def _moved(
    earlier: Sequence[Snapshot] | None, later: Sequence[Snapshot] | None, indices: Sequence[int]
) -> dict[int, float]:
    """Worker index -> how far its counter moved between two snapshot lists of the workers
    `indices` (a reset raises)."""
    if earlier is None or later is None:
        return {}
    deltas = {i: a.delta(b, worker_index=i) for i, a, b in zip(indices, earlier, later)}
    return {i: d for i, d in deltas.items() if d}


def router_moved(before: dict[int, float], after: dict[int, float]) -> dict[int, float]:
    return {i: after.get(i, 0.0) - before.get(i, 0.0) for i in sorted({*before, *after})}


async def read_router_counts(target: Target) -> dict[int, float] | None:
    """The router's own per-worker counts, where it keeps them (a blocking read, off the loop)."""
    return None if target.router_counts is None else await asyncio.to_thread(target.router_counts)


def _attributed(target: Target, traffic: BurstResult) -> dict[int, int] | None:
    """Worker index -> responses naming it (a worker's 4xx included: it counted that request
    too), where every answered request names a known worker; None where any does not (the
    counters alone can then judge placement). A failure that names no worker is left out:
    the verdict fails on it anyway."""
    served: dict[int, int] = {}
    for record in traffic.records:
        index = target.index_of(record.worker)
        if index is None and (record.ok or record.worker):
            return None
        if index is not None:
            served[index] = served.get(index, 0) + 1
    return served


async def _logged(
    frontend_url: str,
    log: FrontendLog,
    since: int,
    ids: str,
    traffic: BurstResult,
    snapshots: Sequence[Snapshot] | None,
    indices: Sequence[int],
) -> dict[int, int] | None:
    """Worker index -> the responses Dynamo's frontend log attributes to it (None: some answered
    request has no single selection of a known worker). The frontend writes a selection before it
    answers, but its log may reach the file later: read again for up to `_LOG_WAIT_S`."""
    if snapshots is None:
        return None
    # The counter's own worker_id label first; the frontend's /health where a worker's endpoint is its own.
    workers = instances(snapshots, indices)
    try:
        async with clients.async_client(timeout=5.0) as http:
            health = (await http.get(frontend_url.rstrip("/") + "/health")).json()
        workers = {**instances_from_health(health, snapshots, indices), **workers}
    except (httpx.HTTPError, ValueError):
        pass
    statuses = {f"{ids}{r.index}": r.status for r in traffic.records}
    deadline = time.perf_counter() + _LOG_WAIT_S
    while True:
        served = attributed(statuses, log.selected(since), workers)
        if served is not None or time.perf_counter() >= deadline:
            return served
        await asyncio.sleep(0.1)


# How long a burst waits for the frontend's log to show every selection of its answered requests.
_LOG_WAIT_S = 2.0


def _unsent(moved: dict[int, float], seconds: float) -> str:
    shown = ", ".join(f"worker {i} +{d:g}" for i, d in sorted(moved.items()))
    return (
        f"traffic embedlab did not send: {shown} in the {seconds:.1f} s of quiet windows around the burst "
        "(another client, a health probe or a canary), so its counts judge nothing of the router"
    )


def status_codes(bursts: Sequence[Burst]) -> dict[str, int]:
    """How many requests failed with each HTTP status ("0": no answer at all), over `bursts`."""
    found: dict[str, int] = {}
    for burst in bursts:
        for record in burst.traffic.failures:
            found[str(record.status)] = found.get(str(record.status), 0) + 1
    return found


def burst_of(deployment: Deployment | Target, spec: BurstSpec, *, progress: bool = False) -> Burst:
    """`run_burst` from synchronous code (a scenario's `run`, a script, a notebook cell): read every
    worker, send the burst, read again, and judge the deltas by worker index."""
    return clients.run_sync(run_burst(target_of(deployment), spec, progress=progress))


def judge(bursts: Sequence[Burst], *, exact_total: bool) -> tuple[Verdict, list[str]]:
    """A verdict over bursts: a counter reset or a worker that could not be read is inconclusive; a
    failed request, a leak, a silent worker, a skewed split or (with `exact_total`) a count other
    than the requests sent fails."""
    doubtful = [f"{burst.name}: {burst.inconclusive}" for burst in bursts if burst.inconclusive]
    if doubtful:
        return Verdict.INCONCLUSIVE, doubtful
    reasons: list[str] = []
    uncounted: list[str] = []
    for burst in bursts:
        failed = burst.traffic.failures
        if failed:
            reasons.append(
                f"{burst.name}: {len(failed)} of {burst.traffic.n} requests failed ({failed[0].error})"
            )
        assert burst.check is not None
        short = burst.traffic.n - burst.check.total_delta if exact_total and not failed else 0
        if short > 0:
            # Answered, yet counted by no worker: it never reached one. That says nothing of where
            # the router sends what does reach a worker, so a worker left still is not blamed on it.
            said = uncounted if burst.replayed else reasons
            said.append(f"{burst.name}: {_answered_unseen(burst, short)}")
            reasons += [f"{burst.name}: {r}" for r in burst.check.reasons if not _blames_stillness(r)]
            continue
        reasons += [f"{burst.name}: {r}" for r in burst.check.reasons]
        if exact_total and not failed and burst.check.total_delta != burst.traffic.n:
            reasons.append(  # more than sent: the shortfall was taken above
                f"{burst.name}: counters moved {burst.check.total_delta:g} for {burst.traffic.n} requests "
                "sent: some were counted twice (a retry whose first attempt still counted, hedging)"
            )
    if reasons:
        return Verdict.FAILED, reasons + uncounted
    if uncounted:
        return Verdict.INCONCLUSIVE, uncounted
    return Verdict.PASSED, reasons


def _answered_unseen(burst: Burst, short: float) -> str:
    """A burst's answered requests that moved no worker's counter, in words."""
    assert burst.check is not None
    n, counted = burst.traffic.n, burst.check.total_delta
    if burst.replayed:
        return (
            f"{short:g} of its {n} answered requests moved no worker's counter: this run replays an earlier "
            "run's request bodies (its nonce), and a response cache answered them; placement is judged on "
            f"the {counted:g} that reached workers"
        )
    return (
        f"{short:g} of its {n} answered requests moved no worker's counter, though no earlier request "
        "carried their bodies: they were answered without reaching a worker (a response cache that "
        f"answers unseen bodies, or the router itself); placement is judged on the {counted:g} that did"
    )


def _blames_stillness(reason: str) -> bool:
    """A check's reason that blames a still worker or a short total: not the router's where requests
    never reached any worker."""
    return reason.startswith(("no traffic reached", "total delta"))
