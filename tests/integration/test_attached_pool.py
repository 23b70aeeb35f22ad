"""A pool of two models with two replicas each, attached to as a user would: by URLs and
`--worker-models`, quiet and with another client sending one model's requests.

The other client is `hey`, a separate process embedlab knows nothing about: the check must
name its traffic and judge nothing, not accuse the router of a leak.
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

import pytest

from embedlab import Deployment, DeploymentSpec
from embedlab.metrics import scrape

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


@pytest.fixture
def other_client(pool: Deployment) -> Iterator[subprocess.Popen[bytes]]:
    """`hey` sending model-a's requests, 20 a second, until the test is done with it."""
    hey = shutil.which("hey")
    if hey is None:
        pytest.fail("hey is missing: `make test` installs it (apt-get install hey)")
    body = json.dumps({"model": MODELS[0], "input": "someone else's request"})
    argv = [hey, "-z", "120s", "-c", "1", "-q", "20", "-m", "POST", "-T", "application/json", "-d", body]
    proc = subprocess.Popen(
        [*argv, f"{pool.frontend_url}/v1/embeddings"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        # Ready when its requests show on model-a's replicas, not after a guessed delay.
        start, deadline = counted(pool), time.monotonic() + 20
        while sum(counted(pool)[:2]) - sum(start[:2]) < 2:
            assert proc.poll() is None and time.monotonic() < deadline, "hey's requests never arrived"
            time.sleep(0.05)
        yield proc
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)


def test_mixed_attached_with_worker_models_passes(pool: Deployment) -> None:
    proc = attached(pool, "mixed")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "mixed on attached: PASSED"


@pytest.mark.parametrize("scenario", ["multi-model", "mixed"])
def test_another_clients_traffic_is_named_and_judges_nothing(
    pool: Deployment, other_client: subprocess.Popen[bytes], scenario: str
) -> None:
    proc = attached(pool, scenario)
    out = proc.stdout
    assert proc.returncode == 1, out[-3000:] + proc.stderr[-3000:]
    assert f"{scenario} on attached: INCONCLUSIVE" in out, out[-3000:]
    assert "traffic embedlab did not send" in out and "leak" not in out.lower(), out[-3000:]
    # Only model-a's replicas carry hey's requests, and the reason names them.
    assert "worker 0 +" in out or "worker 1 +" in out, out[-3000:]
    assert "worker 2 +" not in out and "worker 3 +" not in out, out[-3000:]
