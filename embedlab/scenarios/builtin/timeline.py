"""Watching a deployment through a fault: steady traffic, every worker's counter, the dispatch list.

A fault scenario (`cluster.py`) runs steady traffic at `RATE` requests per second while a
`Watch` polls every worker's counter and the frontend's dispatch list every `POLL_S`; the
timeline it keeps shows each worker's share stop and resume, and when an instance left
dispatch and came back.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx

from ...cluster.deployment import Deployment
from ...cluster.events import Event
from ...errors import MetricsError
from ...evidence import clients
from ...evidence.metrics import ascrape
from ...evidence.target import Target
from ...evidence.traffic import BurstResult, asend_burst, probes
from .cluster_figures import RATE, CounterSample

__all__ = [
    "DISPATCH_TIMEOUT_S",
    "POLL_S",
    "STEADY_REQUEST_TIMEOUT_S",
    "Watch",
    "events_since",
    "served_between",
    "status_codes",
    "steady_traffic",
]

POLL_S = 0.25  # how often every worker's counter is read
# The read of the frontend's dispatch list: its own host is never cut off, so only load slows it.
DISPATCH_TIMEOUT_S = 5.0
# The client's wait for one request of the steady traffic: one held past it by a fault counts as
# failed (status 0), and the traffic goes on (the frontend's own wait is defaults.REQUEST_TIMEOUT_S).
STEADY_REQUEST_TIMEOUT_S = 30.0


class Watch:
    """Polls every worker's counter and the frontend's dispatch list while traffic runs."""

    def __init__(self, deployment: Deployment, origin: float) -> None:
        self.deployment = deployment
        self.origin = origin
        self.samples: list[CounterSample] = []
        self.dispatch: list[tuple[float, set[str]]] = []
        self.done = asyncio.Event()

    async def run(self) -> None:
        target = self.deployment.target()
        # A keep-alive connection per worker: every poll reads them all.
        async with clients.scrape_client(timeout=POLL_S * 0.9) as client:
            await asyncio.gather(self._poll_counters(client, target), self._poll_dispatch(client))

    async def _poll_counters(self, client: httpx.AsyncClient, target: Target) -> None:
        while not self.done.is_set():
            at = time.perf_counter() - self.origin
            values = await asyncio.gather(*(self._read(client, url, target) for url in target.system_urls))
            self.samples += [CounterSample(at, i, v) for i, v in enumerate(values)]
            await self._tick()

    async def _poll_dispatch(self, client: httpx.AsyncClient) -> None:
        """The frontend's list, in a loop of its own: it answers slowly on a loaded box (over a
        second with 128 requests in flight: docs/benchmarks.md), and a read cut at the counters'
        0.225 s would lose every sample of a partition's outage. Host 0 is never cut off, so a slow
        answer is an answer."""
        while not self.done.is_set():
            at = time.perf_counter() - self.origin
            try:
                response = await client.get(self.deployment.health_url, timeout=DISPATCH_TIMEOUT_S)
                self.dispatch.append((at, self.deployment.read_dispatchable(response.json())))
            except (httpx.HTTPError, ValueError):
                pass
            await self._tick()

    async def _tick(self) -> None:
        try:
            await asyncio.wait_for(self.done.wait(), POLL_S)
        except TimeoutError:
            pass

    @staticmethod
    async def _read(client: httpx.AsyncClient, url: str, target: Target) -> float | None:
        try:
            return (await ascrape(url, metric=target.metric, client=client, timeout=POLL_S * 0.9)).value
        except MetricsError:
            return None

    def left_dispatch(self, endpoint: str, after: float) -> float | None:
        """When `endpoint` first went missing from the frontend's list, `after` or later."""
        return next((at for at, listed in self.dispatch if at >= after and endpoint not in listed), None)

    def back_in_dispatch(self, endpoint: str, after: float) -> float | None:
        """When `endpoint` was listed again, `after` or later."""
        return next((at for at, listed in self.dispatch if at >= after and endpoint in listed), None)

    def served_again(self, worker: int, after: float) -> float | None:
        """When worker's counter first moved again (or restarted and moved), `after` or later."""
        previous = None
        for sample in self.samples:
            if sample.worker != worker or sample.value is None:
                continue
            if (
                sample.at_s >= after
                and previous is not None
                and sample.value != previous
                and sample.value > 0
            ):
                return sample.at_s
            previous = sample.value
        return None


def steady_traffic(
    deployment: Deployment, model: str, seconds: float, concurrency: int, progress: bool
) -> Callable[[], Any]:
    n = max(1, int(RATE * seconds))
    return lambda: asend_burst(
        deployment.frontend_url,
        model,
        n,
        concurrency=concurrency,
        inputs=probes().take(n),
        timeout=STEADY_REQUEST_TIMEOUT_S,
        progress=progress,
        rate=RATE,
    )


def status_codes(traffic: BurstResult) -> dict[str, int]:
    return dict(Counter(str(r.status) for r in traffic.failures))


def served_between(traffic: BurstResult, start: float, end: float) -> int:
    return sum(1 for r in traffic.records if r.ok and start <= r.started + r.latency <= end)


def events_since(deployment: Deployment, origin: float, since: int) -> list[Event]:
    return [e.after(origin) for e in deployment.events[since:]]
