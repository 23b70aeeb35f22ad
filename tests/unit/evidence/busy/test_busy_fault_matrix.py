"""Every frontend fault on the busy schedule, by its exact verdict and the reason that names it.

The quiet path's matrix is tests/integration/test_resilience.py's, on real processes; the watch's
is tests/unit/watch/test_watch_runner.py's. Here each fault is what the embedded frontend does to a
request (serving/frontend/faults.py), applied window by window to what the schedule sends, with
another client's Poisson traffic on every worker; the windows go through the same BusyMonitor
and `busy_outcome` a real schedule's do (scenarios/schedule.py), so a verdict that changes, or a
reason that stops naming its fault, fails here. Real processes: leak and stick on the schedule in
tests/integration/test_other_traffic.py, a restart mid-schedule in test_restarts.py.

What each fault does here:

    leak:p, stick, skew:w   the router's split (simulate.Pool.routing)
    drop:p                  answered 503 by the frontend, counted by no worker
    ghost                   a dead worker kept in dispatch (failover's victim): its share of the
                            requests fails (502), counted by no worker
    double:p                served twice: counted on two replicas
    cache                   answered 200 by the frontend's cache, counted by no worker
    slow:ms                 answered late: the block it falls in is set aside and run again
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np
import pytest

from embedlab.evidence.busy import BusyMonitor, Schedule, WindowRecord
from embedlab.evidence.busy.simulate import Pool
from embedlab.evidence.traffic import BurstResult, RequestRecord
from embedlab.scenarios.result import ScheduleRun, ScheduleWindow
from embedlab.scenarios.schedule import busy_outcome
from embedlab.verdicts import Verdict

BUDGET_S = 60.0


@dataclasses.dataclass(frozen=True)
class Case:
    fault: str
    models: tuple[str | None, ...]  # each worker's model; None: dead (failover's victim)
    verdict: Verdict
    named: tuple[str, ...] = ()  # one of these is in a reason
    # The router's own count of the other client's requests read beside the counters (as Dynamo's
    # is). Without it, one request in ten counted twice or not at all hides in the other client's
    # noise for longer than the budget (docs/busy-method.md): the counters alone pass no pool here,
    # so the rows they must convict alone (placement, failures) say so.
    router: bool = True


SAME, MULTI, SURVIVORS = ("m", "m"), ("a", "a", "b", "b"), ("m", None, "m")
MATRIX = [
    Case("", SAME, Verdict.PASSED),
    Case("", MULTI, Verdict.PASSED),
    Case("", SURVIVORS, Verdict.PASSED),
    Case(
        "leak:0.1",
        MULTI,
        Verdict.FAILED,
        ("was counted on its replicas, not all of it", "some reached none of them"),
        router=False,
    ),
    Case("stick", SAME, Verdict.FAILED, ("not its 50 %",), router=False),
    Case("stick", MULTI, Verdict.FAILED, ("not its 50 %",), router=False),
    Case("skew:0.9", SAME, Verdict.FAILED, ("not its 50 %",), router=False),
    Case("drop:0.2", SAME, Verdict.FAILED, ("requests failed (HTTP 503",), router=False),
    Case("ghost", SURVIVORS, Verdict.FAILED, ("requests failed (HTTP 502",), router=False),
    Case("double:0.1", SAME, Verdict.FAILED, ("not each once: some were counted twice",)),
    Case("cache", SAME, Verdict.FAILED, ("some reached none of them (answered by a cache",)),
    Case("slow:50", SAME, Verdict.PASSED),
]


def scheduled(case: Case, *, seed: int = 0, background: float = 10.0) -> ScheduleRun:
    """One check on a busy pool, its blocks fed to the monitor as `scenarios.schedule` feeds them."""
    rng = np.random.default_rng(seed)
    name, _, param = case.fault.partition(":")
    p = float(param) if param else 0.0
    live = [m for m in case.models if m is not None]
    served = tuple(dict.fromkeys(live))
    schedule = (
        Schedule.same_model(served[0], requests=10, seed=seed)
        if len(served) == 1
        else Schedule.per_model(served, requests=10, seed=seed)
    )
    # The router's split over every worker it dispatches to (ghost keeps the dead one).
    dispatched = tuple(m or served[0] for m in case.models) if name == "ghost" else case.models
    routing = Pool(tuple(m or "" for m in dispatched), fault=case.fault).routing()
    monitor = BusyMonitor(schedule, case.models, budget_s=BUDGET_S)
    windows: list[ScheduleWindow] = []
    records: list[RequestRecord] = []
    verdict = None
    block = 0
    while verdict is None:
        late_block = name == "slow" and rng.random() < 0.25
        found = []
        for position in range(len(schedule.arms)):
            window = schedule.window(block * len(schedule.arms) + position)
            at = len(windows + found) * schedule.window_s
            theirs = rng.poisson(background / len(live), len(case.models)) * [
                m is not None for m in case.models
            ]
            deltas = theirs.astype(float)
            sent: Counter[str] = Counter()
            for m, model in enumerate(Pool(tuple(m or "" for m in dispatched)).served):
                if model not in served:
                    continue
                dose = window.arm.dose(model)
                landed = rng.multinomial(dose, routing[m])
                for worker, n in enumerate(landed):
                    for _ in range(n):
                        status, error = 200, None
                        if case.models[worker] is None:
                            status, error = 502, "HTTP 502: worker unreachable"
                        elif name == "drop" and rng.random() < p:
                            status, error = 503, "HTTP 503: dropped"
                        elif name == "cache" and rng.random() < 0.2:
                            pass  # answered from the cache: no worker counts it
                        else:
                            deltas[worker] += 1 + (name == "double" and rng.random() < p)
                        sent[model] += 1
                        records.append(RequestRecord(len(records), model, at, 0.01, status, None, 1, error))
            others = {model: float(theirs[[x == model for x in case.models]].sum()) for model in served}
            found.append(
                ScheduleWindow(
                    window.index,
                    window.arm.name,
                    at,
                    at + schedule.window_s,
                    tuple(deltas),
                    dict(sent),
                    late=int(late_block),
                    others=others if case.router else None,
                )
            )
        if late_block:  # set aside and run again, the same order
            windows += [dataclasses.replace(w, kept=False) for w in found]
            continue
        windows += found
        for w in found:
            monitor.add(WindowRecord(index=w.index, deltas=w.deltas, sent=w.sent, others=w.others))
        block += 1
        verdict = monitor.verdict()
    traffic = BurstResult("+".join(served), len(records), 4, records, wall_seconds=windows[-1].end_s)
    return ScheduleRun(windows, verdict, traffic, seed, schedule.window_s, 40.0, worker_models=case.models)


@pytest.mark.parametrize("case", MATRIX, ids=lambda c: f"{c.fault or 'clean'}-{len(c.models)}w")
def test_each_fault_on_the_schedule_by_its_exact_verdict_and_reason(case: Case) -> None:
    run = scheduled(case)
    verdict, reasons, power = busy_outcome(run)
    assert verdict is case.verdict, (case, reasons, power)
    if case.named:
        assert any(n in r for r in reasons for n in case.named), reasons
    if case.fault == "slow:50":  # blocks came late, were set aside, and the kept ones decided
        assert any(not w.kept for w in run.windows) and any(w.kept for w in run.windows)
    if verdict is Verdict.PASSED:
        assert "ruled out" in power and not reasons, (power, reasons)


def test_a_failure_the_counters_also_saw_is_named_first_with_their_finding_beside_it() -> None:
    """A dropped request is direct evidence (the check holds its 503); the counters' deficit is the
    same fault seen statistically. Both are said, the direct one first."""
    run = scheduled(Case("drop:0.2", SAME, Verdict.FAILED, router=False), background=2.0)
    assert run.verdict is not None and run.verdict.verdict is Verdict.FAILED
    verdict, reasons, _ = busy_outcome(run)
    assert verdict is Verdict.FAILED and "of the schedule's" in reasons[0], reasons
    assert any("reached none of them" in r for r in reasons[1:]), reasons


def test_a_monitor_that_doubts_every_failure_would_fail_the_matrix(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mutation the matrix must catch: the monitor turning each failed verdict into INCONCLUSIVE
    (a check that lost its power). `stick` is then no longer FAILED, and the matrix says so."""
    real = BusyMonitor.verdict

    def doubting(self: BusyMonitor, *, final: bool | None = None):  # type: ignore[no-untyped-def]
        found = real(self, final=final)
        if found is not None and found.verdict is Verdict.FAILED:
            return dataclasses.replace(found, verdict=Verdict.INCONCLUSIVE)
        return found

    monkeypatch.setattr(BusyMonitor, "verdict", doubting)
    case = next(c for c in MATRIX if c.fault == "stick")
    with pytest.raises(AssertionError):
        test_each_fault_on_the_schedule_by_its_exact_verdict_and_reason(case)
