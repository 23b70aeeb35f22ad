"""Counters read through a Prometheus server, each with the timestamp of the scrape that took it.

    counters = prometheus_counters("http://prom:9090", ["http://w0:8081", "http://w1:8081"])
    found = discover_workers("http://prom:9090", 'nvidia.com/dynamo-component-type="worker"')
    counters = prometheus_counters("https://prom.corp", urls, http_config="prom-http.yml")

Where the harness cannot reach the workers' /metrics (or should not add scrapers), it reads the
same counters from Prometheus' HTTP API: `/api/v1/query` with a range selector
(`metric{...}[10s]`), whose samples carry the time Prometheus scraped them (an instant
selector answers with the evaluation time instead). A worker is its scrape target's `job` and
`instance` labels (several, for a worker with several metrics ports).

A burst is aligned to the scrapes: each snapshot waits until every worker has a sample scraped
after the snapshot was asked for (`margin_s` later), so the baseline is scraped before the first
request leaves and the end after the last answer came back. A worker without one within
`max_wait_s` (3 scrape intervals) is stale: the read raises `ScrapeError` naming it, and the
burst is inconclusive, never judged. What the waits cost is kept (`waited_s`) and said
(`sentence`), beside the verdict.

`discover_workers` lists the active targets (`/api/v1/targets`) whose labels match a selector,
in the operator's spelling (`nvidia.com/dynamo-component-type`) or Prometheus' sanitised one
(`nvidia_com_dynamo_component_type`), on the target's labels or, from Kubernetes service
discovery, its `__meta_kubernetes_pod_label_*`.

A Prometheus behind an ingress (basic auth or a bearer token, TLS with a company CA) is reached
with `http_config`: a file of its HTTP client config (promtool's `--http.config.file`, the
fields of a scrape config: evidence/access.py), or a `ScrapeAuth` read from one. It goes with
every request to Prometheus' origin, and nowhere else.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from ..errors import ConfigError, ScrapeError
from . import clients
from .access import HTTP_CONFIG, ScrapeAuth, grant, granted, prometheus_access, read_config
from .metrics import DEFAULT_METRIC, MetricQuery, Snapshot, metrics_url, port_urls

__all__ = [
    "DiscoveredWorker",
    "LabelMatcher",
    "PromSample",
    "PromTarget",
    "PrometheusCounters",
    "discover_workers",
    "discovered_text",
    "parse_duration",
    "parse_label_selector",
    "parse_samples",
    "parse_targets",
    "prometheus_counters",
    "stale_workers",
]

# (job, instance): one scrape target, as Prometheus labels what it scraped.
Key = tuple[str, str]
# How to reach a Prometheus (its credentials, its TLS trust): a file of its HTTP config, or one read.
HttpConfig = str | Path | ScrapeAuth | None
# How many scrape intervals a snapshot waits for a fresh sample of every worker.
WAIT_INTERVALS = 3
# The margin a window keeps before the first worker's next scrape, as a share of the interval:
# the driver's and Prometheus' own jitter, on a loaded machine (a window that ends after it waits
# a whole interval more).
SCRAPE_GUARD = 0.1
# Where Prometheus does not say a target's interval: its own default.
DEFAULT_INTERVAL_S = 15.0
# Kubernetes service discovery keeps a pod's labels as these, sanitised.
_POD_LABEL = "__meta_kubernetes_pod_label_"
_MATCHER = re.compile(r'\s*([^\s=!~,{}"]+)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


def sanitise(name: str) -> str:
    """A label name as Prometheus keeps it: `nvidia.com/dynamo-namespace` -> `nvidia_com_dynamo_namespace`."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def _quote(text: str) -> str:
    """A PromQL string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(frozen=True)
class LabelMatcher:
    """One `name OP "value"` of a label selector (`=`, `!=`, `=~`, `!~`, the regex anchored)."""

    name: str
    op: str
    value: str

    def matches(self, value: str | None) -> bool:
        found = value or ""  # a missing label matches "" as in PromQL
        if self.op in ("=", "!="):
            return (found == self.value) == (self.op == "=")
        return (re.fullmatch(self.value, found) is not None) == (self.op == "=~")

    def promql(self) -> str:
        return f"{sanitise(self.name)}{self.op}{_quote(self.value)}"


def parse_label_selector(text: str) -> tuple[LabelMatcher, ...]:
    """`{a="x",b=~"y.*"}` or the same without braces; label names in either spelling."""
    body = text.strip()
    if body.startswith("{") and body.endswith("}"):
        body = body[1:-1]
    matchers, pos = [], 0
    while pos < len(body.rstrip()):
        found = _MATCHER.match(body, pos)
        if not found:
            raise ConfigError(
                f'cannot read the label selector {text!r} at {body[pos:]!r} (want name="value",...)'
            )
        value = found.group(3).replace('\\"', '"').replace("\\\\", "\\")
        if found.group(2) in ("=~", "!~"):
            try:
                re.compile(value)
            except re.error as exc:
                raise ConfigError(f"label selector {text!r}: {value!r} is not a regex: {exc}") from None
        matchers.append(LabelMatcher(found.group(1), found.group(2), value))
        pos = found.end()
    return tuple(matchers)


def parse_duration(text: str) -> float:
    """Prometheus' durations in seconds: `1s`, `500ms`, `1m30s`."""
    parts = _DURATION.findall(text or "")
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ConfigError(f"not a Prometheus duration: {text!r}")
    return sum(float(n) * _UNITS[u] for n, u in parts)


@dataclass(frozen=True)
class PromTarget:
    """One active target of `/api/v1/targets`."""

    job: str
    instance: str
    scrape_url: str
    health: str
    scrape_interval_s: float
    labels: tuple[tuple[str, str], ...]
    discovered: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> Key:
        return (self.job, self.instance)

    def label(self, name: str) -> str | None:
        """A label in either spelling: the target's own, else Kubernetes' pod label."""
        own, found = dict(self.labels), dict(self.discovered)
        for candidate in (name, sanitise(name)):
            if candidate in own:
                return own[candidate]
        return found.get(_POD_LABEL + sanitise(name))

    def matches(self, selector: Sequence[LabelMatcher]) -> bool:
        return all(m.matches(self.label(m.name)) for m in selector)


def parse_targets(payload: Mapping[str, Any]) -> list[PromTarget]:
    """The active targets of an `/api/v1/targets` answer."""
    data = _data(payload, "/api/v1/targets")
    found = []
    for item in data.get("activeTargets") or []:
        labels = {str(k): str(v) for k, v in (item.get("labels") or {}).items()}
        discovered = {str(k): str(v) for k, v in (item.get("discoveredLabels") or {}).items()}
        interval = item.get("scrapeInterval")
        found.append(
            PromTarget(
                job=labels.get("job", str(item.get("scrapePool", ""))),
                instance=labels.get("instance", ""),
                scrape_url=str(item.get("scrapeUrl", "")),
                health=str(item.get("health", "unknown")),
                scrape_interval_s=parse_duration(interval) if interval else DEFAULT_INTERVAL_S,
                labels=tuple(sorted(labels.items())),
                discovered=tuple(sorted(discovered.items())),
            )
        )
    return found


@dataclass(frozen=True)
class PromSample:
    """The latest sample of one series in a range query's answer, at the time it was scraped."""

    labels: tuple[tuple[str, str], ...]
    value: float
    timestamp: float

    @property
    def key(self) -> Key:
        own = dict(self.labels)
        return (own.get("job", ""), own.get("instance", ""))


def parse_samples(payload: Mapping[str, Any]) -> list[PromSample]:
    """Each series' latest sample from an `/api/v1/query` answer of a range selector (a matrix);
    an instant vector is read too, its time then the evaluation's."""
    data = _data(payload, "/api/v1/query")
    found = []
    for series in data.get("result") or []:
        points = series.get("values") or ([series["value"]] if "value" in series else [])
        if not points:
            continue
        stamp, value = points[-1]
        labels = tuple(sorted((str(k), str(v)) for k, v in (series.get("metric") or {}).items()))
        found.append(PromSample(labels=labels, value=float(value), timestamp=float(stamp)))
    return found


def _data(payload: Mapping[str, Any], api: str) -> Mapping[str, Any]:
    if not isinstance(payload, Mapping) or payload.get("status") != "success":
        said = payload.get("error", payload) if isinstance(payload, Mapping) else payload
        raise ScrapeError(f"Prometheus' {api} did not succeed: {str(said)[:200]}")
    data = payload.get("data")
    return data if isinstance(data, Mapping) else {"result": data}


def stale_workers(
    samples: Iterable[PromSample], workers: Sequence[Sequence[Key]], newer_than: float
) -> list[int]:
    """The positions in `workers` (each its scrape targets) with a target whose latest sample is not
    newer than `newer_than` (or that has none): the pure rule of freshness."""
    latest: dict[Key, float] = {}
    for sample in samples:
        latest[sample.key] = max(latest.get(sample.key, -math.inf), sample.timestamp)
    return [
        k
        for k, keys in enumerate(workers)
        if not keys or any(latest.get(key, -math.inf) <= newer_than for key in keys)
    ]


def _seconds(value: float) -> str:
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"


@dataclass
class PrometheusCounters:
    """Each worker's counter read through Prometheus; `workers[k]` is worker k's scrape targets.

    `aread` waits for a scrape of every worker after it was called (`margin_s` later), at most
    `max_wait_s`; a worker still without one is stale, and the read raises `ScrapeError` naming
    it. `waited_s` and `reads` add up what the waits cost, for the verdict's sentence.
    `http_config`: what Prometheus' origin is sent (its credentials, its TLS trust), where it asks.
    """

    url: str
    workers: tuple[tuple[Key, ...], ...]
    scrape_interval_s: float = DEFAULT_INTERVAL_S
    selector: tuple[LabelMatcher, ...] = ()  # more matchers for every query (`job="dynamo-workers"`)
    margin_s: float = 0.05
    poll_s: float = 0.1
    timeout: float = 5.0
    http_config: ScrapeAuth | None = field(default=None, repr=False, compare=False)
    waited_s: float = field(default=0.0, init=False)
    reads: int = field(default=0, init=False)
    stale: int = field(default=0, init=False)  # reads that found a worker's scrape missing or stale
    # Each target's latest sample time after the last read: their phases, which Prometheus keeps.
    stamps: dict[Key, float] = field(default_factory=dict, init=False, repr=False)
    # What the busy schedule made of the interval (`fits_s`), for the sentence; "" before it asks.
    windows: str = field(default="", init=False)

    def __post_init__(self) -> None:
        self.url = self.url.rstrip("/")
        if self.scrape_interval_s <= 0:
            raise ConfigError(f"a scrape interval must be positive, got {self.scrape_interval_s!r}")

    @property
    def max_wait_s(self) -> float:
        return WAIT_INTERVALS * self.scrape_interval_s + self.margin_s

    def query(self, metric: MetricQuery, indices: Sequence[int], name: str | None = None) -> str:
        """The range query of the workers `indices`: their latest samples, with scrape times."""
        keys = [key for i in indices for key in self.workers[i]]
        jobs = sorted({job for job, _ in keys})
        instances = sorted({instance for _, instance in keys})
        matchers = [f"{k}={_quote(v)}" for k, v in metric.labels] if name is None else []
        matchers += [m.promql() for m in self.selector]
        matchers.append(f"job=~{_quote('|'.join(map(re.escape, jobs)))}")
        matchers.append(f"instance=~{_quote('|'.join(map(re.escape, instances)))}")
        window = max(10, math.ceil((WAIT_INTERVALS + 1) * self.scrape_interval_s))
        return f"{name or metric.name}{{{','.join(matchers)}}}[{window}s]"

    async def aread(
        self,
        urls: Sequence[str],
        indices: Sequence[int],
        metric: MetricQuery = DEFAULT_METRIC,
        *,
        moment: str = "",
        client: httpx.AsyncClient | None = None,
    ) -> list[Snapshot]:
        """Worker `indices[k]`'s counter (its URL `urls[k]`), from a scrape after this call began."""
        asked = time.time()
        newer_than = asked + self.margin_s
        deadline = time.monotonic() + self.max_wait_s
        workers = [self.workers[i] for i in indices]
        own = client is None
        withdraw = grant(prometheus_access(self.url, self.http_config))  # for a client of its own
        http = client or clients.async_client(timeout=self.timeout)
        try:
            while True:
                samples = await self._get(http, self.query(metric, indices))
                stale = stale_workers(samples, workers, newer_than)
                if metric.lazy and stale:  # no series until the first increment: `up` says it was scraped
                    ups = [
                        s for s in await self._get(http, self.query(metric, indices, "up")) if s.value == 1
                    ]
                    counted = {s.key for s in samples}
                    stale = [
                        k for k in stale_workers(ups, workers, newer_than) if not set(workers[k]) <= counted
                    ]
                if not stale or time.monotonic() >= deadline:
                    break
                await asyncio.sleep(self.poll_s)
            if stale:
                ups = await self._get(http, self.query(metric, indices, "up"))
        finally:
            if own:
                await http.aclose()
            withdraw()
        self.waited_s += time.time() - asked
        self.reads += 1
        if stale:
            k = stale[0]
            self.stale += 1
            raise self._stale(indices[k], urls[k], workers[k], samples, ups, asked, moment)
        for sample in samples:
            if any(sample.key in keys for keys in workers):
                self.stamps[sample.key] = max(self.stamps.get(sample.key, -math.inf), sample.timestamp)
        return [self._snapshot(url, metric, keys, samples) for url, keys in zip(urls, workers)]

    def fits_s(self) -> tuple[float, float]:
        """A window opened now, after a read: how long it may send and still be closed before the
        first of the workers' next scrapes, and how long it then lasts, read to read (an interval).
        Prometheus scrapes each target at an offset of its own, the same every interval: a window
        fits between the last worker's scrape and the first one's next, less the read's lag and a
        margin (`SCRAPE_GUARD` of the interval). A window longer than that lasts two intervals:
        more sent, but half the windows, and a verdict needs blocks (14 at least) more than
        requests. (0, interval) before any read."""
        interval = self.scrape_interval_s
        if not self.stamps:
            return 0.0, interval
        first_next = min(self.stamps.values()) + interval
        guard = max(self.margin_s + self.poll_s, SCRAPE_GUARD * interval)
        return max(0.0, first_next - time.time() - guard), interval

    def _snapshot(
        self, url: str, metric: MetricQuery, keys: Sequence[Key], samples: Sequence[PromSample]
    ) -> Snapshot:
        mine = [s for s in samples if s.key in keys]
        stamps = [s.timestamp for s in mine]
        return Snapshot(
            url=url,
            query=metric,
            series=tuple((s.labels, s.value) for s in mine),
            taken_at=min(stamps) if stamps else time.time(),
        )

    def _stale(
        self,
        index: int,
        url: str,
        keys: Sequence[Key],
        samples: Sequence[PromSample],
        ups: Sequence[PromSample],
        asked: float,
        moment: str,
    ) -> ScrapeError:
        last = max((s.timestamp for s in samples if s.key in keys), default=None)
        down = [s for s in ups if s.key in keys and s.value == 0 and s.timestamp > asked]
        seen = (
            f"its last sample was scraped {asked - last:.1f} s before it was asked for"
            if last is not None
            else "Prometheus holds no sample of it"
        )
        why = f"Prometheus' scrape of it failed (up=0); {seen}" if down else seen
        instances = ", ".join(instance for _, instance in keys)
        when = f" {moment}" if moment else ""
        return ScrapeError(
            f"no scrape of worker {index} ({instances}) through Prometheus at {self.url}{when} within "
            f"{_seconds(self.max_wait_s)} s ({WAIT_INTERVALS} scrape intervals of {_seconds(self.scrape_interval_s)} s): "
            f"stale; {why}",
            url=url,
            worker_index=index,
        )

    async def _get(self, http: httpx.AsyncClient, query: str) -> list[PromSample]:
        api = f"{self.url}/api/v1/query"
        try:
            response = await http.get(api, params={"query": query}, timeout=self.timeout)
            return parse_samples(response.json())
        except httpx.HTTPError as exc:
            raise ScrapeError(
                f"cannot query Prometheus at {api}: {exc.__class__.__name__}: {exc}", url=api
            ) from exc
        except ValueError as exc:
            raise ScrapeError(f"Prometheus at {api} did not answer with JSON: {exc}", url=api) from exc

    def sentence(self) -> str:
        """How placement was read, and what aligning the bursts to the scrapes cost, in words."""
        cost = (
            f": waiting for scrapes that bracket each burst or window added {_seconds(self.waited_s)} s to "
            f"the verdict over {self.reads} snapshots"
            if self.reads
            else ""
        )
        stale = (
            f"; {self.stale} of them found a worker's scrape missing or stale, and judged nothing"
            if self.stale
            else ""
        )
        windows = f"; {self.windows}" if self.windows else ""
        return (
            f"counters read through Prometheus ({self.url}) at its {_seconds(self.scrape_interval_s)} s scrape "
            f"interval{cost}{stale}{windows}"
        )


@dataclass(frozen=True)
class DiscoveredWorker:
    """A target found by its labels: a worker of the check, its model from a label or a probe."""

    target: PromTarget
    model: str | None
    model_from: str  # "label NAME", "the counter's model label", or "" (not found)

    @property
    def system_url(self) -> str:
        return self.target.scrape_url or f"http://{self.target.instance}/metrics"

    def describe(self, index: int) -> str:
        shown = ", ".join(f"{k}={v}" for k, v in self.target.labels if k not in ("job", "instance"))
        model = f"{self.model} (from {self.model_from})" if self.model else "model unknown"
        return (
            f"worker {index}: {model}; {self.system_url} (job {self.target.job}, instance {self.target.instance}, "
            f"{self.target.health}){'; ' + shown if shown else ''}"
        )


def _get_json(
    url: str,
    params: Mapping[str, str] | None = None,
    *,
    http_config: ScrapeAuth | None = None,
    timeout: float = 10.0,
) -> Any:
    """An API's answer; `http_config` is granted for its origin while it is asked."""
    try:
        with granted(prometheus_access(url, http_config)), clients.client(timeout=timeout) as http:
            response = http.get(url, params=params)
    except httpx.HTTPError as exc:
        raise ScrapeError(
            f"cannot reach Prometheus at {url}: {exc.__class__.__name__}: {exc}", url=url
        ) from exc
    try:
        return response.json()
    except ValueError as exc:
        if response.is_error:  # a proxy in front of it refused (401, 403): its page is no JSON
            hint = (
                ": give its credentials with --prometheus-http-config FILE"
                if response.status_code in (401, 403)
                else ""
            )
            raise ScrapeError(
                f"Prometheus at {url} answered HTTP {response.status_code} {response.reason_phrase}{hint}",
                url=url,
            ) from exc
        raise ScrapeError(f"Prometheus at {url} did not answer with JSON: {exc}", url=url) from exc


def active_targets(prometheus_url: str, *, http_config: HttpConfig = None) -> list[PromTarget]:
    """What Prometheus scrapes now (`/api/v1/targets?state=active`)."""
    url = prometheus_url.rstrip("/") + "/api/v1/targets"
    return parse_targets(
        _get_json(url, {"state": "active"}, http_config=read_config(http_config, HTTP_CONFIG))
    )


def discover_workers(
    prometheus_url: str,
    selector: str | Sequence[LabelMatcher],
    *,
    metric: MetricQuery | str = DEFAULT_METRIC,
    model_label: str = "model",
    targets: Sequence[PromTarget] | None = None,
    http_config: HttpConfig = None,
) -> list[DiscoveredWorker]:
    """The healthy active targets whose labels match `selector`, in a stable order (model, then
    job and instance). A worker's model is its target's `model_label`, else the `model` label of
    its counter as Prometheus last scraped it (a probe), else unknown. `http_config`: how to
    reach Prometheus (its credentials and TLS trust), for the targets and the probe."""
    matchers = parse_label_selector(selector) if isinstance(selector, str) else tuple(selector)
    if not matchers:
        raise ConfigError('--discover prometheus:SELECTOR needs a label selector, e.g. job="workers"')
    auth = read_config(http_config, HTTP_CONFIG)
    found = list(targets) if targets is not None else active_targets(prometheus_url, http_config=auth)
    chosen = [t for t in found if t.matches(matchers)]
    up = [t for t in chosen if t.health == "up"]
    if not up:
        down = (
            f" ({len(chosen)} match but are not up: {', '.join(t.instance for t in chosen)})"
            if chosen
            else ""
        )
        raise ConfigError(
            f"Prometheus at {prometheus_url} has no healthy target matching "
            f"{{{','.join(m.promql() for m in matchers)}}}{down}; it scrapes {len(found)} targets"
        )
    query = MetricQuery.parse(metric) if isinstance(metric, str) else metric
    probed = (
        _probed_models(prometheus_url, query, up, auth)
        if any(t.label(model_label) is None for t in up)
        else {}
    )
    workers = [
        DiscoveredWorker(t, t.label(model_label), f"label {model_label}")
        if t.label(model_label) is not None
        else DiscoveredWorker(t, probed.get(t.key), "the counter's model label" if t.key in probed else "")
        for t in up
    ]
    return sorted(workers, key=lambda w: (w.model or "", w.target.job, w.target.instance))


def discovered_text(prometheus_url: str, selector: str, workers: Sequence[DiscoveredWorker]) -> str:
    """The deployment found, for people, before anything is sent to it."""
    head = (
        f"discovered {len(workers)} workers through Prometheus ({prometheus_url.rstrip('/')}) by {selector}:"
    )
    return "\n".join([head, *(f"  {w.describe(i)}" for i, w in enumerate(workers))])


def _probed_models(
    prometheus_url: str, metric: MetricQuery, targets: Sequence[PromTarget], http_config: ScrapeAuth | None
) -> dict[Key, str]:
    """Each target's model, where its counter carries a `model` label (one value)."""
    counters = PrometheusCounters(prometheus_url, (tuple(t.key for t in targets),))
    url = prometheus_url.rstrip("/") + "/api/v1/query"
    models: dict[Key, set[str]] = {}
    for sample in parse_samples(
        _get_json(url, {"query": counters.query(metric, [0])}, http_config=http_config)
    ):
        if dict(sample.labels).get("model"):
            models.setdefault(sample.key, set()).add(dict(sample.labels)["model"])
    return {key: next(iter(names)) for key, names in models.items() if len(names) == 1}


def prometheus_counters(
    prometheus_url: str,
    system_urls: Sequence[str],
    *,
    selector: str = "",
    targets: Sequence[PromTarget] | None = None,
    http_config: HttpConfig = None,
) -> PrometheusCounters:
    """Read the workers at `system_urls` (each `URL` or `URL+URL`) through Prometheus: each metrics
    URL is found among its active targets (by scrape URL, else by `instance` = host:port), which
    gives its job, instance and scrape interval. One it does not scrape is a ConfigError.
    `http_config`: how to reach Prometheus, for the targets and every read after (a file is read
    once, here)."""
    matchers = parse_label_selector(selector) if selector else ()
    auth = read_config(http_config, HTTP_CONFIG)
    if targets is None:
        targets = active_targets(prometheus_url, http_config=auth)
    found = [t for t in targets if t.matches(matchers)]
    workers, intervals = [], []
    for index, url in enumerate(system_urls):
        keys = []
        for port in port_urls(metrics_url(url)):
            target = next((t for t in found if t.scrape_url.rstrip("/") == port), None) or next(
                (t for t in found if t.instance == urlsplit(port).netloc), None
            )
            if target is None:
                raise ConfigError(
                    f"Prometheus at {prometheus_url} scrapes no target for worker {index} ({port})"
                    f"{' matching ' + selector if selector else ''}; it scrapes "
                    f"{', '.join(sorted(t.instance for t in found)[:8]) or 'nothing'}"
                )
            keys.append(target.key)
            intervals.append(target.scrape_interval_s)
        workers.append(tuple(keys))
    return PrometheusCounters(
        prometheus_url,
        tuple(workers),
        scrape_interval_s=max(intervals, default=DEFAULT_INTERVAL_S),
        selector=matchers,
        http_config=auth,
    )
