"""Every request counted exactly once, on real processes: routers written to miscount the way real
ones do (the embedded frontend's `double:0.1`, `cache`, `shared-rr` and `leak:0.01`, its worker
header off), with another client sending through the same router (`hey`), attached as a user is.

- A router that serves one request in ten twice fails on a busy pool by the counters alone
  (multi-model, mixed, same-model), and at once by the router's own counts read beside them.
- Through a caching router, runs in a row and the watch pass: no body is ever sent twice; a run
  replayed on purpose with its recorded nonce reaches the cache, and says so.
- The mixed check's alternating order reaches the router as sent: a round-robin position shared
  by every model fails it, one per model passes.
- The watch, given the router's counts and nothing per response, catches a leak of 1 in 100.
- Dynamo's frontend counts agree with the workers' at every window boundary.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from embedlab import Deployment, DeploymentSpec
from embedlab.stacks.dynamo import dynamo_installed
from embedlab.watch import names

from ..commands import attach_args, run_embedlab
from .test_other_traffic import another_client
from .test_watch import all_ok, watching

MODELS = ("model-a", "model-b")
WORKER_MODELS = ("--worker-models", ",".join(m for m in MODELS for _ in range(2)))
# Room for a slow machine: the schedule stops at its first decision (about 10 s here), and the
# budget only bounds it; the test is anytime-valid at any length.
ROOM = ("--budget-s", "200")


def _pool(
    tmp_path_factory: pytest.TempPathFactory, name: str, *frontend: str, **spec: object
) -> Iterator[Deployment]:
    pool = DeploymentSpec.pool(
        list(MODELS), replicas=2, frontend_args=(*frontend, "--no-worker-header"), **spec
    )
    with Deployment(pool, run_dir=tmp_path_factory.mktemp(name)) as dep:
        yield dep


@pytest.fixture(scope="module")
def doubling(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    yield from _pool(tmp_path_factory, "doubling", "--fault", "double:0.1")


@pytest.fixture(scope="module")
def caching(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    yield from _pool(tmp_path_factory, "caching", "--fault", "cache")


def scenario(dep: Deployment, name: str, *extra: str | Path, only: str = "") -> tuple[int, list[str], str]:
    """`embedlab scenario NAME` attached to `dep`: every worker, or `only` one model's."""
    if only:
        urls = [
            a
            for i, w in enumerate(dep.spec.workers)
            if w.model == only
            for a in ("--system-url", dep.system_urls[i])
        ]
        pool = [
            "--frontend-url",
            dep.frontend_url,
            *urls,
            "--worker-models",
            ",".join([only] * (len(urls) // 2)),
        ]
    else:
        pool = [*attach_args(dep), *WORKER_MODELS]
    proc = run_embedlab("scenario", name, *pool, *extra, timeout=400)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    return proc.returncode, proc.stdout.strip().splitlines(), proc.stdout[-3000:] + proc.stderr[-2000:]


@pytest.mark.parametrize("name", ["multi-model", "mixed", "same-model"])
def test_serving_one_request_in_ten_twice_fails_on_a_busy_pool_by_the_counters_alone(
    doubling: Deployment, name: str
) -> None:
    with another_client(doubling, *MODELS):
        code, lines, text = scenario(doubling, name, *ROOM, only=MODELS[0] if name == "same-model" else "")
    assert code == 1 and lines[-1].startswith(f"{name} on attached: FAILED ("), text
    assert "counted twice" in lines[-1], text
    assert "placement proven by the schedule's on-minus-off counts" in text, text


def test_with_the_routers_own_counts_one_request_served_twice_fails_in_the_first_blocks(
    doubling: Deployment, tmp_path: Path
) -> None:
    out = tmp_path / "result.json"
    with another_client(doubling, *MODELS):
        code, lines, text = scenario(
            doubling, "multi-model", "--router-metrics", doubling.frontend_url, "--json", out, *ROOM
        )
    assert (
        code == 1 and "more than the embedded frontend admitted for it: some were served twice" in lines[-1]
    ), text
    result = json.loads(out.read_text())
    assert result["proven_by"] == "the router's own per-model counts beside the workers'"
    assert result["schedule"]["verdict"]["windows"] <= 8, result["schedule"]["verdict"]  # the first blocks


def test_through_a_caching_router_runs_in_a_row_pass_and_a_replay_reaches_the_cache(
    caching: Deployment, tmp_path: Path
) -> None:
    first = tmp_path / "first.json"
    for out in (first, tmp_path / "second.json"):
        code, lines, text = scenario(caching, "same-model", "--json", out, only=MODELS[0])
        assert code == 0 and lines[-1] == "same-model on attached: PASSED", text
    code, lines, text = scenario(caching, "mixed")
    assert code == 0 and lines[-1] == "mixed on attached: PASSED", text
    probes = json.loads(first.read_text())["probes"]
    assert probes["replayed"] is False and probes["bodies"] >= 40 and len(probes["nonce"]) == 12
    code, lines, text = scenario(caching, "same-model", "--nonce", probes["nonce"], only=MODELS[0])
    assert code == 1 and lines[-1].startswith("same-model on attached: INCONCLUSIVE"), text
    assert (
        "replays an earlier run's request bodies (its nonce), and a response cache answered them" in lines[-1]
    )
    assert "no traffic reached" not in lines[-1]


def test_the_watch_through_a_caching_router_never_repeats_a_body_and_raises_no_alarm(
    caching: Deployment, tmp_path: Path
) -> None:
    with watching(caching, tmp_path, "--router-metrics", caching.frontend_url) as watch:
        took = watch.wait_until("every check ok", lambda: all_ok(watch), deadline_s=180)
        assert all(v == 0 for v in watch.alarms().values()), watch.text()[-3000:]
        assert {c for c, _ in watch.verdicts()} == {names.SAME_MODEL, names.MULTI_MODEL, names.COUNTED_ONCE}
    assert " unseen: " not in watch.text(), watch.text()[-3000:]  # nothing it sent was answered by the cache
    print(f"\nwatch through a caching router: every check ok after {took:.0f} s, no alarm")


@pytest.fixture(scope="module")
def shared_rr(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    yield from _pool(tmp_path_factory, "shared-rr", "--fault", "shared-rr", router_mode="round-robin")


@pytest.fixture(scope="module")
def per_model_rr(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    yield from _pool(tmp_path_factory, "per-model-rr", router_mode="round-robin")


def test_the_alternating_order_reaches_the_router_as_sent(
    shared_rr: Deployment, per_model_rr: Deployment
) -> None:
    """Sent through concurrent lanes, the alternation arrived reordered and a shared round-robin
    position passed; one request at a time, every request of a model lands on one replica."""
    code, lines, text = scenario(shared_rr, "mixed", "--patterns", "alternate")
    # Which replica of each model the shared position leaves still depends on where it stood.
    said = r"mixed on attached: FAILED \(alternate: no traffic reached worker [01], worker [23]\)"
    assert code == 1 and re.fullmatch(said, lines[-1]), text
    assert "the alternate order reached the router as sent, one request at a time" in lines[-2], text
    code, lines, text = scenario(per_model_rr, "mixed", "--patterns", "alternate")
    assert code == 0 and lines[-1] == "mixed on attached: PASSED", text


def test_the_watch_given_the_routers_counts_catches_a_leak_of_one_in_a_hundred(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """No response names its worker; another client sends both models' requests; the leak moves
    the other model's replicas by a fraction of a request a window. The router's own counts bind
    each request it admitted to its model's replicas: the first leaked one past the requests in
    flight is an alarm."""
    for dep in _pool(tmp_path_factory, "leaky", "--fault", "leak:0.01"):
        with (
            another_client(dep, *MODELS, rate=8),
            watching(dep, tmp_path, "--router-metrics", dep.frontend_url) as watch,
        ):
            took = watch.wait_until(
                "an alarm", lambda: any(v >= 1 for v in watch.alarms().values()), deadline_s=120
            )
            text = watch.text()
            alarmed = {key for key, v in watch.alarms().items() if v >= 1}
        assert " miscount: " in text and "(a leak" in text, text[-3000:]
        assert alarmed & {(c, m) for c in (names.MULTI_MODEL, names.COUNTED_ONCE) for m in MODELS}, alarmed
        print(f"\nwatch: a leak of 1 in 100 alarmed {took:.0f} s after the watch started")


def test_dynamos_own_counts_agree_with_the_workers_at_every_window(tmp_path: Path) -> None:
    assert dynamo_installed(), "ai-dynamo is not installed: run `make dynamo`"
    spec = DeploymentSpec.pool(list(MODELS), replicas=2, stack="dynamo")
    with Deployment(spec, run_dir=tmp_path / "run") as dep, another_client(dep, *MODELS):
        out = tmp_path / "result.json"
        code, lines, text = scenario(dep, "mixed", "--router-metrics", dep.frontend_url, "--json", out, *ROOM)
    assert code == 0 and lines[-1] == "mixed on attached: PASSED", text
    assert "Dynamo's frontend's own counts agreed with the workers' at all" in lines[-2], text
    assert "by the router's count" in lines[-2], text


def test_smgs_own_counts_agree_with_the_workers_at_every_window(tmp_path: Path) -> None:
    """smg counts per model as it routes and as it answers, on its own metrics port, errors apart."""
    spec = DeploymentSpec.pool(list(MODELS), replicas=2, stack="smg")
    with Deployment(spec, run_dir=tmp_path / "run") as dep, another_client(dep, *MODELS):
        router = dep.target().router_metrics
        assert router is not None and router.name == "smg"
        code, lines, text = scenario(dep, "mixed", "--router-metrics", router.url, *ROOM)
    assert code == 0 and lines[-1] == "mixed on attached: PASSED", text
    assert "smg's own counts agreed with the workers' at all" in lines[-2], text
