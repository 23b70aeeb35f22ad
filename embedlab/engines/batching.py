"""Dynamic batching: concurrent requests share one forward.

Each request's sequences join a queue of their length bucket (the width a forward pads
them to). The policy, and why:

- A batch is *full* once it holds `max_batch_size` sequences, or once one more would
  take its padded tokens (rows x bucket width) past `max_batch_tokens`. A full batch
  launches at once, with up to `max_inflight` forwards in flight.
- While a forward is in flight, a partial batch waits. Launched now, it would cost a whole
  forward for a few sequences and delay the full ones behind it (the 256/249/7 cycle).
  With `pipeline_min`, a partial batch of at least that many sequences does not wait: it
  queues behind the one in flight. Where a forward's fixed cost is small (graph replays)
  and the load is heavy, the device then never idles between forwards, and each batch
  holds what arrived during the last one.
- With the device idle, a partial batch launches once it holds as many sequences as the
  last batch did (closed-loop clients come back in the numbers they left), or once no
  sequence has arrived for `wait_ms` (the burst is over), or once its oldest sequence has
  waited `max_wait_ms`.
- A batch takes the bucket of the oldest waiting sequence and tops up with shorter ones,
  which pad up to its width without another forward.

A forward may return a `Deferred`: its kernels are queued and a copy to host memory is
pending. A thread of its own waits for that, so the event loop never blocks on the
device. A runner whose forwards only queue device work (CUDA graph replays) is called on
the event loop itself (`inline`) when the device is idle: no thread hand-off, and so no
wait for the GIL, stands between a lone request and its forward. With a forward already
queued, a launch can block until the device drains its queue (a graph of ~1,600 kernels
behind another took 110 ms to queue at 256 x 128), so it goes to the forward thread,
which releases the GIL while it blocks, and the event loop keeps serving HTTP.

`stats()` also says where a sequence's time went: its wait from arrival (or from
`since`, the moment its ingest process sent it) to the start of its batch, and each
forward's time from launch to vectors home, in fixed millisecond buckets (`Durations`).
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import concurrent.futures
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

# Bucket bounds of `Durations`, in milliseconds (one more open bucket above the last).
DURATION_BOUNDS_MS = (
    0.1,
    0.25,
    0.5,
    1,
    2,
    3,
    5,
    7.5,
    10,
    15,
    20,
    30,
    50,
    75,
    100,
    150,
    200,
    300,
    500,
    1000,
    2000,
)
_BOUNDS_S = tuple(b / 1000 for b in DURATION_BOUNDS_MS)


class Durations:
    """Counts of durations in the fixed buckets of `DURATION_BOUNDS_MS`: one bisect per sample.

    Reported as counts since start; a reader takes two snapshots and subtracts them.
    """

    __slots__ = ("counts", "total_s")

    def __init__(self) -> None:
        self.counts = [0] * (len(_BOUNDS_S) + 1)
        self.total_s = 0.0

    def add(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(_BOUNDS_S, seconds)] += 1
        self.total_s += seconds

    def snapshot(self) -> dict[str, object]:
        return {"bounds_ms": list(DURATION_BOUNDS_MS), "counts": list(self.counts), "sum_s": self.total_s}


class Deferred:
    """Vectors still on their way from the device; `wait()` returns them."""

    def wait(self) -> np.ndarray:  # pragma: no cover - interface
        raise NotImplementedError


RunBatch = Callable[[list[Sequence[int]]], "np.ndarray | Deferred"]


@dataclass(frozen=True, kw_only=True)
class BatchShapes:
    """How an engine pads a batch: its length buckets and, for graphs, its row buckets.

    Empty `widths` pads to the longest sequence in the batch; empty `rows` pads no rows.
    """

    widths: tuple[int, ...] = ()
    rows: tuple[int, ...] = ()

    def width(self, length: int) -> int:
        """The bucket width a sequence of `length` tokens pads to (a power of two past the buckets)."""
        i = bisect.bisect_left(self.widths, length)
        if i < len(self.widths):
            return self.widths[i]
        return 1 << max(0, length - 1).bit_length()

    def padded_rows(self, count: int) -> int:
        i = bisect.bisect_left(self.rows, count)
        return self.rows[i] if i < len(self.rows) else count


class _Request:
    __slots__ = ("future", "vectors", "remaining")

    def __init__(self, future: asyncio.Future[np.ndarray], count: int) -> None:
        self.future = future
        self.vectors: np.ndarray | None = None
        self.remaining = count


class _Item:
    __slots__ = ("request", "index", "seq", "arrived", "since")

    def __init__(
        self, request: _Request, index: int, seq: Sequence[int], arrived: float, since: float
    ) -> None:
        self.request = request
        self.index = index
        self.seq = seq
        self.arrived = arrived
        self.since = since  # where its wait is counted from: arrival, or its ingest process's send


class DynamicBatcher:
    """Turns `await submit(seqs)` calls into batched `run_batch(all_seqs)` calls."""

    def __init__(
        self,
        run_batch: RunBatch,
        *,
        max_batch_size: int = 64,
        max_batch_tokens: int = 16384,
        wait_ms: float = 2.0,
        max_wait_ms: float | None = None,
        max_inflight: int = 2,
        shapes: BatchShapes | None = None,
        inline: Callable[[int, int], bool] | None = None,
        pipeline_min: int | None = None,
    ) -> None:
        if max_batch_size < 1 or max_batch_tokens < 1 or max_inflight < 1:
            raise ValueError("max_batch_size, max_batch_tokens and max_inflight must be positive")
        if pipeline_min is not None and pipeline_min < 1:
            raise ValueError("pipeline_min must be positive")
        self.pipeline_min = pipeline_min
        self._run_batch = run_batch
        self._inline = inline
        self.max_batch_size = max_batch_size
        self.max_batch_tokens = max_batch_tokens
        self.wait = wait_ms / 1000.0
        self.max_wait = (max_wait_ms if max_wait_ms is not None else max(20.0, 10 * wait_ms)) / 1000.0
        self.max_inflight = max_inflight
        self.shapes = shapes or BatchShapes()
        # width -> its queue, widths kept sorted so a batch can top up with shorter ones.
        self._queues: dict[int, collections.deque[_Item]] = {}
        self._widths: list[int] = []
        self._waiting = 0
        self._inflight = 0
        self._expected = 1
        self._last_arrival = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="forward")
        self._waiter = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="device-sync")
        self._closed = False
        self.batches = 0
        self.sequences = 0
        self.tokens = 0
        self.padded_tokens = 0
        self.batch_sizes: collections.Counter[int] = collections.Counter()
        self.queued = Durations()  # per sequence: `since` to its batch's launch
        self.forwards = Durations()  # per forward: launch to vectors home

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()

    async def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        for queue in self._queues.values():
            for item in queue:
                if not item.request.future.done():
                    item.request.future.cancel()
        self._queues.clear()
        self._widths.clear()
        self._waiting = 0
        self._executor.shutdown(wait=True, cancel_futures=True)
        self._waiter.shutdown(wait=True, cancel_futures=True)

    def stats(self) -> dict[str, object]:
        """Counts since start: forwards, sequences, real and padded tokens, batch-size histogram."""
        return {
            "batches": self.batches,
            "sequences": self.sequences,
            "tokens": self.tokens,
            "padded_tokens": self.padded_tokens,
            "batch_sizes": {str(k): v for k, v in sorted(self.batch_sizes.items())},
            "queued": self.queued.snapshot(),
            "forward": self.forwards.snapshot(),
        }

    async def submit(self, seqs: Sequence[Sequence[int]]) -> np.ndarray:
        return await self.submit_nowait(seqs)

    def submit_nowait(
        self, seqs: Sequence[Sequence[int]], *, since: float | None = None
    ) -> asyncio.Future[np.ndarray]:
        """`submit` without the coroutine: the future its vectors arrive in.

        For callers that serve many requests from one loop callback (a worker's engine
        process, fed by its ingest processes): no task per request. `since` (monotonic
        seconds, at most now) is when the request entered the worker, for `stats()`'s
        queueing figures only: the policy counts from arrival here.
        """
        if self._closed:
            raise RuntimeError("the batcher is closed")
        loop = self._loop or asyncio.get_running_loop()
        self._loop = loop
        future: asyncio.Future[np.ndarray] = loop.create_future()
        request = _Request(future, len(seqs))
        now = time.monotonic()
        origin = now if since is None else min(since, now)
        for index, seq in enumerate(seqs):
            width = self.shapes.width(len(seq))
            queue = self._queues.get(width)
            if queue is None:
                queue = self._queues[width] = collections.deque()
                bisect.insort(self._widths, width)
            queue.append(_Item(request, index, seq, now, origin))
        self._waiting += len(seqs)
        self._last_arrival = now
        self._pump()
        return future

    # -- choosing and launching batches -----------------------------------------------

    def _plan(self) -> tuple[int, int, bool]:
        """The next batch as (width, sequences, full?) without taking it."""
        # The oldest sequence's bucket; on a tie the widest, so shorter ones can top it up.
        width = min(self._widths, key=lambda w: (self._queues[w][0].arrived, -w))
        limit = self.max_batch_size
        count = 0
        for w in reversed(self._widths[: self._widths.index(width) + 1]):
            count += len(self._queues[w])
            if count >= limit:
                break
        rows_cap = max(1, self.max_batch_tokens // width)
        if count >= limit or count >= rows_cap:
            return width, min(count, limit, rows_cap), True
        return width, count, False

    def _pump(self) -> None:
        """Launch what the policy allows now; arm the timer for what it allows later."""
        while self._waiting and self._inflight < self.max_inflight and not self._closed:
            width, count, full = self._plan()
            if not full:
                if self._inflight:
                    if self.pipeline_min is None or count < self.pipeline_min:
                        return  # the in-flight forward's completion calls _pump again
                    self._launch(self._take(width, count))
                    continue
                now = time.monotonic()
                oldest = self._queues[width][0].arrived
                if (
                    count < self._expected
                    and now - self._last_arrival < self.wait
                    and now - oldest < self.max_wait
                ):
                    self._arm(min(self._last_arrival + self.wait, oldest + self.max_wait))
                    return
            self._launch(self._take(width, count))

    def _arm(self, when: float) -> None:
        """Call _pump at monotonic time `when` (or earlier, if a timer is already set sooner)."""
        assert self._loop is not None
        if self._timer is not None:
            if self._timer_at <= when:
                return  # it fires no later, and _pump re-arms if it is still too soon
            self._timer.cancel()
        self._timer_at = when
        self._timer = self._loop.call_later(max(0.0, when - time.monotonic()), self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._pump()

    def _take(self, width: int, count: int) -> list[_Item]:
        taken: list[_Item] = []
        stop = self._widths.index(width) + 1
        for w in reversed(self._widths[:stop]):
            queue = self._queues[w]
            while queue and len(taken) < count:
                taken.append(queue.popleft())
            if len(taken) >= count:
                break
        self._widths = [w for w in self._widths if self._queues[w]]
        for w in [w for w, q in self._queues.items() if not q]:
            del self._queues[w]
        self._waiting -= len(taken)
        return taken

    def _launch(self, items: list[_Item]) -> None:
        items = [item for item in items if not item.request.future.done()]
        if not items:
            return
        seqs = [item.seq for item in items]
        longest = max(len(s) for s in seqs)
        self.batches += 1
        self.sequences += len(seqs)
        self.tokens += sum(len(s) for s in seqs)
        self.padded_tokens += self.shapes.padded_rows(len(seqs)) * (
            self.shapes.width(longest)
            if self.shapes.widths and longest <= self.shapes.widths[-1]
            else longest
        )
        self.batch_sizes[len(seqs)] += 1
        launched = time.monotonic()
        for item in items:
            self.queued.add(launched - item.since)
        self._expected = len(seqs)
        idle = self._inflight == 0
        self._inflight += 1
        assert self._loop is not None
        if idle and self._inline is not None and self._inline(len(seqs), longest):
            done: asyncio.Future[np.ndarray | Deferred] = self._loop.create_future()
            try:
                done.set_result(self._run_batch(seqs))
            except Exception as exc:  # delivered to the batch's requests as their error
                done.set_exception(exc)
            self._settle(done, items, launched)
        else:
            work = self._loop.run_in_executor(self._executor, self._run_batch, seqs)
            work.add_done_callback(lambda finished: self._settle(finished, items, launched))

    def _settle(
        self, done: asyncio.Future[np.ndarray | Deferred], items: list[_Item], launched: float
    ) -> None:
        result = done.result() if not done.cancelled() and done.exception() is None else None
        if isinstance(result, Deferred):
            assert self._loop is not None
            synced = self._loop.run_in_executor(self._waiter, result.wait)
            synced.add_done_callback(lambda finished: self._deliver(finished, items, launched))
            return
        self._deliver(done, items, launched)

    def _deliver(
        self,
        done: asyncio.Future[np.ndarray] | asyncio.Future[np.ndarray | Deferred],
        items: list[_Item],
        launched: float,
    ) -> None:
        self.forwards.add(time.monotonic() - launched)
        self._inflight -= 1
        error = done.exception() if not done.cancelled() else asyncio.CancelledError()
        vectors = done.result() if error is None else None
        for row, item in enumerate(items):
            request = item.request
            if request.future.done():
                continue
            if error is not None:
                request.future.set_exception(error)
                continue
            assert vectors is not None and not isinstance(vectors, Deferred)  # _settle waited for it
            if request.remaining == 1 and request.vectors is None:
                # One sequence: a view of the batch's rows, no copy.
                request.future.set_result(vectors[row : row + 1])
                continue
            if request.vectors is None:  # first of its rows back: remaining is still its count
                request.vectors = np.empty((request.remaining, vectors.shape[1]), dtype=vectors.dtype)
            request.vectors[item.index] = vectors[row]
            request.remaining -= 1
            if request.remaining == 0:
                request.future.set_result(request.vectors)
        self._pump()
