"""Dynamo 1.6.1's frontend log as per-response attribution: its `Selected worker` lines, the
instance ids mapped to workers by their counters' `worker_id` label, and what is left unattributed."""

from __future__ import annotations

import json
from pathlib import Path

from embedlab.evidence.dynamo_log import (
    FrontendLog,
    attributed,
    instances,
    instances_from_health,
    selected_workers,
)
from embedlab.evidence.metrics import DEFAULT_METRIC, Snapshot
from embedlab.scenarios.plan import ScenarioPlan

A, B = 704403488172215793, 1234567890123


def _line(request: str, worker: int, **extra: object) -> str:
    # The shape measured on Dynamo 1.6.1 (DYN_LOGGING_JSONL=true, push_router at info).
    return json.dumps(
        {
            "time": "2026-12-01T10:00:00Z",
            "level": "INFO",
            "file": "lib/runtime/src/pipeline/network/egress/push_router.rs",
            "line": 924,
            "target": "dynamo_runtime::pipeline::network::egress::push_router",
            "message": "Selected worker",
            "worker_id": worker,
            "x_request_id": request,
            "router_mode": "round-robin",
            **extra,
        }
    )


def _snap(worker_id: str) -> Snapshot:
    labels = (("dynamo_component", "backend"), ("worker_id", worker_id))
    return Snapshot(url="http://w", query=DEFAULT_METRIC, series=((labels, 3.0),))


def test_the_selections_are_read_by_request_id_and_other_lines_are_skipped() -> None:
    lines = [
        _line("r-0", A),
        "2026-12-01T10:00:00Z WARN not json: Selected worker",
        json.dumps({"level": "INFO", "message": "route request completed", "x_request_id": "r-0"}),
        json.dumps(
            {"message": "Selected worker", "fields": {"worker_id": B}, "span": {"x_request_id": "r-1"}}
        ),
        _line("r-2", A),
        _line("r-2", B),  # reselected: an instance disappeared during routing
    ]
    assert selected_workers(lines) == {"r-0": [A], "r-1": [B], "r-2": [A, B]}


def test_instance_ids_name_workers_by_their_counters_label_in_decimal_or_hex() -> None:
    workers = instances([_snap(str(A)), _snap(format(B, "x"))], [0, 2])
    assert workers[A] == 0 and workers[B] == 2


def test_every_answered_request_needs_one_selection_of_a_known_worker() -> None:
    workers = {A: 0, B: 1}
    selected = {"r-0": [A], "r-1": [B], "r-2": [B], "r-3": [A, B]}
    assert attributed({"r-0": 200, "r-1": 200, "r-2": 400}, selected, workers) == {0: 1, 1: 2}
    # No answer: it may never have been routed, and counts nowhere.
    assert attributed({"r-0": 200, "r-9": 0}, selected, workers) == {0: 1}
    assert attributed({"r-0": 200, "r-3": 200}, selected, workers) is None  # two selections
    assert attributed({"r-0": 200, "r-9": 200}, selected, workers) is None  # none logged
    assert attributed({"r-0": 200}, {"r-0": [42]}, workers) is None  # an instance no counter names


def test_the_log_is_read_from_where_it_stood_when_the_burst_began(tmp_path: Path) -> None:
    log = FrontendLog(tmp_path / "frontend.log")
    assert log.mark() == 0 and log.selected(0) == {}
    log.path.write_text(_line("old", A) + "\n")
    since = log.mark()
    with log.path.open("a") as f:
        f.write(_line("new", B) + "\n")
    assert log.selected(since) == {"new": [B]} and log.selected(0)["old"] == [A]


def test_an_attached_plan_hands_the_log_to_its_target() -> None:
    plan = ScenarioPlan(
        scenario="same-model", frontend_url="http://f:8000", system_urls=("http://w0", "http://w1"),
        dynamo_log="/var/log/frontend.jsonl",
    )  # fmt: skip
    assert plan.target().dynamo_log == "/var/log/frontend.jsonl"


def test_instance_ids_name_workers_by_the_frontends_health_where_an_endpoint_is_one_workers() -> None:
    def snap(component: str) -> Snapshot:
        labels = (
            ("dynamo_component", component),
            ("dynamo_endpoint", "generate"),
            ("dynamo_namespace", "ns"),
        )
        return Snapshot(url="http://w", query=DEFAULT_METRIC, series=((labels, 1.0),))

    health = {
        "status": "healthy",
        "instances": [
            {"instance_id": A, "namespace": "ns", "component": "embed-worker-1", "endpoint": "generate"},
            {"instance_id": B, "namespace": "ns", "component": "embed-worker-2", "endpoint": "generate"},
            {"instance_id": 7, "namespace": "ns", "component": "shared", "endpoint": "generate"},
        ],
    }
    snapshots = [snap("embed-worker-1"), snap("embed-worker-2"), snap("shared"), snap("shared")]
    assert instances_from_health(health, snapshots, [0, 1, 2, 3]) == {A: 0, B: 1}  # "shared" is two workers'
    assert instances_from_health("not json", snapshots, [0, 1, 2, 3]) == {}
