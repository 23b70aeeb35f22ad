"""A routing process other than the owner (`embedlab frontend --processes N`): routes from a replica.

Started by the owner (`serving/frontend/multiprocess/owner.py`), never by hand:
`python -m embedlab.serving.frontend.multiprocess.replica SETTINGS_JSON`, its socket to the owner and the
shared routing memory passed as inherited descriptors. It applies every table the owner
sends and acknowledges it; it listens only once it has the first one. Registry calls it
receives go to the owner, a dispatch that could not connect is reported there, and a
scrape of `/metrics` is answered with the owner's merge of every process. It exits on
SIGTERM or SIGINT, and when the owner dies (EOF, or the parent-death signal).
"""

from __future__ import annotations

import asyncio
import base64
import socket
import sys
from collections.abc import Callable
from typing import Any

from ...http import configure_logging, die_with_parent, run_service
from ...registration import token_from_env
from ..app import Frontend, FrontendConfig
from ..instances import instance_from
from ..metrics import export
from ..shared_routing import SharedRouting
from .frames import Calls, ReplicaSettings, read_frame, write_frame


class Replica:
    def __init__(self, settings: ReplicaSettings) -> None:
        self.index = settings.index
        config = FrontendConfig.from_settings(settings.config, token=token_from_env())
        self.frontend = Frontend(config, index=self.index, shared=SharedRouting(settings.shared_fd))
        self.frontend.forward = self.forward
        self.frontend.gather = self.gather
        self.frontend.suspected = lambda instance: self._send(
            {"t": "suspect", "instance_id": instance.instance_id}
        )
        self.socket = socket.socket(fileno=settings.socket_fd)
        self.writer: asyncio.StreamWriter | None = None
        self.calls = Calls()
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
        return (await self._ask(lambda i: {"t": "gather", "id": i})).encode()

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
    settings = ReplicaSettings.from_json(argv[1])
    die_with_parent(settings.parent)
    configure_logging(settings.log_level or "INFO")
    return run_service(lambda stop: Replica(settings).run(stop))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
