"""The frontend's own Prometheus series, and how N routing processes expose them as one.

With `embedlab frontend --processes N` each routing process counts what it served in
its own registry. A scrape, whichever process takes it, is answered by the owner of the
instance table: it collects every process's samples and sums them by name and labels
(`_created` takes the earliest), so the series are those of one process. The live
instance gauge comes from the owner alone (every process has the same table), and the
owner adds one series of its own: how long the table took to reach each process.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.samples import Sample

from .instances import Instance, InstanceTable

LIVE = "embedlab_frontend_live_instances"
PROPAGATION_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1)


class FrontendMetrics:
    def __init__(self, instances: InstanceTable) -> None:
        self.prom = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "embedlab_frontend_requests",
            "Requests to /v1/embeddings by model and status code.",
            ["model", "status"],
            registry=self.prom,
        )
        self.duration = Histogram(
            "embedlab_frontend_request_duration_seconds",
            "Time to answer /v1/embeddings.",
            ["model"],
            registry=self.prom,
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )
        # Counted as each request is read, before it is dispatched (the other counts it at its
        # answer): every request the router took for a model lies between the two, so a check that
        # reads both beside the workers' counters knows the other clients' traffic per model.
        self.admissions = Counter(
            "embedlab_frontend_requests_admitted",
            "Requests to /v1/embeddings by model, counted when read, before dispatch.",
            ["model"],
            registry=self.prom,
        )
        self._admitted: dict[str, Any] = {}
        self.inflight = Gauge(
            "embedlab_frontend_inflight_requests", "Requests being answered.", registry=self.prom
        )
        # Read at scrape time: a plain int costs a request nothing, where the gauge's own
        # inc() and dec() take a lock each.
        self.inflight_now = 0
        self.inflight.set_function(lambda: self.inflight_now)
        # Each label set's child, looked up once: labels() validates and locks on every
        # call, and the series are never removed, so a child stays the series' own.
        self._requests: dict[tuple[str, int], Any] = {}
        self._durations: dict[str, Any] = {}
        self.retries = Counter(
            "embedlab_frontend_retries",
            "Requests retried on another instance.",
            ["model"],
            registry=self.prom,
        )
        # The router's own view of the workers' prefix caches (router mode kv): the events it
        # applied per instance, held against each worker's own count of the events it made.
        self.kv_events = Counter(
            "embedlab_frontend_kv_events_applied",
            "KV events applied to the router's index, by instance and kind.",
            ["worker_id", "model", "kind"],
            registry=self.prom,
        )
        self.prom.register(LiveInstances(instances))

    def kv_applied(self, instance: Instance, kind: str) -> None:
        self.kv_events.labels(instance.instance_id, instance.model, kind).inc()

    def admitted(self, model: str) -> None:
        """Count one /v1/embeddings request read for `model`, before it is dispatched."""
        counter = self._admitted.get(model)
        if counter is None:
            counter = self._admitted[model] = self.admissions.labels(model)
        counter.inc()

    def answered(self, model: str, status: int, seconds: float) -> None:
        """Count one answered /v1/embeddings request and its duration."""
        counter = self._requests.get((model, status))
        if counter is None:
            counter = self._requests[(model, status)] = self.requests.labels(model, str(status))
        counter.inc()
        duration = self._durations.get(model)
        if duration is None:
            duration = self._durations[model] = self.duration.labels(model)
        duration.observe(seconds)


class LiveInstances:
    """Reads the instance table at scrape time, so the gauge can never go stale."""

    def __init__(self, instances: InstanceTable) -> None:
        self._instances = instances

    def describe(self) -> list[GaugeMetricFamily]:
        return []

    def collect(self) -> list[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "embedlab_frontend_live_instances", "Live instances per model.", labels=["model"]
        )
        for model in self._instances.models():
            family.add_metric([model], len(self._instances.live(model)))
        return [family]


def propagation_histogram(registry: CollectorRegistry) -> Histogram:
    return Histogram(
        "embedlab_frontend_table_propagation_seconds",
        "From a change of the instance table to its acknowledgement by a routing process.",
        registry=registry,
        buckets=PROPAGATION_BUCKETS,
    )


def export(registry: CollectorRegistry, *, live: bool = False) -> list[dict[str, Any]]:
    """One process's samples as plain data (the owner merges them); the live gauge only if `live`."""
    return [
        {
            "name": m.name,
            "type": m.type,
            "doc": m.documentation,
            "unit": m.unit,
            "samples": [[s.name, s.labels, s.value] for s in m.samples],
        }
        for m in registry.collect()
        if live or m.name != LIVE
    ]


def merge(exports: Iterable[Sequence[dict[str, Any]]]) -> list[Metric]:
    """Sum the processes' samples per (name, labels); `_created` keeps the earliest."""
    families: dict[str, Metric] = {}
    values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], list[Any]]] = {}
    for families_of_one in exports:
        for family in families_of_one:
            name = family["name"]
            if name not in families:
                families[name] = Metric(name, family["doc"], family["type"], family["unit"])
                values[name] = {}
            seen = values[name]
            for sample, labels, value in family["samples"]:
                key = (sample, tuple(sorted(labels.items())))
                if key not in seen:
                    seen[key] = [labels, value]
                elif sample.endswith("_created"):
                    seen[key][1] = min(seen[key][1], value)
                else:
                    seen[key][1] += value
    for name, metric in families.items():
        metric.samples = [Sample(key[0], labels, value) for key, (labels, value) in values[name].items()]
    return list(families.values())


class Merged:
    """A collector of already merged families (what a registry asks of any collector)."""

    def __init__(self, metrics: list[Metric]) -> None:
        self._metrics = metrics

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> list[Metric]:
        return self._metrics
