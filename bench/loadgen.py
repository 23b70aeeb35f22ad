"""A multi-process closed-loop load generator for /v1/embeddings (no `hey` needed).

One Python process tops out near 1,000 req/s and would measure itself, so the
connections are spread over worker processes, each an asyncio loop with aiohttp.

    python bench/loadgen.py URL MODEL --requests 2000 --concurrency 32 [--processes 4]
        [--inputs-per-request 1] [--tokens 128 | --text "..."] [--base64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import threading
import time
from collections.abc import Coroutine
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")


@dataclass
class LoadResult:
    requests: int
    failed: int
    seconds: float
    rps: float
    p50_ms: float
    p99_ms: float
    inputs_per_second: float
    concurrency: int

    def row(self) -> str:
        return f"{self.rps:10.1f} req/s  p50 {self.p50_ms:8.2f} ms  p99 {self.p99_ms:8.2f} ms  failed {self.failed}"


def body_for(
    model: str, *, inputs: int, tokens: int | None, text: str, base64: bool, seed: int, max_id: int = 5000
) -> bytes:
    rng = np.random.default_rng(seed)
    if tokens:
        # Token ids fix the sequence length exactly, whatever the tokenizer.
        payload: Any = [rng.integers(min(100, max_id // 2), max_id, tokens).tolist() for _ in range(inputs)]
    else:
        payload = [f"{text} {i}" for i in range(inputs)] if inputs > 1 else text
    body: dict[str, Any] = {"model": model, "input": payload}
    if base64:
        body["encoding_format"] = "base64"
    return json.dumps(body).encode()


async def _lane_group(
    url: str, body: bytes, count: int, lanes: int, start: Any, seconds: float | None
) -> tuple[list[float], int, float, float]:
    import aiohttp

    latencies: list[float] = []
    failed = 0
    remaining = count
    connector = aiohttp.TCPConnector(limit=lanes, force_close=False)
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=300)
    ) as session:
        # All processes start together, once every one has imported and is ready: on a
        # loaded machine a fixed start time can pass before the last one is up.
        try:
            start.wait(timeout=120)
        except threading.BrokenBarrierError:
            pass
        started = time.time()
        stop_at = started + seconds if seconds is not None else float("inf")

        async def lane() -> None:
            nonlocal remaining, failed
            while remaining > 0 and time.time() < stop_at:
                remaining -= 1
                t = time.perf_counter()
                try:
                    async with session.post(
                        url, data=body, headers={"Content-Type": "application/json"}
                    ) as resp:
                        await resp.read()
                        ok = resp.status == 200
                except aiohttp.ClientError:
                    ok = False
                if ok:  # throughput and latency count answered requests only, like hey's 200s
                    latencies.append(time.perf_counter() - t)
                else:
                    failed += 1

        await asyncio.gather(*(lane() for _ in range(lanes)))
        last_done = time.time()  # before the session closes: teardown is not load
    return latencies, failed, started, last_done


def run_fast(main: Coroutine[Any, Any, T]) -> T:
    """asyncio.run on uvloop where it is installed: a load generator must not measure itself."""
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    return asyncio.run(main)


def _process(args: tuple[str, bytes, int, int, Any, float | None, Any]) -> None:
    url, body, count, lanes, start, seconds, queue = args
    queue.put(run_fast(_lane_group(url, body, count, lanes, start, seconds)))


def run_load(
    url: str,
    body: bytes,
    *,
    requests: int,
    concurrency: int,
    processes: int | None = None,
    inputs_per_request: int = 1,
    seconds: float | None = None,
) -> LoadResult:
    """`requests` in all, or as many as `seconds` allow (no new request starts after them)."""
    processes = max(1, min(processes or os.cpu_count() or 1, concurrency))
    lanes = [concurrency // processes + (1 if i < concurrency % processes else 0) for i in range(processes)]
    counts = [requests * lane // concurrency for lane in lanes]
    counts[0] += requests - sum(counts)
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    start = ctx.Barrier(processes)
    procs = [
        ctx.Process(target=_process, args=((url, body, c, lane, start, seconds, queue),))
        for c, lane in zip(counts, lanes)
    ]
    for p in procs:
        p.start()
    try:
        # Bounded: a child that died never reports, and must not hang the benchmark.
        results = [queue.get(timeout=600) for _ in procs]
    except BaseException:
        for p in procs:  # ours, by PID
            p.kill()
        raise
    for p in procs:
        p.join()
    start_at = min(started for _, _, started, _ in results)
    ended = max(done for _, _, _, done in results)
    latencies = np.array([x for lat, _, _, _ in results for x in lat])
    failed = sum(f for _, f, _, _ in results)
    seconds = ended - start_at
    return LoadResult(
        requests=len(latencies),
        failed=failed,
        seconds=seconds,
        rps=len(latencies) / seconds,
        p50_ms=float(np.percentile(latencies, 50) * 1000) if len(latencies) else float("nan"),
        p99_ms=float(np.percentile(latencies, 99) * 1000) if len(latencies) else float("nan"),
        inputs_per_second=len(latencies) * inputs_per_request / seconds,
        concurrency=concurrency,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="frontend or worker base URL")
    parser.add_argument("model")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--processes", type=int, default=None)
    parser.add_argument("--inputs-per-request", type=int, default=1)
    parser.add_argument(
        "--tokens", type=int, default=None, help="send token-id inputs of exactly this length"
    )
    parser.add_argument("--text", default="hello world")
    parser.add_argument("--base64", action="store_true")
    args = parser.parse_args()
    body = body_for(
        args.model,
        inputs=args.inputs_per_request,
        tokens=args.tokens,
        text=args.text,
        base64=args.base64,
        seed=0,
    )
    result = run_load(
        args.url.rstrip("/") + "/v1/embeddings",
        body,
        requests=args.requests,
        concurrency=args.concurrency,
        processes=args.processes,
        inputs_per_request=args.inputs_per_request,
    )
    print(json.dumps(asdict(result)))


if __name__ == "__main__":
    main()
