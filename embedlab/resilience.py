"""Scenarios in which a worker leaves: killed mid-burst (failover) or drained (rolling restart).

Both need a deployment embedlab launched: they kill a process or call a worker's
system port. A dead worker cannot be scraped, so its row in the failover table comes
from the requests attributed to it, not from its counter.
"""

from __future__ import annotations

import asyncio
import signal
import time
from typing import Any

import httpx

from . import clients
from .checks import evaluate
from .deployment import Deployment
from .errors import ConfigError
from .metrics import ascrape
from .scenarios import FAILED, PASSED, REPORTED, Burst, ScenarioResult, _run_burst, _served_models, _verdict, _workers
from .traffic import RequestRecord, asend_burst, default_inputs, run_sync


def _single_model(deployment: Deployment, model: str | None) -> tuple[str, list[int]]:
    models = deployment.models
    model = model or models[0]
    serving = [i for i, m in enumerate(models) if m == model]
    if len(serving) < 2:
        raise ConfigError(f"this scenario needs at least two workers serving '{model}', found {len(serving)}")
    return model, serving


async def _dispatchable(client: httpx.AsyncClient, deployment: Deployment, endpoint: str) -> bool:
    """Whether the frontend would still dispatch to `endpoint`."""
    health = (await client.get(f"{deployment.frontend_url}/health", timeout=2.0)).json()
    if deployment.spec.stack == "embedded":
        return any(i["endpoint"] == endpoint and not i.get("suspect") for group in health["models"].values() for i in group)
    return any(f"{i['namespace']}.{i['component']}.{i['endpoint']}" == endpoint for i in health.get("instances", []))


def failover(
    deployment: Deployment,
    *,
    requests: int = 200,
    concurrency: int = 8,
    kill_after: int = 50,
    victim: int = 1,
    model: str | None = None,
    sig: int = signal.SIGKILL,
    assert_zero_loss: bool | None = None,
    timeout: float = 60.0,
    progress: bool = False,
) -> ScenarioResult:
    """Kill worker `victim` after `kill_after` responses of a same-model burst.

    On the embedded stack the verdict asserts zero failed requests and that the dead
    instance leaves dispatch within 2 lease TTLs. Elsewhere (`assert_zero_loss=False`,
    the default for the dynamo stack) the same figures are reported, not asserted.
    """
    if not isinstance(deployment, Deployment):
        raise ConfigError("failover kills a worker process: it needs a deployment embedlab launched, not an attached one")
    model, serving = _single_model(deployment, model)
    if victim not in serving:
        raise ConfigError(f"worker {victim} does not serve '{model}'")
    if not 0 < kill_after < requests:
        raise ConfigError("kill_after must fall inside the burst")
    strict = deployment.spec.stack == "embedded" if assert_zero_loss is None else assert_zero_loss
    survivors = [i for i in serving if i != victim]
    urls = deployment.system_urls
    endpoint = deployment._context().endpoint(victim)
    ttl = deployment.spec.lease_ttl
    # Dynamo's file discovery forgets a dead instance only after its ~10 s TTL.
    watch_limit = 3 * ttl if deployment.spec.stack == "embedded" else 30.0
    _served_models(deployment.frontend_url)
    started = time.monotonic()

    async def run() -> tuple[Any, ...]:
        state: dict[str, float | None] = {"killed": None, "excluded": None}
        responses = 0

        def on_response(record: RequestRecord) -> None:
            nonlocal responses
            responses += 1
            if responses == kill_after:
                deployment.kill_worker(victim, sig)
                state["killed"] = time.perf_counter()

        async with clients.async_client(timeout=5.0) as client:
            before = await asyncio.gather(*(ascrape(urls[i], client=client) for i in survivors))
            victim_before = await ascrape(urls[victim], client=client)

            async def watch() -> None:
                while state["killed"] is None:
                    await asyncio.sleep(0.005)
                while time.perf_counter() - state["killed"] < watch_limit:  # type: ignore[operator]
                    try:
                        if not await _dispatchable(client, deployment, endpoint):
                            state["excluded"] = time.perf_counter()
                            return
                    except (httpx.HTTPError, ValueError, KeyError):
                        pass
                    await asyncio.sleep(0.01)

            watcher = asyncio.create_task(watch())
            traffic = await asend_burst(
                deployment.frontend_url, model, requests, concurrency=concurrency, inputs=default_inputs(requests),
                timeout=timeout, progress=progress, on_response=on_response,
            )
            await watcher
            after = await asyncio.gather(*(ascrape(urls[i], client=client) for i in survivors))
        return traffic, before, after, victim_before, state

    traffic, before, after, victim_before, state = run_sync(run())
    check = evaluate([urls[i] for i in survivors], before, after, set(survivors), indices=survivors)
    killed_at = state["killed"] - traffic.origin if state["killed"] is not None else None
    excluded_after = state["excluded"] - state["killed"] if state["excluded"] is not None and state["killed"] is not None else None
    failed = traffic.failures
    after_kill = [r for r in traffic.records if killed_at is not None and r.started + r.latency >= killed_at]
    errors_window = (
        max(r.started + r.latency for r in failed) - killed_at if failed and killed_at is not None else 0.0
    )
    extra = {
        "victim": victim,
        "victim_counter_before": victim_before.value,
        "kill_after_responses": kill_after,
        "killed_at_s": killed_at,
        "excluded_after_s": excluded_after,
        "lease_ttl_s": ttl if deployment.spec.stack == "embedded" else None,
        "failed_requests": len(failed),
        "responses_after_kill": len(after_kill),
        "errors_window_s": errors_window,
        "asserted": strict,
    }
    reasons: list[str] = []
    if strict:
        if failed:
            reasons.append(f"{len(failed)} of {requests} requests failed after the kill ({failed[0].error})")
        if excluded_after is None or excluded_after > 2 * ttl:
            shown = "never" if excluded_after is None else f"after {excluded_after:.2f} s"
            reasons.append(f"the dead instance left dispatch {shown}, not within 2 TTLs ({2 * ttl:g} s)")
        reasons += list(check.reasons)
        verdict = FAILED if reasons else PASSED
    else:
        # Nothing asserted: the figures are the result, and the summary line carries them.
        shown = "not within the watch" if excluded_after is None else f"{excluded_after * 1000:.0f} ms after the kill"
        reasons = [f"{len(failed)} of {requests} requests failed", f"out of dispatch {shown}"]
        verdict = REPORTED
    burst = Burst(name=model, model=model, expected=frozenset(survivors), traffic=traffic, check=check,
                  expected_shares={i: 1 / len(survivors) for i in survivors})
    return ScenarioResult(
        scenario="failover", stack=deployment.spec.stack,
        params={"requests": requests, "concurrency": concurrency, "kill_after": kill_after, "victim": victim, "model": model,
                "signal": signal.Signals(sig).name},
        workers=_workers(deployment.target()), bursts=[burst], verdict=verdict, reasons=reasons,
        wall_seconds=time.monotonic() - started, extra=extra,
    )


def drain(
    deployment: Deployment,
    *,
    victim: int = 1,
    requests: int = 20,
    concurrency: int = 4,
    model: str | None = None,
    resume: bool = True,
    progress: bool = False,
) -> ScenarioResult:
    """Drain worker `victim` (it deregisters but keeps serving), then check it receives nothing.

    With `resume` the worker registers again afterwards, so the deployment can be reused.
    """
    if not isinstance(deployment, Deployment) or deployment.spec.stack != "embedded":
        raise ConfigError("drain needs an embedded deployment embedlab launched (it calls the worker's /drain)")
    model, serving = _single_model(deployment, model)
    expected = frozenset(i for i in serving if i != victim)
    target = deployment.target()
    system_url = deployment.system_urls[victim]
    started = time.monotonic()
    with clients.client(timeout=10.0) as client:
        client.post(f"{system_url}/drain").raise_for_status()
    try:
        burst = run_sync(
            _run_burst(
                target, name=f"{model} (worker {victim} drained)", model=model, expected=expected, requests=requests,
                concurrency=concurrency, inputs=default_inputs(requests), min_total_delta=requests, weights=None,
                fairness_alpha=None, settle_seconds=0.0, timeout=60.0, progress=progress,
            )
        )
    finally:
        if resume:
            with clients.client(timeout=30.0) as client:
                client.post(f"{system_url}/resume").raise_for_status()
    verdict, reasons = _verdict([burst], exact_total=True)
    return ScenarioResult(
        scenario="drain", stack=deployment.spec.stack, params={"requests": requests, "victim": victim, "model": model},
        workers=_workers(target), bursts=[burst], verdict=verdict, reasons=reasons, wall_seconds=time.monotonic() - started,
    )
