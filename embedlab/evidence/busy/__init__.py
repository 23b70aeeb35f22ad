"""Routing verdicts on a pool that other clients also use: a randomized schedule and anytime-valid tests.

    schedule.py    Schedule (seeded blocks of windows, one per arm, in random order), Window, WindowRecord;
                   busy_rate and schedule_for: the check's rate, scaled by the pool, and its schedule
    driver.py      run_block: the one window driver (one-shot check and watch alike); the window rule
    sequential.py  RandomizationCS: per-block randomization bets, e-processes and confidence sequences
    engine.py      BlockEngine: the units judged (placement per model, share per replica) and the stop rule
    monitor.py     BusyMonitor: window records in, a BusyVerdict out as soon as the evidence suffices
    outcome.py     BusyVerdict, ShareEstimate, ProvenBy: plain frozen data
    power.py       quiet-pool power: requests needed per pool, the smallest fault a burst catches
    simulate.py    simulated busy pools (steady, bursty, ramp backgrounds; the frontend's faults)
    constants.py   the defaults (budget, window, alpha, the faults a pass rules out)

The method and its simulated figures: docs/busy-method.md. What the test assumes, and where each
assumption is enforced or checked:

    Each request is counted once, on the replica that served it, before its answer.
        Checked, not assumed: the `counted` units (engine.py) test each model's count against
        the check's requests, and fail a surplus or a deficit (monitor.BusyMonitor._failures).
    Nothing carries over between windows.
        A request still in flight at its window's closing read would count in the next window
        (driver.Cut.late). Its block is set aside and run again: scenarios/schedule.py `_blocks`
        (`kept = not any(w.late ...)`), watch/runner.py `Watch._block` (`disturbed = "late"`);
        the monitor refuses to decide past LATE_TOLERANCE late (monitor.BusyMonitor.verdict).
    Other traffic is independent of the secret order.
        Each block's order is drawn from the check's own seed (schedule.Schedule.order), which
        nothing outside the check sees; the sender is fitted before any order is drawn
        (scenarios/schedule.py `_fitted`), and the watch spaces its blocks at random
        (watch/runner.py `_spacing`), so no periodic behaviour of a pool locks in phase.
    Counters only rise.
        A counter that went down raises CounterResetError (embedlab/evidence/metrics.py
        Snapshot.delta): the one-shot check ends inconclusive naming the worker, the watch sets
        the block aside. A worker that restarts and climbs back past its old count between two
        reads is not seen: docs/busy-method.md, "A restart the counters cannot see", bounds it.

This package is pure: it imports only embedlab's base layer (errors, defaults, verdicts),
embedlab.evidence.stats, and numpy (a core dependency; scipy is a dev dependency only, and is not used
here). It sits on its own floor of the import contract, just above stats.
"""

from __future__ import annotations

from .monitor import BusyMonitor
from .outcome import BusyVerdict, ProvenBy, ShareEstimate
from .power import (
    LeakPower,
    QuietPower,
    leak_power,
    leak_requests,
    moving_requests,
    quiet_power,
    required_requests,
)
from .schedule import Arm, Schedule, Window, WindowRecord, busy_rate, schedule_for
from .sequential import Betting, RandomizationCS

__all__ = [
    "Arm",
    "Betting",
    "BusyMonitor",
    "BusyVerdict",
    "ProvenBy",
    "LeakPower",
    "QuietPower",
    "RandomizationCS",
    "Schedule",
    "ShareEstimate",
    "Window",
    "WindowRecord",
    "busy_rate",
    "leak_power",
    "leak_requests",
    "moving_requests",
    "quiet_power",
    "required_requests",
    "schedule_for",
]
