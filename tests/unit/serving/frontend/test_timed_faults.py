"""The embedded frontend's faults with a start (and stop) time: `leak:0.01@60s`, `stick@30s-90s`."""

from __future__ import annotations

import math

import pytest

from embedlab.errors import ConfigError
from embedlab.serving.frontend.app import FrontendConfig
from embedlab.serving.frontend.faults import Fault, FaultInjector, parse_fault


@pytest.mark.parametrize(
    ("spec", "fault"),
    [
        ("leak:0.01@60s", Fault("leak", 0.01, 60.0)),
        ("leak:0.01@60", Fault("leak", 0.01, 60.0)),
        ("stick@30s-90s", Fault("stick", 0.0, 30.0, 90.0)),
        ("skew:0.9@2.5s-3", Fault("skew", 0.9, 2.5, 3.0)),
        ("leak:0.1", Fault("leak", 0.1)),
    ],
)
def test_parse_and_round_trip(spec: str, fault: Fault) -> None:
    assert parse_fault(spec) == fault
    # str() is what a multi-process frontend hands its routing processes: it must parse back.
    assert parse_fault(str(fault)) == fault


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("leak:0.01@", "not a start time"),
        ("leak:0.01@soon", "not a start time"),
        ("leak:0.01@-5s", "not a start time"),
        ("leak:0.01@60s-30s", "not after it starts"),
        ("stick:1@5s", "takes no parameter"),
        ("teleport@5s", "unknown fault"),
        ("leak@5s", "needs a parameter"),
    ],
)
def test_bad_specs_are_config_errors(spec: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        parse_fault(spec)


def test_a_timed_fault_is_active_only_in_its_window() -> None:
    now = [100.0]
    injector = FaultInjector(
        [parse_fault("leak:0.1@60s"), parse_fault("stick@30s-90s")], clock=lambda: now[0]
    )
    assert injector  # configured: the frontend takes the fault path from the start
    seen = {}
    for t in (0, 29.9, 30, 59.9, 60, 89.9, 90, 1e6):
        now[0] = 100.0 + t
        seen[t] = injector.faults
    assert seen[0] == {} and seen[29.9] == {}
    assert seen[30] == {"stick": 0.0} and seen[59.9] == {"stick": 0.0}
    assert seen[60] == {"stick": 0.0, "leak": 0.1} and seen[89.9] == {"stick": 0.0, "leak": 0.1}
    assert seen[90] == {"leak": 0.1} and seen[1e6] == {"leak": 0.1}
    assert injector.describe() == "leak:0.1@60s, stick@30s-90s"


def test_the_frontend_config_hands_timed_faults_on() -> None:
    config = FrontendConfig(port=0, faults=(parse_fault("leak:0.01@60s"),))
    again = FrontendConfig.from_settings(config.settings(), token=None)
    assert again.faults == config.faults and again.faults[0].stop_s == math.inf
