"""DispatchCheck's payload logic without servers: httpx.MockTransport over private registries."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest

from embedlab import (
    CheckFailedError,
    CounterResetError,
    DispatchCheck,
    MetricNotFoundError,
    MetricQuery,
    ScrapeError,
    scrape,
)
from embedlab.evidence.traffic import asend_burst

LABELS = ["dynamo_namespace", "dynamo_component", "dynamo_endpoint", "model", "worker_id"]


class FakePool:
    """Workers with real prometheus_client counters, and a router function to misbehave with."""

    def __init__(self, models: list[str]) -> None:
        self.models = models
        self.registries = [CollectorRegistry() for _ in models]
        self.counters = []
        for i, (registry, model) in enumerate(zip(self.registries, models)):
            counter = Counter("dynamo_component_requests", "requests", LABELS, registry=registry)
            self.counters.append(counter.labels("ns", f"w{i}", "generate", model, f"id{i}"))
        self.events: list[str] = []
        self.route: Callable[[str, int], int] = lambda model, n: models.index(model)
        self.sent = 0

    @property
    def urls(self) -> list[str]:
        return [f"http://worker{i}.test" for i in range(len(self.models))]

    def handler(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            index = int(request.url.host.removeprefix("worker").removesuffix(".test"))
            self.events.append(f"scrape{index}")
            return httpx.Response(200, content=generate_latest(self.registries[index]))
        body = json.loads(request.content)
        index = self.route(body["model"], self.sent)
        self.sent += 1
        self.counters[index].inc()
        self.events.append(f"request->{index}")
        data = [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2]}]
        return httpx.Response(
            200,
            json={
                "object": "list",
                "data": data,
                "model": body["model"],
                "usage": {"prompt_tokens": 1, "total_tokens": 1},
            },
        )

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=httpx.MockTransport(self.handler))

    def burst(self, model: str, n: int, expected: set[int], **check_options: object) -> DispatchCheck:
        async def run() -> DispatchCheck:
            async with self.client() as client:
                check = DispatchCheck(self.urls, expected, raise_on_failure=False, **check_options)  # type: ignore[arg-type]
                await check.abegin(client)
                await asend_burst("http://frontend.test", model, n, concurrency=4, client=client)
                await check.aend(client)
                return check

        return asyncio.run(run())


def test_1_baseline_is_taken_once_before_the_first_request() -> None:
    pool = FakePool(["a", "b"])
    # The very first request of burst b leaks onto worker 0; the seed's baseline, taken
    # after the first response, would have absorbed it.
    pool.route = lambda model, n: 0 if n == 0 else pool.models.index(model)
    check = pool.burst("b", 10, {1})
    first_request = pool.events.index(next(e for e in pool.events if e.startswith("request")))
    assert pool.events[:first_request] == ["scrape0", "scrape1"], (
        "exactly one baseline round, before any request"
    )
    assert check.result is not None and not check.result.passed
    assert check.result.rows[0].delta == 1


def test_2_delta_is_taken_after_the_last_request() -> None:
    pool = FakePool(["a", "b"])
    check = pool.burst("a", 7, {0})
    last_request = max(i for i, e in enumerate(pool.events) if e.startswith("request"))
    assert pool.events[last_request + 1 :] == ["scrape0", "scrape1"]
    assert check.result is not None and check.result.rows[0].delta == 7


def test_3_expected_indices_pass() -> None:
    pool = FakePool(["a", "b"])
    assert pool.burst("a", 10, {0}).result.passed  # type: ignore[union-attr]
    assert pool.burst("b", 10, {1}).result.passed  # type: ignore[union-attr]


def test_4_the_seeds_leak_example_fails_with_the_table() -> None:
    pool = FakePool(["a", "b"])
    pool.burst("a", 10, {0})
    # During burst B, worker A takes +3 and worker B +10.
    pool.route = lambda model, n: 0 if n in (10, 11, 12) else pool.models.index(model)
    check = pool.burst("b", 13, {1})
    result = check.result
    assert result is not None and not result.passed
    assert [r.delta for r in result.rows] == [3, 10]
    with pytest.raises(CheckFailedError) as err:
        result.raise_for_failure()
    text = str(err.value)
    assert "traffic leaked onto worker 0 (+3)" in text
    assert "before" in text and "after" in text and "delta" in text and "expected" in text


def test_5_min_total_delta_is_enforced() -> None:
    pool = FakePool(["a", "b"])
    check = pool.burst("a", 4, {0}, min_total_delta=5)
    assert check.result is not None and not check.result.passed
    assert "below the minimum 5" in check.result.reasons[0]
    assert pool.burst("a", 5, {0}, min_total_delta=5).result.passed  # type: ignore[union-attr]


def test_6_unreachable_worker_and_missing_metric_name_the_url() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with httpx.Client(transport=httpx.MockTransport(refuse)) as client:
        with pytest.raises(ScrapeError, match="http://gone.test:9/metrics"):
            scrape("http://gone.test:9", client=client)
    empty = CollectorRegistry()
    Counter("something_else", "x", registry=empty).inc()
    transport = httpx.MockTransport(lambda r: httpx.Response(200, content=generate_latest(empty)))
    with httpx.Client(transport=transport) as client:
        with pytest.raises(
            MetricNotFoundError, match=r"http://w.test/metrics has no dynamo_component_requests_total"
        ):
            scrape("http://w.test", client=client)


def test_every_metrics_error_carries_the_worker_it_came_from() -> None:
    """Set where the scrape knows the index: callers read `worker_index`, never the message."""
    registry = CollectorRegistry()
    Counter("dynamo_component_requests", "r", registry=registry).inc()
    good = generate_latest(registry)

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.host == "gone.test":
            raise httpx.ConnectError("connection refused", request=request)
        if request.url.host == "sick.test":
            return httpx.Response(503)
        if request.url.host == "other.test":
            return httpx.Response(200, content=b"other_total 1\n")
        return httpx.Response(200, content=good)

    with httpx.Client(transport=httpx.MockTransport(answer)) as client:
        for index, (host, kind) in enumerate(
            [("gone.test", ScrapeError), ("sick.test", ScrapeError), ("other.test", MetricNotFoundError)], 1
        ):
            urls = ["http://w.test"] * index + [f"http://{host}"]
            with pytest.raises(kind) as err:
                DispatchCheck(urls, {0}, client=client).begin()
            assert err.value.worker_index == index, err.value
            assert str(err.value).startswith(f"worker {index}: ")
        with pytest.raises(ScrapeError) as bare:
            scrape("http://gone.test", client=client)
        assert bare.value.worker_index is None, "a bare scrape knows no worker"


def test_counter_reset_raises_naming_the_worker() -> None:
    pool = FakePool(["a", "b"])

    async def run() -> None:
        async with pool.client() as client:
            check = DispatchCheck(pool.urls, {0}, raise_on_failure=False)
            pool.counters[1].inc(5)
            await check.abegin(client)
            # Worker 1 restarts: a fresh registry, its counter back at 0.
            pool.registries[1] = CollectorRegistry()
            Counter("dynamo_component_requests", "r", LABELS, registry=pool.registries[1]).labels(
                "ns", "w1", "generate", "b", "id1"
            )
            with pytest.raises(CounterResetError, match="worker 1") as err:
                await check.aend(client)
            assert err.value.worker_index == 1

    asyncio.run(run())


def test_label_filter_and_family_name_gotcha() -> None:
    registry = CollectorRegistry()
    counter = Counter("http_requests", "r", ["handler", "status"], registry=registry)
    counter.labels("/v1/embeddings", "200").inc(4)
    counter.labels("/v1/embeddings", "400").inc(1)
    counter.labels("/health", "200").inc(100)
    transport = httpx.MockTransport(lambda r: httpx.Response(200, content=generate_latest(registry)))
    with httpx.Client(transport=transport) as client:
        query = MetricQuery.parse('http_requests_total{handler="/v1/embeddings"}')
        assert scrape("http://w.test", metric=query, client=client).value == 5
        assert (
            scrape(
                "http://w.test",
                metric='http_requests_total{handler="/v1/embeddings",status="200"}',
                client=client,
            ).value
            == 4
        )
        # Asked by the family name, as prometheus_client reports it: still the _total samples.
        assert scrape("http://w.test", metric="http_requests", client=client).value == 105
        # http_requests_total is one of the counters whose series appear at their first
        # increment (vLLM's, Infinity's): none with these labels yet reads 0.
        assert (
            scrape("http://w.test", metric='http_requests_total{handler="/nope"}', client=client).value == 0
        )
        with pytest.raises(MetricNotFoundError, match="no sample carries labels"):
            strict = MetricQuery(name="http_requests_total", labels=(("handler", "/nope"),))
            scrape("http://w.test", metric=strict, client=client)


def test_fairness_p_value_flags_a_skewed_split() -> None:
    pool = FakePool(["m", "m"])
    pool.route = lambda model, n: 0 if n % 10 else 1  # 90/10
    check = pool.burst("m", 60, {0, 1}, weights=[1, 1], fairness_alpha=0.001)
    assert check.result is not None and not check.result.passed
    assert check.result.p_value is not None and check.result.p_value < 1e-6
    pool.route = lambda model, n: n % 2  # 50/50
    fair = pool.burst("m", 60, {0, 1}, weights=[1, 1], fairness_alpha=0.001)
    assert fair.result is not None and fair.result.passed and fair.result.p_value == 1.0


def test_sync_context_manager_raises_with_the_table() -> None:
    registry = CollectorRegistry()
    counter = Counter("dynamo_component_requests", "r", registry=registry)
    transport = httpx.MockTransport(lambda r: httpx.Response(200, content=generate_latest(registry)))
    with httpx.Client(transport=transport) as client:
        with pytest.raises(CheckFailedError, match="no traffic reached worker 0"):
            with DispatchCheck(["http://w.test"], {0}, client=client):
                pass  # a burst that sent nothing
        with DispatchCheck(["http://w.test"], {0}, client=client) as check:
            counter.inc()
        assert check.result is not None and check.result.passed


def test_placement_by_attribution_judges_the_responses_and_keeps_the_baseline() -> None:
    from embedlab.evidence.metrics import DEFAULT_METRIC, Snapshot
    from embedlab.evidence.target import Target
    from embedlab.evidence.traffic import BurstResult, RequestRecord
    from embedlab.scenarios.burst import _attributed

    target = Target("http://f", ("http://w0", "http://w1"), ("a", "b"), endpoints=("ns.a.gen", "ns.b.gen"))
    records = [
        RequestRecord(0, "a", 0.0, 0.01, 200, "ns.a.gen/1", 1),
        RequestRecord(
            1, "a", 0.0, 0.01, 404, "ns.b.gen/2", 1, "HTTP 404"
        ),  # leaked: the wrong worker said no
        RequestRecord(2, "a", 0.0, 0.01, 503, None, 1, "HTTP 503"),  # named no worker: failed anyway
    ]
    served = _attributed(target, BurstResult("a", 3, 1, records, 0.1))
    assert served == {0: 1, 1: 1}
    unnamed = [RequestRecord(0, "a", 0.0, 0.01, 200, None, 1)]
    assert _attributed(target, BurstResult("a", 1, 1, unnamed, 0.1)) is None, "an answer naming no worker"
    check = DispatchCheck(["http://w0", "http://w1"], {0}, min_total_delta=3, raise_on_failure=False)
    check.before = [Snapshot(u, DEFAULT_METRIC, (((), 7.0),)) for u in check.system_urls]
    result = check.judge_attributed(served)
    assert [(r.before, r.after, r.delta) for r in result.rows] == [(7.0, 8.0, 1.0), (7.0, 8.0, 1.0)]
    assert not result.passed and any("worker 1" in r for r in result.reasons), result.reasons


def test_the_routers_own_counts_beside_the_workers_agree_or_are_a_finding() -> None:
    from embedlab.evidence.counters import evaluate
    from embedlab.evidence.metrics import DEFAULT_METRIC, Snapshot
    from embedlab.evidence.traffic import BurstResult
    from embedlab.scenarios.result import Burst

    def snaps(*values: float) -> list[Snapshot]:
        return [Snapshot(f"http://w{i}", DEFAULT_METRIC, (((), v),)) for i, v in enumerate(values)]

    check = evaluate(["http://w0", "http://w1"], snaps(0, 0), snaps(20, 20), {0, 1})
    burst = Burst("m", "m", frozenset({0, 1}), BurstResult("m", 40, 4, [], 0.1), check=check)
    assert burst.router_disagreement() is None, "no router counts: nothing to compare"
    burst.router_deltas = {0: 20.0, 1: 20.0}
    assert burst.router_disagreement() is None
    burst.router_deltas = {0: 20.0, 1: 23.0}  # e.g. retries counted twice
    said = burst.router_disagreement()
    assert said is not None and "worker 1: router 23, worker 20" in said
