"""Failover through the burst path, in its pure parts: a check that reads some workers by their own
indices (the victim is not read), the header checked against the survivors' counters only, a
schedule that leaves the dead worker out, and the verdict when the schedule judges the survivors."""

from __future__ import annotations

import numpy as np
import pytest

from embedlab.errors import ConfigError
from embedlab.evidence.busy import BusyMonitor, BusyVerdict, ProvenBy, Schedule, WindowRecord
from embedlab.evidence.busy.engine import BlockEngine
from embedlab.evidence.counters import DispatchCheck
from embedlab.evidence.metrics import DEFAULT_METRIC, Snapshot
from embedlab.evidence.traffic import BurstResult, RequestRecord
from embedlab.scenarios.builtin.resilience import FailoverFigures, FailoverParams, _failover_verdict
from embedlab.scenarios.burst import _counters_agree
from embedlab.scenarios.params import knobs
from embedlab.scenarios.result import Burst, ScheduleRun
from embedlab.verdicts import Verdict


def _snap(value: float) -> Snapshot:
    return Snapshot(url="http://w", query=DEFAULT_METRIC, series=(((), value),))


def test_failover_takes_the_busy_knobs_after_its_own() -> None:
    names = [k.name for k in knobs(FailoverParams)]
    assert names[-2:] == ["busy", "budget_s"] and names[0] == "requests", names
    assert FailoverParams().busy is False and FailoverParams().budget_s == 60.0


def test_a_check_of_some_workers_goes_by_their_own_indices() -> None:
    # Workers 0 and 2 read; worker 1 (the victim) is not.
    check = DispatchCheck(["http://w0", "http://w2"], {0, 2}, indices=[0, 2], raise_on_failure=False)
    check.before, check.after = [_snap(5), _snap(7)], [_snap(9), _snap(7)]
    judged = check._judge()
    assert [r.index for r in judged.rows] == [0, 2] and judged.reasons == ("no traffic reached worker 2",)
    assert check.delta_of(0) == 4 and check.delta_of(2) == 0 and check.delta_of(1) is None
    # The responses that named the victim count nowhere: it has no row, and cannot refute the header.
    attributed = check.judge_attributed({0: 3, 1: 40, 2: 2})
    assert attributed.passed and [r.delta for r in attributed.rows] == [3, 2]
    refuted = _counters_agree(attributed, check, {0: 3, 1: 40, 2: 2})
    assert refuted.reasons == (
        "worker 2's counter rose by 0 while 2 responses named it "
        "(the x-embedlab-worker header is contradicted by the counters)",
    )
    with pytest.raises(ConfigError, match=r"expected workers \[1\] are not among the workers read"):
        DispatchCheck(["http://w0"], {1}, indices=[0])


def test_a_worker_left_out_of_the_schedule_is_in_no_unit_and_asks_no_leak() -> None:
    engine = BlockEngine({"m": (0, 10)}, ["m", None, "m"])
    assert [u.workers for u in engine.units] == [(0, 2), (0,), (2,)] and not engine.asks_leak
    # The survivor alone: its placement unit only, every request of the check's on it.
    schedule = Schedule.same_model("m", requests=10, seed=3)
    monitor = BusyMonitor(schedule, ["m", None], budget_s=30)
    rng = np.random.default_rng(0)
    verdict = None
    for window in schedule.windows():
        on = window.arm.dose("m")
        background = float(rng.poisson(1))
        monitor.add(WindowRecord(index=window.index, deltas=(on + background, 0.0), sent={"m": on}))
        verdict = monitor.verdict()
        if verdict is not None:
            break
    assert verdict is not None and verdict.verdict is Verdict.PASSED, verdict
    assert [e.workers for e in verdict.counted] == [(0,)] and verdict.replicas == verdict.placement == ()


def _figures(*, asserted: bool, failed: int = 0, excluded: float | None = 0.2) -> FailoverFigures:
    return FailoverFigures(
        victim=1, kill_after_responses=50, requests=200, killed_at_s=0.4, excluded_after_s=excluded,
        lease_ttl_s=3.0, failed_requests=failed, codes={}, responses_after_kill=150, errors_window_s=0.0,
        asserted=asserted, victim_counter_before=0.0, served_by={},
    )  # fmt: skip


def _burst(*, failed: int = 0) -> Burst:
    records = [RequestRecord(i, "m", 0.0, 0.01, 200, None, 1) for i in range(200 - failed)]
    records += [RequestRecord(i, "m", 0.0, 0.01, 0, None, 1, error="boom") for i in range(failed)]
    traffic = BurstResult(model="m", n=200, concurrency=8, records=records, wall_seconds=1.0)
    inconclusive = "traffic embedlab did not send: worker 0 +7 in the 0.4 s of quiet windows around the burst"
    return Burst("m", "m", frozenset({0}), traffic, inconclusive=inconclusive, other_traffic={0: 7.0})


def _busy(verdict: Verdict, reasons: tuple[str, ...] = ()) -> ScheduleRun:
    said = BusyVerdict(
        verdict=verdict, reasons=reasons, placement=(), replicas=(), power="the counters account for it",
        proven_by=ProvenBy.SCHEDULE, how="9 blocks", windows=18, seconds=4.5, confidence=0.999,
    )  # fmt: skip
    traffic = BurstResult(model="m", n=90, concurrency=4, records=[], wall_seconds=4.5)
    return ScheduleRun([], said, traffic, seed=1, window_s=0.25, rate_per_s=80.0, worker_models=("m", None))


def test_on_a_busy_pool_the_schedule_judges_the_survivors_in_place_of_the_burst_pair() -> None:
    assert (
        _failover_verdict(_burst(), _figures(asserted=True), requests=200, ttl=3.0)[0] is Verdict.INCONCLUSIVE
    )
    passed = _failover_verdict(
        _burst(), _figures(asserted=True), requests=200, ttl=3.0, busy=_busy(Verdict.PASSED)
    )
    assert passed == (Verdict.PASSED, [])
    leaked = _busy(Verdict.FAILED, ("80 % (70 % to 90 %) of 'm' was counted on its replicas",))
    verdict, reasons = _failover_verdict(
        _burst(), _figures(asserted=True), requests=200, ttl=3.0, busy=leaked
    )
    assert verdict is Verdict.FAILED and reasons == [
        "m, the survivors after the kill: 80 % (70 % to 90 %) of 'm' was counted on its replicas"
    ]
    open_ = _busy(
        Verdict.INCONCLUSIVE, ("after 240 windows (60 s) the evidence does not yet rule out every fault",)
    )
    assert _failover_verdict(_burst(), _figures(asserted=True), requests=200, ttl=3.0, busy=open_)[0] is (
        Verdict.INCONCLUSIVE
    )
    # A lost request fails whatever the schedule could say.
    lost = _failover_verdict(
        _burst(failed=2), _figures(asserted=True, failed=2), requests=200, ttl=3.0, busy=open_
    )
    assert lost[0] is Verdict.FAILED and lost[1][0].startswith("2 of 200 requests failed after the kill")


def test_reported_on_a_busy_pool_stays_reported_and_says_what_the_schedule_found() -> None:
    verdict, reasons = _failover_verdict(
        _burst(), _figures(asserted=False), requests=200, ttl=3.0, busy=_busy(Verdict.PASSED)
    )
    assert verdict is Verdict.REPORTED
    assert reasons == [
        "0 of 200 requests failed",
        "out of dispatch 200 ms after the kill",
        "the survivors after the kill, on a busy pool: passed",
    ]
