"""The router's side of the KV view is read only from a router that applies embedlab's KV events:
one that routes on the text it saw (the Rust routers' cache_aware) is not accused of dropping them."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from embedlab.evidence import clients
from embedlab.evidence.kv_view import kv_view
from embedlab.evidence.target import Target

WORKER = """\
# TYPE dynamo_component_requests_total counter
dynamo_component_requests_total{{worker_id="{wid}"}} 6
# TYPE embedlab_kv_events_total counter
embedlab_kv_events_total{{kind="stored",worker_id="{wid}"}} 6
"""
# embedlab's frontend before it applied any event: the counter is exposed with no sample yet.
UNTOUCHED = """\
# HELP embedlab_frontend_kv_events_applied_total KV events applied to the router's index.
# TYPE embedlab_frontend_kv_events_applied_total counter
"""
APPLIED_ONE = UNTOUCHED + 'embedlab_frontend_kv_events_applied_total{worker_id="a",kind="stored"} 6\n'


def _view(monkeypatch: pytest.MonkeyPatch, router: str | None) -> Any:
    pages = {
        "http://router/metrics": router,
        "http://w0/metrics": WORKER.format(wid="a"),
        "http://w1/metrics": WORKER.format(wid="b"),
    }

    def answer(request: httpx.Request) -> httpx.Response:
        page = pages[str(request.url)]
        return httpx.Response(404) if page is None else httpx.Response(200, text=page)

    monkeypatch.setattr(clients, "client", lambda **_: httpx.Client(transport=httpx.MockTransport(answer)))
    return kv_view(
        Target(frontend_url="http://router", system_urls=("http://w0", "http://w1"), models=("m", "m"))
    )


def test_a_router_without_the_applied_counter_is_judged_on_the_counters_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for router in (None, "# TYPE smg_router_requests_total counter\n"):
        view = _view(monkeypatch, router)
        assert view.made == {0: 6, 1: 6} and view.applied == {} and view.findings() == []


def test_a_router_that_applies_events_is_held_to_each_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    untouched = _view(monkeypatch, UNTOUCHED)
    assert untouched.applied == {0: 0, 1: 0} and len(untouched.findings()) == 2
    one = _view(monkeypatch, APPLIED_ONE)
    assert one.applied == {0: 6, 1: 0}
    assert one.findings() == [
        "worker 1 made 6 KV events that the router never applied: it routes as if that worker's cache were empty"
    ]
