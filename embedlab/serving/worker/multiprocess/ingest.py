"""One ingest process of a multi-process worker: HTTP in, token ids to the engine, vectors out.

Started by the worker's engine process (`serving/worker/multiprocess/pool.py`), never by hand:
`python -m embedlab.serving.worker.multiprocess.ingest SETTINGS_JSON`, with the shared memory and the doorbell
socket passed as inherited descriptors. It binds the worker's request port beside its
siblings (SO_REUSEPORT) and serves the same request plane as a single-process worker,
with an engine that tokenizes here and computes there. It exits on SIGTERM or SIGINT
(after the requests it holds are answered), when the engine process dies (EOF on the
doorbell, or the parent-death signal) and never outlives it.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
import sys
import time
from collections.abc import Sequence
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest

from ....engines.base import Embeddings, InvalidInput
from ....engines.preprocess import IngestSpec, LocalIngest, TokenIngest, pack_ids
from ....errors import RemoteEngineError
from ...channel import Channel, map_memory
from ...http import (
    configure_logging,
    die_with_parent,
    freeze_heap,
    make_app,
    reuseport_socket,
    run_service,
    start_site,
)
from ..config import IngestSettings
from ..metrics import Board, BoardCollector, SlotMetrics
from ..request_plane import RequestPlane
from . import messages

log = logging.getLogger("embedlab.worker")

COUNTS_EVERY_S = 0.25  # how often a process copies its channel's counts to its board slot


class RemoteEngine:
    """The engine, as an ingest process sees it: the same attributes, `embed` across the channel."""

    def __init__(self, spec: IngestSpec) -> None:
        self.name = spec.engine
        self.dim = spec.dim
        self.max_model_len = spec.max_model_len
        self.supports_dimensions = spec.supports_dimensions
        self._local = LocalIngest(spec) if spec.local else None
        self._tokens = None if spec.local else TokenIngest(spec)
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self.channel: Channel | None = None
        self.lost = asyncio.Event()
        # vectors replies' trip from the engine process's send to this loop (see messages.py)
        self.replies = {"reply_travel_s": 0.0, "replies_over_1ms": 0.0, "replies_over_5ms": 0.0}

    def connect(self, *, memory_fd: int, doorbell: socket.socket) -> None:
        self.channel = Channel(
            memory_fd=memory_fd, sock=doorbell, side=0, on_message=self._message, on_closed=self._closed
        )
        self.channel.start()

    async def embed(
        self, inputs: Sequence[str] | Sequence[Sequence[int]], *, dimensions: int | None = None
    ) -> Embeddings:
        if self._local is not None:
            return self._local.embed(inputs, dimensions=dimensions)
        assert self._tokens is not None
        lengths, ids = pack_ids(self._tokens.tokenize(inputs))
        vectors = await self._call(
            lambda rid: messages.embed_request(rid, lengths, ids, dimensions, messages.stamp_now())
        )
        return Embeddings(vectors=vectors, prompt_tokens=int(lengths.sum()))

    async def describe(self) -> dict[str, Any] | None:
        return await self._call(lambda rid: messages.json_message(messages.DESCRIBE, rid, None))

    async def _call(self, build: Any) -> Any:
        if self.channel is None or self.channel.closed:
            raise RemoteEngineError("the worker's engine process is gone")
        request_id = next(self._ids) & 0xFFFFFFFF
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            self.channel.send(build(request_id))
            return await future
        finally:
            self._pending.pop(request_id, None)

    def _message(self, view: memoryview) -> None:
        kind, request_id, rows, dim, _ = messages.head(view)
        future = self._pending.get(request_id)
        if future is None or future.done():
            return  # its client went away
        if kind == messages.VECTORS:
            now = time.monotonic()
            took = now - messages.sent_at(view, now)
            self.replies["reply_travel_s"] += took
            self.replies["replies_over_1ms"] += took > 0.001
            self.replies["replies_over_5ms"] += took > 0.005
            future.set_result(messages.read_vectors(view, rows, dim))
        elif kind == messages.INFO:
            future.set_result(messages.read_json(view))
        elif kind == messages.FAILED:
            failure = messages.read_json(view)
            if failure["invalid"]:
                future.set_exception(
                    InvalidInput(failure["message"], param=failure["param"], code=failure["code"])
                )
            else:
                future.set_exception(RemoteEngineError(failure["message"], remote_class=failure["class"]))

    def _closed(self) -> None:
        for future in self._pending.values():
            if not future.done():
                future.set_exception(RemoteEngineError("the worker's engine process exited"))
        self.lost.set()


async def serve_ingest(settings: IngestSettings, stop: asyncio.Event) -> int:
    spec_buf = map_memory(settings.spec_fd)
    spec = IngestSpec.from_json(bytes(spec_buf).rstrip(b"\0").decode())
    spec_buf.release()
    os.close(settings.spec_fd)
    board = Board(settings.board_fd)
    config = settings.worker_config()
    engine = RemoteEngine(spec)
    freeze_heap()  # the tokenizer and the libraries: kept for life, never walked
    engine.connect(memory_fd=settings.memory_fd, doorbell=socket.socket(fileno=settings.doorbell_fd))
    os.close(settings.memory_fd)  # mapped: the mapping keeps it
    plane = RequestPlane(
        config,
        engine=engine,
        metrics=SlotMetrics(board, settings.index),
        state=lambda: board.state,
        url=lambda: settings.url,
        load=board.inflight,
        describe=engine.describe,
    )
    runner = web.AppRunner(plane.app, access_log=None, handle_signals=False, shutdown_timeout=2.0)
    await runner.setup()
    await web.SockSite(
        runner, reuseport_socket(settings.host, settings.port, listen=True), backlog=1024
    ).start()
    runners = [runner]
    if settings.metrics_port is not None:
        runners.append(await _serve_own_metrics(settings, board, config.labels))
    assert engine.channel is not None
    channel = engine.channel

    copier: asyncio.TimerHandle

    def copy_counts() -> None:
        nonlocal copier
        board.put_counts(settings.index, {**channel.counts.as_dict(), **engine.replies})
        copier = asyncio.get_running_loop().call_later(COUNTS_EVERY_S, copy_counts)

    copier = asyncio.get_running_loop().call_later(COUNTS_EVERY_S, copy_counts)
    channel.send(messages.json_message(messages.READY, 0, None))
    waits = {asyncio.ensure_future(stop.wait()), asyncio.ensure_future(engine.lost.wait())}
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for task in waits:
        task.cancel()
    copier.cancel()
    for each in runners:
        await each.cleanup()  # answers what it holds while the engine is still there
    engine.channel.close()
    return 0 if not engine.lost.is_set() or stop.is_set() else 1


async def _serve_own_metrics(settings: IngestSettings, board: Board, labels: dict[str, str]) -> web.AppRunner:
    """This process's own /metrics on its port: its slot's counts, in the worker's series."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(BoardCollector(board, labels, slots=(settings.index,)))

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry), content_type="text/plain", charset="utf-8")

    app = make_app()
    app.add_routes([web.get("/metrics", metrics)])
    runner, port = await start_site(app, settings.metrics_host, settings.metrics_port or 0)
    log.info("ingest process %d: its metrics on http://%s:%d", settings.index, settings.metrics_host, port)
    return runner


def main(argv: list[str]) -> int:
    settings = IngestSettings.from_json(argv[1])
    die_with_parent(settings.parent)
    configure_logging(settings.log_level or "INFO")
    return run_service(lambda stop: serve_ingest(settings, stop))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
