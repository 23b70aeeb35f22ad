"""The harness end to end: both scenarios on both stacks, bite, exit codes, and clean teardown."""

from __future__ import annotations

import json

import pytest

from embedlab import (
    CheckFailedError,
    Deployment,
    DeploymentSpec,
    DispatchCheck,
    multi_model_dispatch,
    same_model_load_balance,
    send_burst,
    table,
)
from embedlab.stacks.dynamo import dynamo_installed

from ..commands import attach_args, run_embedlab
from ..netcheck import listening_addresses
from ..proctools import assert_all_gone, descendants_of, processes_under

STACKS = ["embedded", "dynamo"]


def require(stack: str) -> None:
    # The dynamo extra is part of `make test`; a missing install is a failure, not a skip.
    if stack == "dynamo":
        assert dynamo_installed(), "ai-dynamo is not installed: run `make dynamo`"


def assert_torn_down(dep: Deployment) -> None:
    pids = [p.pid for p in dep.processes if p.pid]
    groups = [p.pgid for p in dep.processes if p.pgid]
    assert pids, "the deployment started no process"
    assert_all_gone(pids, groups, "deployment")


@pytest.mark.parametrize("stack", STACKS)
def test_both_scenarios_on_each_stack(stack: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    require(stack)
    spec = DeploymentSpec.same_model("m", workers=2, stack=stack)
    with Deployment(spec, run_dir=tmp_path / "same") as dep:
        addresses = listening_addresses(
            [p.pid for p in dep.processes] + [c for p in dep.processes for c in descendants_of(p.pid)]
        )
        assert addresses and all(a.startswith("127.0.0.1:") for a in addresses), addresses
        same = same_model_load_balance(dep, requests=40)  # 40: two replicas' 99 % power
    assert same.passed, same.summary()
    assert [row.delta > 0 for row in same.bursts[0].check.rows] == [True, True]  # type: ignore[union-attr]
    assert same.bursts[0].check.total_delta == 40  # type: ignore[union-attr]
    assert same.p_values["m"] is not None
    assert_torn_down(dep)

    with Deployment(DeploymentSpec.multi_model(["a", "b"], stack=stack), run_dir=tmp_path / "multi") as dep:
        multi = multi_model_dispatch(dep, requests=10)
    assert multi.passed, multi.summary()
    deltas = [[r.delta for r in b.check.rows] for b in multi.bursts]  # type: ignore[union-attr]
    assert deltas == [[10, 0], [0, 10]]
    rows = table(multi)
    # Workers by index, counts as integers, and no column that repeats another.
    assert list(rows.columns[:3]) == ["burst", "worker", "serves"]
    assert list(rows.delta) == [10, 0, 0, 10] and str(rows.delta.dtype) == "Int64"
    json.dumps(multi.to_json())
    assert_torn_down(dep)


def test_wrong_expectation_fails_with_the_table_and_still_tears_down(tmp_path) -> None:  # type: ignore[no-untyped-def]
    dep = Deployment(DeploymentSpec.multi_model(["a", "b"]), run_dir=tmp_path)
    with pytest.raises(CheckFailedError) as err:
        with dep:
            # Deliberately wrong: expect worker 0 to serve model "b".
            with DispatchCheck(dep.system_urls, {0}, min_total_delta=5):
                assert send_burst(dep.frontend_url, "b", 10).ok
    message = str(err.value)
    assert "traffic leaked onto worker 1 (+10)" in message and "no traffic reached worker 0" in message
    assert "before" in message and "delta" in message and "expected" in message
    assert_torn_down(dep)


def test_start_failure_halfway_tears_down_what_started(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from embedlab import ServerExitedError, WorkerSpec

    spec = DeploymentSpec(
        workers=(WorkerSpec(model="ok"), WorkerSpec(model="bad", extra_args=("--dim", "0")))
    )
    dep = Deployment(spec, run_dir=tmp_path)
    with pytest.raises(ServerExitedError) as err:
        dep.start()
    assert "worker 1 exited" in str(err.value) and "dim must be positive" in str(err.value)
    assert_torn_down(dep)


@pytest.mark.parametrize("stack", STACKS)
def test_cli_scenarios_print_the_table_and_verdict(stack: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    require(stack)
    out = tmp_path / "r.json"
    proc = run_embedlab(
        "scenario", "multi-model", "--stack", stack, "--json", str(out), "--run-dir", str(tmp_path / "run")
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"multi-model on {stack} (hash): PASSED" in proc.stdout
    assert "serves" in proc.stdout and "delta" in proc.stdout
    assert json.loads(out.read_text())["verdict"] == "passed"


def test_cli_exit_codes_for_failure_and_cannot_run(tmp_path) -> None:  # type: ignore[no-untyped-def]
    bad_args = run_embedlab("scenario", "same-model", "--requests", "0")
    assert bad_args.returncode == 2 and len(bad_args.stderr.strip().splitlines()) == 1
    unreachable = run_embedlab(
        "scenario",
        "same-model",
        "--frontend-url",
        "http://127.0.0.1:9",
        "--system-url",
        "http://127.0.0.1:9",
        "--system-url",
        "http://127.0.0.1:9",
    )
    assert unreachable.returncode == 2
    assert "127.0.0.1:9" in unreachable.stderr and len(unreachable.stderr.strip().splitlines()) == 1
    # A real failure: attach to a running deployment with the models named in the wrong order.
    with Deployment(DeploymentSpec.multi_model(["a", "b"]), run_dir=tmp_path) as dep:
        swapped = run_embedlab(
            "scenario",
            "multi-model",
            "--models",
            "b,a",
            *attach_args(dep),
        )
    assert swapped.returncode == 1, swapped.stdout + swapped.stderr
    assert "FAILED" in swapped.stdout and "leaked" in swapped.stdout


def test_cli_drain_passes_on_embedded(tmp_path) -> None:  # type: ignore[no-untyped-def]
    proc = run_embedlab("scenario", "drain", "--stack", "embedded", "--run-dir", str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "drain on embedded (hash): PASSED"
    assert "drained" in proc.stdout and "its delta while drained  0" in proc.stdout


def test_cli_metric_that_no_worker_exports_exits_2_naming_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A launched deployment reads the asked-for counter too: a missing one is an error, not a silent pass."""
    proc = run_embedlab(
        "scenario", "same-model", "--metric", "no_such_metric_total", "--run-dir", str(tmp_path / "run")
    )
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    (line,) = proc.stderr.strip().splitlines()
    assert "no_such_metric_total" in line and "worker 0" in line, line
    assert processes_under(tmp_path / "run") == [], "the deployment was torn down"
