"""Several routing processes on one port: `embedlab frontend --processes N`.

The process `embedlab frontend` starts routes too, and owns the instance table: leases,
heartbeats, drains, weights and the lease sweep happen there alone. It starts N-1
routing processes (`python -m embedlab.serve.routing_procs SETTINGS`) that listen on the
same port (SO_REUSEPORT) and route from replicas of the table. Each is connected to the
owner by a socketpair carrying length-prefixed JSON frames:

- owner -> process: the whole table after every change (`table`, versioned), answers to
  registry calls (`reply`), requests for its metrics (`collect`, `merged`);
- process -> owner: `ready` (listening, table applied), `ack` of each table version, the
  registry calls it received (`call`: registration, heartbeat, deregistration, weights,
  listing, all answered by the owner), a dispatch that could not connect (`suspect`), its
  metrics (`metrics`) and scrapes it took (`gather`).

A registration, deregistration (a drain) or weight change is answered only once every
process has acknowledged the new table, so anything that follows the answer sees it
everywhere; heartbeats and lease expiry go out without waiting (a lapsed lease leaves
every replica at the same instant anyway: they compare the same monotonic clock). The
owner times each acknowledgement (`embedlab_frontend_table_propagation_seconds`).
Round-robin positions and the leak fault's debt live in shared memory
(`shared_routing.py`), so those routes are exact over all processes together.

Every routing process is a child in the frontend's process group; each also dies with
the owner (a parent-death signal, and EOF on its socket), and the owner stops if one of
them exits on its own.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from ..defaults import TOKEN_ENV
from ..errors import ConfigError
from .frontend import Frontend, FrontendConfig, token_from_env
from .frontend_metrics import Merged, export, merge, propagation_histogram
from .http import configure_logging, die_with_parent, reuseport_socket, run_service
from .instances import instance_fields, instance_from
from .registry_api import CHANGES
from .shared_routing import SharedRouting

log = logging.getLogger("embedlab.frontend")

FRAME = struct.Struct(">I")
ACK_TIMEOUT_S = 2.0
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 5.0


async def read_frame(reader: asyncio.StreamReader) -> dict[str, Any] | None:
    try:
        (size,) = FRAME.unpack(await reader.readexactly(FRAME.size))
        return json.loads(await reader.readexactly(size))  # type: ignore[no-any-return]
    except (asyncio.IncompleteReadError, ConnectionError):
        return None


def write_frame(writer: asyncio.StreamWriter, frame: dict[str, Any]) -> None:
    data = json.dumps(frame).encode()
    writer.write(FRAME.pack(len(data)) + data)


class _Calls:
    """Requests by id over a frame stream, and their answers."""

    def __init__(self) -> None:
        self._next = 0
        self.pending: dict[int, asyncio.Future[Any]] = {}

    def open(self) -> tuple[int, asyncio.Future[Any]]:
        self._next += 1
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending[self._next] = future
        return self._next, future

    def answer(self, call_id: int, value: Any) -> None:
        future = self.pending.pop(call_id, None)
        if future is not None and not future.done():
            future.set_result(value)

    def fail_all(self, exc: BaseException) -> None:
        for future in self.pending.values():
            if not future.done():
                future.set_exception(exc)
        self.pending.clear()


class _Process:
    def __init__(self, index: int, popen: subprocess.Popen[bytes], writer: asyncio.StreamWriter) -> None:
        self.index = index
        self.popen = popen
        self.writer = writer
        self.acked = 0
        self.ready = asyncio.get_running_loop().create_future()
        self.calls = _Calls()


class Owner:
    """The first routing process: the instance table's owner, and the others' parent."""

    def __init__(self, config: FrontendConfig, stop: asyncio.Event) -> None:
        self.config = config
        self.stop = stop
        self.shared = SharedRouting()
        self.frontend = Frontend(config, shared=self.shared)
        self.frontend.changed = self._changed
        self.frontend.changed_soon = self.publish_soon
        self.frontend.gather = self.gather
        self.frontend.suspected = lambda instance: self.publish_soon()
        self.propagation = propagation_histogram(self.frontend.metrics.prom)
        self.processes: list[_Process] = []
        self.version = 0
        self._sent: dict[int, float] = {}
        self._acks = asyncio.Event()
        self._soon = False
        self.stopping = False
        self.exit_code = 0

    async def start(self) -> None:
        """Start every routing process; the port answers once all of them route from the table."""
        reservation = reuseport_socket(self.config.host, self.config.port, listen=False)
        port = reservation.getsockname()[1]
        try:
            for index in range(1, self.config.processes):
                await self._spawn(index, port)
            deadline = time.monotonic() + READY_TIMEOUT_S
            for process in self.processes:
                while not process.ready.done():
                    if self.stop.is_set():
                        return  # stopped while starting: serve_routing closes what started
                    if process.popen.poll() is not None:
                        raise ConfigError(
                            f"routing process {process.index} exited with code {process.popen.returncode} "
                            "while starting; its messages are above in this log"
                        )
                    if time.monotonic() > deadline:
                        raise ConfigError(f"routing processes were not ready within {READY_TIMEOUT_S:g} s")
                    await asyncio.wait({process.ready}, timeout=0.1)
            await self.frontend.start(port=port, announce=True)
        except BaseException:
            await self.close()
            raise
        finally:
            reservation.close()

    async def _spawn(self, index: int, port: int) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        settings = {
            "index": index,
            "parent": os.getpid(),
            "socket_fd": theirs.fileno(),
            "shared_fd": self.shared.fd,
            "log_level": logging.getLevelName(logging.getLogger().level),
            "config": {**self.config.settings(), "port": port},
        }
        env = dict(os.environ)
        if self.config.token:
            env[TOKEN_ENV] = self.config.token
        try:
            popen = subprocess.Popen(
                [sys.executable, "-m", "embedlab.serve.routing_procs", json.dumps(settings)],
                stdin=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(), self.shared.fd),
                env=env,
            )
        finally:
            theirs.close()
        reader, writer = await asyncio.open_unix_connection(sock=ours)
        process = _Process(index, popen, writer)
        self.processes.append(process)
        write_frame(writer, self._table())  # applied before it listens: it never routes from nothing
        asyncio.create_task(self._serve(process, reader))

    # -- the table ----------------------------------------------------------------------

    def _table(self) -> dict[str, Any]:
        ghosts = self.frontend.faults.ghosts()
        return {
            "t": "table",
            "v": self.version,
            "table": self.frontend.instances.snapshot(),
            "ghosts": {model: [instance_fields(i) for i in group] for model, group in ghosts.items()},
        }

    def publish(self) -> int:
        self.version += 1
        self._sent[self.version] = time.monotonic()
        self._sent.pop(self.version - 1000, None)
        frame = self._table()
        for process in self.processes:
            write_frame(process.writer, frame)
        return self.version

    def publish_soon(self) -> None:
        """One publication for all the changes of this loop iteration (heartbeats, expiry, suspects)."""
        if not self._soon and self.processes:
            self._soon = True

            def go() -> None:
                self._soon = False
                self.publish()

            asyncio.get_running_loop().call_soon(go)

    async def _changed(self, op: str) -> None:
        if op == "heartbeat":  # renews a lease (or clears a suspect): nothing needs to wait for it
            self.publish_soon()
        if op not in CHANGES or not self.processes:
            return
        version = self.publish()
        deadline = time.monotonic() + ACK_TIMEOUT_S
        while any(p.acked < version for p in self.processes if p.popen.poll() is None):
            self._acks.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                log.warning("table version %d not acknowledged by every routing process in time", version)
                return
            try:
                await asyncio.wait_for(self._acks.wait(), left)
            except TimeoutError:
                pass

    # -- frames from a routing process --------------------------------------------------

    async def _serve(self, process: _Process, reader: asyncio.StreamReader) -> None:
        while (frame := await read_frame(reader)) is not None:
            kind = frame["t"]
            if kind == "ack":
                process.acked = max(process.acked, frame["v"])
                sent = self._sent.get(frame["v"])
                if sent is not None:
                    self.propagation.observe(time.monotonic() - sent)
                self._acks.set()
            elif kind == "ready" and not process.ready.done():
                process.ready.set_result(None)
            elif kind == "call":
                asyncio.create_task(self._call(process, frame))
            elif kind == "suspect":
                self.frontend.instances.mark_suspect(frame["instance_id"])
                self.publish_soon()
            elif kind == "metrics":
                process.calls.answer(frame["id"], frame["families"])
            elif kind == "gather":
                asyncio.create_task(self._gathered(process, frame["id"]))
        process.calls.fail_all(ConnectionError("routing process gone"))
        if not self.stopping and not self.stop.is_set():
            code = process.popen.poll()
            log.error("routing process %d exited (code %s): the frontend stops", process.index, code)
            self.exit_code = 1
            self.stop.set()

    async def _call(self, process: _Process, frame: dict[str, Any]) -> None:
        status, body = await self.frontend.registry_call(
            frame["op"], frame["instance_id"], base64.b64decode(frame["body"]), frame["auth"]
        )
        write_frame(
            process.writer, {"t": "reply", "id": frame["id"], "status": status, "body": body.decode()}
        )

    async def _gathered(self, process: _Process, call_id: int) -> None:
        write_frame(process.writer, {"t": "merged", "id": call_id, "text": (await self.gather()).decode()})

    async def gather(self) -> bytes:
        """Every process's metrics, merged into the series of one frontend."""
        asked = []
        for process in self.processes:
            call_id, future = process.calls.open()
            write_frame(process.writer, {"t": "collect", "id": call_id})
            asked.append(future)
        families = [export(self.frontend.metrics.prom, live=True)]
        if asked:
            done, _ = await asyncio.wait(asked, timeout=ACK_TIMEOUT_S)
            families += [f.result() for f in done if f.exception() is None]
        registry = CollectorRegistry(auto_describe=False)
        registry.register(Merged(merge(families)))
        return generate_latest(registry)

    async def close(self) -> None:
        self.stopping = True
        for process in self.processes:
            if process.popen.poll() is None:
                process.popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while any(p.popen.poll() is None for p in self.processes) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for process in self.processes:
            if process.popen.poll() is None:
                process.popen.kill()
                process.popen.wait()
            process.writer.close()
        await self.frontend.close()


async def serve_routing(config: FrontendConfig, stop: asyncio.Event) -> int:
    owner = Owner(config, stop)
    await owner.start()
    try:
        await stop.wait()
    finally:
        await owner.close()
    return owner.exit_code


# -- a routing process other than the owner ------------------------------------------------


class Replica:
    def __init__(self, settings: dict[str, Any]) -> None:
        self.index = settings["index"]
        config = FrontendConfig.from_settings(settings["config"], token=token_from_env())
        self.frontend = Frontend(config, index=self.index, shared=SharedRouting(settings["shared_fd"]))
        self.frontend.forward = self.forward
        self.frontend.gather = self.gather
        self.frontend.suspected = lambda instance: self._send(
            {"t": "suspect", "instance_id": instance.instance_id}
        )
        self.socket = socket.socket(fileno=settings["socket_fd"])
        self.writer: asyncio.StreamWriter | None = None
        self.calls = _Calls()
        self.first_table = asyncio.Event()
        self.gone = asyncio.Event()

    def _send(self, frame: dict[str, Any]) -> None:
        if self.writer is not None and not self.writer.is_closing():
            write_frame(self.writer, frame)

    async def _ask(self, frame: Callable[[int], dict[str, Any]]) -> Any:
        call_id, future = self.calls.open()
        self._send(frame(call_id))
        return await future

    async def forward(self, op: str, instance_id: str, body: bytes, authorization: str) -> tuple[int, bytes]:
        reply = await self._ask(
            lambda i: {
                "t": "call",
                "id": i,
                "op": op,
                "instance_id": instance_id,
                "body": base64.b64encode(body).decode(),
                "auth": authorization,
            }
        )
        return reply["status"], reply["body"].encode()

    async def gather(self) -> bytes:
        return (await self._ask(lambda i: {"t": "gather", "id": i})).encode()  # type: ignore[no-any-return]

    async def run(self, stop: asyncio.Event) -> int:
        reader, self.writer = await asyncio.open_unix_connection(sock=self.socket)
        reading = asyncio.create_task(self._read(reader))
        await self.first_table.wait()
        if self.gone.is_set():
            return 1
        await self.frontend.start(announce=False)
        self._send({"t": "ready"})
        waits = {asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self.gone.wait())}
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for task in (*waits, reading):
            task.cancel()
        await self.frontend.close()
        return 0 if stop.is_set() or not self.gone.is_set() else 1

    async def _read(self, reader: asyncio.StreamReader) -> None:
        while (frame := await read_frame(reader)) is not None:
            kind = frame["t"]
            if kind == "table":
                self.frontend.instances.apply_snapshot(frame["table"])
                ghosts = {m: [instance_from(f) for f in group] for m, group in frame["ghosts"].items()}
                self.frontend.faults.set_ghosts(ghosts)
                self._send({"t": "ack", "v": frame["v"]})
                self.first_table.set()
            elif kind == "reply":
                self.calls.answer(frame["id"], frame)
            elif kind == "merged":
                self.calls.answer(frame["id"], frame["text"])
            elif kind == "collect":
                self._send(
                    {"t": "metrics", "id": frame["id"], "families": export(self.frontend.metrics.prom)}
                )
        self.calls.fail_all(ConnectionError("the frontend's owner process is gone"))
        self.gone.set()
        self.first_table.set()


def main(argv: list[str]) -> int:
    settings = json.loads(argv[1])
    die_with_parent(settings["parent"])
    configure_logging(settings.get("log_level") or "INFO")
    return run_service(lambda stop: Replica(settings).run(stop))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
