"""The dynamic batcher's policy: full batches, no near-empty forward behind a full one,
admission by tokens and bucket, and every request's rows back in order.

The runner is a real function of its sequences (each vector encodes its sequence), so a
row delivered to the wrong request, or out of order, fails the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator

import numpy as np
import pytest

from embedlab.engines.batching import BatchShapes, Deferred, DynamicBatcher


def vectors_of(seqs: list[list[int]]) -> np.ndarray:
    return np.array([[sum(s), len(s), s[0]] for s in seqs], dtype=np.float32)


class Gated(Deferred):
    """A batch on a 'device' that finishes when the test opens its gate."""

    def __init__(self, seqs: list[list[int]]) -> None:
        self.seqs = seqs
        self.gate = threading.Event()

    def wait(self) -> np.ndarray:
        self.gate.wait(timeout=30)
        return vectors_of(self.seqs)


class Recorder:
    def __init__(self, *, gated: bool = False) -> None:
        self.batches: list[list[list[int]]] = []
        self.pending: list[Gated] = []
        self.threads: list[str] = []
        self.gated = gated

    def __call__(self, seqs: list[list[int]]) -> np.ndarray | Deferred:
        self.batches.append(seqs)
        self.threads.append(threading.current_thread().name)
        if self.gated:
            self.pending.append(Gated(seqs))
            return self.pending[-1]
        return vectors_of(seqs)


@contextlib.asynccontextmanager
async def started(batcher: DynamicBatcher, gated: Recorder | None = None) -> AsyncIterator[DynamicBatcher]:
    """The batcher running, then closed: a gated runner's forwards are opened first, as close waits for them."""
    batcher.start()
    try:
        yield batcher
    finally:
        for pending in gated.pending if gated is not None else ():
            pending.gate.set()
        await batcher.close()


async def settle() -> None:
    """Let every callback that is already due run (no time passes)."""
    for _ in range(5):
        await asyncio.sleep(0)


def test_a_lone_request_on_an_idle_device_launches_at_once() -> None:
    async def run() -> np.ndarray:
        # A window this long would time the test out if the batcher waited for company.
        batcher = DynamicBatcher(Recorder(), max_batch_size=8, wait_ms=60_000, max_wait_ms=60_000)
        async with started(batcher):
            return await asyncio.wait_for(batcher.submit([[5, 6, 7]]), timeout=10)

    np.testing.assert_array_equal(asyncio.run(run()), [[18, 3, 5]])


async def launched(runner: Recorder, count: int) -> None:
    """Until the runner has been called `count` times (a launch may go through a thread)."""
    for _ in range(10_000):
        if len(runner.batches) >= count:
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"{len(runner.batches)} launches, expected {count}")


def test_a_partial_batch_waits_while_a_full_one_is_in_flight() -> None:
    async def run() -> None:
        runner = Recorder(gated=True)
        batcher = DynamicBatcher(
            runner, max_batch_size=4, wait_ms=20, max_wait_ms=60_000, inline=lambda *_: True
        )

        def submit(*firsts: int) -> list[asyncio.Future[np.ndarray]]:
            return [asyncio.ensure_future(batcher.submit([[f]])) for f in firsts]

        async with started(batcher, runner):
            alone = submit(1)
            await settle()
            # An idle device: the first request goes at once, inline on the event loop.
            assert runner.batches == [[[1]]] and runner.threads == [threading.main_thread().name]
            waiting = submit(2, 3, 4)
            await settle()
            assert batcher.batches == 1  # three behind one in flight: not a batch yet
            filling = submit(5)
            await settle()
            assert batcher.batches == 2  # full: it joins the one in flight...
            await launched(runner, 2)
            assert runner.batches[1] == [[2], [3], [4], [5]]
            assert runner.threads[1].startswith("forward")  # ...through the forward thread
            late = submit(6, 7, 8)
            await settle()
            runner.pending[0].gate.set()
            await asyncio.wait_for(alone[0], timeout=10)
            await settle()
            # A slot is free, but a full batch is still in flight: three must not go yet.
            assert batcher.batches == 2
            runner.pending[1].gate.set()
            await asyncio.wait_for(asyncio.gather(*waiting, *filling), timeout=10)
            # The device is idle and nothing has arrived for the window: the three go together.
            await launched(runner, 3)
            assert runner.batches[2] == [[6], [7], [8]]
            runner.pending[2].gate.set()
            results = await asyncio.wait_for(asyncio.gather(*late), timeout=10)
            assert [r[0, 0] for r in results] == [6, 7, 8]

    asyncio.run(run())


def test_with_pipeline_min_a_partial_batch_queues_behind_the_one_in_flight() -> None:
    async def run() -> None:
        runner = Recorder(gated=True)
        batcher = DynamicBatcher(
            runner, max_batch_size=8, wait_ms=20, max_wait_ms=60_000, inline=lambda *_: True, pipeline_min=3
        )

        def submit(*firsts: int) -> list[asyncio.Future[np.ndarray]]:
            return [asyncio.ensure_future(batcher.submit([[f]])) for f in firsts]

        async with started(batcher, runner):
            alone = submit(1)
            await settle()
            assert runner.batches == [[[1]]]
            two = submit(2, 3)
            await settle()
            assert batcher.batches == 1  # two behind one in flight: fewer than pipeline_min
            third = submit(4)
            await settle()
            assert batcher.batches == 2  # three: it goes behind the one in flight, not yet full
            await launched(runner, 2)
            assert runner.batches[1] == [[2], [3], [4]]
            more = submit(5, 6, 7)
            await settle()
            assert batcher.batches == 2  # two in flight already: max_inflight holds
            runner.pending[0].gate.set()
            await asyncio.wait_for(alone[0], timeout=10)
            await launched(runner, 3)  # a slot came free: the three waiting go behind the second
            assert runner.batches[2] == [[5], [6], [7]]
            for pending in runner.pending:
                pending.gate.set()
            results = await asyncio.wait_for(asyncio.gather(*two, *third, *more), timeout=10)
            assert [r[0, 0] for r in results] == [2, 3, 4, 5, 6, 7]

    asyncio.run(run())


def test_closed_loop_clients_fill_every_batch() -> None:
    """64 clients, batches of 16, two in flight: after the first forward every batch is
    full, so no cycle of tiny batches can form."""

    async def run() -> DynamicBatcher:
        batcher = DynamicBatcher(Recorder(), max_batch_size=16, max_batch_tokens=1 << 20, wait_ms=2)

        async def client(k: int) -> None:
            for i in range(40):
                got = await batcher.submit([[k, i, 1]])
                assert got.tolist() == [[k + i + 1, 3, k]]

        async with started(batcher):
            await asyncio.wait_for(asyncio.gather(*(client(k) for k in range(1, 65))), timeout=60)
        return batcher

    batcher = asyncio.run(run())
    sizes = batcher.batch_sizes
    assert sum(k * v for k, v in sizes.items()) == 64 * 40
    assert sizes[1] == 1  # the very first request, alone on an idle device
    # The tail drains as the clients finish; everything before it is full.
    full = sizes[16] * 16
    assert full >= 64 * 40 - 64, dict(sizes)
    assert batcher.stats()["batch_sizes"]["16"] == sizes[16]


def test_admission_by_tokens_and_bucket() -> None:
    """Width-64 sequences fit two to a 128-token batch; short ones top up a long batch's
    free row, and the rest share one width-16 batch."""

    async def run() -> tuple[Recorder, np.ndarray]:
        runner = Recorder()
        batcher = DynamicBatcher(
            runner,
            max_batch_size=8,
            max_batch_tokens=128,
            wait_ms=1,
            shapes=BatchShapes(widths=(16, 64), rows=(1, 2, 4, 8)),
        )
        long = [[7] * 60, [8] * 50, [9] * 40]
        short = [[i] * 10 for i in range(1, 9)]
        async with started(batcher):
            got = await asyncio.wait_for(batcher.submit(long + short), timeout=10)
        return runner, got

    runner, got = asyncio.run(run())
    shapes = BatchShapes(widths=(16, 64))
    for batch in runner.batches:
        assert len(batch) * shapes.width(max(len(s) for s in batch)) <= 128, [len(s) for s in batch]
    assert len(runner.batches) == 3, [[len(s) for s in b] for b in runner.batches]
    assert sorted(len(b) for b in runner.batches) == [2, 2, 7]
    np.testing.assert_array_equal(got[:, 2], [7, 8, 9, 1, 2, 3, 4, 5, 6, 7, 8])


def test_a_request_larger_than_a_batch_comes_back_whole_and_in_order() -> None:
    async def run() -> tuple[Recorder, np.ndarray]:
        runner = Recorder()
        batcher = DynamicBatcher(runner, max_batch_size=4, wait_ms=1)
        async with started(batcher):
            return runner, await asyncio.wait_for(batcher.submit([[i, 1] for i in range(10)]), timeout=10)

    runner, got = asyncio.run(run())
    assert [len(b) for b in runner.batches] == [4, 4, 2]
    np.testing.assert_array_equal(got[:, 2], np.arange(10))


def test_a_failed_forward_fails_its_requests_only() -> None:
    class Failing(Recorder):
        def __call__(self, seqs: list[list[int]]) -> np.ndarray | Deferred:
            super().__call__(seqs)
            if any(s[0] == 13 for s in seqs):
                raise RuntimeError("device fault")
            return vectors_of(seqs)

    async def run() -> None:
        batcher = DynamicBatcher(Failing(), max_batch_size=4, wait_ms=1)
        async with started(batcher):
            with pytest.raises(RuntimeError, match="device fault"):
                await asyncio.wait_for(batcher.submit([[13]]), timeout=10)
            assert (await asyncio.wait_for(batcher.submit([[4]]), timeout=10)).tolist() == [[4, 1, 4]]

    asyncio.run(run())


def test_inline_runners_run_on_the_event_loop() -> None:
    async def run() -> Recorder:
        runner = Recorder(gated=False)
        batcher = DynamicBatcher(
            runner, max_batch_size=4, wait_ms=1, inline=lambda count, longest: longest <= 2
        )
        async with started(batcher):
            await asyncio.wait_for(batcher.submit([[1, 2]]), timeout=10)
            await asyncio.wait_for(batcher.submit([[1, 2, 3]]), timeout=10)
        return runner

    runner = asyncio.run(run())
    assert runner.threads[0] == threading.main_thread().name
    assert runner.threads[1].startswith("forward")


def test_bucket_widths_and_rows() -> None:
    shapes = BatchShapes(widths=(16, 32, 64), rows=(1, 2, 4, 8))
    assert [shapes.width(n) for n in (1, 16, 17, 64, 65, 300)] == [16, 16, 32, 64, 128, 512]
    assert [shapes.padded_rows(n) for n in (1, 3, 8, 9)] == [1, 4, 8, 9]
    assert BatchShapes().width(5) == 8


HOUR_S = 3600.0


def test_stats_count_each_sequence_wait_from_its_ingest_send_and_each_forward() -> None:
    async def run() -> dict[str, object]:
        runner = Recorder(gated=True)
        batcher = DynamicBatcher(runner, max_batch_size=4, wait_ms=60_000, max_wait_ms=60_000)
        async with started(batcher):
            # Sent by an ingest process an hour ago (the stamp), launched on an idle device: its wait
            # lands in the open bucket above 2 s however long this machine takes to launch it.
            first = batcher.submit_nowait([[1, 2], [3, 4]], since=time.monotonic() - HOUR_S)
            await launched(runner, 1)
            runner.pending[0].gate.set()
            await asyncio.wait_for(first, timeout=10)
            return batcher.stats()

    stats = asyncio.run(run())
    queued, forward = stats["queued"], stats["forward"]
    bounds = queued["bounds_ms"]  # type: ignore[index]
    # Both sequences fell in the open bucket above the last bound, none elsewhere, each counted
    # from its stamp: an hour each, plus the launch (bounded only loosely: CI may be busy).
    assert queued["counts"][len(bounds)] == 2 and sum(queued["counts"]) == 2  # type: ignore[index,arg-type]
    assert 2 * HOUR_S <= queued["sum_s"] < 2 * HOUR_S + 600  # type: ignore[index,operator]
    assert sum(forward["counts"]) == 1  # type: ignore[index]
