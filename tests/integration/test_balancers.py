"""smg, HAProxy and nginx in front of embedlab's workers: real binaries, real processes, real HTTP.

One deployment per stack is shared by the checks that leave it as they found it (same-model,
drain with resume, the counter comparison); multi-model and failover launch their own. Each
assertion is what the router did when the counters were read.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from embedlab import Deployment
from embedlab.evidence.metrics import scrape
from embedlab.evidence.traffic import send_burst
from embedlab.scenarios.plan import ScenarioPlan, run_scenario
from embedlab.stacks.routers import router_venv

from ..commands import run_embedlab
from ..proctools import processes_under
from ..requires import missing

BURST = 30


def _needs(stack: str) -> None:
    # `make test` installs all three (routers: smg; cluster-debs: haproxy, nginx), so CI runs these.
    if stack == "smg":
        if not (router_venv("smg") / ".stamp").exists():
            missing("smg", "smg's venv is missing: `make routers` builds it")
    elif not any(Path(d, stack).exists() for d in ("/usr/sbin", "/usr/bin")) and not shutil.which(stack):
        missing(stack, f"Debian's {stack} is missing: `make cluster-debs` installs it")


def _pool(stack: str, run_dir: Path, **options: object) -> Iterator[Deployment]:
    _needs(stack)
    plan = ScenarioPlan(scenario="same-model", stack=stack, run_dir=str(run_dir), **options)  # type: ignore[arg-type]
    with plan.deployment() as deployment:
        yield deployment
    assert processes_under(run_dir) == [], "the router and its workers were stopped"


@pytest.fixture(scope="module")
def haproxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    yield from _pool("haproxy", tmp_path_factory.mktemp("haproxy") / "run")


@pytest.fixture(scope="module")
def smg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    yield from _pool("smg", tmp_path_factory.mktemp("smg") / "run", router_mode="round_robin")


@pytest.fixture(scope="module")
def nginx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    yield from _pool("nginx", tmp_path_factory.mktemp("nginx") / "run")


def run_on(deployment: Deployment, scenario: str) -> object:
    plan = ScenarioPlan(
        scenario=scenario, stack=deployment.spec.stack, router_mode=deployment.spec.router_mode
    )
    return plan.run_on(deployment)


def counts_after_burst(deployment: Deployment) -> tuple[dict[int, float], dict[int, float]]:
    """(what the router says it sent each worker, what each worker's own counter moved) over one burst."""
    router_before = deployment.backend_counts()
    workers_before = [scrape(url).value for url in deployment.system_urls]
    burst = send_burst(deployment.frontend_url, deployment.models[0], BURST, concurrency=4)
    router_after = deployment.backend_counts()
    workers_after = [scrape(url).value for url in deployment.system_urls]
    assert router_before is not None and router_after is not None
    assert burst.ok, burst.failures[:3]
    router = {i: router_after[i] - router_before[i] for i in router_after}
    return router, {i: after - before for i, (before, after) in enumerate(zip(workers_before, workers_after))}


# -- HAProxy ------------------------------------------------------------------------------------


def test_haproxy_round_robin_splits_exactly(haproxy: Deployment) -> None:
    result = run_on(haproxy, "same-model")
    assert result.verdict == "passed", result.reasons  # type: ignore[attr-defined]
    assert [result.bursts[0].delta(i) for i in (0, 1)] == [20, 20]  # type: ignore[attr-defined]
    # Its exporter's per-server responses, read beside the workers' counters around the burst.
    assert result.bursts[0].router_deltas == {0: 20, 1: 20}  # type: ignore[attr-defined]
    assert result.router_counts_note() == "the router's own counters agree with the workers' over 1 burst"  # type: ignore[attr-defined]


def test_haproxy_drains_through_its_runtime_api(haproxy: Deployment) -> None:
    result = run_on(haproxy, "drain")
    assert result.verdict == "passed", result.reasons  # type: ignore[attr-defined]
    assert result.figures.victim_delta == 0 and result.figures.resumed  # type: ignore[attr-defined]
    with httpx.Client(timeout=5.0) as client:
        assert haproxy.dispatchable_endpoints(client) == {haproxy.endpoint(0), haproxy.endpoint(1)}


def test_haproxy_counts_each_request_where_the_worker_counted_it(haproxy: Deployment) -> None:
    # haproxy_server_http_responses_total leaves its own health checks (GET /health, every second) out.
    router, workers = counts_after_burst(haproxy)
    assert router == workers and sum(workers.values()) == BURST, (router, workers)


def test_haproxy_keeps_models_apart_by_the_body_and_answers_mistakes_in_openai_json(tmp_path: Path) -> None:
    _needs("haproxy")
    plan = ScenarioPlan(scenario="multi-model", stack="haproxy", run_dir=str(tmp_path / "run"))
    with plan.deployment() as deployment:
        result = plan.run_on(deployment)
        with httpx.Client(base_url=deployment.frontend_url, timeout=5.0) as client:
            models = client.get("/v1/models").json()
            # `model` after a long `input`, as OpenAI's Python client orders them: still routed.
            late = client.post("/v1/embeddings", json={"input": ["word " * 2000] * 10, "model": "model-b"})
            unknown = client.post("/v1/embeddings", json={"model": "nope", "input": "x"})
            no_model = client.post("/v1/embeddings", json={"input": "x"})
        endpoint_b = deployment.endpoint(1)
    assert result.verdict == "passed", result.reasons
    assert [m["id"] for m in models["data"]] == ["model-a", "model-b"]
    assert late.status_code == 200 and late.headers["x-embedlab-worker"].startswith(endpoint_b)
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"
    assert no_model.status_code == 400 and no_model.json()["error"]["param"] == "model"
    assert processes_under(tmp_path / "run") == []


def test_haproxy_failover_redispatches_and_without_retries_loses_requests(tmp_path: Path) -> None:
    _needs("haproxy")
    kept = run_scenario(ScenarioPlan(scenario="failover", stack="haproxy", run_dir=str(tmp_path / "a")))
    lost = run_scenario(
        ScenarioPlan(scenario="failover-no-retries", stack="haproxy", run_dir=str(tmp_path / "b"))
    )
    assert kept.figures.failed_requests == 0, kept.reasons  # type: ignore[union-attr]
    # Health checks every second, down after 2 failures: out of dispatch within a few seconds.
    for result in (kept, lost):
        assert result.figures.excluded_after_s is not None and result.figures.excluded_after_s < 5  # type: ignore[union-attr]
    # Until then, each request HAProxy sends the dead worker fails: a 503 in OpenAI error JSON when
    # it finds the port closed; one in flight when the worker died comes back as a closed connection
    # (HAProxy passes a reused server connection's silent close on, for the client to retry).
    failures = lost.bursts[0].traffic.failures
    assert lost.figures.failed_requests > 0 and lost.params["frontend_args"] == ["--retries", "0"]  # type: ignore[union-attr]
    assert {r.status for r in failures} <= {0, 503}, {r.error for r in failures}
    assert all(
        '"upstream_failed"' in str(r.error) if r.status else "disconnected" in str(r.error) for r in failures
    ), {r.error for r in failures}
    assert processes_under(tmp_path) == []


# -- smg ----------------------------------------------------------------------------------------


def test_smg_round_robin_splits_exactly_and_names_the_worker_by_url(smg: Deployment) -> None:
    result = run_on(smg, "same-model")
    assert result.verdict == "passed", result.reasons  # type: ignore[attr-defined]
    assert [result.bursts[0].delta(i) for i in (0, 1)] == [20, 20]  # type: ignore[attr-defined]
    response = httpx.post(f"{smg.frontend_url}/v1/embeddings", json={"model": smg.models[0], "input": "x"})
    served = next(i for i in (0, 1) if response.headers["x-embedlab-worker"].startswith(smg.endpoint(i)))
    # 1.13.0 names the worker by its URL; the opaque x-smg-worker-id of sglang PR #34976 did not ship.
    assert response.headers["x-smg-routed-worker-id"] == smg.direct_url(served)
    assert "x-smg-worker-id" not in response.headers


def test_smg_counts_each_send_where_the_worker_counted_it(smg: Deployment) -> None:
    router, workers = counts_after_burst(smg)
    assert router == workers and sum(workers.values()) == BURST, (router, workers)


def test_smg_drains_through_its_worker_api(smg: Deployment) -> None:
    result = run_on(smg, "drain")
    assert result.verdict == "passed", result.reasons  # type: ignore[attr-defined]
    assert result.figures.victim_delta == 0  # type: ignore[attr-defined]


def test_smg_keeps_models_apart_in_its_regular_mode(tmp_path: Path) -> None:
    _needs("smg")
    result = run_scenario(
        ScenarioPlan(
            scenario="multi-model", stack="smg", router_mode="round_robin", run_dir=str(tmp_path / "run")
        )
    )
    assert result.verdict == "passed", result.reasons
    assert processes_under(tmp_path / "run") == []


# -- nginx --------------------------------------------------------------------------------------


def test_nginx_round_robin_splits_exactly_and_counts_nothing_per_server(nginx: Deployment) -> None:
    result = run_on(nginx, "same-model")
    assert result.verdict == "passed", result.reasons  # type: ignore[attr-defined]
    assert [result.bursts[0].delta(i) for i in (0, 1)] == [20, 20]  # type: ignore[attr-defined]
    assert nginx.backend_counts() is None


def test_nginx_drains_by_a_reload_with_the_server_down(nginx: Deployment) -> None:
    status = httpx.get(nginx.health_url).json()
    result = run_on(nginx, "drain")
    assert result.verdict == "passed", result.reasons  # type: ignore[attr-defined]
    # Two reloads: the server marked down, then back.
    assert httpx.get(nginx.health_url).json()["generation"] == status["generation"] + 2
    assert "down;" not in (nginx.run_dir / "nginx" / "nginx.conf").read_text()


def test_nginx_cannot_route_two_models_and_says_why(tmp_path: Path) -> None:
    _needs("nginx")
    proc = run_embedlab(
        "scenario", "multi-model", "--stack", "nginx", "--run-dir", str(tmp_path), timeout=120
    )
    last = proc.stdout.strip().splitlines()[-1]
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert last.startswith(
        "multi-model on nginx (hash): UNSUPPORTED (nginx picks an upstream before it reads"
    ), last
    assert processes_under(tmp_path) == [] and not (tmp_path / "nginx" / "nginx.conf").exists()


# -- where the router's count and the workers' part: a worker that is gone -------------------------


def dead_worker_counts(stack: str, run_dir: Path, **options: object) -> tuple[dict[int, float], float, int]:
    """Worker 1 SIGKILLed, then a burst with the router's retries on: (router's counts over the burst,
    worker 0's own delta, failed requests). Worker 1 received nothing: it was dead before the first."""
    _needs(stack)
    plan = ScenarioPlan(scenario="same-model", stack=stack, run_dir=str(run_dir), **options)  # type: ignore[arg-type]
    with plan.deployment() as deployment:
        deployment.outages.kill_worker(1)
        deadline = time.monotonic() + 5
        while deployment.workers[1].alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not deployment.workers[1].alive()
        before, survivor = deployment.backend_counts(), scrape(deployment.system_urls[0]).value
        burst = send_burst(deployment.frontend_url, deployment.models[0], BURST, concurrency=4)
        after = deployment.backend_counts()
        assert before is not None and after is not None
        survivor = scrape(deployment.system_urls[0]).value - survivor
    return {i: after[i] - before[i] for i in after}, survivor, len(burst.failures)


def test_haproxy_counts_responses_so_a_dead_worker_gets_none(tmp_path: Path) -> None:
    router, survivor, failed = dead_worker_counts("haproxy", tmp_path / "run")
    # The connections refused by the dead worker were redispatched to worker 0; HAProxy counts
    # responses, so they count once, where they were answered (the refusals go to
    # haproxy_server_connection_errors_total instead).
    assert failed == 0 and router == {0: BURST, 1: 0} and survivor == BURST, (router, survivor)
    assert processes_under(tmp_path / "run") == []


def test_smg_counts_every_send_so_a_dead_worker_gets_the_refused_ones(tmp_path: Path) -> None:
    router, survivor, failed = dead_worker_counts("smg", tmp_path / "run", router_mode="round_robin")
    # smg counts each send (its help: "counted at each send"): the refused sends to the dead worker
    # count there although they never reached it, and their retries count again on worker 0. So its
    # total exceeds the requests answered by exactly the refused sends.
    assert failed == 0 and survivor == BURST and router[0] == BURST, (router, survivor)
    # The refused sends stop when its circuit breaker opens, after 10 failures (--cb-failure-threshold);
    # up to 3 more may be under way then, at concurrency 4. Measured: 10, three runs of three.
    assert 10 <= router[1] <= 13 and sum(router.values()) == BURST + router[1], router
    assert processes_under(tmp_path / "run") == []


def test_haproxy_drains_through_an_abstract_socket_when_the_run_dir_is_too_deep(tmp_path: Path) -> None:
    _needs("haproxy")
    run_dir = tmp_path / ("d" * 90) / "run"  # <run_dir>/haproxy/admin.sock would pass 107 bytes
    plan = ScenarioPlan(scenario="drain", stack="haproxy", run_dir=str(run_dir))
    with plan.deployment() as dep:
        config = (run_dir / "haproxy" / "haproxy.cfg").read_text()
        result = plan.run_on(dep)
    assert result.verdict == "passed", result.reasons
    assert "stats socket abns@embedlab-haproxy-" in config
    # The config folder went with the run: only the logs stay.
    assert [p.name for p in run_dir.iterdir()] and all(p.suffix == ".log" for p in run_dir.rglob("*"))
    assert processes_under(run_dir) == []


def test_the_debian_balancers_report_their_own_versions() -> None:
    from embedlab.scenarios.battery import stack_versions

    versions = stack_versions(["haproxy", "nginx"])
    assert versions["haproxy"].startswith("haproxy 2.") and versions["nginx"].startswith("nginx 1."), versions
