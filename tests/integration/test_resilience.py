"""Workers leaving: failover without loss, drains, restarts, and faults the checks must catch."""

from __future__ import annotations

import pytest

from embedlab import Deployment, DeploymentSpec, multi_model_dispatch, same_model_load_balance
from embedlab.resilience import drain, failover
from embedlab.stacks.dynamo import dynamo_installed


def test_failover_on_embedded_loses_nothing(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with Deployment(DeploymentSpec.same_model("m", workers=2), run_dir=tmp_path) as dep:
        result = failover(dep, requests=200, concurrency=8, kill_after=50)
        assert not dep.workers[1].alive()
    assert result.passed, result.summary()
    assert result.extra["failed_requests"] == 0
    assert result.extra["excluded_after_s"] is not None and result.extra["excluded_after_s"] < 2 * 3.0
    assert sum(result.bursts[0].traffic.served_by().values()) == 200
    result.plot()


def test_failover_on_dynamo_is_reported_not_asserted(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert dynamo_installed()
    with Deployment(DeploymentSpec.same_model("m", workers=2, stack="dynamo"), run_dir=tmp_path) as dep:
        result = failover(dep, requests=120, concurrency=8, kill_after=30)
    assert result.passed and result.extra["asserted"] is False
    assert result.extra["killed_at_s"] is not None
    assert result.bursts[0].check is not None and result.bursts[0].check.rows[0].delta > 0


def test_drained_worker_gets_nothing_then_resumes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with Deployment(DeploymentSpec.same_model("m", workers=2), run_dir=tmp_path) as dep:
        drained = drain(dep, victim=1, requests=20)
        assert drained.passed, drained.summary()
        assert [r.delta for r in drained.bursts[0].check.rows] == [20, 0]  # type: ignore[union-attr]
        assert same_model_load_balance(dep).passed, "the resumed worker takes traffic again"


def test_restart_between_snapshots_is_inconclusive(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with Deployment(DeploymentSpec.same_model("m", workers=2), run_dir=tmp_path) as dep:
        restarted = []

        def restart_once(record) -> None:  # type: ignore[no-untyped-def]
            if not restarted:
                restarted.append(True)
                dep.restart_worker(1)

        result = same_model_load_balance(dep, requests=20, on_response=restart_once)
    assert result.verdict == "inconclusive" and not result.passed
    assert result.reasons == ["m: counter reset on worker 1"]


@pytest.mark.parametrize(
    "fault,scenario",
    [("leak:0.1", "multi"), ("stick", "same"), ("skew:0.95", "same"), ("drop:0.2", "same"), ("ghost", "drain")],
)
def test_injected_fault_is_caught(fault: str, scenario: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    if scenario == "multi":
        spec = DeploymentSpec.multi_model(["a", "b"], frontend_args=("--fault", fault))
    else:
        spec = DeploymentSpec.same_model("m", workers=2, frontend_args=("--fault", fault))
    with Deployment(spec, run_dir=tmp_path) as dep:
        assert "FAULT INJECTION IS ON" in dep.log_paths["frontend"].read_text()
        if scenario == "multi":
            result = multi_model_dispatch(dep, requests_per_burst=10)
        elif scenario == "drain":
            result = drain(dep, victim=1, requests=20)
        else:
            result = same_model_load_balance(dep, requests=60)
    assert not result.passed, f"{fault} went unnoticed: {result.summary()}"
