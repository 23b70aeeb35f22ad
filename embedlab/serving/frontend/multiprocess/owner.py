"""Several routing processes on one port: `embedlab frontend --processes N`.

The process `embedlab frontend` starts routes too, and owns the instance table: leases,
heartbeats, drains, weights and the lease sweep happen there alone. It starts N-1
routing processes (`python -m embedlab.serving.frontend.multiprocess.replica SETTINGS`) that listen on the
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
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from ....defaults import TOKEN_ENV
from ....errors import ConfigError
from ....plugins import child_env
from ...http import reuseport_socket
from ..app import Frontend, FrontendConfig
from ..instances import instance_fields
from ..metrics import Merged, export, merge, propagation_histogram
from ..registry_api import CHANGES
from ..shared_routing import SharedRouting
from .frames import REPLICA_MODULE, Calls, ReplicaSettings, read_frame, write_frame

log = logging.getLogger("embedlab.frontend")

ACK_TIMEOUT_S = 2.0
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 5.0


class _Process:
    def __init__(self, index: int, popen: subprocess.Popen[bytes], writer: asyncio.StreamWriter) -> None:
        self.index = index
        self.popen = popen
        self.writer = writer
        self.acked = 0
        self.ready = asyncio.get_running_loop().create_future()
        self.calls = Calls()


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
        settings = ReplicaSettings(
            index=index,
            parent=os.getpid(),
            socket_fd=theirs.fileno(),
            shared_fd=self.shared.fd,
            log_level=logging.getLevelName(logging.getLogger().level),
            config={**self.config.settings(), "port": port},
        )
        env = child_env(os.environ)
        if self.config.token:
            env[TOKEN_ENV] = self.config.token
        try:
            popen = subprocess.Popen(
                [sys.executable, "-m", REPLICA_MODULE, settings.to_json()],
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
        for _ in range(100):  # its exit code says whether it was stopped or failed
            if process.popen.poll() is not None:
                break
            await asyncio.sleep(0.01)
        if not self.stopping and not self.stop.is_set():
            code = process.popen.poll()
            # 0: a signal for the whole group (Ctrl-C, SIGTERM) reached it before us.
            if code != 0:
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
