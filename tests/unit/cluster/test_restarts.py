"""The restart policy's budget and back-off, and what a child process is given to import: pure logic."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from embedlab import ConfigError, ScenarioPlan, WorkerSpec
from embedlab.cli.entry import build_parser
from embedlab.cli.scenario import plan_from_args
from embedlab.cluster.events import EventLog
from embedlab.cluster.supervisor import GAVE_UP, RestartBudget
from embedlab.defaults import PLUGINS_ENV, RESTART_BACKOFF_MAX_S, SAFE_PATH_ENV
from embedlab.plugins import child_env
from embedlab.scenarios.result import ScenarioResult
from embedlab.verdicts import Verdict

from ...conftest import REPO


def crash_loop(budget: RestartBudget, *, starts_in: float = 0.0) -> list[float]:
    """The waits before each restart of a worker that exits `starts_in` seconds after every start."""
    waits, now = [], 0.0
    while (wait := budget.next_wait(now)) is not None:
        waits.append(wait)
        now += wait
        budget.spend(now)
        now += starts_in
    return waits


def test_a_worker_that_exits_at_once_is_restarted_limit_times_with_doubling_waits_then_given_up() -> None:
    budget = RestartBudget(backoff=0.5, limit=5, window=120.0)
    assert crash_loop(budget) == [0.5, 1.0, 2.0, 4.0, 8.0]
    assert budget.next_wait(100.0) is None  # still spent: the restarts are within the window


def test_the_waits_stop_doubling_at_the_cap() -> None:
    waits = crash_loop(RestartBudget(backoff=1.0, limit=12, window=1e6))
    assert len(waits) == 12 and max(waits) == RESTART_BACKOFF_MAX_S
    assert waits == sorted(waits) and waits[:3] == [1.0, 2.0, 4.0]


def test_a_worker_that_crashes_once_comes_back_after_the_first_wait_and_its_budget_refills() -> None:
    budget = RestartBudget(backoff=0.5, limit=2, window=60.0)
    assert budget.next_wait(10.0) == 0.5
    assert budget.spend(10.5) == 1
    # It served for longer than the window: the next crash is a first one again.
    assert budget.next_wait(80.0) == 0.5 and budget.spend(80.5) == 1
    assert budget.next_wait(90.0) == 1.0 and budget.spend(91.0) == 2
    assert budget.next_wait(92.0) is None  # two restarts within 60 s: spent


def test_a_crash_loop_slower_than_the_window_is_never_given_up() -> None:
    # Each start runs 10 s before it exits; a window of 5 s never holds more than one restart.
    budget = RestartBudget(backoff=0.5, limit=1, window=5.0)
    now = 0.0
    for _ in range(20):
        wait = budget.next_wait(now)
        assert wait == 0.5
        now += wait
        budget.spend(now)
        now += 10.0


def test_the_budget_comes_from_the_worker_spec_and_bad_values_fail_when_the_spec_is_made() -> None:
    worker = WorkerSpec(model="m", restart="on-exit", restart_backoff=0.25, restart_limit=3, restart_window=9)
    assert RestartBudget.of(worker) == RestartBudget(backoff=0.25, limit=3, window=9)
    for bad in ({"restart_limit": 0}, {"restart_limit": True}, {"restart_limit": 2.5}):
        with pytest.raises(ConfigError, match="restart_limit must be a whole number"):
            WorkerSpec(model="m", **bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="restart_backoff must be 0 or more"):
        WorkerSpec(model="m", restart_backoff=-1)
    with pytest.raises(ConfigError, match="restart_window must be a positive"):
        WorkerSpec(model="m", restart_window=0)


def test_the_command_line_and_a_plan_reach_the_budget() -> None:
    args = build_parser(command="scenario").parse_args(
        ["scenario", "same-model", "--restart", "on-exit", "--restart-limit", "2", "--restart-backoff", "0.1"]
    )
    workers = plan_from_args(args).deployment_spec().workers
    assert {(w.restart, w.restart_limit, w.restart_backoff) for w in workers} == {("on-exit", 2, 0.1)}
    default = ScenarioPlan(scenario="same-model", restart="on-exit").deployment_spec().workers[0]
    assert (default.restart_limit, default.restart_backoff) == (
        WorkerSpec(model="m").restart_limit,
        WorkerSpec(model="m").restart_backoff,
    )
    with pytest.raises(ConfigError, match="restart_limit"):
        ScenarioPlan(scenario="same-model", restart="on-exit", restart_limit=0)


def result(verdict: Verdict) -> ScenarioResult:
    return ScenarioResult(
        scenario="s", stack="embedded", params={}, workers=[], bursts=[], verdict=verdict, reasons=[]
    )


def test_a_worker_given_up_on_is_a_reason_of_the_result_and_no_run_passes_with_it() -> None:
    events = EventLog()
    events.record("exit", "worker 1 (code 1)")
    events.record(GAVE_UP, "worker 1: 5 restarts within 120 s ...\nTraceback: boom")
    passed = result(Verdict.PASSED)
    passed.note_given_up(events)
    assert passed.verdict == Verdict.FAILED
    assert passed.reasons == [
        "the restart policy gave up on worker 1: 5 restarts within 120 s ...\nTraceback: boom"
    ]
    doubtful = result(Verdict.INCONCLUSIVE)
    doubtful.note_given_up(events)
    assert doubtful.verdict == Verdict.INCONCLUSIVE and len(doubtful.reasons) == 1
    clean = result(Verdict.PASSED)
    clean.note_given_up(EventLog())
    assert clean.passed and clean.reasons == []


def test_a_child_runs_in_safe_path_mode_with_its_plugin_files_by_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    env = child_env({PLUGINS_ENV: "mine.py, pkg.module,sub/other.py", "PYTHONPATH": "/x"})
    assert env[SAFE_PATH_ENV] == "1"
    assert env[PLUGINS_ENV].split(",") == [
        str(tmp_path / "mine.py"),
        "pkg.module",
        str(tmp_path / "sub/other.py"),
    ]
    assert env["PYTHONPATH"] == "/x"  # embedlab is not found through this folder: nothing to add
    assert PLUGINS_ENV not in child_env({})


def test_a_child_of_a_harness_run_in_embedlabs_checkout_finds_embedlab_by_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The current folder found embedlab before; safe-path mode drops it, so the checkout is named.
    monkeypatch.chdir(REPO)
    assert child_env({})["PYTHONPATH"] == str(REPO)
    assert child_env({"PYTHONPATH": f"/x{os.pathsep}{REPO}"})["PYTHONPATH"] == f"/x{os.pathsep}{REPO}"
