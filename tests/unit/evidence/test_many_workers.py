"""Snapshots of many workers: concurrent and bounded, a connection kept per worker, the parse
cut to the lines the query needs."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from embedlab import MetricNotFoundError, MetricQuery, ScrapeError
from embedlab.evidence.clients import PerOriginTransport, scrape_client
from embedlab.evidence.metrics import _relevant, _series, ascrape_all, parse_snapshot

LABELS = ["dynamo_namespace", "dynamo_component", "dynamo_endpoint", "model", "worker_id"]


def exposition(requests: float = 7) -> str:
    """A worker's full exposition: the counter among the other families a hash worker exports."""
    registry = CollectorRegistry()
    Counter("dynamo_component_requests", "r", LABELS, registry=registry).labels(
        "ns", "w0", "generate", 'a "quoted" } model', "1"
    ).inc(requests)
    Counter("dynamo_component_errors", "e", LABELS, registry=registry).labels(
        "ns", "w0", "generate", "m", "1"
    ).inc(2)
    histogram = Histogram("dynamo_component_request_duration_seconds", "d", ["model"], registry=registry)
    histogram.labels("m").observe(0.01)
    Gauge("dynamo_component_inflight_requests", "i", ["model"], registry=registry).labels("m").set(3)
    return generate_latest(registry).decode()


@pytest.mark.parametrize(
    "selector",
    [
        "dynamo_component_requests_total",
        "dynamo_component_requests",  # the family's name: its _total samples
        'dynamo_component_requests_total{model="a \\"quoted\\" } model"}',
        "dynamo_component_request_duration_seconds_count",
        "dynamo_component_inflight_requests",
        "dynamo_component_errors_total",
    ],
)
def test_the_relevant_lines_select_what_the_whole_text_selects(selector: str) -> None:
    text, query = exposition(), MetricQuery.parse(selector)
    whole, _ = _series(text, url="u", query=query, worker_index=None)
    assert whole, "the query selects something in the full text"
    # From the cut text alone, not through the fallback to the whole text.
    assert _series(_relevant(text, query), url="u", query=query, worker_index=None)[0] == whole
    assert parse_snapshot(text, url="u", query=query).series == tuple(whole)


def test_a_text_without_the_counter_still_says_why() -> None:
    with pytest.raises(ScrapeError, match="did not answer with Prometheus text"):
        parse_snapshot("<html>{not metrics}</html> 1 2 3", url="u")
    with pytest.raises(MetricNotFoundError, match="the metric is missing"):
        parse_snapshot(exposition(), url="u", query=MetricQuery.parse("vllm:request_success_total"))
    with pytest.raises(MetricNotFoundError, match="no sample carries labels"):
        parse_snapshot(exposition(), url="u", query=MetricQuery.parse('dynamo_component_requests{model="b"}'))


def test_a_snapshot_bounds_the_scrapes_in_flight_and_raises_the_first_failure_by_index() -> None:
    in_flight, most = 0, 0

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight, most
        index = int(request.url.host.removeprefix("w").removesuffix(".test"))
        in_flight += 1
        most = max(most, in_flight)
        # The later failure answers first: the error raised must still be worker 3's.
        await asyncio.sleep(0.02 if index == 3 else 0.001)
        in_flight -= 1
        if index in (3, 7):
            return httpx.Response(503)
        return httpx.Response(200, content=exposition(index).encode())

    urls = [f"http://w{i}.test" for i in range(20)]

    async def run(limit: int, take: list[str]) -> list[float]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            found = await ascrape_all(take, client=client, limit=limit)
        return [s.value for s in found]

    healthy = [u for i, u in enumerate(urls) if i not in (3, 7)]
    assert asyncio.run(run(4, healthy)) == [float(i) for i in range(20) if i not in (3, 7)]
    assert most == 4, "four at once: bounded, and concurrent"
    with pytest.raises(ScrapeError) as err:
        asyncio.run(run(20, urls))
    assert err.value.worker_index == 3


def test_each_worker_keeps_one_connection_across_snapshots() -> None:
    """Real loopback servers: three snapshots of eight workers open eight connections, not 24."""

    async def run() -> tuple[list[set[int]], int]:
        peers: list[set[int]] = [set() for _ in range(8)]
        runners, urls = [], []
        for index in range(8):

            async def metrics(request: web.Request, index: int = index) -> web.Response:
                peers[index].add(request.transport.get_extra_info("peername")[1])  # type: ignore[union-attr]
                return web.Response(text=exposition(index))

            app = web.Application()
            app.router.add_get("/metrics", metrics)
            runner = web.AppRunner(app)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            runners.append(runner)
            urls.append(f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}")  # type: ignore[union-attr]
        try:
            async with scrape_client() as client:
                for _ in range(3):
                    assert [s.value for s in await ascrape_all(urls, client=client)] == list(range(8))
                transport = client._transport
                assert isinstance(transport, PerOriginTransport)
                pools = len(transport._pools)
        finally:
            for runner in runners:
                await runner.cleanup()
        return peers, pools

    peers, pools = asyncio.run(run())
    assert [len(p) for p in peers] == [1] * 8, "one kept-alive connection per worker"
    assert pools == 8
