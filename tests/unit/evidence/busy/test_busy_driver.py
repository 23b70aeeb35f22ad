"""The window driver's clocks: one per block, or one per window where reads wait for scrapes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

from embedlab.evidence.busy import Arm, Schedule
from embedlab.evidence.busy.driver import run_block

READ_S = 0.15  # each read waits this long, as one through Prometheus waits for a scrape
WINDOW_S = 0.05


class _Sender:
    """Answers nothing: the test looks only at when each window opened."""

    def __init__(self) -> None:
        self.opened: list[float] = []

    def send(self, requests: Mapping[str, int], *, name: str, at: float) -> list[int]:
        self.opened.append(at)
        return []


def _openings(aligned: bool) -> list[float]:
    schedule = Schedule(
        arms=(Arm("off", {}), Arm("on", {"m": 2}), Arm("on2", {"m": 3})), seed=1, window_s=WINDOW_S
    )
    sender = _Sender()

    async def read() -> None:
        await asyncio.sleep(READ_S)

    async def block() -> None:
        origin = time.perf_counter()
        await run_block(
            schedule, 0, window_s=WINDOW_S, origin=origin, sender=sender, read=read, aligned=aligned
        )

    asyncio.run(block())
    return sender.opened


def test_aligned_windows_each_open_after_the_read_before_them_and_keep_their_sending_part() -> None:
    opened = _openings(aligned=True)
    gaps = [b - a for a, b in zip(opened, opened[1:])]
    # A window's requests go out only once its opening read came back: never sooner than the
    # last window's sending part plus that read (sleeps last at least as long as asked).
    assert len(gaps) == 2 and all(gap >= WINDOW_S + READ_S for gap in gaps), gaps


def test_a_block_clock_opens_windows_on_its_own_ticks_whatever_the_reads_took() -> None:
    opened = _openings(aligned=False)
    # On the block's clock the openings are its ticks, read time or not: a slow read eats the
    # next window's sending part, which is why reads through Prometheus run aligned.
    assert [round(b - a, 9) for a, b in zip(opened, opened[1:])] == [WINDOW_S, WINDOW_S]
