"""A worker's Prometheus contract: one process's registry, or a board shared by its ingest processes.

With `--api-processes 1` the worker counts in an ordinary registry (`WorkerMetrics`). With
N ingest processes each request is counted by the one process that received it, in that
process's own slot of a shared memory board (one writer per slot, so no lock), and the
system port sums the slots when it is scraped (`BoardCollector`): the series, names, labels
and help texts are the single-process ones, one `dynamo_component_requests_total` per
worker however many processes took requests.

The board also carries the worker's state, so that each ingest process's `/health` says
what the engine process knows (loading, ready, draining).
"""

from __future__ import annotations

import bisect
import gc
import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.samples import Sample

from ...defaults import METRIC
from ..channel import COUNTS, map_memory

DURATION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
COUNTERS = (
    ("requests", METRIC.removesuffix("_total"), "Requests this worker received."),
    ("errors", "dynamo_component_errors", "Requests this worker answered with an error."),
    ("request_bytes", "dynamo_component_request_bytes", "Request body bytes received."),
    ("response_bytes", "dynamo_component_response_bytes", "Response body bytes sent."),
)
DURATION = ("dynamo_component_request_duration_seconds", "Time to answer a request.")
INFLIGHT = ("dynamo_component_inflight_requests", "Requests being answered.")
# The simulated prefix cache of a worker that answers completions and chat (engines/kv.py).
KV_EVENTS = ("embedlab_kv_events", "KV events the worker's prefix cache made, by kind.")
KV_BLOCKS = ("embedlab_kv_blocks", "Blocks the worker's prefix cache holds.")
STATES = ("starting", "loading", "registering", "ready", "draining", "stopping")


class WorkerMetrics:
    """The Prometheus contract the harness reads, on a registry of this worker's own."""

    def __init__(self, labels: dict[str, str]) -> None:
        self.prom = CollectorRegistry(auto_describe=True)
        names = list(labels)
        # .labels() now, so every series is exported at 0 before the first request.
        for attribute, name, doc in COUNTERS:
            setattr(self, attribute, Counter(name, doc, names, registry=self.prom).labels(**labels))
        self.requests: Counter
        self.errors: Counter
        self.request_bytes: Counter
        self.response_bytes: Counter
        self.duration = Histogram(*DURATION, names, registry=self.prom, buckets=DURATION_BUCKETS).labels(
            **labels
        )
        self.inflight = Gauge(*INFLIGHT, names, registry=self.prom).labels(**labels)
        events = Counter(*KV_EVENTS, [*names, "kind"], registry=self.prom)
        self.kv_stored, self.kv_removed = (events.labels(**labels, kind=k) for k in ("stored", "removed"))
        self.kv_blocks = Gauge(*KV_BLOCKS, names, registry=self.prom).labels(**labels)


# A slot: the four counters, inflight, the duration's sum, count and per-bucket counts (+Inf last),
# then what the process's side of its channel counted (its copy, refreshed now and then), then
# the vectors replies' trip from the engine process: seconds in all, and how many took over 1 and 5 ms.
_SLOT_FIELDS = 4 + 1 + 2 + len(DURATION_BUCKETS) + 1
_CHANNEL_FIELDS = _SLOT_FIELDS
_REPLY_FIELDS = _CHANNEL_FIELDS + len(COUNTS)
REPLY_FIGURES = ("reply_travel_s", "replies_over_1ms", "replies_over_5ms")
_SLOT_BYTES = 8 * 32
_HEADER_BYTES = 64
assert _REPLY_FIELDS + len(REPLY_FIGURES) <= 32


class _Cell:
    """One float of one slot, with the method the handlers call on a prometheus child."""

    __slots__ = ("_values", "_index")

    def __init__(self, values: memoryview[float], index: int) -> None:
        self._values = values
        self._index = index

    def inc(self, amount: float = 1.0) -> None:
        self._values[self._index] += amount

    def dec(self, amount: float = 1.0) -> None:
        self._values[self._index] -= amount


class _Duration:
    __slots__ = ("_values", "_base")

    def __init__(self, values: memoryview[float], base: int) -> None:
        self._values = values
        self._base = base

    def observe(self, seconds: float) -> None:
        values, base = self._values, self._base
        values[base] += seconds
        values[base + 1] += 1
        values[base + 2 + bisect.bisect_left(DURATION_BUCKETS, seconds)] += 1


class SlotMetrics:
    """One ingest process's counters: the interface of `WorkerMetrics`, kept in its board slot."""

    def __init__(self, board: Board, slot: int) -> None:
        values = board.slot(slot)
        self.requests, self.errors, self.request_bytes, self.response_bytes = (
            _Cell(values, i) for i in range(4)
        )
        self.inflight = _Cell(values, 4)
        self.duration = _Duration(values, 5)


class Board:
    """Shared memory: the worker's state code, then one slot per ingest process."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buf = map_memory(fd)
        self._header = self._buf[:_HEADER_BYTES].cast("d")
        self.slots = (len(self._buf) - _HEADER_BYTES) // _SLOT_BYTES

    @staticmethod
    def size(slots: int) -> int:
        return _HEADER_BYTES + slots * _SLOT_BYTES

    def slot(self, index: int) -> memoryview[float]:
        start = _HEADER_BYTES + index * _SLOT_BYTES
        return self._buf[start : start + _SLOT_BYTES].cast("d")

    @property
    def state(self) -> str:
        return STATES[int(self._header[0])]

    @state.setter
    def state(self, value: str) -> None:
        self._header[0] = STATES.index(value)

    def put_counts(self, index: int, counts: dict[str, float]) -> None:
        """An ingest process's copy of its channel's counts and its replies' trip (`REPLY_FIGURES`),
        for the engine process to report."""
        values = self.slot(index)
        for i, name in enumerate(COUNTS):
            values[_CHANNEL_FIELDS + i] = counts[name]
        for i, name in enumerate(REPLY_FIGURES):
            values[_REPLY_FIELDS + i] = counts.get(name, 0.0)

    def process_figures(self, index: int) -> dict[str, float]:
        """One slot's requests, time answering them, and its channel's counts as last copied."""
        values = self.slot(index)
        return {
            "requests": values[0],
            "seconds_answering": values[5],
            **{name: values[_CHANNEL_FIELDS + i] for i, name in enumerate(COUNTS)},
            **{name: values[_REPLY_FIELDS + i] for i, name in enumerate(REPLY_FIGURES)},
        }

    def total(self, field: int) -> float:
        return sum(self.slot(i)[field] for i in range(self.slots))

    def inflight(self) -> int:
        return int(self.total(4))


class BoardCollector:
    """The system port's view of a board: every slot summed into the single-process series
    (`slots`: only those, as an ingest process with a metrics port of its own shows its own)."""

    def __init__(self, board: Board, labels: dict[str, str], *, slots: tuple[int, ...] | None = None) -> None:
        self._board = board
        self._slots = slots
        self._names = list(labels)
        self._values = list(labels.values())
        self._created = time.time()

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        chosen = range(self._board.slots) if self._slots is None else self._slots
        slots = [self._board.slot(i).tolist() for i in chosen]
        for field, (_, name, doc) in enumerate(COUNTERS):
            family = CounterMetricFamily(name, doc, labels=self._names)
            family.add_metric(self._values, sum(s[field] for s in slots), created=self._created)
            yield family
        duration = HistogramMetricFamily(*DURATION, labels=self._names)
        cumulative, buckets = 0.0, []
        for i, bound in enumerate((*DURATION_BUCKETS, float("inf"))):
            cumulative += sum(s[7 + i] for s in slots)
            buckets.append(("+Inf" if bound == float("inf") else str(float(bound)), cumulative))
        duration.add_metric(self._values, buckets, sum(s[5] for s in slots))
        duration.samples.append(
            Sample(DURATION[0] + "_created", dict(zip(self._names, self._values)), self._created)
        )
        yield duration
        inflight = GaugeMetricFamily(*INFLIGHT, labels=self._names)
        inflight.add_metric(self._values, sum(s[4] for s in slots))
        yield inflight


class GcPauses:
    """The cyclic garbage collector's pauses in this process, by generation, for /health.

    A pause stops the process's event loop: in an engine process, whose heap holds the
    model's modules and torch.compile's artifacts, a full collection walks all of them.
    """

    def __init__(self) -> None:
        self._started = 0.0
        self.collections = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self.longest = [0.0, 0.0, 0.0]
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        generation = info["generation"]
        took = time.perf_counter() - self._started
        self.collections[generation] += 1
        self.seconds[generation] += took
        self.longest[generation] = max(self.longest[generation], took)

    def close(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

    def stats(self) -> dict[str, object]:
        return {
            "collections": list(self.collections),
            "seconds": [round(s, 6) for s in self.seconds],
            "longest_ms": [round(1000 * s, 3) for s in self.longest],
            "frozen_objects": gc.get_freeze_count(),
        }
