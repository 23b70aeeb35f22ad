"""BusyMonitor over window records: the verdicts, their evidence and their words."""

from __future__ import annotations

import json

import numpy as np
import pytest

from embedlab.errors import ConfigError
from embedlab.evidence.busy import BusyMonitor, BusyVerdict, ProvenBy, Schedule, WindowRecord
from embedlab.evidence.busy.simulate import Pool
from embedlab.verdicts import Verdict


def _run(
    pool: Pool,
    *,
    seed: int = 0,
    background: float = 10.0,
    late_every: int = 0,
    budget_s: float = 60.0,
    router: bool = False,
    twice: float = 0.0,
    lost: float = 0.0,
) -> BusyVerdict:
    """One check, window by window, as the burst path will drive it: the schedule says what to send,
    the pool's router places it, another client adds Poisson traffic to every worker (its count per
    model read from the router too, with `router`). `twice`: each of the check's requests is counted
    a second time with this probability (a router that serves some twice); `lost`, counted nowhere
    with this probability (answered by a cache)."""
    rng = np.random.default_rng(seed)
    served = pool.served
    schedule = (
        Schedule.same_model(served[0], requests=10, seed=seed)
        if len(served) == 1
        else Schedule.per_model(served, requests=10, seed=seed)
    )
    monitor = BusyMonitor(schedule, pool.models, pool.weights or None, budget_s=budget_s)
    routing = pool.routing()
    for window in schedule.windows():
        theirs = rng.poisson(background / len(pool.models), len(pool.models)).astype(float)
        deltas = theirs.copy()
        for m, model in enumerate(served):
            dose = window.arm.dose(model)
            counted = dose - rng.binomial(dose, lost)
            deltas += rng.multinomial(counted + rng.binomial(counted, twice), routing[m])
        late = int(bool(late_every) and window.index % late_every == 0)
        others = {m: float(theirs[[x == m for x in pool.models]].sum()) for m in served} if router else None
        monitor.add(
            WindowRecord(
                index=window.index,
                deltas=tuple(deltas),
                sent=dict(window.arm.requests),
                late=late,
                others=others,
            )
        )
        verdict = monitor.verdict()
        if verdict is not None:
            return verdict
    raise AssertionError("unreachable: the budget ends every check")


def test_a_correct_same_model_pool_passes_and_says_what_it_ruled_out() -> None:
    verdict = _run(Pool.same_model(2), background=2.0)
    assert verdict.verdict is Verdict.PASSED, verdict.summary()
    assert verdict.proven_by is ProvenBy.SCHEDULE and verdict.seconds < 60
    assert (
        "an idle replica is ruled out" in verdict.power
        and "0.9/0.1 skew between two replicas is ruled out" in verdict.power
    )
    assert [r.unit for r in verdict.replicas] == ["worker 0", "worker 1"]
    assert all(r.moved and r.fits and r.low < 0.5 < r.high for r in verdict.replicas)
    assert verdict.counted[0].fits and verdict.confidence == pytest.approx(0.999)
    assert "each request counted once" in verdict.power and "(1 in 10 is ruled out)" in verdict.power
    assert "randomized blocks of 2 windows of 0.25 s (seed 0)" in verdict.how
    assert (
        "other clients' requests 'm' " in verdict.how and "from the counters, less the check's" in verdict.how
    )


def test_requests_counted_twice_fail_where_the_pool_is_busy_and_the_router_s_counts_are_read() -> None:
    """At a background as large as the check's own rate, the counters alone cannot rule out one
    request in ten counted twice within the budget; the router's count of the other clients'
    requests takes their noise out, so a correct router passes and a doubling one fails, at once."""
    alone = _run(Pool.same_model(2))
    assert alone.verdict is Verdict.INCONCLUSIVE and "(1 in 10 is not yet ruled out)" in alone.power
    clean = _run(Pool.same_model(2), router=True)
    assert clean.verdict is Verdict.PASSED and clean.seconds < 20, clean.summary()
    assert "by the router's count" in clean.how
    doubled = _run(Pool.same_model(2), router=True, twice=0.1)
    assert doubled.verdict is Verdict.FAILED and doubled.seconds < 30, doubled.summary()
    assert any("not each once: some were counted twice" in r for r in doubled.reasons), doubled.reasons
    assert doubled.counted[0].estimate > 1.0 and not doubled.counted[0].fits


def test_a_deficit_fails_as_requests_that_reached_no_replica() -> None:
    verdict = _run(Pool.same_model(2), router=True, lost=0.1)
    assert verdict.verdict is Verdict.FAILED, verdict.summary()
    assert any("reached none of them (answered by a cache" in r for r in verdict.reasons), verdict.reasons


def test_a_stuck_router_fails_naming_the_replica_left_out() -> None:
    verdict = _run(Pool.same_model(2, fault="stick"))
    assert verdict.verdict is Verdict.FAILED
    # Read net of the pool's other traffic, two replicas' reads are mirror images (they add up to
    # the check's requests), so both shares are ruled out in the same block.
    assert [r.split(" took")[0] for r in verdict.reasons] == ["worker 0", "worker 1"], verdict.reasons
    assert all("not its 50 %" in r for r in verdict.reasons)
    idle, busy = verdict.replicas[1], verdict.replicas[0]
    assert not idle.fits and not idle.moved and idle.high < 0.5 and busy.moved and busy.low > 0.5


def test_unequal_weights_set_each_replica_s_expected_share() -> None:
    verdict = _run(Pool.same_model(3, weights=(1, 1, 2)), background=2.0)
    assert [r.expected for r in verdict.replicas] == [0.25, 0.25, 0.5]
    assert verdict.verdict is Verdict.PASSED, verdict.summary()


def test_a_leak_between_two_models_fails_and_a_clean_pool_bounds_the_leak() -> None:
    leaky = _run(Pool.multi_model(2, fault="leak:0.1"))
    assert leaky.verdict is Verdict.FAILED
    named = ("was counted on its replicas, not all of it", "or sent to another model's replicas")
    assert any(n in r for r in leaky.reasons for n in named), leaky.reasons
    clean = _run(Pool.multi_model(2), seed=1, background=1.0)
    assert clean.verdict is Verdict.PASSED, clean.summary()
    assert "of 'm0' or of 'm1' landed on other models' replicas" in clean.power
    assert clean.placement[0].low >= 0.9 and not clean.replicas


def test_at_its_budget_an_undecided_check_is_inconclusive_and_says_what_it_could_rule_out() -> None:
    verdict = _run(Pool.same_model(2), background=400.0, budget_s=10.0)
    assert verdict.verdict is Verdict.INCONCLUSIVE and verdict.seconds == 10.0
    assert "does not yet rule out every fault" in verdict.reasons[0]
    assert "not yet ruled out" in verdict.power


def test_requests_answered_after_their_window_block_any_decision() -> None:
    verdict = _run(Pool.same_model(2), late_every=5)
    assert verdict.verdict is Verdict.INCONCLUSIVE and "still in flight" in verdict.reasons[0]


def test_the_verdict_is_plain_data() -> None:
    verdict = _run(Pool.same_model(2), router=True)
    data = json.loads(json.dumps(verdict.to_json()))
    assert data["verdict"] == "passed" and data["proven_by"] == ProvenBy.SCHEDULE.value
    assert [r["unit"] for r in data["replicas"]] == ["worker 0", "worker 1"]
    assert [r["unit"] for r in data["counted"]] == ["'m' counted once"] and set(data["other_traffic"]) == {
        "m"
    }
    with pytest.raises(AttributeError):
        verdict.verdict = Verdict.FAILED  # type: ignore[misc]


def test_records_out_of_order_or_of_the_wrong_size_are_refused() -> None:
    monitor = BusyMonitor(Schedule.same_model("m", requests=10, seed=0), ["m", "m"])
    with pytest.raises(ConfigError):
        monitor.add(WindowRecord(index=1, deltas=(0.0, 0.0)))
    with pytest.raises(ConfigError):
        monitor.add(WindowRecord(index=0, deltas=(0.0,)))
    assert monitor.verdict() is None and monitor.verdict(final=True).verdict is Verdict.INCONCLUSIVE
    with pytest.raises(ConfigError):
        BusyMonitor(Schedule.same_model("x", requests=10, seed=0), ["m", "m"])


def test_a_replicas_share_is_judged_evenly_only_where_the_routers_split_is_not_too_skewed() -> None:
    from embedlab.evidence.busy.engine import BlockEngine

    few = BlockEngine({"m": [0, 5]}, ["m"] * 16)
    assert set(few.stricter.values()) == {"below"} and len(few.stricter) == 16
    assert BlockEngine({"m": [0, 80]}, ["m"] * 16).stricter == {}
    assert BlockEngine({"m": [0, 5]}, ["m"] * 2).stricter == {}  # an even split of two is symmetric
    # A replica of weight 9 in 10 has its long tail on the other side: its excess is the stricter side.
    assert BlockEngine({"m": [0, 5]}, ["m"] * 2, [9.0, 1.0]).stricter == {
        "worker 0": "above",
        "worker 1": "below",
    }
