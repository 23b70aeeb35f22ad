"""The watch notebook's verdict line (`LiveWatch.summary`), from a watch's states alone: pure."""

from __future__ import annotations

from math import nan
from types import SimpleNamespace
from typing import Any

import pytest

from embedlab.watch.checks import CheckKey
from embedlab.watch.in_notebook import LiveWatch
from embedlab.watch.names import FAILING, INCONCLUSIVE, OK


def _live(states: list[tuple[str, str, int, float]], *, expect_fault: bool) -> LiveWatch:
    keyed = [
        SimpleNamespace(
            key=CheckKey(check, "m"), state=state, alarms=alarms, why=f"{check} why", ruled_out=ruled_out
        )
        for check, state, alarms, ruled_out in states
    ]
    watch: Any = SimpleNamespace(
        states=lambda: keyed, now=31.2, blocks={"kept": 30, "late": 1}, config=SimpleNamespace(max_rate=40.0)
    )
    return LiveWatch(watch=watch, exporter=SimpleNamespace(), expect_fault=expect_fault)  # type: ignore[arg-type]  # the summary reads no exporter


@pytest.mark.parametrize(
    ("states", "expect_fault", "said"),
    [
        # An alarm, as the fault asked: the failing checks named in words, each once.
        (
            [
                ("same-model", INCONCLUSIVE, 0, nan),
                ("multi-model", FAILING, 1, nan),
                ("counted-once", FAILING, 1, nan),
            ],
            True,
            "watch PASSED (expected: an alarm, a fault was injected): 2 alarms in 31 s: "
            "multi-model m and counted-once m failing.",
        ),
        (
            [
                ("same-model", OK, 0, nan),
                ("multi-model", INCONCLUSIVE, 0, 0.25),
                ("counted-once", INCONCLUSIVE, 0, nan),
            ],
            False,
            "watch INCONCLUSIVE (expected: no alarm on a correct router): no alarm in 31 s, but multi-model m "
            "and counted-once m had not decided yet (so far: multi-model m rules out a leak of 25 % of its "
            "requests; counted-once m rules out nothing yet). To decide, watch longer (seconds = 62) or send faster (max_rate = 80).",
        ),
        (
            [("same-model", OK, 0, nan), ("multi-model", FAILING, 1, nan)],
            False,
            "watch FAILED (expected: no alarm on a correct router): 1 alarm in 31 s: multi-model m failing "
            "(multi-model why).",
        ),
        (
            [("same-model", OK, 0, nan), ("multi-model", OK, 0, nan)],
            False,
            "watch PASSED (expected: no alarm on a correct router): no alarm in 31 s, every check ok.",
        ),
    ],
)
def test_the_verdict_line_names_the_checks_in_words(
    states: list[tuple[str, str, int, float]], expect_fault: bool, said: str
) -> None:
    summary = _live(states, expect_fault=expect_fault).summary()
    assert summary.startswith(said), summary
    assert summary.endswith("30 blocks kept, set aside: 1 late."), summary
