"""Dynamo as it runs in production: etcd discovery, workers on other hosts (network namespaces), and
the faults of a real cluster. Real etcd, real Dynamo, real namespaces; found and checked by PID and name."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from embedlab import (
    Deployment,
    DeploymentSpec,
    DeploymentStoppedError,
    ScenarioPlan,
    WorkerSpec,
    plot,
    run_scenario,
    same_model_load_balance,
)
from embedlab.scenarios.builtin.cluster import etcd_restart
from embedlab.stacks.dynamo import dynamo_installed

from ..commands import attach_args, run_embedlab
from ..proctools import processes_under, wait_gone, wait_until
from ..robustness.test_orphans import harness

pytestmark = [pytest.mark.dynamo, pytest.mark.netns]  # netns: it compares the machine's namespaces
ON_THREE_HOSTS = ("--stack", "dynamo", "--discovery", "etcd", "--hosts", "3")


def namespaces() -> set[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in listed.splitlines() if line.strip()}


def loopback_addresses() -> set[str]:
    out = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "dev", "lo"], capture_output=True, text=True, check=True
    ).stdout
    return {line.split()[3].split("/")[0] for line in out.splitlines()}


def etcds_under(run_dir: Path) -> list[int]:
    """etcd processes whose data dir lies under `run_dir` (by their command line, never by name alone)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"etcd") and any(a.startswith(str(run_dir).encode()) for a in argv):
            found.append(int(entry.name))
    return found


def not_logs(run_dir: Path) -> list[Path]:
    return [p for p in run_dir.rglob("*") if not (p.is_file() and p.suffix == ".log")]


@pytest.fixture(autouse=True)
def dynamo_and_etcd() -> None:
    # Both are installed by `make test`: a missing one is a failure, not a skip.
    assert dynamo_installed(), "ai-dynamo is not installed: run `make dynamo`"
    assert subprocess.run(["sh", "-c", "command -v etcd"], capture_output=True).returncode == 0, (
        "make test installs etcd-server"
    )


@pytest.mark.parametrize("scenario", ["same-model", "multi-model"])
def test_dispatch_scenarios_pass_on_etcd_across_three_hosts_and_leave_nothing(
    scenario: str, tmp_path: Path
) -> None:
    before, lo_before = namespaces(), loopback_addresses()
    run_dir, out = tmp_path / "run", tmp_path / "result.json"
    proc = run_embedlab(
        "scenario",
        scenario,
        *ON_THREE_HOSTS,
        "--json",
        str(out),
        "--run-dir",
        str(run_dir),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == f"{scenario} on dynamo (hash): PASSED"
    result = json.loads(out.read_text())
    # One worker on each of hosts 1 and 2, scraped across their links, on the run's own addresses.
    assert [w["host"] for w in result["workers"]] == [1, 2]
    addresses = [w["system_url"].split("//")[1].split(":")[0] for w in result["workers"]]
    assert all(a.startswith("10.") for a in addresses) and len(set(addresses)) == 2, addresses
    assert (run_dir / "etcd.log").is_file()
    assert namespaces() == before and loopback_addresses() == lo_before
    assert processes_under(run_dir) == [] and etcds_under(run_dir) == []
    # Of the run only its logs stay: etcd's data dir, the state folders and tmp are gone.
    assert not_logs(run_dir) == [] and not (run_dir / "etcd").exists()


def test_partition_mid_traffic_is_reported_and_the_cluster_recovers(tmp_path: Path) -> None:
    before = namespaces()
    plan = ScenarioPlan(
        scenario="partition", stack="dynamo", discovery="etcd", hosts=3, run_dir=str(tmp_path / "run")
    )
    result = run_scenario(plan)
    assert result.passed, result.summary()
    fault = result.figures
    assert fault is not None and fault.recovered and fault.fault == "partition of host 2"
    # What Dynamo decides is reported; these bounds only say the figures were measured at all.
    assert fault.failed_requests > 0 and fault.longest_hang_s > 1.0, fault
    assert (
        fault.left_dispatch_after_s is not None
        and fault.left_dispatch_after_s < fault.ended_s - fault.started_s
    )
    kinds = [e.kind for e in result.events]
    assert kinds[:2] == ["partition", "heal"] and "restart" in kinds, kinds
    assert {s.worker for s in result.figures.samples} == {0, 1} and any(
        s.value is None for s in result.figures.samples if s.worker == 1
    )
    plot(result)
    assert namespaces() == before


def test_etcd_restart_mid_traffic_and_a_burst_after_it_passes(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    result = run_scenario(
        ScenarioPlan(scenario="etcd-restart", stack="dynamo", discovery="etcd", run_dir=str(run_dir))
    )
    assert result.passed, result.summary()
    fault = result.figures
    assert fault is not None and fault.recovered and fault.served_during_fault > 0, fault
    kinds = [e.kind for e in result.events]
    # Workers whose leases lapsed in the outage exit and come back between and after these.
    assert kinds[0] == "etcd stopped" and "etcd ready" in kinds, kinds
    assert etcds_under(run_dir) == []


def test_a_worker_down_when_the_recovery_reads_it_makes_it_inconclusive_and_is_on_the_timeline(
    tmp_path: Path,
) -> None:
    """Worker 1 SIGKILLed once etcd is back, nothing to restart it: the scenario returns, its
    recovery burst is inconclusive naming worker 1, and the failed read is an event and a figure.

    The lease (10 s) outlives the outage (etcd restarted at once), so worker 0 keeps its own."""
    workers = tuple(WorkerSpec(model="m") for _ in range(2))  # restart="never"
    spec = DeploymentSpec(stack="dynamo", discovery="etcd", workers=workers, lease_ttl=10.0)
    with Deployment(spec, run_dir=tmp_path) as dep:

        def kill_once_etcd_is_back() -> None:
            assert wait_until(lambda: any(e.kind == "etcd ready" for e in dep.events), 120), dep.events
            dep.outages.kill_worker(1)

        killer = threading.Thread(target=kill_once_etcd_is_back)
        killer.start()
        try:
            result = etcd_restart(dep, down_s=0.0)
        finally:
            killer.join()
        assert dep.workers[0].alive() and not dep.workers[1].alive()
    assert result.verdict == "inconclusive", result.summary()
    assert result.reasons == ["after recovery: m: worker 1 could not be read before the burst"]
    recovery = result.bursts[-1]
    assert recovery.unread is not None and recovery.unread.worker == 1
    assert "ConnectError" in recovery.unread.error and recovery.traffic.n > 0
    timeline = [(e.kind, e.detail) for e in result.events]
    assert ("unreadable", "m: worker 1 could not be read before the burst") in timeline, timeline
    assert timeline.index(("kill worker", "worker 1 SIGKILL")) < timeline.index(
        ("unreadable", "m: worker 1 could not be read before the burst")
    )
    fault = result.figures
    assert fault is not None and not fault.recovered and [u.worker for u in fault.unread] == [1]
    assert dict(fault.rows())["recovery burst (asserted)"].startswith("not judged: worker 1")
    json.dumps(result.to_json())
    plot(result)


def test_hosts_without_privileges_fail_at_once_in_one_line(tmp_path: Path) -> None:
    """As user nobody: one line and exit 2, before any namespace or process exists."""
    before = namespaces()
    proc = subprocess.run(
        [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            sys.executable,
            "-m",
            "embedlab",
            "scenario",
            "same-model",
            *ON_THREE_HOSTS,
            "--run-dir",
            str(tmp_path / "run"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HOME": str(tmp_path)},
    )
    assert proc.returncode == 2, proc.stdout[-1000:] + proc.stderr[-1000:]
    (line,) = proc.stderr.strip().splitlines()
    assert "hosts=3 needs network namespaces" in line and "root" in line, line
    assert namespaces() == before and not (tmp_path / "run").exists()


@pytest.mark.parametrize("how", ["sigkill", "sigint"])
def test_a_killed_harness_leaves_no_namespace_address_or_etcd(how: str, tmp_path: Path) -> None:
    with harness("cluster", tmp_path) as started:
        made = set(started.report["namespaces"])
        hub = started.report["hub"]
        assert len(made) == 2 and made <= namespaces() and hub in loopback_addresses()
        assert "etcd" in started.report["servers"]
        if how == "sigkill":
            started.sigkill()  # the watchdog alone is left to clean up
        else:
            started.proc.send_signal(signal.SIGINT)  # Ctrl-C: the harness's own teardown runs
            started.proc.wait(timeout=60)
        assert wait_gone(started.pids, timeout=30) == [], "a process of the run survived"
        assert wait_until(lambda: not (made & namespaces()), 20), f"namespaces left: {made & namespaces()}"
        assert wait_until(lambda: hub not in loopback_addresses(), 20), f"{hub} is still on lo"
        run_dir = tmp_path / "run"
        assert wait_until(lambda: not (run_dir / "etcd").exists(), 20), "etcd's data dir is left"
        assert not_logs(run_dir) == [], not_logs(run_dir)


def test_a_worker_started_again_keeps_its_live_weight_and_the_launch_spec_stays_as_it_was(
    tmp_path: Path,
) -> None:
    spec = DeploymentSpec.same_model("m", workers=2, seed=0)
    with Deployment(spec, run_dir=tmp_path) as dep:
        dep.steering.set_weights([1.0, 7.0])
        dep.outages.restart_worker(1)  # it registers again, with the weight it has now
        with httpx.Client(timeout=10) as client:
            health = client.get(dep.health_url).json()
        weights = {i["endpoint"]: i["weight"] for group in health["models"].values() for i in group}
        assert weights == {dep.endpoint(0): 1.0, dep.endpoint(1): 7.0}, health
        assert [w.weight for w in dep.spec.workers] == [1.0, 7.0] and dep.target().weights == (1.0, 7.0)
    assert [w.weight for w in spec.workers] == [1.0, 1.0]  # steering never replaced what was launched


def test_restart_policy_brings_a_worker_back_and_a_straddling_burst_is_inconclusive(tmp_path: Path) -> None:
    workers = tuple(WorkerSpec(model="m", restart="on-exit") for _ in range(2))
    with Deployment(DeploymentSpec(workers=workers), run_dir=tmp_path) as dep:
        killed = []

        def kill_once(record) -> None:  # type: ignore[no-untyped-def]
            if not killed:
                killed.append(dep.workers[1].pid)
                dep.outages.kill_worker(1)

        straddled = same_model_load_balance(dep, requests=200, concurrency=4, on_response=kill_once)
        assert wait_until(lambda: any(e.kind == "restart" for e in dep.events), 60), dep.events
        after = same_model_load_balance(dep)
        assert dep.workers[1].pid != killed[0] and dep.workers[1].alive()
    # The new process's counter starts again under a new instance label (a reset), or it is not
    # up yet when the burst ends (unreadable): inconclusive either way, never a pass.
    assert straddled.verdict == "inconclusive", straddled.summary()
    assert straddled.reasons[0].endswith(
        ("counter reset on worker 1", "worker 1 could not be read after the burst")
    )
    assert after.passed, after.summary()
    kinds = [e.kind for e in dep.events]
    assert kinds[:4] == ["kill worker", "exit", "restarting", "restart"], kinds


def test_attach_lists_what_etcd_believes_is_live(tmp_path: Path) -> None:
    spec = DeploymentSpec.multi_model(["a", "b"], stack="dynamo", discovery="etcd")
    out = tmp_path / "r.json"
    with Deployment(spec, run_dir=tmp_path / "run") as dep:
        assert dep.etcd_url is not None
        proc = run_embedlab(
            "scenario",
            "multi-model",
            "--models",
            "a,b",
            *attach_args(dep),
            "--etcd-endpoints",
            dep.etcd_url,
            "--json",
            str(out),
            timeout=120,
        )
        endpoints = {dep.endpoint(0), dep.endpoint(1)}
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    listed = json.loads(out.read_text())["discovered"]
    assert {d["path"] for d in listed} == endpoints and all(d["address"] for d in listed)
    assert sum(line.startswith("in etcd: ") for line in proc.stdout.splitlines()) == 2


def test_kill_host_kills_every_worker_on_it_and_no_other(tmp_path: Path) -> None:
    workers = (WorkerSpec(model="m", host=1), WorkerSpec(model="m", host=2), WorkerSpec(model="m", host=2))
    spec = DeploymentSpec(stack="dynamo", discovery="etcd", hosts=3, workers=workers)
    with Deployment(spec, run_dir=tmp_path) as dep:
        assert [dep.host_of(i) for i in range(3)] == [1, 2, 2]
        doomed = [dep.workers[1].pid, dep.workers[2].pid]
        dep.outages.kill_host(2)
        assert wait_gone(doomed, timeout=10) == [] and dep.workers[0].alive()
        assert dep.events[-1].kind == "kill host" and dep.events[-1].detail == "host 2: workers [1, 2]"


def test_kill_host_0_kills_the_frontend_and_etcd_too(tmp_path: Path) -> None:
    """Host 0 holds the frontend and the run's services: a host that lost power takes them along."""
    workers = (WorkerSpec(model="m", host=0), WorkerSpec(model="m", host=1))
    spec = DeploymentSpec(stack="dynamo", discovery="etcd", hosts=2, workers=workers)
    with Deployment(spec, run_dir=tmp_path) as dep:
        assert dep.frontend is not None and "etcd" in dep.services
        doomed = [dep.frontend.pid, dep.services["etcd"].pid, dep.workers[0].pid]
        dep.outages.kill_host(0)
        # At once: the deployment knows it SIGKILLed its frontend, though the kernel reports the
        # exit of its many threads up to ~0.1 s later.
        with pytest.raises(DeploymentStoppedError, match="frontend .* exited") as stopped:
            dep.target()
        assert stopped.value.returncode == -9
        assert wait_gone(doomed, timeout=10) == [] and dep.workers[1].alive()
        assert dep.events[-1].kind == "kill host"
        assert dep.events[-1].detail == "host 0: workers [0], frontend, etcd"
