"""The engine process's side of a multi-process worker (`embedlab worker --api-processes N`).

The process `embedlab worker` starts keeps the device, the engine, its batcher and its
CUDA graphs, the system port, the registration and the lease. It starts N ingest
processes (`serving/worker/multiprocess/ingest.py`) that share the request port through SO_REUSEPORT: the
kernel spreads connections over them. Each parses, validates and tokenizes, sends token
ids here over its shared-memory channel, and encodes the answer; here the ids go into
the one batcher, as a single process's requests would.

Every ingest process is a child in the worker's process group, so the group's SIGTERM
or SIGKILL reaches them too; each also dies with this process (a parent-death signal,
and EOF on its doorbell), and this process treats an ingest process that exits on its
own as the worker failing: it stops, and the exit code says so.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from ....engines import InvalidInput
from ....engines.batching import Durations
from ....errors import EngineError
from ....plugins import child_env
from ...channel import Channel, create_memory
from ...http import reuseport_socket
from ..config import IngestSettings, WorkerConfig
from ..metrics import Board
from . import messages

log = logging.getLogger("embedlab.worker")

INGEST_MODULE = "embedlab.serving.worker.multiprocess.ingest"
READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 5.0


def memory_with(data: bytes) -> int:
    fd = create_memory(max(1, len(data)))
    os.pwrite(fd, data, 0)
    return fd


class IngestPool:
    def __init__(
        self,
        config: WorkerConfig,
        engine: Any,
        *,
        processes: int,
        state: str,
        on_failure: Callable[[int], None],
    ) -> None:
        self.config = config
        self.engine = engine
        self.processes = processes
        self._on_failure = on_failure
        self.board = Board(create_memory(Board.size(processes)))
        self.board.state = state
        self.url = ""
        self.children: list[subprocess.Popen[bytes]] = []
        self.channels: list[Channel] = []
        self._ready: list[asyncio.Future[None]] = []
        self.stopping = False
        # Where the time goes, for /health: requests and sequences per ingest process, and
        # each request's trip from its ingest process's send to this loop.
        self.requests = [0] * processes
        self.sequences = [0] * processes
        self.travelled = Durations()

    async def start(self) -> None:
        cfg = self.config
        spec = self.engine.ingest_spec()
        reservation = reuseport_socket(cfg.host, cfg.port, listen=False)
        port = reservation.getsockname()[1]
        self.url = f"http://{cfg.host}:{port}"
        spec_fd = memory_with(spec.to_json().encode())
        try:
            for index in range(self.processes):
                self._spawn(index, spec_fd=spec_fd, port=port)
            started = time.monotonic()
            pending = set(self._ready)
            while pending:
                done, pending = await asyncio.wait(pending, timeout=0.1)
                for child in self.children:
                    if child.poll() is not None:
                        raise EngineError(
                            f"ingest process {child.pid} exited with code {child.returncode} while starting; "
                            "its messages are above in this log"
                        )
                if time.monotonic() - started > READY_TIMEOUT_S:
                    raise EngineError(f"ingest processes were not ready within {READY_TIMEOUT_S:g} s")
                for future in done:
                    future.result()
        except BaseException:
            await self.stop()
            raise
        finally:
            reservation.close()
            os.close(spec_fd)
        log.info(
            "%d ingest processes on %s (pids %s)", self.processes, self.url, [c.pid for c in self.children]
        )

    def _spawn(self, index: int, *, spec_fd: int, port: int) -> None:
        cfg = self.config
        memory = create_memory(Channel.SIZE)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        settings = IngestSettings(
            index=index,
            parent=os.getpid(),
            host=cfg.host,
            port=port,
            url=self.url,
            board_fd=self.board.fd,
            spec_fd=spec_fd,
            memory_fd=memory,
            doorbell_fd=theirs.fileno(),
            log_level=logging.getLevelName(logging.getLogger().level),
            worker=IngestSettings.worker_fields(cfg),
            metrics_host=cfg.system_host,
            metrics_port=cfg.process_metrics_ports[index] if cfg.process_metrics_ports else None,
        )
        try:
            child = subprocess.Popen(
                [sys.executable, "-m", INGEST_MODULE, settings.to_json()],
                stdin=subprocess.DEVNULL,
                env=child_env(os.environ),
                pass_fds=(self.board.fd, spec_fd, memory, theirs.fileno()),
            )
        finally:
            theirs.close()
        self.children.append(child)
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._ready.append(ready)
        channel = Channel(
            memory_fd=memory,
            sock=ours,
            side=1,
            on_message=functools.partial(self._message, index),
            on_closed=functools.partial(self._lost, index),
        )
        os.close(memory)  # mapped: the mapping keeps it
        self.channels.append(channel)
        channel.start()

    # -- requests from the ingest processes ---------------------------------------------

    def _message(self, index: int, view: memoryview) -> None:
        kind, request_id, count, tokens, dimensions = messages.head(view)
        channel = self.channels[index]
        if kind == messages.EMBED:
            now = time.monotonic()
            sent = messages.sent_at(view, now)
            self.travelled.add(now - sent)
            self.requests[index] += 1
            self.sequences[index] += count
            seqs = messages.embed_sequences(view, count, tokens)
            try:
                work = self._submit(seqs, None if dimensions < 0 else dimensions, sent)
            except Exception as exc:
                channel.send(failure(request_id, exc))
                return
            work.add_done_callback(functools.partial(self._answer, channel, request_id))
        elif kind == messages.DESCRIBE:
            describe = getattr(self.engine, "describe", None)
            channel.send(messages.json_message(messages.INFO, request_id, describe() if describe else None))
        elif kind == messages.READY and not self._ready[index].done():
            self._ready[index].set_result(None)

    def _submit(self, seqs: list[Any], dimensions: int | None, sent: float) -> asyncio.Future[Any]:
        submit = getattr(self.engine, "submit_ids", None)
        if submit is not None and dimensions is None:
            return submit(seqs, since=sent)

        async def embed() -> Any:
            result = await self.engine.embed([s.tolist() for s in seqs], dimensions=dimensions)
            return result.vectors

        return asyncio.ensure_future(embed())

    def _answer(self, channel: Channel, request_id: int, done: asyncio.Future[Any]) -> None:
        if channel.closed:
            return
        if done.cancelled():
            channel.send(failure(request_id, EngineError("the engine stopped before answering")))
        elif (error := done.exception()) is not None:
            channel.send(failure(request_id, error))
        else:
            channel.send(messages.vectors_reply(request_id, done.result()))

    def stats(self) -> dict[str, Any]:
        """Per ingest process: requests and sequences sent here, the board's figures (requests it
        counted, seconds spent answering, its channel's counts), this side's channel counts;
        and the requests' trip from an ingest process's send to this loop."""
        return {
            "processes": [
                {
                    "requests_sent": self.requests[i],
                    "sequences_sent": self.sequences[i],
                    "ingest": self.board.process_figures(i),
                    "engine_side": channel.counts.as_dict(),
                }
                for i, channel in enumerate(self.channels)
            ],
            "travelled": self.travelled.snapshot(),
        }

    def _lost(self, index: int) -> None:
        child = self.children[index]
        if self.stopping:
            return
        try:
            code = child.wait(timeout=1)
        except subprocess.TimeoutExpired:
            code = None
        log.error("ingest process %d (pid %d) exited (code %s): the worker stops", index, child.pid, code)
        self._on_failure(0 if code == 0 else 1)

    # -- shutdown -----------------------------------------------------------------------

    async def stop(self) -> None:
        """SIGTERM every ingest process, let them finish what they hold, then close the channels."""
        self.stopping = True
        for child in self.children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while any(c.poll() is None for c in self.children) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for child in self.children:
            if child.poll() is None:
                child.kill()
                child.wait()
        for channel in self.channels:
            channel.close()


def failure(request_id: int, exc: BaseException) -> bytes:
    payload = {"message": str(exc), "class": exc.__class__.__name__, "invalid": isinstance(exc, InvalidInput)}
    if isinstance(exc, InvalidInput):
        payload.update(param=exc.param, code=exc.code)
    return messages.json_message(messages.FAILED, request_id, payload)
