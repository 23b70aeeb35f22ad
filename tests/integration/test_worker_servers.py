"""The worker servers users run, behind real routers: Infinity, `vllm serve`, and embedlab's own
worker counting on a metrics port per process. One deployment per module (a vLLM server takes a
minute to start on 2 cores), each test reading what it needs from it; each deployment must leave
no process behind."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from embedlab import Deployment, DeploymentSpec, MetricQuery, ScenarioPlan, WorkerSpec, run_scenario, scrape
from embedlab.defaults import INFINITY_METRIC, VLLM_SERVE_METRIC
from embedlab.verdicts import Verdict

from ..minilm import EXPECTED, served_similarities
from ..proctools import processes_under

# Two servers side by side start in about 40 s (Infinity) and 70 s (vLLM) on an idle 2-core
# machine; on a busy one, several minutes.
STARTUP_TIMEOUT = 900.0


def _deployment(tmp: Path, spec: DeploymentSpec) -> Iterator[Deployment]:
    run_dir = tmp / "run"
    with Deployment(spec, run_dir=run_dir) as deployment:
        yield deployment
    assert processes_under(run_dir) == []
    assert sorted(p.name for p in run_dir.iterdir()) == sorted(
        f"{p}.log" for p in ("frontend", "worker-0", "worker-1")
    )


def _post(url: str, body: dict[str, Any]) -> int:
    with httpx.Client(timeout=120) as client:
        return client.post(f"{url}/v1/embeddings", json=body).status_code


def _count(url: str, metric: str) -> float:
    return scrape(url, metric=metric).value


def _counted(url: str, metrics: tuple[str, ...], body: dict[str, Any]) -> tuple[int, list[float]]:
    """One request straight to a worker: its status, and how far each counter moved."""
    before = [_count(url, m) for m in metrics]
    status = _post(url, body)
    return status, [_count(url, m) - b for m, b in zip(metrics, before)]


# -- Infinity behind HAProxy ------------------------------------------------------------------


@pytest.fixture(scope="module")
def infinity(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    # Two models by served name, one directory: HAProxy routes each to its own pool.
    spec = DeploymentSpec(
        stack="haproxy",
        workers=tuple(
            WorkerSpec(model=name, server="infinity", model_path="all-MiniLM-L6-v2")
            for name in ("minilm-a", "minilm-b")
        ),
        startup_timeout=STARTUP_TIMEOUT,
    )
    yield from _deployment(tmp_path_factory.mktemp("infinity"), spec)


def test_infinity_serves_minilm_as_sentence_transformers_does(infinity: Deployment) -> None:
    worker = SimpleNamespace(frontend_url=infinity.direct_url(0))  # one worker, bypassing HAProxy
    assert served_similarities(worker, "minilm-a") == pytest.approx(EXPECTED, abs=5e-4)  # type: ignore[arg-type]


def test_infinity_counts_each_request_once_whatever_its_inputs_or_status(infinity: Deployment) -> None:
    url = str(infinity.direct_url(0))
    assert infinity.target().metric.name == "http_requests_total"  # its own, not embedlab's
    assert _counted(url, (INFINITY_METRIC,), {"model": "minilm-a", "input": "one"}) == (200, [1])
    assert _counted(url, (INFINITY_METRIC,), {"model": "minilm-a", "input": ["a", "b", "c"]}) == (200, [1])
    assert _counted(url, (INFINITY_METRIC,), {"model": "minilm-a"}) == (422, [1])  # no input
    # With one model loaded, Infinity answers a request for any other model with that one.
    assert _counted(url, (INFINITY_METRIC,), {"model": "not-served", "input": "x"}) == (200, [1])


def test_multi_model_on_haproxy_over_infinity_passes(infinity: Deployment) -> None:
    plan = ScenarioPlan(
        scenario="multi-model",
        stack="haproxy",
        worker_server="infinity",
        models=("minilm-a", "minilm-b"),
        model_paths=("all-MiniLM-L6-v2",),
    )
    result = plan.run_on(infinity)
    assert result.verdict == Verdict.PASSED, result.summary()
    assert infinity.target().endpoints == ()  # Infinity sends no x-embedlab-worker: counters alone


# -- vllm serve behind vllm-router --------------------------------------------------------------


@pytest.fixture(scope="module")
def vllm_serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    spec = DeploymentSpec(
        stack="vllm-router",
        router_mode="round_robin",
        workers=(
            WorkerSpec(model="minilm", server="vllm-serve", model_path="all-MiniLM-L6-v2", max_model_len=128),
        )
        * 2,
        startup_timeout=STARTUP_TIMEOUT,
    )
    yield from _deployment(tmp_path_factory.mktemp("vllm-serve"), spec)


@pytest.mark.vllm
def test_vllm_serve_counts_requests_on_http_and_inputs_on_its_own(vllm_serve: Deployment) -> None:
    url = str(vllm_serve.direct_url(0))
    both = (VLLM_SERVE_METRIC, "vllm:request_success_total")
    assert _counted(url, both, {"model": "minilm", "input": "one"}) == (200, [1, 1])
    assert _counted(url, both, {"model": "minilm", "input": ["a", "b", "c"]}) == (200, [1, 3])
    assert _counted(url, both, {"model": "not-served", "input": "x"}) == (404, [1, 0])
    assert _counted(url, both, {"model": "minilm"}) == (400, [1, 0])


@pytest.mark.vllm
def test_vllm_serve_serves_minilm_as_sentence_transformers_does(vllm_serve: Deployment) -> None:
    assert served_similarities(vllm_serve, "minilm") == pytest.approx(EXPECTED, abs=5e-4)


def round_robin_over_vllm_serve(**fields: Any) -> ScenarioPlan:
    """same-model through vllm-router's round robin, over the `vllm_serve` pool of MiniLM."""
    return ScenarioPlan(
        scenario="same-model",
        stack="vllm-router",
        worker_server="vllm-serve",
        models=("minilm",),
        router_mode="round_robin",
        **fields,
    )


@pytest.mark.vllm
def test_same_model_on_vllm_router_over_vllm_serve_passes(vllm_serve: Deployment) -> None:
    plan = round_robin_over_vllm_serve()
    result = plan.run_on(vllm_serve)
    assert result.verdict == Verdict.PASSED, result.summary()
    assert [b.check.total_delta for b in result.bursts if b.check] == [b.traffic.n for b in result.bursts]


@pytest.mark.vllm
def test_a_counter_of_inputs_is_named_in_the_verdict(vllm_serve: Deployment) -> None:
    # One input a request: vLLM's own counter agrees with the requests, and the verdict still
    # says what it counts.
    plan = round_robin_over_vllm_serve(metric="vllm:request_success_total")
    result = plan.run_on(replace(vllm_serve.target(), metric=MetricQuery.parse(plan.metric)))
    assert result.verdict == Verdict.PASSED, result.summary()
    assert "counts each input of a request" in result.summary()


# -- embedlab's worker with a metrics port per ingest process --------------------------------------


@pytest.fixture(scope="module")
def split_ports(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    spec = DeploymentSpec(
        workers=(WorkerSpec(model="embed-model", metrics_ports=2),) * 2, router_mode="round-robin"
    )
    yield from _deployment(tmp_path_factory.mktemp("ports"), spec)


def test_a_worker_counts_on_each_of_its_metrics_ports(split_ports: Deployment) -> None:
    urls = split_ports.target().system_urls
    assert all(len(u.split("+")) == 2 for u in urls), urls
    before = [[scrape(port).value for port in url.split("+")] for url in urls]
    result = ScenarioPlan(scenario="same-model").run_on(split_ports)
    assert result.verdict == Verdict.PASSED, result.summary()
    after = [[scrape(port).value for port in url.split("+")] for url in urls]
    # Each port counts what its process took (where the kernel sent each connection), and
    # the worker's count is their sum: every request, once.
    moved = [[a - b for a, b in zip(*pair)] for pair in zip(after, before)]
    assert sum(map(sum, moved)) == sum(b.traffic.n for b in result.bursts), moved


def test_attached_over_two_ports_each_passes_and_fails_with_one_left_out(split_ports: Deployment) -> None:
    urls = split_ports.target().system_urls
    attached = dict(
        scenario="same-model", frontend_url=split_ports.frontend_url, metric=split_ports.spec.metric
    )
    for _ in range(3):
        before = {port: scrape(port).value for url in urls for port in url.split("+")}
        whole = run_scenario(ScenarioPlan(**attached, system_urls=urls))  # type: ignore[arg-type]
        assert whole.verdict == Verdict.PASSED, whole.summary()
        # Leave out the port that took most of worker 1's share: the frontend keeps its
        # connections alive, so its process takes requests again in the next burst.
        ports = urls[1].split("+")
        busiest = max(ports, key=lambda port: scrape(port).value - before[port])
        kept = "+".join(p for p in ports if p != busiest)
        left_out_before = scrape(busiest).value
        short = run_scenario(ScenarioPlan(**attached, system_urls=(urls[0], kept)))  # type: ignore[arg-type]
        if scrape(busiest).value > left_out_before:  # requests its count would have held
            assert short.verdict == Verdict.FAILED, short.summary()
            return
        assert short.verdict == Verdict.PASSED, short.summary()  # it missed nothing: nothing to see
    pytest.fail("the left-out port took no request in 3 bursts")
