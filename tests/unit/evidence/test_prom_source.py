"""Counters through Prometheus, without a Prometheus: its API's answers as fixtures, its
transport mocked (httpx.MockTransport), and the freshness rule on plain samples."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import httpx
import pytest

from embedlab.errors import ConfigError, ScrapeError
from embedlab.evidence import prom_source
from embedlab.evidence.metrics import MetricQuery
from embedlab.evidence.prom_source import (
    PrometheusCounters,
    PromSample,
    discover_workers,
    discovered_text,
    parse_duration,
    parse_label_selector,
    parse_samples,
    parse_targets,
    prometheus_counters,
    stale_workers,
)
from embedlab.evidence.target import attach
from embedlab.scenarios.plan import ScenarioPlan

PROM = "http://prom:9090"
METRIC = MetricQuery.parse("dynamo_component_requests_total")


def target(
    instance: str, *, model: str | None = None, health: str = "up", job: str = "workers", **labels: str
) -> dict[str, Any]:
    """One active target as /api/v1/targets writes it (file_sd labels kept as target labels)."""
    own = {"job": job, "instance": instance, **labels, **({"model": model} if model else {})}
    return {
        "discoveredLabels": {"__address__": instance, "__scheme__": "http", **labels},
        "labels": own,
        "scrapePool": job,
        "scrapeUrl": f"http://{instance}/metrics",
        "globalUrl": f"http://{instance}/metrics",
        "lastError": "",
        "lastScrape": "2026-12-07T06:00:00.000Z",
        "lastScrapeDuration": 0.002,
        "health": health,
        "scrapeInterval": "1s",
        "scrapeTimeout": "1s",
    }


OPERATOR = {
    "nvidia_com_dynamo_graph_deployment_name": "embed",
    "nvidia_com_dynamo_component_type": "worker",
    "nvidia_com_dynamo_namespace": "lab",
}
TARGETS = {
    "status": "success",
    "data": {
        "activeTargets": [
            target("127.0.0.1:9002", model="model-b", **OPERATOR),
            target("127.0.0.1:9001", model="model-a", **OPERATOR),
            target("127.0.0.1:9003", model="model-a", health="down", **OPERATOR),
            target("127.0.0.1:9100", job="frontend", nvidia_com_dynamo_component_type="frontend"),
        ],
        "droppedTargets": [],
    },
}


def matrix(*series: tuple[dict[str, str], list[tuple[float, str]]]) -> dict[str, Any]:
    return {
        "status": "success",
        "data": {"resultType": "matrix", "result": [{"metric": m, "values": v} for m, v in series]},
    }


def test_a_label_selector_takes_the_operators_spelling_and_prometheus_one() -> None:
    found = parse_label_selector('{nvidia.com/dynamo-component-type="worker", job=~"work.*",x!="y"}')
    assert [(m.name, m.op, m.value) for m in found] == [
        ("nvidia.com/dynamo-component-type", "=", "worker"),
        ("job", "=~", "work.*"),
        ("x", "!=", "y"),
    ]
    assert found[0].promql() == 'nvidia_com_dynamo_component_type="worker"'
    assert found[1].matches("workers") and not found[1].matches("frontend")
    with pytest.raises(ConfigError, match="label selector"):
        parse_label_selector("job=workers")


def test_durations_read_as_prometheus_writes_them() -> None:
    assert parse_duration("1s") == 1 and parse_duration("1m30s") == 90 and parse_duration("500ms") == 0.5
    with pytest.raises(ConfigError):
        parse_duration("1 second")


def test_targets_are_parsed_and_matched_by_either_spelling_or_the_pod_labels() -> None:
    targets = parse_targets(TARGETS)
    assert [t.key for t in targets][:2] == [("workers", "127.0.0.1:9002"), ("workers", "127.0.0.1:9001")]
    assert targets[0].scrape_interval_s == 1 and targets[0].scrape_url == "http://127.0.0.1:9002/metrics"
    selector = parse_label_selector('nvidia.com/dynamo-component-type="worker"')
    assert [t.instance for t in targets if t.matches(selector)] == [
        "127.0.0.1:9002", "127.0.0.1:9001", "127.0.0.1:9003",
    ]  # fmt: skip
    # Kubernetes service discovery: the pod's labels only among the discovered ones.
    pod = parse_targets(
        {
            "status": "success",
            "data": {
                "activeTargets": [
                    {
                        "labels": {"job": "k8s", "instance": "10.0.0.1:9090"},
                        "discoveredLabels": {
                            "__meta_kubernetes_pod_label_nvidia_com_dynamo_component_type": "worker"
                        },
                        "scrapeUrl": "http://10.0.0.1:9090/metrics",
                        "health": "up",
                        "scrapeInterval": "15s",
                    }
                ]
            },
        }
    )
    assert pod[0].matches(selector) and pod[0].scrape_interval_s == 15


def test_discovery_keeps_healthy_matches_in_model_order_and_says_what_it_found() -> None:
    found = discover_workers(
        PROM, 'nvidia.com/dynamo-component-type="worker"', targets=parse_targets(TARGETS)
    )
    assert [(w.model, w.target.instance) for w in found] == [
        ("model-a", "127.0.0.1:9001"),
        ("model-b", "127.0.0.1:9002"),
    ]
    text = discovered_text(PROM, "prometheus:x", found)
    assert "worker 0: model-a (from label model); http://127.0.0.1:9001/metrics" in text
    assert "nvidia_com_dynamo_component_type=worker" in text
    with pytest.raises(ConfigError, match="no healthy target"):
        discover_workers(PROM, 'nvidia.com/dynamo-namespace="elsewhere"', targets=parse_targets(TARGETS))


def test_a_model_not_on_the_target_is_probed_from_the_counters_model_label(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plain = parse_targets({"status": "success", "data": {"activeTargets": [target("h:1"), target("h:2")]}})
    answer = matrix(
        ({"job": "workers", "instance": "h:1", "model": "m1"}, [(1.0, "3")]),
        ({"job": "workers", "instance": "h:2", "model": "m2"}, [(1.0, "0")]),
    )
    monkeypatch.setattr(prom_source, "_get_json", lambda url, params=None, **_: answer)
    found = discover_workers(PROM, 'job="workers"', targets=plain)
    assert [(w.model, w.model_from) for w in found] == [
        ("m1", "the counter's model label"),
        ("m2", "the counter's model label"),
    ]


def test_a_range_query_gives_each_series_latest_sample_at_its_scrape_time() -> None:
    found = parse_samples(matrix(({"job": "w", "instance": "a", "x": "1"}, [(10.0, "1"), (11.0, "4")])))
    assert found == [
        PromSample(labels=(("instance", "a"), ("job", "w"), ("x", "1")), value=4.0, timestamp=11.0)
    ]
    with pytest.raises(ScrapeError, match="did not succeed"):
        parse_samples({"status": "error", "errorType": "bad_data", "error": "parse error"})


def test_a_worker_is_fresh_only_when_every_target_of_it_was_scraped_after_the_moment() -> None:
    samples = [
        PromSample((("instance", "a"), ("job", "w")), 1, 10.5),
        PromSample((("instance", "b"), ("job", "w")), 1, 9.9),
        PromSample((("instance", "c"), ("job", "w")), 1, 10.2),
    ]
    workers = [(("w", "a"),), (("w", "b"),), (("w", "a"), ("w", "c")), (("w", "d"),)]
    assert stale_workers(samples, workers, newer_than=10.0) == [1, 3]
    assert stale_workers(samples, workers, newer_than=10.3) == [1, 2, 3]


def test_workers_are_found_among_the_targets_by_scrape_url_or_instance() -> None:
    counters = prometheus_counters(
        PROM,
        ["http://127.0.0.1:9001", "http://127.0.0.1:9002/metrics+http://127.0.0.1:9003"],
        targets=parse_targets(TARGETS),
    )
    assert counters.workers == (
        (("workers", "127.0.0.1:9001"),),
        (("workers", "127.0.0.1:9002"), ("workers", "127.0.0.1:9003")),
    )
    assert counters.scrape_interval_s == 1 and counters.max_wait_s == pytest.approx(3.05)
    query = counters.query(METRIC, [0, 1])
    assert query.startswith(
        'dynamo_component_requests_total{job=~"workers",instance=~"127\\\\.0\\\\.0\\\\.1:9001|'
    )
    assert query.endswith("}[10s]")
    with pytest.raises(ConfigError, match="scrapes no target for worker 0"):
        prometheus_counters(PROM, ["http://elsewhere:1"], targets=parse_targets(TARGETS))


def _mocked(stamp: Any) -> tuple[httpx.AsyncClient, list[str]]:
    """A client whose Prometheus answers each worker's counter (3 and 5) scraped at `stamp()`."""
    asked: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        query = request.url.params["query"]
        asked.append(query)
        name = "up" if query.startswith("up{") else "dynamo_component_requests_total"
        when = stamp()
        return httpx.Response(
            200,
            json=matrix(
                ({"__name__": name, "job": "w", "instance": "a"}, [(when, "1" if name == "up" else "3")]),
                ({"__name__": name, "job": "w", "instance": "b"}, [(when, "1" if name == "up" else "5")]),
            ),
        )

    return httpx.AsyncClient(transport=httpx.MockTransport(answer)), asked


def test_a_read_waits_for_a_scrape_after_it_was_asked_and_keeps_its_time() -> None:
    counters = PrometheusCounters(PROM, ((("w", "a"),), (("w", "b"),)), scrape_interval_s=0.5)
    client, asked = _mocked(time.time)  # Prometheus scrapes as it is asked: fresh after the margin

    async def read() -> list[Any]:
        async with client:
            return await counters.aread(
                ["ua", "ub"], [0, 1], METRIC, moment="before the burst", client=client
            )

    started = time.time()
    found = asyncio.run(read())
    assert [s.value for s in found] == [3, 5] and [s.url for s in found] == ["ua", "ub"]
    assert all(s.taken_at > started + counters.margin_s for s in found)
    assert len(asked) >= 2  # the first answer was not yet newer than the margin
    assert counters.reads == 1 and 0 < counters.waited_s < 1
    assert "at its 0.5 s scrape interval" in counters.sentence() and "over 1 snapshots" in counters.sentence()


def test_a_scrape_that_does_not_come_makes_the_read_fail_naming_the_worker_as_stale() -> None:
    counters = PrometheusCounters(PROM, ((("w", "a"),), (("w", "b"),)), scrape_interval_s=0.1)
    old = time.time() - 5
    client, _ = _mocked(lambda: old)

    async def read() -> list[Any]:
        async with client:
            return await counters.aread(["ua", "ub"], [0, 1], METRIC, moment="after the burst", client=client)

    with pytest.raises(
        ScrapeError,
        match=r"no scrape of worker 0 \(a\) through Prometheus .* after the burst within 0\.\d s .*stale",
    ) as caught:
        asyncio.run(read())
    assert caught.value.worker_index == 0 and caught.value.url == "ua"
    assert "last sample was scraped 5." in str(caught.value)


def test_the_busy_schedule_reads_through_prometheus_aligned_and_a_stale_read_judges_nothing() -> None:
    from embedlab.scenarios.schedule import _Reader

    found = attach("http://f:1", ["http://a:1", "http://b:1"], counters=_Stale())

    async def reads() -> tuple[bool, Any]:
        async with httpx.AsyncClient() as client:
            reader = _Reader(found, ["m", "m"], client)
            cut = await reader.read_or_stale()  # inside a block: the block is cut, nothing judged
            with pytest.raises(ScrapeError, match="worker 1"):
                await reader.read()  # from nothing in flight: the check ends inconclusive
            return reader.aligned, (cut, reader.stale, reader.unread())

    aligned, (cut, stale, unread) = asyncio.run(reads())
    assert aligned and cut is None
    assert stale == ["no scrape of worker 1 (b) at a window's boundary: stale"]
    assert len(unread) == 2 and all(math.isnan(d) for d in unread)


def test_discovery_needs_the_prometheus_url_and_finds_what_system_urls_would_say() -> None:
    with pytest.raises(ConfigError, match="give it too"):
        ScenarioPlan(scenario="same-model", frontend_url="http://f:1", discover='prometheus:job="w"')
    with pytest.raises(ConfigError, match="leave out system_urls"):
        ScenarioPlan(
            scenario="same-model",
            frontend_url="http://f:1",
            system_urls=("http://a:1",),
            prometheus_url=PROM,
            discover='prometheus:job="w"',
        )
    with pytest.raises(ConfigError, match="prometheus:SELECTOR"):
        ScenarioPlan(
            scenario="same-model", frontend_url="http://f:1", prometheus_url=PROM, discover="consul:x"
        )
    plan = ScenarioPlan(
        scenario="same-model", frontend_url="http://f:1", prometheus_url=PROM, discover='prometheus:job="w"'
    )
    assert plan.attached


class _Stale:
    """A counter source whose every read finds worker 1's scrape stale."""

    async def aread(
        self, urls: Any, indices: Any, metric: Any = None, *, moment: str = "", client: Any = None
    ) -> Any:
        raise ScrapeError(f"no scrape of worker 1 (b) {moment}: stale", url=urls[1], worker_index=1)

    windows = ""

    def sentence(self) -> str:
        return "counters read through Prometheus"

    def fits_s(self) -> tuple[float, float]:
        return 0.0, 1.0  # one piece a window


def test_a_stale_scrape_makes_the_burst_inconclusive_naming_the_worker_never_judged() -> None:
    from embedlab.scenarios.burst import BurstSpec, burst_of, judge
    from embedlab.verdicts import Verdict

    found = attach("http://127.0.0.1:9", ["http://a:1", "http://b:1"], counters=_Stale())
    spec = BurstSpec(name="m", model="m", expected=frozenset({0, 1}), requests=1, quiet_s=0, timeout=2)
    burst = burst_of(found, spec)
    assert burst.check is None and burst.unread is not None
    assert burst.inconclusive == (
        "worker 1 could not be read before the burst: no scrape of worker 1 (b) before the burst: stale"
    )
    assert judge([burst], exact_total=True)[0] == Verdict.INCONCLUSIVE


def test_a_window_fits_between_the_last_workers_scrape_and_the_first_ones_next() -> None:
    counters = PrometheusCounters(PROM, ((("w", "a"),), (("w", "b"),)), scrape_interval_s=5)
    assert counters.fits_s() == (0.0, 5)  # before any read: nothing known of the phases
    now = time.time()
    counters.stamps = {("w", "a"): now - 0.5, ("w", "b"): now - 0.2}
    fits, lasts = counters.fits_s()
    # a's next scrape comes 4.5 s from now; the guard keeps a tenth of the interval.
    assert lasts == 5 and 3.9 < fits <= 4.0, fits
    counters.stamps = {("w", "a"): now - 4.8, ("w", "b"): now - 0.1}
    # Phases 4.7 s apart leave 0.2 s before a's next scrape, less than the guard: nothing fits.
    assert counters.fits_s() == (0.0, 5)
