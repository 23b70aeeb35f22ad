"""The busy schedule's blocks when a read through Prometheus finds a scrape stale: the block is
cut and set aside, judging nothing, and the check goes on from a fresh read (pure: a counter
source and a sender that place every request on its model's workers at once)."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import random
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from embedlab.errors import ScrapeError
from embedlab.evidence.busy import schedule_for
from embedlab.evidence.metrics import DEFAULT_METRIC, Snapshot
from embedlab.evidence.target import attach
from embedlab.scenarios.result import ScheduleWindow
from embedlab.scenarios.schedule import _blocks, _Reader
from embedlab.verdicts import Verdict

MODELS = ("a", "a")


class _Pool:
    """Two replicas of one model behind a correct router; each request counted at once."""

    def __init__(self, stale_at: Sequence[int]) -> None:
        self.counts = [0.0] * len(MODELS)
        self.reads = 0
        self.stale_at = set(stale_at)  # the reads (1-based) that find worker 1's scrape stale
        self.rng = random.Random(7)

    async def aread(
        self,
        urls: Sequence[str],
        indices: Sequence[int],
        metric: Any = None,
        *,
        moment: str = "",
        client: Any = None,
    ) -> list[Snapshot]:
        self.reads += 1
        if self.reads in self.stale_at:
            raise ScrapeError(f"no scrape of worker 1 (b) {moment}: stale", url=urls[1], worker_index=1)
        return [
            Snapshot(url=u, query=DEFAULT_METRIC, series=(((), self.counts[i]),))
            for u, i in zip(urls, indices)
        ]

    windows = ""

    def sentence(self) -> str:
        return "counters read through Prometheus"

    def fits_s(self) -> tuple[float, float]:
        return 0.0, 1.0  # one piece a window

    # the sender's side
    def send(self, requests: Mapping[str, int], *, name: str, at: float) -> list[Any]:
        answered = []
        for model, k in requests.items():
            for _ in range(k):
                self.counts[self.rng.choice([i for i, m in enumerate(MODELS) if m == model])] += 1
                answered.append(SimpleNamespace(model=model, status=200))
        return answered

    async def settle(self) -> None:
        return None


def _run(stale_at: Sequence[int]) -> tuple[Any, list[ScheduleWindow], _Reader]:
    pool = _Pool(stale_at)
    target = attach("http://f:1", ["http://w0:1", "http://w1:1"], models=list(MODELS), counters=pool)
    schedule = dataclasses.replace(schedule_for(["a"], workers=2), window_s=0.01)  # no answer waits
    windows: list[ScheduleWindow] = []

    async def go() -> tuple[Any, _Reader]:
        async with httpx.AsyncClient() as client:
            reader = _Reader(target, list(MODELS), client)
            verdict = await _blocks(schedule, pool, reader, windows, None, 60.0)  # type: ignore[arg-type]
            return verdict, reader

    verdict, reader = asyncio.run(go())
    return verdict, windows, reader


def test_a_stale_read_in_a_block_sets_the_block_aside_and_the_check_decides_on_the_others() -> None:
    verdict, windows, reader = _run(stale_at=[3])  # read 1 opens, read 2 ends window 0, read 3 is stale
    assert verdict is not None and verdict.verdict is Verdict.PASSED, verdict
    stale = [w for w in windows if w.stale]
    assert len(stale) == 1 and not stale[0].kept and all(math.isnan(d) for d in stale[0].deltas)
    cut = [w for w in windows if not w.kept]
    assert len(cut) == 2 and cut[0].index == 0, cut  # the block's first window goes with it, judged nothing
    assert all(w.kept for w in windows[2:]) and reader.stale == [
        "no scrape of worker 1 (b) at a window's boundary: stale"
    ]


def test_a_worker_still_stale_on_the_fresh_read_after_a_cut_block_ends_the_check() -> None:
    with pytest.raises(ScrapeError, match="stale") as caught:
        _run(stale_at=[3, 4])
    assert caught.value.worker_index == 1
