"""Dynamic batching: concurrent requests share one forward pass.

A request's sequences wait at most `wait_ms` for company, or less once the batch is
full; then one forward runs on a worker thread. Two batches may be in hand at once,
so the next one gathers while the current one computes.

A forward may return a `Deferred` instead of the vectors: the GPU work is queued and a
copy to host memory is pending. A second thread waits for it, so the forward thread can
queue the next batch's kernels before the current batch finishes, and the GPU never
waits for Python between batches.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

class Deferred:
    """Vectors still on their way from the device; `wait()` returns them."""

    def wait(self) -> np.ndarray:  # pragma: no cover - interface
        raise NotImplementedError


RunBatch = Callable[[list[list[int]]], "np.ndarray | Deferred"]


@dataclass(slots=True)
class _Pending:
    seqs: list[list[int]]
    future: asyncio.Future[np.ndarray]


class DynamicBatcher:
    """Turns `await submit(seqs)` calls into batched `run_batch(all_seqs)` calls."""

    def __init__(self, run_batch: RunBatch, *, max_batch_size: int = 64, max_batch_tokens: int = 16384, wait_ms: float = 2.0) -> None:
        if max_batch_size < 1 or max_batch_tokens < 1:
            raise ValueError("max_batch_size and max_batch_tokens must be positive")
        self._run_batch = run_batch
        self.max_batch_size = max_batch_size
        self.max_batch_tokens = max_batch_tokens
        self.wait = wait_ms / 1000.0
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue()
        # One thread: the device runs one forward at a time anyway.
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="forward")
        self._waiter = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="device-sync")
        self._slots = asyncio.Semaphore(2)
        self._task: asyncio.Task[None] | None = None
        self._carry: _Pending | None = None
        self.batches = 0
        self.sequences = 0

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        self._executor.shutdown(wait=True, cancel_futures=True)
        self._waiter.shutdown(wait=True, cancel_futures=True)

    async def submit(self, seqs: list[list[int]]) -> np.ndarray:
        future: asyncio.Future[np.ndarray] = asyncio.get_running_loop().create_future()
        await self._queue.put(_Pending(seqs, future))
        return await future

    def _fits(self, batch: list[_Pending], count: int, longest: int, item: _Pending) -> bool:
        if not batch:
            return True
        n = count + len(item.seqs)
        width = max(longest, max(len(s) for s in item.seqs))
        return n <= self.max_batch_size and n * width <= self.max_batch_tokens

    async def _gather(self) -> list[_Pending]:
        first = self._carry or await self._queue.get()
        self._carry = None
        batch = [first]
        count = len(first.seqs)
        longest = max(len(s) for s in first.seqs)
        deadline = time.monotonic() + self.wait
        while count < self.max_batch_size:
            remaining = deadline - time.monotonic()
            try:
                item = self._queue.get_nowait() if remaining <= 0 else await asyncio.wait_for(self._queue.get(), remaining)
            except (asyncio.QueueEmpty, asyncio.TimeoutError):
                break
            if not self._fits(batch, count, longest, item):
                self._carry = item
                break
            batch.append(item)
            count += len(item.seqs)
            longest = max(longest, max(len(s) for s in item.seqs))
        return batch

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._slots.acquire()
            try:
                batch = await self._gather()
            except BaseException:
                self._slots.release()
                raise
            batch = [p for p in batch if not p.future.cancelled()]
            if not batch:
                self._slots.release()
                continue
            seqs = [s for p in batch for s in p.seqs]
            self.batches += 1
            self.sequences += len(seqs)
            work = loop.run_in_executor(self._executor, self._run_batch, seqs)
            work.add_done_callback(lambda done, batch=batch: self._settle(done, batch))

    def _settle(self, done: "asyncio.Future[np.ndarray | Deferred]", batch: list[_Pending]) -> None:
        if done.exception() is None and isinstance(done.result(), Deferred):
            deferred = done.result()
            synced = asyncio.get_running_loop().run_in_executor(self._waiter, deferred.wait)  # type: ignore[union-attr]
            synced.add_done_callback(lambda finished: self._deliver(finished, batch))
            return
        self._deliver(done, batch)  # type: ignore[arg-type]

    def _deliver(self, done: asyncio.Future[np.ndarray], batch: list[_Pending]) -> None:
        self._slots.release()
        error = done.exception()
        offset = 0
        for pending in batch:
            n = len(pending.seqs)
            if not pending.future.done():
                if error is not None:
                    pending.future.set_exception(error)
                else:
                    pending.future.set_result(done.result()[offset : offset + n])
            offset += n
