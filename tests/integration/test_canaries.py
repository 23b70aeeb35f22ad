"""Dynamo's canary health checks, on: they fire, the workers answer and count them, and the checks still hold.

One dynamo deployment (two hash workers, canaries on) serves every test here. A canary
goes from a worker's own runtime straight to its handler, so it must leave
`dynamo_component_requests_total` alone: a burst whose quiet windows are longer than the
canary wait has a canary in each of them, and still counts exactly what it sent.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from embedlab import Deployment, DeploymentSpec, same_model_load_balance
from embedlab.defaults import CANARY_METRIC, CANARY_WAIT_S
from embedlab.evidence.clients import run_sync
from embedlab.evidence.metrics import scrape
from embedlab.scenarios.burst import BurstSpec, judge, run_burst
from embedlab.stacks.dynamo import dynamo_installed
from embedlab.verdicts import Verdict

pytestmark = pytest.mark.dynamo

MODEL = "canary-m"
CANARY_DEADLINE_S = 20.0  # a canary comes CANARY_WAIT_S after the worker idles; this allows a loaded machine


@pytest.fixture(scope="module")
def dep(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    # The dynamo extra is part of `make test`: a missing install is a failure, not a skip.
    assert dynamo_installed(), "ai-dynamo is not installed: run `make dynamo`"
    spec = DeploymentSpec.same_model(MODEL, workers=2, stack="dynamo", canaries=True)
    with Deployment(spec, run_dir=tmp_path_factory.mktemp("canaries")) as deployment:
        yield deployment


def canaries(dep: Deployment) -> list[float]:
    return [scrape(url, metric=CANARY_METRIC, worker_index=i).value for i, url in enumerate(dep.system_urls)]


def wait_for_canaries(dep: Deployment, *, above: list[float]) -> list[float]:
    """Each worker's canary count once every one has passed `above`; fails at the deadline."""
    deadline = time.monotonic() + CANARY_DEADLINE_S
    while True:
        counts = canaries(dep)
        if all(now > then for now, then in zip(counts, above)):
            return counts
        dead = [p.name for p in dep.workers if not p.alive()]
        assert not dead, f"{', '.join(dead)} exited while waiting for canaries"
        assert time.monotonic() < deadline, (
            f"no canary within {CANARY_DEADLINE_S:g} s: counts {counts}, were {above}"
        )
        time.sleep(0.1)


def test_each_idle_worker_answers_canaries_and_logs_the_first(dep: Deployment) -> None:
    counts = wait_for_canaries(dep, above=[0.0, 0.0])
    assert all(c >= 1 for c in counts)
    for name in ("worker 0", "worker 1"):
        assert "first canary answered" in dep.log_paths[name].read_text()


def test_a_burst_with_canaries_in_its_quiet_windows_counts_exactly_what_it_sent(dep: Deployment) -> None:
    before = wait_for_canaries(dep, above=[0.0, 0.0])
    # Windows longer than the canary wait: each has a canary on every worker in it.
    quiet = CANARY_WAIT_S + 0.5
    spec = BurstSpec(name=MODEL, model=MODEL, expected=frozenset({0, 1}), requests=20, quiet_s=quiet)
    burst = run_sync(run_burst(dep.target(), spec))
    after = canaries(dep)
    assert all(a > b for a, b in zip(after, before)), f"no canary during the burst: {before} -> {after}"
    verdict, reasons = judge([burst], exact_total=True)
    assert burst.other_traffic == {} and burst.inconclusive is None, burst.inconclusive
    assert verdict == Verdict.PASSED, reasons
    assert burst.check is not None and burst.check.total_delta == 20


def test_same_model_passes_with_canaries_on(dep: Deployment) -> None:
    wait_for_canaries(dep, above=[0.0, 0.0])
    # 40: two replicas' smallest burst that catches a 0.9/0.1 skew with 99 % (fewer ends inconclusive).
    result = same_model_load_balance(dep, requests=40)
    assert result.passed, result.summary()
    assert result.bursts[0].check is not None and result.bursts[0].check.total_delta == 40
