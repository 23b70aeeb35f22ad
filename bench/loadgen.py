"""Multi-process closed-loop load generators for /v1/embeddings (no `hey` needed).

One Python process with aiohttp tops out near 1,000 req/s and would measure itself, so
the connections are spread over worker processes, each an asyncio loop:

- `run_load`: aiohttp, one body for every request;
- `run_bodies`: a bare HTTP/1.1 keep-alive client (prebuilt request bytes, Content-Length
  framing; some 15-25 us of CPU per request on uvloop, where aiohttp's client costs
  several times that) that sends a different body with every request, so that no
  text repeats within a step, and keeps each request's start, latency and connection.
  Connections are opened and used once before the clock starts: a step measures the
  steady state, and what connecting cost is reported beside it.

    python bench/loadgen.py URL MODEL --requests 2000 --concurrency 32 [--processes 4]
        [--inputs-per-request 1] [--tokens 128 | --text "..."] [--base64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import resource
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
    results = _run_all(procs, queue)
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


# -- run_bodies: a different body with every request ----------------------------------------


@dataclass
class BodiesResult:
    """A `run_bodies` step: every answered request's start (s from the common start), latency
    (s) and connection, with what was sent, failed and repeated."""

    starts: np.ndarray
    latencies: np.ndarray
    connections: np.ndarray
    failed: int
    seconds: float
    bodies_sent: int
    repeated: int  # requests that re-sent a body already sent in this step
    connect_ms: list[float]  # each connection's connect time
    first_ms: list[float]  # each connection's first request (before the clock started)
    cpu_s: float  # the load processes' own CPU during the step

    @property
    def requests(self) -> int:
        return len(self.latencies)

    @property
    def rps(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


class _Lane(asyncio.Protocol):
    """One keep-alive connection sending its bodies in turn, one request at a time."""

    def __init__(self, group: _Group, index: int, requests: list[bytes]) -> None:
        self.group = group
        self.index = index
        self.requests = requests
        self.next = 0
        self.buffer = bytearray()
        self.need = -1
        self.status = 0
        self.sent_at = 0.0
        self.transport: asyncio.Transport | None = None
        self.done: asyncio.Future[None] | None = None
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(None)
        if self.done is not None and not self.done.done():
            self.done.set_exception(ConnectionError(f"connection lost: {exc}"))

    def send(self) -> None:
        assert self.transport is not None
        self.buffer.clear()
        self.need = -1
        self.sent_at = time.perf_counter()
        self.transport.write(self.requests[self.next % len(self.requests)])
        self.next += 1

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.need < 0:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buffer[:end]).lower()
            self.status = int(head[9:12])
            at = head.find(b"\r\ncontent-length:")
            if at < 0:
                self.transport.abort()  # type: ignore[union-attr]  # only Content-Length framing here
                return
            stop = head.find(b"\r\n", at + 2)
            self.need = end + 4 + int(head[at + 17 : stop if stop >= 0 else len(head)])
        if len(self.buffer) >= self.need:
            self.group.answered(self, time.perf_counter())


class _Group:
    """One process's lanes: connect, one request each, then closed-loop until the deadline."""

    def __init__(self) -> None:
        self.recording = False
        self.deadline = 0.0
        self.origin = 0.0
        self.starts: list[float] = []
        self.latencies: list[float] = []
        self.connections: list[int] = []
        self.failed = 0
        self.active = 0
        self.finished: asyncio.Future[None] | None = None

    def answered(self, lane: _Lane, now: float) -> None:
        if lane.done is not None:  # the warm-up request
            done, lane.done = lane.done, None
            if lane.status == 200:
                done.set_result(None)
            else:
                done.set_exception(RuntimeError(f"warm-up request answered {lane.status}"))
            return
        if lane.status == 200:
            self.starts.append(lane.sent_at - self.origin)
            self.latencies.append(now - lane.sent_at)
            self.connections.append(lane.index)
        else:
            self.failed += 1
        if now < self.deadline:
            lane.send()
            return
        self.active -= 1
        if self.active == 0 and self.finished is not None and not self.finished.done():
            self.finished.set_result(None)


async def _bodies_group(
    host: str, port: int, lanes: list[tuple[int, list[bytes]]], start: Any, seconds: float
) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    group = _Group()
    connect_ms, first_ms = [], []
    made: list[_Lane] = []
    for index, requests in lanes:
        t = time.perf_counter()
        _, lane = await loop.create_connection(lambda i=index, r=requests: _Lane(group, i, r), host, port)
        connect_ms.append(1000 * (time.perf_counter() - t))
        made.append(lane)

    async def first(lane: _Lane) -> None:
        lane.done = loop.create_future()
        t = time.perf_counter()
        lane.send()
        await lane.done
        first_ms.append(1000 * (time.perf_counter() - t))

    # The first request of each connection, a few at a time: a connection's first use is
    # not what a step measures.
    for i in range(0, len(made), 32):
        await asyncio.gather(*(first(lane) for lane in made[i : i + 32]))
    try:
        start.wait(timeout=300)  # every process connected and warm: the clock starts together
    except threading.BrokenBarrierError:
        pass
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    group.origin = time.perf_counter()
    group.deadline = group.origin + seconds
    group.finished = loop.create_future()
    group.active = len(made)
    for lane in made:
        lane.send()
    lost = [lane.lost for lane in made]
    await asyncio.wait([group.finished, *lost], return_when=asyncio.FIRST_COMPLETED)
    if not group.finished.done():
        group.failed += 1  # a lost connection: its lane stopped
        await asyncio.wait([group.finished], timeout=seconds + 60)
    ended = time.perf_counter()
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    for lane in made:
        if lane.transport is not None:
            lane.transport.close()
    # The warm-up sent each lane's first body; the step sent the rest, wrapping past the last.
    sent = sum(lane.next - 1 for lane in made)
    repeated = sum(max(0, lane.next - len(lane.requests)) for lane in made)
    return {
        "starts": np.asarray(group.starts),
        "latencies": np.asarray(group.latencies),
        "connections": np.asarray(group.connections, dtype=np.int32),
        "failed": group.failed,
        "origin_wall": time.time() - (ended - group.origin),
        "seconds": ended - group.origin,
        "sent": sent,
        "repeated": repeated,
        "connect_ms": connect_ms,
        "first_ms": first_ms,
        "cpu_s": cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime,
    }


def _bodies_process(args: tuple[str, int, str, list[tuple[int, int, int]], Any, float, Any]) -> None:
    host, port, path, lanes, start, seconds, queue = args
    bodies = _read_bodies(path)
    prefix = f"POST /v1/embeddings HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
    built = [
        (
            index,
            [
                prefix.encode()
                + b"Content-Length: %d\r\n\r\n" % len(bodies[j % len(bodies)])
                + bodies[j % len(bodies)]
                for j in range(first, first + count)
            ],
        )
        for index, first, count in lanes
    ]
    del bodies
    try:
        queue.put(run_fast(_bodies_group(host, port, built, start, seconds)))
    except BaseException as exc:  # the parent must hear of it, not wait for the timeout
        queue.put({"error": f"{exc.__class__.__name__}: {exc}"})


def write_bodies(path: str, bodies: list[bytes]) -> None:
    """Request bodies for `run_bodies`, one per line (JSON holds no raw newline)."""
    with open(path, "wb") as handle:
        for body in bodies:
            if b"\n" in body:
                raise ValueError("a request body with a raw newline")
            handle.write(body + b"\n")


def _read_bodies(path: str) -> list[bytes]:
    with open(path, "rb") as handle:
        return handle.read().split(b"\n")[:-1]


def run_bodies(
    url: str,
    bodies_path: str,
    *,
    bodies: int,
    concurrency: int,
    seconds: float,
    processes: int = 4,
    offset: int = 0,
    per_lane: int | None = None,
) -> BodiesResult:
    """`concurrency` connections to `url` (http://host:port, POSTs to /v1/embeddings) for `seconds`.

    Each connection sends its own run of the `bodies` in `bodies_path`, from `offset` on
    (`per_lane` each, by default an equal share of them all): no body repeats in a step
    unless a connection runs through its share (`repeated` says how often).
    """
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    processes = max(1, min(processes, concurrency))
    share = per_lane or max(1, bodies // concurrency)
    lanes = [(i, offset + i * share, share) for i in range(concurrency)]
    # A fork server: each step's processes fork from one clean interpreter (no CUDA, no
    # threads of the caller's) instead of importing everything afresh.
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["numpy", "loadgen"])
    queue = ctx.Queue()
    start = ctx.Barrier(processes)
    procs = [
        ctx.Process(
            target=_bodies_process,
            args=((host, port, bodies_path, lanes[p::processes], start, seconds, queue),),
        )
        for p in range(processes)
    ]
    results = _run_all(procs, queue)
    errors = [r["error"] for r in results if "error" in r]
    if errors:
        raise RuntimeError(f"load process failed: {errors[0]}")
    # Each process's clock starts at its own origin after the common barrier; the origins
    # lie within a few milliseconds of each other, so starts are pooled as they are.
    return BodiesResult(
        starts=np.concatenate([r["starts"] for r in results]),
        latencies=np.concatenate([r["latencies"] for r in results]),
        connections=np.concatenate([r["connections"] for r in results]),
        failed=sum(r["failed"] for r in results),
        seconds=max(r["seconds"] for r in results),
        bodies_sent=sum(r["sent"] for r in results),
        repeated=sum(r["repeated"] for r in results),
        connect_ms=[x for r in results for x in r["connect_ms"]],
        first_ms=[x for r in results for x in r["first_ms"]],
        cpu_s=sum(r["cpu_s"] for r in results),
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


def _run_all(procs: list, queue: Any) -> list:
    """Start the sender processes and collect one result from each; on any failure, kill them."""
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
    return results
