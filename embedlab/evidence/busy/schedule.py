"""The randomized schedule of a busy-pool check, and the record of what each window saw.

    schedule = Schedule.same_model("m", requests=20, seed=7)      # arms: off, on
    schedule = Schedule.per_model(["a", "b"], requests=20)          # arms: a, b (one model per window)
    for window in schedule.windows():                                # endless; the monitor says when to stop
        ...                                                          # snapshot, send window.arm.requests
        monitor.add(WindowRecord(index=window.index, deltas=..., sent=...))

Time is cut into windows of equal length on one clock (boundary k at `start + k * window_s`),
and every worker's counter is snapshotted at every boundary; a window's delta is the later
snapshot minus the earlier. In a window the check sends what its arm plans, starting after
the opening snapshot has returned and paced so that every request is answered within the
first `send_fraction` of the window: then none is in flight at the closing snapshot, and
every request the check sent in a window is counted in that window (a worker's counter moves
before it answers). A request still in flight at the closing snapshot is recorded as `late`.
Off windows have the same length: the other clients' traffic must fill both alike.

The design: blocked randomization. Windows come in blocks of one window per arm, in an order
drawn uniformly at random, independently for each block, from a seed the check alone knows.
With two arms (off, on) this is a pair of windows in random order. Why blocks and not a coin
per window: Bojinov, Simchi-Levi and Zhao, *Design and Analysis of Switchback Experiments*
(Management Science 69(7), 2023), show that the minimax design randomizes once per carryover
period, and that without carryover (here: each window's counts are its own, given the send
discipline above) any fair assignment per period is minimax; within that family, blocks keep
on and off exactly balanced at every block's end (the check's decisions come at block ends)
and make each block a contrast of adjacent windows, which cancels whatever part of the other
clients' traffic varies slower than a block (a ramp, a steady rate). Their randomization-based
inference is what the monitor uses: the schedule's own randomness, not a model of the other
clients, carries the test (sequential.py). A carryover of one window (a request answered late)
would call for blocks spaced by one window (their design for order-1 carryover); the send
discipline avoids it, and the record counts the requests that broke it.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...errors import ConfigError
from .constants import RATE_PER_S, SEND_FRACTION, WINDOW_S
from .sequential import orders

__all__ = ["Arm", "Schedule", "Window", "WindowRecord", "busy_rate", "schedule_for"]


@dataclass(frozen=True)
class Arm:
    """What the check sends in one window of this arm: requests per model (none: an off window)."""

    name: str
    requests: Mapping[str, int] = field(default_factory=dict)

    def dose(self, model: str) -> int:
        return int(self.requests.get(model, 0))


@dataclass(frozen=True)
class Window:
    """One window of the plan: when it starts (seconds from the schedule's start) and what it sends."""

    index: int
    block: int
    position: int
    arm: Arm
    start_s: float
    end_s: float
    send_by_s: float  # every request of the window answered by then


@dataclass(frozen=True)
class WindowRecord:
    """What one window saw: every worker's counter delta (by worker index) and the check's own requests.

    `sent`: requests the check sent in the window and had answered before its closing snapshot,
    by model (any HTTP status the worker gave: its counter moved for it). `late`: requests still
    unanswered at the closing snapshot (they may count in the next window). `others`, where the
    router's own counts are read: per model, the requests it admitted in the window less the
    check's (the other clients'); None where it is not.
    """

    index: int
    deltas: tuple[float, ...]
    sent: Mapping[str, int] = field(default_factory=dict)
    late: int = 0
    others: Mapping[str, float] | None = None


@dataclass(frozen=True)
class Schedule:
    """The arms, the window length and the seed: each block's order follows from (seed, block)."""

    arms: tuple[Arm, ...]
    window_s: float = WINDOW_S
    seed: int = field(default_factory=lambda: secrets.randbits(63))
    send_fraction: float = SEND_FRACTION

    def __post_init__(self) -> None:
        if not 2 <= len(self.arms) <= 5:
            raise ConfigError(
                f"a schedule needs 2 to 5 arms (one block holds every order), got {len(self.arms)}"
            )
        if len({a.name for a in self.arms}) != len(self.arms):
            raise ConfigError(f"arm names repeat: {[a.name for a in self.arms]}")
        if self.window_s <= 0 or not 0 < self.send_fraction <= 1:
            raise ConfigError(
                f"window_s must be > 0 and send_fraction in (0, 1], got {self.window_s}, {self.send_fraction}"
            )
        for model in self.models:
            if len(set(self.doses(model))) < 2:
                raise ConfigError(
                    f"every arm sends the same number of '{model}' requests: no window contrasts them"
                )
        # A model whose dose rises where another's does would let a leak each way cancel (docs/busy-method.md).
        for a in self.models:
            for b in self.models:
                if a < b and np.cov(self.doses(a), self.doses(b))[0, 1] > 1e-9:
                    raise ConfigError(
                        f"arms send more '{a}' where they send more '{b}': leaks between them would cancel"
                    )

    @classmethod
    def same_model(cls, model: str, *, requests: int, **kwargs: Any) -> Schedule:
        """Pairs of windows, one silent and one with `requests` of `model`, in random order."""
        return cls(arms=(Arm("off"), Arm("on", {model: requests})), **kwargs)

    @classmethod
    def per_model(cls, models: Sequence[str], *, requests: int, mix: float = 0.0, **kwargs: Any) -> Schedule:
        """One arm per model: its window sends `requests`, of which a share `mix` spread over the
        other models (interleaved traffic, for the mixed scenario); the rest are of the arm's model."""
        models = list(dict.fromkeys(models))
        if len(models) < 2:
            raise ConfigError(f"per_model needs two models or more, got {models}")
        others = round(requests * mix / (len(models) - 1))
        if not 0 <= mix < 1 / len(models) or requests - others * (len(models) - 1) <= others:
            raise ConfigError(f"mix must leave each arm's own model the largest share, got mix={mix}")
        arms = tuple(
            Arm(
                m,
                {
                    o: (requests - others * (len(models) - 1)) if o == m else others
                    for o in models
                    if o == m or others
                },
            )
            for m in models
        )
        return cls(arms=arms, **kwargs)

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(m for arm in self.arms for m in arm.requests))

    def doses(self, model: str) -> tuple[int, ...]:
        """Requests of `model` each arm plans per window, by arm index."""
        return tuple(arm.dose(model) for arm in self.arms)

    def order(self, block: int) -> tuple[int, ...]:
        """The arms of block `block`, window by window (arm indices): uniform over all orders."""
        rng = np.random.default_rng([self.seed, block])
        return tuple(int(i) for i in rng.permutation(len(self.arms)))

    def order_index(self, block: int) -> int:
        """Where `order(block)` stands in `sequential.orders(len(arms))`."""
        table = orders(len(self.arms))
        return int(np.flatnonzero((table == np.array(self.order(block))).all(axis=1))[0])

    @property
    def block_s(self) -> float:
        return self.window_s * len(self.arms)

    def window(self, index: int) -> Window:
        block, position = divmod(index, len(self.arms))
        start = index * self.window_s
        return Window(
            index=index,
            block=block,
            position=position,
            arm=self.arms[self.order(block)[position]],
            start_s=start,
            end_s=start + self.window_s,
            send_by_s=start + self.window_s * self.send_fraction,
        )

    def windows(self) -> Iterator[Window]:
        index = 0
        while True:
            yield self.window(index)
            index += 1

    def blocks_within(self, seconds: float) -> int:
        """Whole blocks that fit in `seconds`."""
        return int(seconds // self.block_s + 1e-9)


def busy_rate(workers: int) -> float:
    """The busy check's own rate while a window is on, for a model of `workers` replicas (one
    model's requests per window): RATE_PER_S for two, proportionally more for more, so that
    each replica's share of a window stays about the same (up to 8x: the sender bounds it, and
    driver.fitted_window lowers it further to what the sender and router answer in time)."""
    return RATE_PER_S * min(8.0, max(1.0, workers / 2))


def schedule_for(models: Sequence[str], *, workers: int) -> Schedule:
    """The schedule of a busy check: on/off windows for one model, one arm per model for several;
    `workers`: the most replicas any of them has."""
    per_window = max(1, round(busy_rate(workers) * WINDOW_S))
    models = list(dict.fromkeys(models))
    if len(models) == 1:
        return Schedule.same_model(models[0], requests=per_window)
    return Schedule.per_model(models, requests=per_window)
