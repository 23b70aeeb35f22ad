"""The busy check's schedule: seeded, uniform over each block's orders, balanced, on one clock."""

from __future__ import annotations

from collections import Counter

import pytest

from embedlab.errors import ConfigError
from embedlab.evidence.busy import Arm, Schedule


def test_the_same_seed_gives_the_same_schedule_and_another_seed_another() -> None:
    a, b, c = (Schedule.same_model("m", requests=10, seed=s) for s in (7, 7, 8))
    assert [a.order(i) for i in range(50)] == [b.order(i) for i in range(50)]
    assert [a.order(i) for i in range(50)] != [c.order(i) for i in range(50)]


def test_a_schedule_without_a_seed_draws_its_own() -> None:
    assert Schedule.same_model("m", requests=10).seed != Schedule.same_model("m", requests=10).seed


@pytest.mark.parametrize("arms", [2, 3])
def test_every_block_holds_each_arm_once_and_every_order_is_as_likely(arms: int) -> None:
    schedule = (
        Schedule.per_model([f"m{i}" for i in range(arms)], requests=10, seed=3)
        if arms > 2
        else (Schedule.same_model("m", requests=10, seed=3))
    )
    blocks = 6000
    seen = Counter(schedule.order(b) for b in range(blocks))
    assert all(sorted(order) == list(range(arms)) for order in seen)
    expected = blocks / len(seen)
    assert len(seen) == {2: 2, 3: 6}[arms]
    # Pearson's statistic against uniform, well inside its 0.1 % tail (df 1: 10.8; df 5: 20.5).
    assert sum((n - expected) ** 2 / expected for n in seen.values()) < {2: 10.8, 3: 20.5}[arms]


def test_windows_lie_on_one_clock_and_say_what_to_send() -> None:
    schedule = Schedule.same_model("m", requests=10, window_s=0.25, seed=1)
    windows = [schedule.window(i) for i in range(8)]
    assert [w.start_s for w in windows] == [i * 0.25 for i in range(8)]
    assert all(w.end_s == w.start_s + 0.25 and w.start_s < w.send_by_s < w.end_s for w in windows)
    for block in range(4):
        pair = windows[2 * block : 2 * block + 2]
        assert sorted(w.arm.name for w in pair) == ["off", "on"]
        assert [w.arm.name for w in pair] == [schedule.arms[i].name for i in schedule.order(block)]
    on = next(w for w in windows if w.arm.name == "on")
    assert on.arm.requests == {"m": 10} and on.arm.dose("other") == 0
    assert list(zip(range(5), schedule.windows())) == [(i, schedule.window(i)) for i in range(5)]


def test_order_index_points_into_the_engine_s_table() -> None:
    from embedlab.evidence.busy.sequential import orders

    schedule = Schedule.per_model(["a", "b", "c"], requests=9, seed=5)
    table = orders(3)
    for block in range(20):
        assert tuple(table[schedule.order_index(block)]) == schedule.order(block)


def test_per_model_arms_send_mostly_their_own_model() -> None:
    schedule = Schedule.per_model(["a", "b"], requests=10, mix=0.2, seed=0)
    assert [dict(arm.requests) for arm in schedule.arms] == [{"a": 8, "b": 2}, {"a": 2, "b": 8}]
    assert schedule.doses("a") == (8, 2) and schedule.block_s == 2 * schedule.window_s
    assert schedule.blocks_within(60.0) == 120


@pytest.mark.parametrize(
    "make",
    [
        lambda: Schedule(arms=(Arm("off"),)),
        lambda: Schedule(arms=(Arm("x", {"m": 5}), Arm("x", {"m": 0}))),
        lambda: Schedule(arms=(Arm("a", {"m": 5}), Arm("b", {"m": 5}))),  # nothing contrasts them
        lambda: Schedule(arms=(Arm("a", {"m": 5, "n": 5}), Arm("b", {}))),  # both rise together: leaks cancel
        lambda: Schedule.same_model("m", requests=10, window_s=0),
        lambda: Schedule.per_model(["a"], requests=10),
        lambda: Schedule.per_model(["a", "b"], requests=10, mix=0.6),
    ],
)
def test_a_schedule_that_cannot_contrast_its_arms_is_refused(make) -> None:
    with pytest.raises(ConfigError):
        make()
