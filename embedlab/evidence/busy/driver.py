"""The one window driver of a busy check, and its window rule.

    cuts = await run_block(schedule, block, window_s=0.25, origin=t, sender=sender, read=read)

A block's windows run on one clock (its start + k * window_s). Where a read waits for something
outside the check (`aligned`: counters read through Prometheus, each read waiting for a scrape of
every worker after it was asked), each window runs on its own clock instead, from the moment its
opening read came back: its sending part stays whole however long the read waited, and its
requests go out only after every worker was scraped. Each window's requests go out at
once, right after its opening read, and count where they were answered before its closing read:
`Cut.answered` holds the answers in hand when that read began, and a request still in flight then
(late) would count in the next window, perhaps of another arm. What a late or disturbed block means
is the caller's: the one-shot check (`scenarios.schedule.run_schedule`) sets it aside and runs the
same block again; the watch (`watch.runner.Watch`) sets it aside and lengthens its windows where
most blocks come late. Both grow a window by `longer_window`.

Pure asyncio: the sender (`evidence.traffic.WindowSender`) and the reads are given to it.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from .constants import WINDOW_S
from .schedule import Schedule, Window

__all__ = [
    "FEWEST_REQUESTS",
    "LONGEST_WINDOW_S",
    "Cut",
    "Sender",
    "fitted_window",
    "longer_window",
    "run_block",
]

A = TypeVar("A")
R = TypeVar("R")

# The longest window. Windows grow one WINDOW_S at a time where a window's requests are not
# answered within it: a sign-flip test needs blocks more than requests (14 at least at the check's
# level), so fewer requests a window come first, down to FEWEST_REQUESTS; 14 blocks of two 1 s
# windows still fit a 60 s budget twice over.
LONGEST_WINDOW_S = 1.0
FEWEST_REQUESTS = 4


class Sender(Protocol[A]):
    def send(self, requests: Mapping[str, int], *, name: str, at: float) -> list[A]:
        """Send a window's requests in the background; the list returned fills as they are answered."""
        ...


@dataclass(frozen=True)
class Cut(Generic[A, R]):
    """One window as the driver ran it."""

    window: Window
    at: float  # its opening, in seconds from the `origin` run_block was given
    wanted: int  # the requests it sent
    answered: list[A]  # the answers in hand when its closing read began
    read: R  # that closing read
    sending_s: float = 0.0  # how long it sent: its pieces times the window

    @property
    def late(self) -> int:
        return self.wanted - len(self.answered)


async def run_block(
    schedule: Schedule,
    block: int,
    *,
    window_s: float,
    origin: float,
    sender: Sender[A],
    read: Callable[[], Awaitable[R]],
    go_on: Callable[[R], bool] = lambda _: True,
    aligned: bool = False,
    pieces: int = 1,
) -> list[Cut[A, R]]:
    """Block `block` of `schedule`, window by window: send, wait for the window's end, read. Stops
    early after a read `go_on` refuses (a worker unread, a counter reset, a stale scrape).
    `aligned`: each window's clock starts when its opening read came back (reads that wait for
    scrapes), not at the block's start plus the windows before it. `pieces`: each window sends its
    arm's requests that many times, one `window_s` apart (the check's rate kept, its sending part
    stretched to fill the time between two scrapes)."""
    t0 = time.perf_counter()
    arms = len(schedule.arms)
    span = window_s * pieces
    cuts: list[Cut[A, R]] = []
    for position in range(arms):
        window = schedule.window(block * arms + position)
        opened = time.perf_counter() if aligned else t0 + position * span
        at = opened - origin
        sent: list[list[A]] = []
        for piece in range(pieces):
            sent.append(sender.send(window.arm.requests, name=window.arm.name, at=at + piece * window_s))
            await asyncio.sleep(max(0.0, opened + (piece + 1) * window_s - time.perf_counter()))
        in_hand = [answer for answers in sent for answer in answers]
        after = await read()
        cuts.append(Cut(window, at, pieces * sum(window.arm.requests.values()), in_hand, after, span))
        if not go_on(after):
            break
    return cuts


def longer_window(window_s: float) -> float | None:
    """The next window where a window's requests are not answered within it (None: the longest)."""
    if window_s >= LONGEST_WINDOW_S - 1e-9:
        return None
    return min(LONGEST_WINDOW_S, window_s + WINDOW_S)


def fitted_window(window_s: float, requests: int, rate: float, send_fraction: float) -> tuple[float, int]:
    """The window and the requests a window that a sender answering `rate` a second fits in its
    sending part: fewer requests first (down to FEWEST_REQUESTS), then longer windows."""
    window = window_s
    while True:
        fits = math.floor(rate * window * send_fraction)
        longer = longer_window(window)
        if fits >= min(requests, FEWEST_REQUESTS) or longer is None:
            return window, max(1, min(requests, fits))
        window = longer
