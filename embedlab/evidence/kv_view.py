"""The router's view of the workers' KV caches, held against what the workers say.

A KV-aware router routes on the KV events the workers publish (blocks stored, removed). A
worker whose events never reach the router looks empty to it, and prompts cached there are
routed as if new: affinity breaks with no error anywhere. This reads both sides' Prometheus
exposition (parsed by prometheus_client) and joins them by each worker's id, the `worker_id`
label on its own `dynamo_component_*` series:

  - embedlab's frontend counts the events it applied per instance
    (`embedlab_frontend_kv_events_applied_total{worker_id, kind}`), and embedlab's worker the
    events its cache made (`embedlab_kv_events_total{kind}`): a worker that made events the
    router never applied is named;
  - Dynamo 1.6.1's frontend counts the events its indexer applied for all workers together
    (`dynamo_component_kv_cache_events_applied{event_type, status}`, labelled with the
    frontend's own id) and lists each worker its router knows
    (`dynamo_component_router_worker_registered{router_worker_id}`, the worker's id in decimal,
    where the worker's own series carry it in hex); the mocker counts no events it published.
    So a worker is named where the router does not know it at all, and the events applied are
    shown as one total (measured: FACTS.md).

A router that exposes neither (the Rust routers' `cache_aware` keeps a tree of the text it routed,
and reads no KV events) is judged on the workers' counters alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

from . import clients
from .metrics import port_urls
from .target import Target

__all__ = ["KvView", "kv_view"]

WORKER_EVENTS = "embedlab_kv_events"
ROUTER_EVENTS = "embedlab_frontend_kv_events_applied"
DYNAMO_APPLIED = "dynamo_component_kv_cache_events_applied"
DYNAMO_REGISTERED = "dynamo_component_router_worker_registered"


@dataclass(frozen=True)
class KvView:
    """Per worker index: its id, the events it made and the router applied (None: not said)."""

    ids: dict[int, str]
    made: dict[int, float] = field(default_factory=dict)
    applied: dict[int, float] = field(default_factory=dict)
    known: dict[int, bool] = field(default_factory=dict)  # in the KV router's worker list
    applied_total: dict[str, float] = field(default_factory=dict)  # "kind/status" -> all workers together

    def rows(self) -> list[tuple[str, str]]:
        rows = []
        for i in sorted(self.ids):
            parts = []
            if i in self.made:
                parts.append(f"made {self.made[i]:g} KV events")
            if i in self.applied:
                parts.append(f"router applied {self.applied[i]:g}")
            if i in self.known:
                parts.append("known to the KV router" if self.known[i] else "NOT known to the KV router")
            if parts:
                rows.append((f"worker {i} KV", ", ".join(parts)))
        if self.applied_total:
            shown = ", ".join(f"{k} {v:g}" for k, v in sorted(self.applied_total.items()) if v) or "none"
            rows.append(("router applied (all workers)", shown))
        return rows

    def findings(self) -> list[str]:
        """Workers whose events never reached the router, in words."""
        found = []
        for i in sorted(self.ids):
            if self.made.get(i, 0) > 0 and i in self.applied and self.applied[i] == 0:
                found.append(
                    f"worker {i} made {self.made[i]:g} KV events that the router never applied: "
                    "it routes as if that worker's cache were empty"
                )
            if self.known.get(i) is False:
                found.append(f"worker {i} ({self.ids[i]}) is not in the KV router's worker list")
        return found

    def minus(self, earlier: KvView) -> KvView:
        """What changed since `earlier` (counters; the router's worker list as it is now)."""

        def delta(now: dict[int, float], then: dict[int, float]) -> dict[int, float]:
            return {i: v - then.get(i, 0.0) for i, v in now.items()}

        return KvView(
            ids=self.ids,
            made=delta(self.made, earlier.made),
            applied=delta(self.applied, earlier.applied),
            known=self.known,
            applied_total={k: v - earlier.applied_total.get(k, 0.0) for k, v in self.applied_total.items()},
        )


def _families(client: httpx.Client, url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    try:
        response = client.get(url)
        response.raise_for_status()
    except httpx.HTTPError:
        return {}
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    try:
        for family in text_string_to_metric_families(response.text):
            if family.type == "counter":  # a counter it exposes, under its family's name, counted or not yet
                found.setdefault(family.name, [])
            for sample in family.samples:
                found.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    except ValueError:
        return {}
    return found


def _worker_id(samples: dict[str, list[tuple[dict[str, str], float]]]) -> str | None:
    for name in ("dynamo_component_requests_total", f"{WORKER_EVENTS}_total"):
        for labels, _ in samples.get(name, []):
            if labels.get("worker_id"):
                return labels["worker_id"]
    return None


def _decimal(worker_id: str) -> str:
    """A worker's hex id as Dynamo's router names it (decimal); itself where it is no hex."""
    try:
        return str(int(worker_id, 16))
    except ValueError:
        return worker_id


def kv_view(target: Target, *, since: KvView | None = None) -> KvView | None:
    """Both sides' KV-event counts now (minus `since`); None where neither side exposes any."""
    with clients.client(timeout=5.0) as client:
        router = _families(client, target.frontend_url.rstrip("/") + "/metrics")
        workers = [
            _families(client, port_urls(url)[0].rstrip("/") + "/metrics") for url in target.system_urls
        ]
    ids = {i: wid for i, s in enumerate(workers) if (wid := _worker_id(s)) is not None}
    made = {
        i: sum(v for _, v in s.get(f"{WORKER_EVENTS}_total", []))
        for i, s in enumerate(workers)
        if f"{WORKER_EVENTS}_total" in s
    }
    applied: dict[int, float] = {}
    # Only a router that applies embedlab's KV events says how many: one that routes on the text it
    # saw (the Rust routers' cache_aware) or on events of its own kind exposes no such counter.
    if ROUTER_EVENTS in router:
        by_id: dict[str, float] = {}
        for labels, value in router.get(f"{ROUTER_EVENTS}_total", []):
            by_id[labels.get("worker_id", "")] = by_id.get(labels.get("worker_id", ""), 0.0) + value
        applied = {i: by_id.get(wid, 0.0) for i, wid in ids.items() if i in made}
    known: dict[int, bool] = {}
    registered = {labels.get("router_worker_id") for labels, v in router.get(DYNAMO_REGISTERED, []) if v}
    if DYNAMO_REGISTERED in router:
        known = {i: _decimal(wid) in registered for i, wid in ids.items()}
    applied_total: dict[str, float] = {}
    for labels, value in router.get(DYNAMO_APPLIED, []) + router.get(f"{DYNAMO_APPLIED}_total", []):
        key = f"{labels.get('event_type', '?')}/{labels.get('status', '?')}"
        applied_total[key] = applied_total.get(key, 0.0) + value
    if not (made or applied or known or applied_total):
        return None
    view = KvView(ids=ids, made=made, applied=applied, known=known, applied_total=applied_total)
    return view.minus(since) if since is not None else view
