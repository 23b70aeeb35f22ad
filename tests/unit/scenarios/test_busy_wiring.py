"""The busy schedule's wiring into the burst path, in its pure parts: the knobs, the bursts
sized from the pool, the power gate, the header the counters refute, the schedule's counts."""

from __future__ import annotations

import pytest

from embedlab.evidence.busy import (
    ProvenBy,
    busy_rate,
    leak_requests,
    moving_requests,
    required_requests,
    schedule_for,
)
from embedlab.evidence.counters import DispatchCheck
from embedlab.evidence.metrics import DEFAULT_METRIC, Snapshot
from embedlab.evidence.split import Split
from embedlab.evidence.stats import still_chance
from embedlab.evidence.traffic import BurstResult
from embedlab.scenarios.builtin.dispatch import MultiModelParams, SameModelParams
from embedlab.scenarios.builtin.mixed import MixedParams
from embedlab.scenarios.builtin.placement import same_model_power, same_model_rule, still_note
from embedlab.scenarios.burst import _counters_agree
from embedlab.scenarios.params import knobs, params_of
from embedlab.scenarios.result import Burst, ScenarioResult, ScheduleRun, ScheduleWindow
from embedlab.scenarios.schedule import needs_schedule


def test_the_busy_knobs_are_declared_once_and_every_placement_scenario_takes_them() -> None:
    for cls in (SameModelParams, MultiModelParams, MixedParams):
        names = [k.name for k in knobs(cls)]
        assert names[-2:] == ["busy", "budget_s"], names  # its own knobs first, the shared ones after
        assert params_of(cls, {"busy": True, "budget_s": "30"}, scenario="x").budget_s == 30.0
        assert cls().busy is False and cls().budget_s == 60.0 and cls().requests is None


def test_the_default_bursts_follow_from_the_pool_and_reach_99_percent_up_to_64() -> None:
    assert leak_requests() == 44 and moving_requests([1, 1]) == 11 and moving_requests([1]) == 1
    for k, n in [(2, 40), (16, 690), (64, 4350)]:
        q = required_requests([1.0] * k)
        assert q.requests == n and q.require_all and q.idle >= 0.99 and q.skew >= 0.99


def test_a_burst_too_small_for_99_percent_power_says_why_and_what_would_do() -> None:
    enough, short = same_model_power(Split.WEIGHTS, 40, [1.0, 1.0])
    assert short == "" and enough.startswith("40 requests over 2 replicas")
    said, short = same_model_power(Split.WEIGHTS, 40, [1.0] * 16)
    assert short.startswith("40 requests are too few to judge 16 replicas: send 690 or more. At 40,"), short
    assert "short of the 99 % asked; a correct router leaves one still" in short, short
    assert (
        same_model_power(Split.EXACT, 2, [1.0] * 4)[1] and not same_model_power(Split.EXACT, 6, [1.0] * 4)[1]
    )
    assert same_model_power(Split.REPORT, 3, [1.0] * 4)[1] == ""


def test_a_burst_that_passes_with_a_still_worker_says_why_in_its_rule_and_its_reasons() -> None:
    # 1:4 over 20 requests: a correct router leaves the light worker still 1.2 % of the time,
    # above the fairness level, so "every worker moves" is not asserted and a 0/20 burst may pass.
    still = still_chance([1.0, 4.0], 20)
    assert round(still.value, 4) == round(0.8**20 + 0.2**20, 4)
    rule = same_model_rule(Split.WEIGHTS, all_move=False, still=still, alpha=0.001, requests=20)
    assert "a still worker is not asserted (a correct router leaves one still 1.2% of the time" in rule
    note = still_note("m", [0], weights=[1.0, 4.0], requests=20, still=still)
    assert note.startswith(
        "m: worker 0 got none of the 20 requests; a correct router leaves one still 1.2% of"
    )
    assert "at weights 1:4 over 20 requests" in note and "requests would be)" in note


def _snap(value: float) -> Snapshot:
    return Snapshot(url="http://w", query=DEFAULT_METRIC, series=(((), value),))


def test_a_header_naming_a_worker_whose_counter_did_not_rise_as_far_fails_with_both_numbers() -> None:
    check = DispatchCheck(["http://w0", "http://w1"], {0, 1}, raise_on_failure=False, min_total_delta=10)
    check.before = [_snap(5), _snap(7)]
    check.after = [_snap(16), _snap(8)]  # worker 0 rose 11 (another client's too), worker 1 only 1
    judged = check.judge_attributed({0: 5, 1: 5})
    assert judged.passed, judged.reasons
    refuted = _counters_agree(judged, check, {0: 5, 1: 5})
    assert not refuted.passed
    assert refuted.reasons == (
        "worker 1's counter rose by 1 while 5 responses named it "
        "(the x-embedlab-worker header is contradicted by the counters)",
    )
    assert _counters_agree(judged, check, {0: 5, 1: 1}) is judged


def test_only_other_traffic_nothing_accounted_for_sends_a_check_to_its_schedule() -> None:
    def burst(other: dict[int, float], proven_by: str = "") -> Burst:
        traffic = BurstResult(model="m", n=0, concurrency=1, records=[], wall_seconds=0.0)
        return Burst("m", "m", frozenset({0}), traffic, other_traffic=other, proven_by=proven_by)

    assert not needs_schedule([burst({})])
    assert needs_schedule([burst({}), burst({1: 3.0})])
    assert not needs_schedule(
        [burst({1: 3.0}, proven_by="the x-embedlab-worker header on 4 of its 4 responses")]
    )


def test_the_schedule_sends_one_model_on_and_off_or_one_model_per_window() -> None:
    same = schedule_for(["m"], workers=2)
    assert [a.name for a in same.arms] == ["off", "on"] and same.arms[1].requests == {"m": 40}
    per = schedule_for(["a", "b", "a"], workers=2)
    assert [dict(a.requests) for a in per.arms] == [{"a": 40}, {"b": 40}]
    assert busy_rate(2) == 160.0 and busy_rate(16) == 1280.0 and busy_rate(64) == busy_rate(16)


def test_on_minus_off_counts_only_the_blocks_kept_and_the_json_says_how_it_was_proven() -> None:
    windows = [
        ScheduleWindow(0, "off", 0.0, 0.25, (3.0, 4.0), {}),
        ScheduleWindow(1, "on", 0.25, 0.5, (9.0, 10.0), {"m": 12}),
        ScheduleWindow(2, "on", 0.5, 0.75, (50.0, 50.0), {"m": 5}, late=7, kept=False),
        ScheduleWindow(3, "off", 0.75, 1.0, (1.0, 1.0), {}, kept=False),
    ]
    traffic = BurstResult(model="m", n=0, concurrency=1, records=[], wall_seconds=1.0)
    run = ScheduleRun(windows, None, traffic, seed=1, window_s=0.25, rate_per_s=80.0, why="cut short")
    assert run.on_minus_off() == {0: 6.0, 1: 6.0} and run.set_aside == 2
    per_model = [
        ScheduleWindow(0, "a", 0.0, 0.25, (12.0, 2.0), {"a": 10}),
        ScheduleWindow(1, "b", 0.25, 0.5, (3.0, 11.0), {"b": 10}),
    ]
    leaked = ScheduleRun(
        per_model, None, traffic, seed=1, window_s=0.25, rate_per_s=80.0, worker_models=("a", "b")
    )
    assert leaked.on_minus_off() == {0: 9.0, 1: 9.0}
    result = ScenarioResult(
        scenario="same-model", stack="attached", params={}, workers=[], bursts=[], verdict="inconclusive",
        reasons=["cut short"], power="nothing ruled out", proven_by=ProvenBy.SCHEDULE, schedule=run,
    )  # fmt: skip
    shown = result.to_json()
    assert (
        shown["proven_by"] == "the schedule's on-minus-off counts" and shown["power"] == "nothing ruled out"
    )
    assert shown["schedule"]["set_aside"] == 2 and shown["schedule"]["on_minus_off"] == {"0": 6.0, "1": 6.0}
    assert (
        result.evidence()
        == "power: nothing ruled out; placement proven by the schedule's on-minus-off counts"
    )


@pytest.mark.parametrize("scenario", ["same-model", "multi-model", "mixed", "failover"])
def test_the_cli_takes_busy_and_budget_s(scenario: str) -> None:
    from embedlab.cli.entry import build_parser

    args = build_parser().parse_args(["scenario", scenario, "--busy", "--budget-s", "12"])
    assert args.busy is True and args.budget_s == 12.0
