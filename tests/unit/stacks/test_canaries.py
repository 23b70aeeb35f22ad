"""`canaries=True`: a capability a stack declares, carried from the CLI, a plan and a matrix to the workers' environment."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from embedlab import (
    ConfigError,
    DeploymentSpec,
    StackContext,
    WorkerSpec,
    load_matrix,
)
from embedlab.cli.entry import build_parser
from embedlab.cli.scenario import plan_from_args
from embedlab.cli.stacks import describe
from embedlab.cluster.stack import SendsCanaries
from embedlab.cluster.stack_registry import STACKS, get_stack, stacks_with
from embedlab.defaults import (
    CANARY_INPUT,
    CANARY_METRIC,
    CANARY_WAIT_ENV,
    CANARY_WAIT_S,
    HEALTH_CHECK_ENABLED_ENV,
    HEALTH_CHECK_PAYLOAD_ENV,
)
from embedlab.evidence.metrics import MetricQuery, parse_snapshot
from embedlab.serving.worker.dynamo import Canaries
from embedlab.stacks.dynamo import DynamoRun, DynamoStack

from ...conftest import REPO
from ..stub_stacks import context_for

QUERY = MetricQuery.parse(CANARY_METRIC)
CANARY_KEYS = {HEALTH_CHECK_ENABLED_ENV, CANARY_WAIT_ENV, HEALTH_CHECK_PAYLOAD_ENV}


def test_the_variables_are_the_ones_dynamo_1_6_1_reads() -> None:
    # Measured: its runtime maps DYN_CANARY_WAIT_TIME to canary_wait_time_secs and silently
    # drops DYN_CANARY_WAIT_TIME_SECS (the wait stays 10 s, and no canary comes in a test's time).
    assert (HEALTH_CHECK_ENABLED_ENV, CANARY_WAIT_ENV) == ("DYN_HEALTH_CHECK_ENABLED", "DYN_CANARY_WAIT_TIME")
    assert HEALTH_CHECK_PAYLOAD_ENV == "DYN_HEALTH_CHECK_PAYLOAD"


def test_only_dynamo_declares_canaries_and_every_other_stack_refuses_them() -> None:
    assert stacks_with(lambda s: issubclass(s, SendsCanaries)) == ["dynamo"]
    for name in STACKS.names():
        if name == "dynamo":
            continue
        spec = DeploymentSpec(
            stack=name, canaries=True, workers=(WorkerSpec(model="m"), WorkerSpec(model="m"))
        )
        with pytest.raises(
            ConfigError, match="sends its workers no health-check canaries; leave canaries off"
        ):
            get_stack(name).check(spec)
        get_stack(name).check(DeploymentSpec(stack=name, workers=spec.workers))  # the same spec without: fine


def test_canaries_must_be_a_bool() -> None:
    with pytest.raises(ConfigError, match="canaries must be true or false, got 'yes'"):
        DeploymentSpec(canaries="yes", workers=(WorkerSpec(model="m"),))  # type: ignore[arg-type]


def _context(spec: DeploymentSpec, tmp_path: Path) -> StackContext:
    return context_for(spec, tmp_path, iter(range(3000, 3100)))


def _worker_env(tmp_path: Path, *, canaries: bool, server: str = "embedlab") -> dict[str, str]:
    spec = DeploymentSpec(stack="dynamo", canaries=canaries, workers=(WorkerSpec(model="m", server=server),))
    # As prepared on file discovery (prepare itself wants Dynamo installed).
    ctx = replace(_context(spec, tmp_path), state=DynamoRun(tmp=tmp_path, file_kv=tmp_path))
    return DynamoStack().worker(ctx, 0, spec.workers[0], ctx.system_ports[0]).env


def test_dynamo_workers_get_the_canary_settings_only_when_asked(tmp_path: Path) -> None:
    on = _worker_env(tmp_path, canaries=True)
    assert on[HEALTH_CHECK_ENABLED_ENV] == "true" and on[CANARY_WAIT_ENV] == str(CANARY_WAIT_S)
    assert json.loads(on[HEALTH_CHECK_PAYLOAD_ENV]) == {"input": CANARY_INPUT}
    assert not CANARY_KEYS & set(_worker_env(tmp_path, canaries=False))
    # Dynamo's own vLLM worker has a payload of its own, one its handler takes.
    vllm = _worker_env(tmp_path, canaries=True, server="dynamo-vllm")
    assert HEALTH_CHECK_PAYLOAD_ENV not in vllm and vllm[HEALTH_CHECK_ENABLED_ENV] == "true"


def test_the_cli_option_reaches_the_deployment_spec() -> None:
    def spec_of(*argv: str) -> DeploymentSpec:
        return plan_from_args(build_parser().parse_args(["scenario", "mixed", *argv])).deployment_spec()

    assert spec_of("--stack", "dynamo", "--canaries").canaries is True
    assert spec_of("--stack", "dynamo").canaries is False
    with pytest.raises(ConfigError, match="the embedded frontend sends its workers no health-check canaries"):
        spec_of("--stack", "embedded", "--canaries")


def test_a_matrix_takes_canaries_and_refuses_them_on_a_stack_without(tmp_path: Path) -> None:
    path = tmp_path / "m.toml"
    path.write_text(
        'notebooks = ["same_model_load_balance", "mixed_traffic"]\n[[params]]\nstack = "dynamo"\ncanaries = true\n'
    )
    matrix = load_matrix(path, notebook_dir=REPO / "notebooks")
    assert [job.params["canaries"] for job in matrix.jobs] == [True, True]
    path.write_text('scenarios = ["same-model"]\n[[params]]\nstack = "embedded"\ncanaries = true\n')
    with pytest.raises(ConfigError, match="no health-check canaries"):
        load_matrix(path, notebook_dir=REPO / "notebooks")


def test_embedlab_stacks_says_which_stack_has_canaries() -> None:
    assert "; canaries;" in describe(DynamoStack.capabilities())
    assert "; no canaries;" in describe(get_stack("embedded").capabilities())


def test_the_worker_counts_only_the_payload_it_registered_as_a_canary() -> None:
    payload = {"input": CANARY_INPUT}
    counted = Canaries(payload, "m")
    assert counted.is_canary(dict(payload))
    # A client's request through the frontend always names its model: never a canary.
    assert not counted.is_canary({"model": "m", "input": CANARY_INPUT})
    assert not Canaries(None, "m").is_canary(payload), "no payload registered: no canaries to count"
    read = parse_snapshot(counted.exposition(), url="worker", query=QUERY)
    assert read.value == 0 and read.series[0][0] == (("model", "m"),)
    counted.answered_one()
    counted.answered_one()
    assert parse_snapshot(counted.exposition(), url="worker", query=QUERY).value == 2
