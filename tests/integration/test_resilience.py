"""Workers leaving: failover without loss, drains, restarts, and faults the checks must catch."""

from __future__ import annotations

import json

import httpx
import pytest

from embedlab import (
    Deployment,
    DeploymentSpec,
    DrainError,
    StackContext,
    WorkerSpec,
    drain,
    failover,
    multi_model_dispatch,
    plot,
    register_stack,
    same_model_load_balance,
)
from embedlab.cluster.stack_registry import STACKS
from embedlab.scenarios.builtin.mixed import mixed_traffic
from embedlab.stacks.dynamo import dynamo_installed
from embedlab.stacks.embedded import EmbeddedStack
from embedlab.verdicts import Verdict

from ..commands import run_embedlab


def test_failover_on_embedded_loses_nothing(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with Deployment(DeploymentSpec.same_model("m", workers=2), run_dir=tmp_path) as dep:
        result = failover(dep, requests=200, concurrency=8, kill_after=50)
        assert not dep.workers[1].alive()
    assert result.passed, result.summary()
    figures = result.figures
    assert figures is not None and figures.failed_requests == 0
    assert figures.excluded_after_s is not None and figures.excluded_after_s < 2 * 3.0
    assert [e.kind for e in result.events] == ["kill", "out of dispatch"]
    assert sum(result.bursts[0].traffic.served_by().values()) == 200
    plot(result)


def test_failover_on_dynamo_is_reported_not_asserted_and_says_so(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The CLI as a user runs it: the last line says REPORTED, never PASSED, and it exits 0."""
    assert dynamo_installed()
    out = tmp_path / "result.json"
    proc = run_embedlab(
        "scenario",
        "failover",
        "--stack",
        "dynamo",
        "--requests",
        "120",
        "--json",
        str(out),
        "--run-dir",
        str(tmp_path / "run"),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("failover on dynamo (hash): REPORTED (") and "PASSED" not in proc.stdout, (
        proc.stdout[-2000:]
    )
    result = json.loads(out.read_text())
    assert (result["verdict"], result["passed"], result["ok"]) == ("reported", False, True)
    failed = result["figures"]["failed_requests"]
    assert f"{failed} of 120 requests failed" in last
    assert result["figures"]["asserted"] is False and result["figures"]["killed_at_s"] is not None
    survivor = result["bursts"][0]["check"]["rows"][0]
    assert survivor["worker"] == 0 and survivor["delta"] > 0


def test_drained_worker_gets_nothing_then_resumes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with Deployment(DeploymentSpec.same_model("m", workers=2), run_dir=tmp_path) as dep:
        drained = drain(dep, victim=1, requests=20)
        assert drained.passed, drained.summary()
        assert [r.delta for r in drained.bursts[0].check.rows] == [20, 0]  # type: ignore[union-attr]
        assert same_model_load_balance(dep).passed, "the resumed worker takes traffic again"


class DeafDrainStack(EmbeddedStack):
    """The embedded stack with a drain the frontend never hears of: the call succeeds, nothing changes."""

    name = "deaf-drain"

    def drain(self, client: httpx.Client, ctx: StackContext, index: int) -> None:
        client.get(f"{ctx.system_url(index)}/health").raise_for_status()

    def resume(self, client: httpx.Client, ctx: StackContext, index: int) -> None:
        return None


def test_a_drain_that_does_not_take_is_a_drain_error_with_the_worker(tmp_path) -> None:  # type: ignore[no-untyped-def]
    register_stack("deaf-drain", DeafDrainStack)
    try:
        spec = DeploymentSpec.same_model("m", workers=2, stack="deaf-drain")
        with Deployment(spec, run_dir=tmp_path) as dep:
            with pytest.raises(
                DrainError, match=r"worker 1 \(.*\) was not out of dispatch within 0.5 s"
            ) as err:
                dep.steering.drain(1, timeout=0.5)
            assert (err.value.worker_index, err.value.endpoint) == (1, dep.endpoint(1))
            assert err.value.drained is True
            assert [e.kind for e in dep.events] == [], "a drain that did not take is not recorded as one"
    finally:
        STACKS.unregister("deaf-drain")


def test_restart_between_snapshots_is_inconclusive(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with Deployment(DeploymentSpec.same_model("m", workers=2), run_dir=tmp_path) as dep:
        restarted = []

        def restart_once(record) -> None:  # type: ignore[no-untyped-def]
            if not restarted:
                restarted.append(True)
                dep.outages.restart_worker(1)

        result = same_model_load_balance(dep, requests=20, on_response=restart_once)
    assert result.verdict == "inconclusive" and not result.passed
    assert result.reasons == ["m: counter reset on worker 1"]


# The embedded frontend's draws from random.Random(7): under skew:0.95 its first 60 requests split
# 58/2 (a split, not a still worker), and the confirming 240 split 223/17: they do not fit either.
SKEW_SEED = 7


@pytest.mark.parametrize(
    "fault,scenario,named",
    [
        # Each fault by its exact verdict and the reason that names it: a check that lost its power
        # (INCONCLUSIVE) or failed for another reason would not pass here.
        ("leak:0.1", "multi", "a: traffic leaked onto worker 1 (+1)"),
        ("stick", "same", "m: no traffic reached worker "),  # the first replica: either, by start order
        ("skew:0.95", "same", "a confirming burst of 240 requests did not fit either"),
        ("drop:0.2", "same", "requests failed (HTTP 503"),
        ("ghost", "drain", "m (worker 1 drained): traffic leaked onto worker 1"),
        ("double:0.1", "same", "m: counters moved 66 for 60 requests sent: some were counted twice"),
    ],
)
def test_injected_fault_is_caught(fault: str, scenario: str, named: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    if scenario == "multi":
        spec = DeploymentSpec.multi_model(["a", "b"], frontend_args=("--fault", fault))
    else:
        # Seeded: unseeded, skew:0.95 sends all 60 requests to worker 0 in 4.6 % of runs (0.95^60),
        # and the burst then fails on the still worker alone, with no confirming burst to assert.
        spec = DeploymentSpec.same_model("m", workers=2, frontend_args=("--fault", fault), seed=SKEW_SEED)
    with Deployment(spec, run_dir=tmp_path) as dep:
        assert "FAULT INJECTION IS ON" in dep.log_paths["frontend"].read_text()
        if scenario == "multi":
            result = multi_model_dispatch(dep, requests=10)
        elif scenario == "drain":
            result = drain(dep, victim=1, requests=20)
        else:
            result = same_model_load_balance(dep, requests=60)
    assert result.verdict == Verdict.FAILED, f"{fault} went unnoticed: {result.summary()}"
    assert any(named in reason for reason in result.reasons), result.reasons
    if fault.startswith("skew"):  # a split that does not fit fails once a burst 4x as large agrees
        assert [b.check.total_delta for b in result.bursts] == [60, 240], result.summary()  # type: ignore[union-attr]
        assert "did not fit either" in result.summary()


def test_a_slow_replica_is_no_placement_fault_and_its_latency_shows(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`slow:50` delays every request to one replica by 50 ms: where the requests went is right, so
    the verdict passes, and the latency figures show the delay (no clock asserted beyond it: a
    request delayed 50 ms takes at least 50 ms)."""
    spec = DeploymentSpec.same_model("m", workers=2, frontend_args=("--fault", "slow:50"), seed=SKEW_SEED)
    with Deployment(spec, run_dir=tmp_path) as dep:
        result = same_model_load_balance(dep, requests=60)
    assert result.verdict == Verdict.PASSED, result.summary()
    assert result.latency_ms()["p90"] >= 50, result.latency_ms()


def test_a_judge_that_doubts_every_failure_would_fail_the_fault_tests(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """The mutation the fault tests above must catch: `judge` turning each failed burst into
    INCONCLUSIVE (a check that lost its power). Under it, `stick` is no longer FAILED, so the
    fault test's exact-verdict assertion fails, where the old `not result.passed` still held."""
    from embedlab.scenarios.builtin import dispatch

    real = dispatch.judge

    def doubting(bursts, *, exact_total):  # type: ignore[no-untyped-def]
        verdict, reasons = real(bursts, exact_total=exact_total)
        return (Verdict.INCONCLUSIVE if verdict == Verdict.FAILED else verdict), reasons

    monkeypatch.setattr(dispatch, "judge", doubting)
    spec = DeploymentSpec.same_model("m", workers=2, frontend_args=("--fault", "stick"), seed=SKEW_SEED)
    with Deployment(spec, run_dir=tmp_path) as dep:
        result = same_model_load_balance(dep, requests=60)
    assert not result.passed, "the old assertion held under the mutation"
    assert result.verdict != Verdict.FAILED, "the exact assertion catches it"


# The embedded frontend's weighted-random draws from random.Random(331) split its first 40
# requests 9/31 (p=0.00068, below alpha) and its next 160 evenly enough: a correct router's
# chance split, which the confirming burst clears.
CHANCE_SPLIT_SEED = 331


def test_a_chance_split_of_a_correct_random_router_is_confirmed_and_passes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    spec = DeploymentSpec(
        workers=(WorkerSpec(model="m"), WorkerSpec(model="m")),
        router_mode="weighted-random",
        seed=CHANCE_SPLIT_SEED,
    )
    with Deployment(spec, run_dir=tmp_path) as dep:
        result = same_model_load_balance(dep, requests=40)
    assert [b.check.total_delta for b in result.bursts] == [40, 160], result.summary()  # type: ignore[union-attr]
    first = sorted(r.delta for r in result.bursts[0].check.rows)  # type: ignore[union-attr]
    assert first == [9, 31], first
    assert result.passed, result.summary()
    assert "a chance split, not a fault" in result.summary()


# random.Random(3773) at concurrency 1, models alternating: in the first 44 requests of each
# model, a's replicas split 10 and 34 (p=0.00039, below alpha) and b's 21 and 23; in the
# confirming 176 each, 78 and 98, 83 and 93 (which replica takes which depends on the order the
# workers registered in, so the test sorts them). A correct router's chance split in a mixed burst is sent again, as same-model's is.
MIXED_CHANCE_SEED = 3773


def test_a_chance_split_in_a_mixed_burst_is_confirmed_and_passes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    spec = DeploymentSpec.pool(["a", "b"], replicas=2, router_mode="weighted-random", seed=MIXED_CHANCE_SEED)
    with Deployment(spec, run_dir=tmp_path) as dep:
        result = mixed_traffic(dep, patterns=("alternate",), concurrency=1)
    assert [b.name for b in result.bursts] == ["alternate", "alternate (confirming)"], result.summary()
    assert [b.check.total_delta for b in result.bursts] == [88, 352], result.summary()  # type: ignore[union-attr]
    splits = result.figures.splits  # type: ignore[union-attr]
    first = {s.model: sorted(s.deltas) for s in splits if s.burst == "alternate"}
    assert first == {"a": [10, 34], "b": [21, 23]}, first
    assert result.passed, result.summary()
    assert "alternate: a: split" in result.summary() and "a chance split, not a fault" in result.summary()
