"""Disaggregated deployments: which workers prefill and which decode, and what refuses a stage."""

from __future__ import annotations

import pytest

from embedlab import ConfigError, DeploymentSpec, ScenarioPlan
from embedlab.cluster.spec import WorkerSpec
from embedlab.cluster.stack_registry import get_stack
from embedlab.cluster.worker_server import check_servers
from embedlab.scenarios.builtin.disagg import _stage_reasons


def _pool(*stages: str | None, server: str = "mocker", **options: object) -> DeploymentSpec:
    workers = tuple(WorkerSpec(model="m", server=server, stage=s) for s in stages)
    return DeploymentSpec(stack="dynamo", workers=workers, **options)  # type: ignore[arg-type]


def test_a_plan_makes_the_first_replicas_of_each_model_prefill_workers() -> None:
    plan = ScenarioPlan(scenario="prefill-decode", stack="dynamo", worker_server="mocker", workers=5)
    spec = plan.deployment_spec()
    assert [w.stage for w in spec.workers] == ["prefill", "prefill", "decode", "decode", "decode"]
    assert spec.endpoints == "model"  # the scenario's, since Dynamo needs each stage on one endpoint


def test_a_plan_leaving_no_decode_worker_is_refused() -> None:
    with pytest.raises(ConfigError, match="no decode worker"):
        ScenarioPlan(scenario="prefill-decode", stack="dynamo", worker_server="mocker", workers=2)


def test_a_model_needs_both_stages_and_nothing_else() -> None:
    with pytest.raises(ConfigError, match="needs prefill and decode workers"):
        _pool("prefill", "prefill")
    with pytest.raises(ConfigError, match="aggregated"):
        _pool("prefill", "decode", None)
    with pytest.raises(ConfigError, match="stage must be one of"):
        WorkerSpec(model="m", stage="encode")


def test_dynamo_refuses_a_stage_spread_over_endpoints() -> None:
    dynamo = get_stack("dynamo")
    dynamo.check(_pool("prefill", "prefill", "decode", "decode", endpoints="model"))
    with pytest.raises(ConfigError, match="prefill workers are on several endpoints"):
        dynamo.check(_pool("prefill", "prefill", "decode", "decode"))


def test_stages_need_a_stack_and_a_server_that_disaggregate() -> None:
    staged = _pool("prefill", "decode", endpoints="model")
    with pytest.raises(ConfigError, match="does not route prefill and decode separately"):
        get_stack("embedded").check(DeploymentSpec(stack="embedded", workers=staged.workers))
    own = _pool("prefill", "decode", server="embedlab", endpoints="model")
    with pytest.raises(ConfigError, match="has no prefill stage"):
        check_servers(get_stack("dynamo"), own)


def test_each_stage_counts_every_answered_request_once_and_uses_every_worker() -> None:
    assert _stage_reasons("prefill", {0: 3.0, 1: 8.0}, 11) == []
    (twice,) = _stage_reasons("decode", {2: 9.0, 3: 4.0}, 11)
    assert "counted 13 for 11" in twice and "served twice" in twice
    skipped, still = _stage_reasons("prefill", {0: 9.0, 1: 0.0}, 11)
    assert "2 never reached a prefill worker" in skipped
    assert still.startswith("worker 1 (prefill) took no part")
