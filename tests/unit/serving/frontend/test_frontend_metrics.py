"""The frontend's request series, counted through cached children and a plain in-flight int."""

from __future__ import annotations

from prometheus_client import generate_latest

from embedlab.serving.frontend.instances import InstanceTable
from embedlab.serving.frontend.metrics import FrontendMetrics, export, merge


def test_answered_requests_and_inflight_reach_the_scrape() -> None:
    metrics = FrontendMetrics(InstanceTable(ttl=10))
    metrics.inflight_now = 3
    metrics.answered("a", 200, 0.003)
    metrics.answered("a", 200, 0.2)
    metrics.answered("a", 404, 0.001)
    metrics.answered("__unknown__", 404, 0.001)
    text = generate_latest(metrics.prom).decode()
    assert 'embedlab_frontend_requests_total{model="a",status="200"} 2.0' in text
    assert 'embedlab_frontend_requests_total{model="a",status="404"} 1.0' in text
    assert 'embedlab_frontend_requests_total{model="__unknown__",status="404"} 1.0' in text
    assert 'embedlab_frontend_request_duration_seconds_count{model="a"} 3.0' in text
    assert 'embedlab_frontend_request_duration_seconds_bucket{le="0.005",model="a"} 2.0' in text
    assert "embedlab_frontend_inflight_requests 3.0" in text


def test_routing_processes_counts_sum_in_the_merged_scrape() -> None:
    """What a multi-process frontend's owner merges: each process's cached children."""
    processes = [FrontendMetrics(InstanceTable(ttl=10)) for _ in range(2)]
    for i, metrics in enumerate(processes):
        metrics.inflight_now = i + 1
        for _ in range(i + 2):
            metrics.answered("m", 200, 0.01)
    merged = {m.name: m for m in merge(export(p.prom) for p in processes)}
    requests = {s.name: s.value for s in merged["embedlab_frontend_requests"].samples}
    assert requests["embedlab_frontend_requests_total"] == 5
    inflight = [s.value for s in merged["embedlab_frontend_inflight_requests"].samples]
    assert inflight == [3]
