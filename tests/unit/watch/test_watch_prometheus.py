"""The watch reading its counters through Prometheus: the mock pool of test_watch_runner.py behind
a mock of Prometheus' `/api/v1/query`, which scrapes every worker whenever it is asked (a sample
of each, stamped now) except the workers made stale (their last sample, stamped when it was).

What matters here: every read goes through `target.counters`, a stale scrape is an `unreadable`
event that names the worker and sets its block aside, a correct pool still turns ok and a
stuck router is still convicted, a stop never waits for a scrape, and what the watch shows
(/metrics, its page, its events) says how it reads and holds no secret. The real processes
(Debian's Prometheus, the embedded stack) are tests/integration/test_watch_through_prometheus.py's.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
from prometheus_client import generate_latest

from embedlab.evidence import clients
from embedlab.evidence.prom_source import PrometheusCounters
from embedlab.evidence.target import attach
from embedlab.watch import names
from embedlab.watch.page import Page
from embedlab.watch.runner import Watch, WatchConfig, masked

from .test_watch_runner import FRONTEND, MockPool, families, verdicts, watch_on

KEY = "sk-watch-0123456789abcdef"
PASSWORD = "pw-0123456789abcdef"
PROMETHEUS = "http://prom.test:9090"
JOB = "workers"


class PromPool(MockPool):
    """`MockPool` read through Prometheus: `stale` workers were last scraped long ago."""

    def __init__(self, models: list[str], **options: object) -> None:
        super().__init__(models, **options)  # type: ignore[arg-type]
        self.stale: set[int] = set()
        self.scraped: dict[int, tuple[float, float]] = {}  # worker -> (when, value) of its last scrape
        self.queries = 0
        self.worker_reads = 0  # reads of a worker's own /metrics: none, through Prometheus
        self.on_query = lambda: None

    def instance(self, i: int) -> str:
        return f"worker{i}.test:9000"

    def counters(self, url: str = PROMETHEUS, *, interval_s: float = 0.02) -> PrometheusCounters:
        return PrometheusCounters(
            url,
            tuple(((JOB, self.instance(i)),) for i in range(len(self.models))),
            scrape_interval_s=interval_s,
            margin_s=0.0,  # a sample stamped now is newer than any ask before it: one query a read
            poll_s=0.005,
        )

    async def answer(self, request: httpx.Request) -> httpx.Response:
        if request.url.host.startswith("worker"):
            self.worker_reads += 1
        if request.url.host != "prom.test":
            return await super().answer(request)
        self.queries += 1
        self.on_query()
        up = request.url.params["query"].startswith("up{")
        result = []
        for i, (registry, counter) in enumerate(self.registries):
            if i not in self.stale:
                # Another client's requests, counted between scrapes, as a read of /metrics adds them.
                counter.inc(sum(self.rng.random() < self.background for _ in range(3)))
                value = registry.get_sample_value("dynamo_component_requests_total") or 0.0
                self.scraped[i] = (time.time(), value)
            stamp, value = self.scraped.get(i, (time.time() - 100, 0.0))
            labels = {"__name__": "up" if up else "dynamo_component_requests_total"}
            labels |= {"job": JOB, "instance": self.instance(i)}
            result.append({"metric": labels, "values": [[stamp, str(1.0 if up else value)]]})
        data = {"resultType": "matrix", "result": result}
        return httpx.Response(200, json={"status": "success", "data": data})


def test_masked_hides_each_secret_and_every_urls_password() -> None:
    said = f"no scrape at http://scraper:{PASSWORD}@prom.test:9090 (key {KEY}); https://w0:8081 ok"
    assert masked(said, [KEY, ""]) == "no scrape at http://***@prom.test:9090 (key ***); https://w0:8081 ok"
    assert (
        masked("http://prom.test:9090/api/v1/query?query=up") == "http://prom.test:9090/api/v1/query?query=up"
    )


def test_through_prometheus_a_correct_pool_turns_ok_a_stale_scrape_is_named_and_nothing_secret_shows(
    tmp_path: Path,
) -> None:
    pool = PromPool(["a", "a", "b", "b"], seed=1)
    prometheus = f"http://scraper:{PASSWORD}@prom.test:9090"  # a password in the URL: httpx's basic auth
    target = attach(
        FRONTEND, pool.urls(), models=pool.models, counters=pool.counters(prometheus), api_key=KEY
    )
    seen: list[Watch] = []

    def script(now: float) -> None:  # after each block: worker 1 goes stale once, until the watch says so
        if seen:
            pool.stale = {1} if now >= 1 and "unreadable" not in seen[0].event_counts else set()

    def settled(watch: Watch) -> bool:
        seen[:] = [watch]
        return "readable" in watch.event_counts and all(s.state == names.OK for s in watch.states())

    watch, exporter = watch_on(pool, seconds=90, script=script, until=settled, target=target)
    assert pool.worker_reads == 0 and pool.queries > 0  # every read went through Prometheus
    stale = [e.detail for e in watch.events if e.kind == "unreadable"]
    assert len(stale) == 1 and stale[0].startswith("worker 1 (") and "stale" in stale[0], stale
    assert "no scrape of worker 1" in stale[0] and "http://***@prom.test:9090" in stale[0], stale
    assert watch.blocks.get("unreadable", 0) == 1 and watch.scrape_failures == [0, 1, 0, 0]
    assert not any(t.alarm for t in watch.transitions) and set(verdicts(exporter).values()) == {names.OK}

    found = families(exporter)
    (info,) = found[names.COUNTERS_INFO]
    assert info.labels == {names.SOURCE: "prometheus", names.URL: "http://***@prom.test:9090"}
    assert found[names.SCRAPE_WAIT][0].value > 0
    Page(tmp_path).write(watch, exporter.update(watch), force=True)
    page = (tmp_path / "index.html").read_text()
    assert "counters read through Prometheus (http://***@prom.test:9090)" in page
    assert json.loads((tmp_path / "watch.json").read_text())["counters"]["source"] == "prometheus"
    shown = [generate_latest(exporter.registry).decode(), page, (tmp_path / "watch.json").read_text()]
    shown += [e.detail for e in watch.events]
    assert not [text for text in shown if KEY in text or PASSWORD in text]


def test_read_directly_the_watch_says_so() -> None:
    pool = MockPool(["a", "b"], seed=2)
    watch, exporter = watch_on(pool, seconds=30, until=lambda w: w.blocks.get("kept", 0) >= 2)
    (info,) = families(exporter)[names.COUNTERS_INFO]
    assert info.labels == {names.SOURCE: "metrics", names.URL: ""}
    assert families(exporter)[names.SCRAPE_WAIT][0].value == 0
    assert watch.counters_said() == "counters read from each worker's /metrics"


def test_through_prometheus_a_stuck_router_is_convicted_by_the_counters() -> None:
    pool = PromPool(["a", "a", "b", "b"], seed=6, fault="stick")
    target = attach(FRONTEND, pool.urls(), models=pool.models, counters=pool.counters())
    failing = {(names.SAME_MODEL, "a"), (names.SAME_MODEL, "b")}

    def decided(watch: Watch) -> bool:
        return {(t.key.check, t.key.model) for t in watch.transitions if t.alarm} >= failing

    watch, exporter = watch_on(pool, seconds=90, until=decided, target=target)
    assert {k for k, state in verdicts(exporter).items() if state == names.FAILING} == failing
    assert any("counters rule out a correct router" in t.why for t in watch.transitions if t.alarm)
    assert pool.worker_reads == 0


def test_a_stop_never_waits_for_a_scrape() -> None:
    """Every worker stale at a 10 s scrape interval: a read would wait 30 s. The stop comes while
    one waits (at Prometheus' third answer), and the watch ends at once, its block unjudged."""
    pool = PromPool(["a", "a", "b", "b"], seed=3)
    pool.stale = {0, 1, 2, 3}
    target = attach(FRONTEND, pool.urls(), models=pool.models, counters=pool.counters(interval_s=10))
    watch = Watch(target, WatchConfig(seed=3), transport=httpx.MockTransport(pool.answer))

    async def main() -> float:
        stop = asyncio.Event()
        pool.on_query = lambda: stop.set() if pool.queries >= 3 else None
        started = time.monotonic()
        await asyncio.wait_for(watch.run(stop), timeout=20)  # the deadline: far above the stop's
        return time.monotonic() - started

    took = asyncio.run(main())
    assert took < 10, took  # not the 30 s a read waits for a stale worker
    assert watch.events[-1].kind == "stopped" and not watch.blocks


def test_a_refused_key_stops_the_watch_before_it_sends_or_serves_anything(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    from embedlab.cli import main

    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(f"{request.method} {request.url.path}")
        if request.url.path == "/v1/models":
            return httpx.Response(401, json={"error": {"message": f"invalid key {KEY}"}})
        return httpx.Response(200, text="")

    real = clients.async_client
    monkeypatch.setattr(
        clients, "async_client", lambda **options: real(transport=httpx.MockTransport(handler), **options)
    )
    argv = ["watch", "--frontend-url", FRONTEND, "--system-url", "http://worker0.test:9000"]
    argv += ["--system-url", "http://worker1.test:9000", "--worker-models", "a,a", "--api-key", KEY]
    code = main([*argv, "--port", "0", "--duration-s", "5"])
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "the frontend" in err and "401" in err, err
    assert KEY not in captured.out + captured.err and "serving" not in err
    assert "POST /v1/embeddings" not in asked and "GET /v1/models" in asked, asked


def test_a_prometheus_that_refuses_stops_the_watch_before_discovery(monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    """The watch attaches as `embedlab scenario` does (`ScenarioPlan.attached_target`): Prometheus'
    access is tried before its targets are asked for, and a refusal is its one line."""
    from embedlab.cli import main

    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        return httpx.Response(401, text="<html><title>401 Authorization Required</title></html>")

    real = clients.async_client
    monkeypatch.setattr(
        clients, "async_client", lambda **options: real(transport=httpx.MockTransport(handler), **options)
    )
    argv = ["watch", "--frontend-url", FRONTEND, "--prometheus-url", PROMETHEUS]
    code = main([*argv, "--discover", 'prometheus:job="workers"', "--port", "0"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and f"Prometheus at {PROMETHEUS}" in err, err
    assert "401" in err and "--prometheus-http-config" in err, err
    assert asked == ["/api/v1/status/buildinfo"], asked  # not its targets, nor anything else
