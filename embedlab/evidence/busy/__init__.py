"""Routing verdicts on a pool that other clients also use: a randomized schedule and anytime-valid tests.

    schedule.py    Schedule (seeded blocks of windows, one per arm, in random order), Window, WindowRecord
    sequential.py  RandomizationCS: per-block randomization bets, e-processes and confidence sequences
    engine.py      BlockEngine: the units judged (placement per model, share per replica) and the stop rule
    monitor.py     BusyMonitor: window records in, a BusyVerdict out as soon as the evidence suffices
    outcome.py     BusyVerdict, ShareEstimate, ProvenBy: plain frozen data
    power.py       quiet-pool power: requests needed per pool, the smallest fault a burst catches
    simulate.py    simulated busy pools (steady, bursty, ramp backgrounds; the frontend's faults)
    constants.py   the defaults (budget, window, alpha, the faults a pass rules out)

The method and its simulated figures: docs/busy-method.md.

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
from .schedule import Arm, Schedule, Window, WindowRecord
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
    "leak_power",
    "leak_requests",
    "moving_requests",
    "quiet_power",
    "required_requests",
]
