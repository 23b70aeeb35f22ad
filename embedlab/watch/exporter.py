"""The watch on `/metrics`: prometheus_client families read from the latest snapshot of the watch.

The loop takes a `WatchSnapshot` after every block (`Exporter.update`, on the loop's thread)
and the HTTP server's thread serves the latest one: a scrape never reads the judge's arrays
while a block changes them. Names: names.py.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.metrics_core import Metric

from . import names as n
from .judge import KeyState, ShareState
from .runner import Watch

__all__ = ["Exporter", "WatchSnapshot", "snapshot"]


@dataclass(frozen=True)
class WatchSnapshot:
    at: float
    uptime_s: float
    states: tuple[KeyState, ...]
    shares: tuple[ShareState, ...]
    request_rates: dict[str, float]  # model -> the check's own req/s
    pool_rate: float
    requests: dict[str, int]
    misplaced: dict[str, int]
    blocks: dict[str, int]
    scrape_failures: tuple[int, ...]
    events: dict[str, int]
    counters: tuple[str, str]  # where the counters are read: ("prometheus", its URL) or ("metrics", "")
    counters_said: str  # the same in words, with what the reads' waits cost
    scrape_wait_s: float  # the reads' waits for Prometheus to scrape every worker


def snapshot(watch: Watch) -> WatchSnapshot:
    return WatchSnapshot(
        at=time.time(),
        uptime_s=watch.now,
        states=tuple(watch.states()),
        shares=tuple(watch.shares()),
        request_rates={m: watch.request_rate(m) for m in watch.pool.served},
        pool_rate=watch.pool_rate.per_s(),
        requests=dict(watch.requests),
        misplaced=dict(watch.misplaced),
        blocks=dict(watch.blocks),
        scrape_failures=tuple(watch.scrape_failures),
        events=dict(watch.event_counts),
        counters=watch.counters_source(),
        counters_said=watch.counters_said(),
        scrape_wait_s=watch.scrape_wait_s(),
    )


class _Collector:
    def __init__(self) -> None:
        self.latest: WatchSnapshot | None = None

    def collect(self) -> Iterator[Metric]:
        s = self.latest
        if s is None:
            return
        keyed = [n.CHECK, n.MODEL]
        verdict = GaugeMetricFamily(
            n.VERDICT, "The check's verdict as a state set: 1 for the current state, 0 for the others",
            labels=[*keyed, n.STATE],
        )  # fmt: skip
        evidence = GaugeMetricFamily(
            n.EVIDENCE,
            "log10 of the largest e-value against a correct router among the live tests",
            labels=keyed,
        )
        threshold = GaugeMetricFamily(
            n.EVIDENCE_THRESHOLD, "The log10 e-value at which a test rules a correct router out", labels=keyed
        )
        ruled = GaugeMetricFamily(
            n.RULED_OUT,
            "The smallest fault ruled out now: multi-model, the leak share; same-model, the relative "
            "deviation of a replica's share from its weight's (NaN: none yet)",
            labels=keyed,
        )
        rate = GaugeMetricFamily(n.REQUEST_RATE, "The check's own requests per second", labels=keyed)
        alarms = CounterMetricFamily(n.ALARMS, "Alarms: a check turned failing (one per fault)", labels=keyed)
        checks = CounterMetricFamily(
            n.CHECKS, "Tests run to their end: passed, failed or expired", labels=keyed
        )
        for k in s.states:
            labels = [k.key.check, k.key.model]
            for state in n.STATES:
                verdict.add_metric([*labels, state], 1.0 if state == k.state else 0.0)
            evidence.add_metric(labels, k.evidence_log10)
            threshold.add_metric(labels, k.threshold_log10)
            ruled.add_metric(labels, k.ruled_out)
            rate.add_metric(labels, _finite(s.request_rates.get(k.key.model, math.nan)))
            alarms.add_metric(labels, k.alarms)
            checks.add_metric(labels, k.checks)
        yield from (verdict, evidence, threshold, ruled, rate, alarms, checks)

        pool = GaugeMetricFamily(
            n.POOL_RATE, "Every worker's counter together, per second (the check's included)"
        )
        pool.add_metric([], _finite(s.pool_rate))
        yield pool
        worker = [n.WORKER, n.MODEL]
        share = GaugeMetricFamily(
            n.SHARE, "The check's share estimate of its model's requests on the worker", labels=worker
        )
        low = GaugeMetricFamily(n.SHARE_LOW, "Its confidence sequence's lower bound", labels=worker)
        high = GaugeMetricFamily(n.SHARE_HIGH, "Its confidence sequence's upper bound", labels=worker)
        expected = GaugeMetricFamily(n.SHARE_EXPECTED, "The share its weight says", labels=worker)
        for w in s.shares:
            labels = [str(w.worker), w.model]
            share.add_metric(labels, w.estimate)
            low.add_metric(labels, w.low)
            high.add_metric(labels, w.high)
            expected.add_metric(labels, w.expected)
        yield from (share, low, high, expected)

        yield _counter(n.REQUESTS, "The check's own requests answered", n.MODEL, s.requests)
        yield _counter(
            n.MISPLACED,
            "The check's requests a worker of another model answered or refused",
            n.MODEL,
            s.misplaced,
        )
        yield _counter(n.BLOCKS, "Blocks of the schedule: kept, or set aside and why", n.OUTCOME, s.blocks)
        yield _counter(
            n.SCRAPE_FAILURES, "Reads of a worker's counter that failed or timed out", n.WORKER,
            {str(i): v for i, v in enumerate(s.scrape_failures)},
        )  # fmt: skip
        yield _counter(
            n.EVENTS, "What the pool did: resets, workers unreadable, the frontend down", n.KIND, s.events
        )
        up = GaugeMetricFamily(n.UPTIME, "Seconds since the watch started")
        up.add_metric([], s.uptime_s)
        yield up
        source, url = s.counters
        yield InfoMetricFamily(
            n.COUNTERS_INFO.removesuffix("_info"),
            "Where the workers' counters are read: through Prometheus (its URL), or each worker's /metrics",
            value={n.SOURCE: source, n.URL: url},
        )
        waited = CounterMetricFamily(
            n.SCRAPE_WAIT, "Seconds the reads waited for Prometheus to scrape every worker (0: read directly)"
        )
        waited.add_metric([], s.scrape_wait_s)
        yield waited


def _counter(name: str, doc: str, label: str, values: dict[str, Any]) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=[label])
    for key, value in sorted(values.items()):
        family.add_metric([key], float(value))
    return family


def _finite(x: float) -> float:
    return 0.0 if math.isnan(x) else x


class Exporter:
    """The registry, and (with `serve`) its HTTP server on 127.0.0.1."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._collector = _Collector()
        self.registry.register(self._collector)
        self._server: Any = None
        self.port: int | None = None

    @property
    def latest(self) -> WatchSnapshot | None:
        return self._collector.latest

    def update(self, watch: Watch) -> WatchSnapshot:
        self._collector.latest = snap = snapshot(watch)
        return snap

    def serve(self, port: int, *, host: str = "127.0.0.1") -> int:
        self._server, _ = start_http_server(port, addr=host, registry=self.registry)
        self.port = int(self._server.server_port)
        return self.port

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
