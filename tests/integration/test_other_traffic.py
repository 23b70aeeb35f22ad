"""A pool of two models with two replicas each, quiet and with another client sending one
model's requests: attached to as a user would (URLs and `--worker-models`), and launched.

The other client is `hey`, a separate process embedlab knows nothing about. Attached, the
counters alone cannot tell its requests from the check's: the check names its traffic and
judges nothing. Launched on a stack that names the serving worker on each response, the
header proves placement, and says so.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from embedlab import Deployment, DeploymentSpec, ScenarioPlan
from embedlab.evidence.metrics import scrape

MODELS = ("model-a", "model-b")


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    spec = DeploymentSpec.pool(list(MODELS), replicas=2)
    with Deployment(spec, run_dir=tmp_path_factory.mktemp("pool")) as dep:
        yield dep


def attached(dep: Deployment, scenario: str, *extra: str) -> subprocess.CompletedProcess[str]:
    urls = [arg for url in dep.system_urls for arg in ("--system-url", url)]
    models = ",".join(w.model for w in dep.spec.workers)
    argv = ["scenario", scenario, "--frontend-url", dep.frontend_url, *urls, "--worker-models", models]
    return subprocess.run(
        [sys.executable, "-m", "embedlab", *argv, *extra], capture_output=True, text=True, timeout=180
    )


def counted(dep: Deployment) -> list[float]:
    return [scrape(url).value for url in dep.system_urls]


@contextmanager
def another_client(dep: Deployment, model: str) -> Iterator[None]:
    """`hey` sending `model`'s requests, 20 a second, until the block is done with it."""
    hey = shutil.which("hey")
    if hey is None:
        pytest.fail("hey is missing: `make test` installs it (apt-get install hey)")
    body = json.dumps({"model": model, "input": "someone else's request"})
    argv = [hey, "-z", "120s", "-c", "1", "-q", "20", "-m", "POST", "-T", "application/json", "-d", body]
    proc = subprocess.Popen(
        [*argv, f"{dep.frontend_url}/v1/embeddings"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        # Ready when its requests show on the counters, not after a guessed delay.
        start, deadline = sum(counted(dep)), time.monotonic() + 20
        while sum(counted(dep)) - start < 2:
            assert proc.poll() is None and time.monotonic() < deadline, "hey's requests never arrived"
            time.sleep(0.05)
        yield
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)


def test_mixed_attached_with_worker_models_passes(pool: Deployment) -> None:
    proc = attached(pool, "mixed")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "mixed on attached: PASSED"


@pytest.mark.parametrize("scenario", ["multi-model", "mixed"])
def test_attached_another_clients_traffic_is_named_and_judges_nothing(
    pool: Deployment, scenario: str
) -> None:
    with another_client(pool, MODELS[0]):
        proc = attached(pool, scenario)
    out = proc.stdout
    assert proc.returncode == 1, out[-3000:] + proc.stderr[-3000:]
    assert f"{scenario} on attached: INCONCLUSIVE" in out, out[-3000:]
    assert "traffic embedlab did not send" in out and "leak" not in out.lower(), out[-3000:]
    # Only model-a's replicas carry hey's requests, and the reason names them.
    assert "worker 0 +" in out or "worker 1 +" in out, out[-3000:]
    assert "worker 2 +" not in out and "worker 3 +" not in out, out[-3000:]


def test_launched_the_header_proves_placement_and_the_verdict_says_so(pool: Deployment) -> None:
    with another_client(pool, MODELS[0]):
        result = ScenarioPlan(scenario="multi-model").run_on(pool)
    assert result.passed, result.summary()
    assert all(
        b.other_traffic and b.proven_by.startswith("the x-embedlab-worker header") for b in result.bursts
    )
    assert "placement proven by the x-embedlab-worker header" in result.summary()


def test_launched_a_leak_is_caught_through_another_clients_traffic(tmp_path) -> None:  # type: ignore[no-untyped-def]
    spec = DeploymentSpec.multi_model(list(MODELS), frontend_args=("--fault", "leak:0.1"))
    with Deployment(spec, run_dir=tmp_path) as dep, another_client(dep, MODELS[1]):
        result = ScenarioPlan(scenario="multi-model").run_on(dep)
    assert result.verdict == "failed", result.summary()
    assert any("leaked" in r for r in result.reasons) and "placement proven by" in result.summary(), (
        result.summary()
    )
