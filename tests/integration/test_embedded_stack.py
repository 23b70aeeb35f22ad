"""The embedded stack as users run it: real subprocesses on free loopback ports."""

from __future__ import annotations

import signal
import time

import httpx

from embedlab import Deployment, DeploymentSpec, WorkerSpec, scrape, send_burst
from embedlab.cluster.ports import release_port, reserve_port

from ..commands import run_embedlab


def counters(dep: Deployment) -> list[float]:
    return [scrape(url).value for url in dep.system_urls]


def test_same_model_requests_reach_both_workers(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with Deployment(DeploymentSpec.same_model("m", workers=2), run_dir=tmp_path) as dep:
        before = counters(dep)
        assert before == [0.0, 0.0], "the counter is exported at 0 before the first request"
        burst = send_burst(dep.frontend_url, "m", 20, concurrency=4)
        assert burst.ok, burst.failures
        after = counters(dep)
        deltas = [a - b for a, b in zip(after, before)]
        assert all(d > 0 for d in deltas) and sum(deltas) == 20, deltas
        # Each response names the instance that served it, and the names agree with the counters.
        served = burst.served_by()
        assert sorted(served.values()) == sorted(deltas)


def test_two_models_dispatch_by_name_only(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with Deployment(DeploymentSpec.multi_model(["a", "b"]), run_dir=tmp_path) as dep:
        for model, mover in (("a", 0), ("b", 1)):
            before = counters(dep)
            assert send_burst(dep.frontend_url, model, 10).ok
            after = counters(dep)
            deltas = [a - b for a, b in zip(after, before)]
            assert deltas[mover] == 10 and deltas[1 - mover] == 0, (model, deltas)


def test_conflicting_registration_exits_non_zero_with_the_message(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with Deployment(
        DeploymentSpec(workers=(WorkerSpec(model="A", endpoint="ns.comp.ep"),)), run_dir=tmp_path
    ) as dep:
        port = reserve_port()
        try:
            proc = run_embedlab(
                "worker",
                "--served-model-name",
                "B",
                "--endpoint",
                "ns.comp.ep",
                "--frontend-url",
                dep.frontend_url,
                "--system-port",
                str(port),
                timeout=60,
            )
        finally:
            release_port(port)
        assert proc.returncode != 0
        assert (
            "Cannot register model 'B' on endpoint 'ns/comp/ep': a different model 'A' is already registered there"
            in proc.stderr
        )
        # The rejected worker changed nothing: A is still served.
        assert [m["id"] for m in httpx.get(f"{dep.frontend_url}/v1/models").json()["data"]] == ["A"]


def test_sigkilled_worker_leaves_within_two_ttls_and_no_request_fails(tmp_path) -> None:  # type: ignore[no-untyped-def]
    ttl = 1.0
    spec = DeploymentSpec(
        workers=(WorkerSpec(model="m"), WorkerSpec(model="m"), WorkerSpec(model="solo")),
        lease_ttl=ttl,
    )
    with Deployment(spec, run_dir=tmp_path) as dep:
        models = lambda: {m["id"] for m in httpx.get(f"{dep.frontend_url}/v1/models").json()["data"]}  # noqa: E731
        assert models() == {"m", "solo"}
        dep.outages.kill_worker(2, signal.SIGKILL)
        dep.outages.kill_worker(0, signal.SIGKILL)
        # Traffic for "m" right after the kill: every request must still succeed on worker 1.
        burst = send_burst(dep.frontend_url, "m", 40, concurrency=4)
        assert burst.ok, burst.failures[:3]
        # On the frontend's own clock, not the test's (a busy machine delays either): every time
        # it still lists the dead worker, that worker's last heartbeat is under 2 TTLs old.
        ages: list[float] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            listed = httpx.get(f"{dep.frontend_url}/health").json()["models"]
            solo = listed.get("solo", [])
            if not solo:
                break
            ages += [float(i["heartbeat_age_s"]) for i in solo]
            time.sleep(0.05)
        else:
            raise AssertionError("the dead worker was still listed 60 s after its kill")
        assert all(age < 2 * ttl for age in ages), f"listed with heartbeats {max(ages):.2f} s old"
        assert "solo" not in models() and models() == {"m"}
