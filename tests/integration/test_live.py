"""A notebook's live deployment on real servers: Start twice never leaks, a stopped one says so,
and the launch reports each process as it gets ready. Processes are followed by PID."""

from __future__ import annotations

import io
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from embedlab import (
    Deployment,
    DeploymentSpec,
    DeploymentStoppedError,
    Explorer,
    LaunchProgress,
    ScenarioPlan,
    ServerExitedError,
    WorkerSpec,
    live_deployment,
    same_model_load_balance,
    start_deployment,
    stop_deployment,
    table,
)
from embedlab.progress import LaunchStep

from ..commands import run_embedlab
from ..proctools import assert_groups_gone, deployment_pids, processes_under, wait_gone


@pytest.fixture
def slot() -> Iterator[str]:
    """A slot of its own per test, emptied (its deployment stopped) whatever happens."""
    key = "test"
    yield key
    stop_deployment(key=key)


def test_a_second_start_stops_the_first_deployment(slot: str, tmp_path: Path) -> None:
    # seed None: each start routes on a fresh seed of its own, shown under its table (issue 43).
    plan = ScenarioPlan.from_params(scenario="same-model", seed=None, run_dir=str(tmp_path / "run"))
    first = start_deployment(plan, key=slot, progress=False)
    seed = first.spec.seed
    assert isinstance(seed, int) and f"the frontend's routing seed: {seed}" in table(first).caption
    first_pids = deployment_pids(first)
    assert len(first_pids) == 3
    second = start_deployment(plan, key=slot, progress=False)
    assert_groups_gone(first_pids)  # stopped before the second launched, not left to the kernel's exit
    second_pids = deployment_pids(second)
    assert len(second_pids) == 3 and not set(second_pids) & set(first_pids)
    assert live_deployment(key=slot) is second
    assert second.spec.seed != seed  # one chance in 2**31 of a repeat
    # Each start keeps its own logs: the second goes one level down in the named run folder.
    assert (tmp_path / "run" / "worker-1.log").is_file() and (
        tmp_path / "run" / "start-2" / "worker-1.log"
    ).is_file()
    assert same_model_load_balance(second, requests=40).passed  # 40: two replicas' 99 % power
    stop_deployment(key=slot)
    assert_groups_gone(second_pids)
    assert processes_under(tmp_path / "run") == []


def test_the_stop_cell_says_what_it_did_in_a_line_and_returns_nothing(
    slot: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The explore notebook's last cell, `stop_deployment(when=stop_at_end)`: a returned string
    would show quoted under the cell (`''` where nothing was stopped)."""
    plan = ScenarioPlan.from_params(scenario="same-model", run_dir=str(tmp_path / "run"))
    dep = start_deployment(plan, key=slot, progress=False)
    pids = deployment_pids(dep)
    assert stop_deployment(key=slot, when=False) is None  # type: ignore[func-returns-value]
    assert capsys.readouterr().out == (
        f"the deployment keeps running (run dir {dep.run_dir}): stop_deployment() or dep.stop() stops it\n"
    )
    assert all(p.alive() for p in dep.processes)
    assert stop_deployment(key=slot) is None  # type: ignore[func-returns-value]
    assert_groups_gone(pids)
    assert capsys.readouterr().out.startswith(
        f"stopped the deployment this notebook started (frontend and 2 workers, run dir {dep.run_dir}) in "
    )
    stop_deployment(key=slot)  # nothing left to stop: nothing to say
    stop_deployment(key=slot, when=False)
    assert capsys.readouterr().out == ""


def test_a_burst_on_a_stopped_deployment_is_one_clear_error(tmp_path: Path) -> None:
    with Deployment(DeploymentSpec.same_model("m", workers=2), run_dir=tmp_path) as dep:
        explorer = Explorer(dep)
        explorer.burst(10)
    with pytest.raises(DeploymentStoppedError, match=r"was stopped .* run the Start cell again"):
        explorer.burst(10)
    with pytest.raises(DeploymentStoppedError):
        same_model_load_balance(dep, requests=10)


def test_a_deployment_whose_frontend_died_names_it(tmp_path: Path) -> None:
    with Deployment(DeploymentSpec.same_model("m", workers=2), run_dir=tmp_path) as dep:
        assert dep.frontend is not None and dep.frontend.pid is not None
        pid = dep.frontend.pid
        dep.frontend.signal(signal.SIGKILL)
        assert wait_gone([pid]) == []
        with pytest.raises(
            DeploymentStoppedError, match=rf"frontend \(pid {pid}\) exited with code -9; start a new one"
        ):
            Explorer(dep).burst(10)


def test_the_launch_reports_each_process_as_it_gets_ready(tmp_path: Path) -> None:
    events: list[LaunchStep] = []
    with Deployment(DeploymentSpec.same_model("m", workers=2), run_dir=tmp_path, progress=events.append):
        pass
    steps = [(e.kind, e.process) for e in events if e.kind != "poll"]
    assert steps == [
        ("starting", "frontend"),
        ("starting", "worker 0"),
        ("starting", "worker 1"),
        ("waiting", "frontend"),
        ("ready", "frontend"),
        ("waiting", "worker 0"),
        ("ready", "worker 0"),
        ("waiting", "worker 1"),
        ("ready", "worker 1"),
        ("done", ""),
    ]
    ready = {e.process: e for e in events if e.kind == "ready"}
    assert ready["worker 1"].detail.startswith("its /health answered 200 and the frontend listed model 'm'")
    assert all(e.seconds > 0 for e in ready.values())


def test_a_failed_launch_names_the_process_and_keeps_the_log_tail(tmp_path: Path) -> None:
    log = io.StringIO()
    spec = DeploymentSpec(
        workers=(WorkerSpec(model="ok"), WorkerSpec(model="bad", extra_args=("--dim", "0")))
    )
    dep = Deployment(spec, run_dir=tmp_path, progress=LaunchProgress(file=log, notebook=False))
    with pytest.raises(ServerExitedError) as err:
        dep.start()
    assert "worker 1 exited" in str(err.value) and "dim must be positive" in str(err.value)  # the log tail
    last = log.getvalue().strip().splitlines()[-1]
    assert last.startswith("worker 1 FAILED: worker 1 exited with code") and last.endswith(
        "everything started was stopped"
    )
    assert processes_under(tmp_path) == []


def test_the_cli_shows_the_launch_when_asked(tmp_path: Path) -> None:
    proc = run_embedlab(
        "scenario", "same-model", "--progress", "--run-dir", str(tmp_path / "run"), timeout=120
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "frontend ready after" in proc.stderr and "all 3 processes ready in" in proc.stderr, proc.stderr
    assert "40 of 40 requests for 'embed-model' sent in" in proc.stderr, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "same-model on embedded (hash): PASSED"
