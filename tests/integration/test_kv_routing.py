"""KV-aware routing, proven from the workers' counters, on real processes.

- The embedded frontend's `kv` policy keeps each shared-prefix group on one worker (completions
  and chat), and spreads new prefixes over every worker; each faulty policy is caught: `blind`
  (it ignores the cached prefix) splits groups, `deaf` (one worker's KV events never reach it)
  is named from the router's own view beside the worker's count, `stick` (every request on one
  worker) leaves workers out of the participation check.
- Dynamo 1.6.1's KV router over its mocker: workers of one model on one endpoint keep every
  group; on an endpoint each (the seed's layout) the groups split and the verdict names the
  layout as the cause.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from embedlab import Deployment, DeploymentSpec, ScenarioPlan, Verdict, run_scenario
from embedlab.scenarios.builtin.kv import kv_participation, participation_requests, prefix_affinity
from embedlab.stacks.dynamo import dynamo_installed

from ..commands import run_embedlab

GROUPS = 8  # a deaf first instance gets some group's first request unless 8 fair coins all miss


def _kv_pool(tmp: Path, *faults: str, workers: int = 2) -> Iterator[Deployment]:
    args = tuple(a for f in faults for a in ("--fault", f))
    spec = DeploymentSpec.same_model("m", workers=workers, router_mode="kv", frontend_args=args)
    with Deployment(spec, run_dir=tmp) as dep:
        yield dep


@pytest.fixture(scope="module")
def correct(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    yield from _kv_pool(tmp_path_factory.mktemp("kv"), workers=3)


@pytest.mark.parametrize("kind", ["completions", "chat"])
def test_a_correct_kv_policy_keeps_each_group_on_one_worker(correct: Deployment, kind: str) -> None:
    result = prefix_affinity(correct, groups=GROUPS, kind=kind)
    assert result.verdict is Verdict.PASSED, result.reasons
    assert all(sum(1 for d in g.values() if d) == 1 for g in result.figures.groups)  # type: ignore[union-attr]
    view = result.figures.view  # type: ignore[union-attr]
    assert view is not None and view.made == view.applied and sum(view.made.values()) > 0


def test_a_correct_kv_policy_spreads_new_prefixes_over_every_worker(correct: Deployment) -> None:
    result = kv_participation(correct)
    assert result.verdict is Verdict.PASSED, result.reasons
    assert result.params["requests"] == participation_requests(3) == 20
    assert all((result.bursts[0].delta(i) or 0) > 0 for i in range(3))


def test_a_policy_blind_to_the_cached_prefix_splits_groups(tmp_path: Path) -> None:
    for dep in _kv_pool(tmp_path, "blind"):
        result = prefix_affinity(dep, groups=GROUPS)
    assert result.verdict is Verdict.FAILED, result.reasons
    assert any("split" in r and "must follow the cached prefix" in r for r in result.reasons), result.reasons


def test_a_router_deaf_to_one_workers_kv_events_is_named(tmp_path: Path) -> None:
    for dep in _kv_pool(tmp_path, "deaf"):
        result = prefix_affinity(dep, groups=GROUPS)
        spread = kv_participation(dep)  # every worker caches something new: the deaf one is named
    assert spread.verdict is Verdict.FAILED, spread.reasons
    assert any("KV events that the router never applied" in r for r in spread.reasons), spread.reasons
    assert result.verdict is Verdict.FAILED, result.reasons
    assert any("KV events that the router never applied" in r for r in result.reasons), result.reasons
    view = result.figures.view  # type: ignore[union-attr]
    deaf = [i for i in view.made if view.made[i] > 0 and view.applied[i] == 0]
    assert len(deaf) == 1, view


def test_a_router_pinned_to_one_worker_fails_participation(tmp_path: Path) -> None:
    for dep in _kv_pool(tmp_path, "stick"):
        result = kv_participation(dep)
    assert result.verdict is Verdict.FAILED, result.reasons
    assert any("no traffic reached worker" in r for r in result.reasons), result.reasons


def test_dynamos_kv_router_keeps_groups_only_among_workers_of_one_endpoint(tmp_path: Path) -> None:
    """The issue's own command, on Dynamo's mocker: `--endpoints model` passes; the seed's layout
    (an endpoint per worker) fails, naming the layout."""
    assert dynamo_installed(), "ai-dynamo is not installed: run `make dynamo`"
    base = (
        "scenario",
        "prefix-affinity",
        "--stack",
        "dynamo",
        "--router-mode",
        "kv",
        "--worker-server",
        "mocker",
    )
    shared = run_embedlab(*base, "--endpoints", "model", "--groups", "6", "--run-dir", tmp_path / "shared")
    assert shared.returncode == 0, shared.stdout[-3000:] + shared.stderr[-2000:]
    last = shared.stdout.strip().splitlines()[-1]
    assert last.startswith("prefix-affinity on dynamo (mocker): PASSED"), last
    assert "known to the KV router" in shared.stdout and "stored/ok" in shared.stdout
    apart = run_embedlab(*base, "--groups", "6", "--run-dir", tmp_path / "apart")
    last = apart.stdout.strip().splitlines()[-1]
    assert apart.returncode == 1 and "FAILED" in last, apart.stdout[-3000:] + apart.stderr[-2000:]
    assert "the cause is the layout" in last and "on 2 endpoints" in last, last


def test_dynamos_disaggregated_mocker_pools_count_each_request_once_per_stage() -> None:
    """Prefill and decode pools (dynamo #12864): each request on one prefill and one decode worker,
    every worker of each stage used; chat, keyed by model name, stays on each model's workers."""
    assert dynamo_installed(), "ai-dynamo is not installed: run `make dynamo`"
    result = run_scenario(ScenarioPlan(scenario="prefill-decode", stack="dynamo", worker_server="mocker"))
    assert result.verdict is Verdict.PASSED, result.reasons
    n = result.params["requests"]
    stages = result.figures.stages  # type: ignore[union-attr]
    assert set(stages) == {"prefill", "decode"}
    assert all(sum(split.values()) == n and all(split.values()) for split in stages.values()), stages
    chat = run_scenario(
        ScenarioPlan(scenario="multi-model", stack="dynamo", worker_server="mocker", params={"kind": "chat"})
    )
    assert chat.verdict is Verdict.PASSED, chat.reasons
    assert all(b.traffic.n == b.check.total_delta for b in chat.bursts if b.check), chat.reasons
