"""Length-prefixed JSON frames over a stream, and calls answered by id: the routing processes' control plane.

Low volume (table changes, registry calls, scrapes), so JSON is fine here; nothing on a
request's path goes through it.
"""

from __future__ import annotations

import asyncio
import json
import struct
from dataclasses import asdict, dataclass
from typing import Any

FRAME = struct.Struct(">I")
REPLICA_MODULE = "embedlab.serving.frontend.multiprocess.replica"


@dataclass(frozen=True, kw_only=True)
class ReplicaSettings:
    """What the owner hands each routing process (`python -m embedlab.serving.frontend.multiprocess.replica JSON`);
    the registry token travels in its environment, never on its command line."""

    index: int
    parent: int  # the owner's pid: the routing process dies with it
    socket_fd: int
    shared_fd: int
    log_level: str
    config: dict[str, Any]  # FrontendConfig.settings(), the port the owner reserved included

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ReplicaSettings:
        return cls(**json.loads(text))


async def read_frame(reader: asyncio.StreamReader) -> dict[str, Any] | None:
    try:
        (size,) = FRAME.unpack(await reader.readexactly(FRAME.size))
        return json.loads(await reader.readexactly(size))
    except (asyncio.IncompleteReadError, ConnectionError):
        return None


def write_frame(writer: asyncio.StreamWriter, frame: dict[str, Any]) -> None:
    data = json.dumps(frame).encode()
    writer.write(FRAME.pack(len(data)) + data)


class Calls:
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
