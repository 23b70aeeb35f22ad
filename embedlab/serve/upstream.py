"""A lean keep-alive HTTP/1.1 client for the frontend's one hop to a worker.

aiohttp's client costs the frontend more CPU per request than the rest of dispatch
together (profiled with py-spy under `hey`). This hop is narrow: one POST with a JSON
body to a worker's request plane, one response with Content-Length or chunked
framing. So a small asyncio protocol with a per-worker pool of idle connections does
it, and everything else stays on aiohttp.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from urllib.parse import urlsplit

MAX_HEAD = 64 * 1024
MAX_BODY = 256 * 1024 * 1024


class UpstreamError(Exception):
    """The worker could not be reached, or broke the connection or the protocol."""


@dataclass(slots=True)
class UpstreamResponse:
    status: int
    content_type: str
    body: bytes


class _Connection(asyncio.Protocol):
    """One keep-alive connection; answers one request at a time."""

    def __init__(self, pool: "_Pool") -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.waiter: asyncio.Future[UpstreamResponse] | None = None
        self.closed = False
        self.got_bytes = False
        self.keep_alive = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(UpstreamError(f"connection lost: {exc or 'closed by the worker'}"))
        self.pool.forget(self)

    def send(self, head: bytes, body: bytes) -> asyncio.Future[UpstreamResponse]:
        assert self.transport is not None
        self.waiter = asyncio.get_running_loop().create_future()
        self.buffer.clear()
        self.got_bytes = False
        self.transport.write(head + body)
        return self.waiter

    def data_received(self, data: bytes) -> None:
        self.got_bytes = True
        self.buffer += data
        if self.waiter is None or self.waiter.done():
            if self.waiter is None:  # bytes nobody asked for: the framing is lost
                self.abort()
            return
        try:
            response = self._parse()
        except UpstreamError as exc:
            self.waiter.set_exception(exc)
            self.abort()
            return
        if response is not None:
            waiter, self.waiter = self.waiter, None
            waiter.set_result(response)

    def _parse(self) -> UpstreamResponse | None:
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buffer) > MAX_HEAD:
                raise UpstreamError("response head too large")
            return None
        head = bytes(self.buffer[:end]).decode("latin-1").split("\r\n")
        try:
            status = int(head[0].split(" ", 2)[1])
        except (IndexError, ValueError):
            raise UpstreamError(f"bad status line {head[0][:80]!r}") from None
        length = -1
        chunked = False
        content_type = "application/json"
        self.keep_alive = True
        for line in head[1:]:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            if name == "content-length":
                length = int(value.strip())
            elif name == "transfer-encoding" and "chunked" in value.lower():
                chunked = True
            elif name == "content-type":
                content_type = value.strip()
            elif name == "connection" and value.strip().lower() == "close":
                self.keep_alive = False
        start = end + 4
        if chunked:
            body = self._dechunk(start)
            if body is None:
                return None
        elif length >= 0:
            if length > MAX_BODY:
                raise UpstreamError("response body too large")
            if len(self.buffer) - start < length:
                return None
            body = bytes(self.buffer[start : start + length])
        else:
            raise UpstreamError("response without Content-Length or chunked framing")
        return UpstreamResponse(status=status, content_type=content_type, body=body)

    def _dechunk(self, pos: int) -> bytes | None:
        out = bytearray()
        buf = self.buffer
        while True:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                return None
            try:
                size = int(bytes(buf[pos:eol]).split(b";")[0], 16)
            except ValueError:
                raise UpstreamError("bad chunk size") from None
            pos = eol + 2
            if size == 0:
                return bytes(out) if buf.find(b"\r\n", pos) >= 0 else None
            if len(buf) < pos + size + 2:
                return None
            out += buf[pos : pos + size]
            pos += size + 2

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


class _Pool:
    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.idle: deque[_Connection] = deque()
        self.head_prefix = f"POST /v1/embeddings HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n".encode()

    def forget(self, conn: _Connection) -> None:
        try:
            self.idle.remove(conn)
        except ValueError:
            pass

    async def connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            _, conn = await loop.create_connection(lambda: _Connection(self), self.host, self.port)
        except OSError as exc:
            raise UpstreamError(f"cannot connect to {self.host}:{self.port}: {exc.strerror or exc}") from None
        return conn

    def close(self) -> None:
        while self.idle:
            self.idle.popleft().abort()


class UpstreamClient:
    """POSTs request bodies to workers' `/v1/embeddings`, reusing connections per worker."""

    def __init__(self, *, timeout: float = 120.0, max_idle_per_worker: int = 256) -> None:
        self.timeout = timeout
        self.max_idle = max_idle_per_worker
        self._pools: dict[str, _Pool] = {}

    def _pool(self, base_url: str) -> _Pool:
        pool = self._pools.get(base_url)
        if pool is None:
            parts = urlsplit(base_url)
            if parts.scheme != "http" or not parts.hostname:
                raise UpstreamError(f"unsupported worker URL {base_url!r} (http only)")
            pool = self._pools[base_url] = _Pool(parts.hostname, parts.port or 80)
        return pool

    async def post(self, base_url: str, body: bytes) -> UpstreamResponse:
        pool = self._pool(base_url)
        head = pool.head_prefix + b"Content-Length: %d\r\n\r\n" % len(body)
        # A pooled connection may have been closed by the worker while idle; that is no
        # fault of the worker, so retry once on a fresh connection before reporting one.
        while pool.idle:
            conn = pool.idle.pop()
            if conn.closed:
                continue
            try:
                return await self._exchange(pool, conn, head, body)
            except UpstreamError:
                if conn.got_bytes:
                    raise
                break
        return await self._exchange(pool, await pool.connect(), head, body)

    async def _exchange(self, pool: _Pool, conn: _Connection, head: bytes, body: bytes) -> UpstreamResponse:
        loop = asyncio.get_running_loop()
        waiter = conn.send(head, body)
        timer = loop.call_later(self.timeout, _expire, waiter, self.timeout)
        try:
            response = await waiter
        except BaseException:
            conn.abort()
            raise
        finally:
            timer.cancel()
        if conn.keep_alive and not conn.closed and len(pool.idle) < self.max_idle:
            pool.idle.append(conn)
        else:
            conn.abort()
        return response

    def close(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()

    def drop(self, base_url: str) -> None:
        """Close the idle connections to one worker (it left the registry)."""
        pool = self._pools.pop(base_url, None)
        if pool is not None:
            pool.close()


def _expire(waiter: asyncio.Future[UpstreamResponse], timeout: float) -> None:
    if not waiter.done():
        waiter.set_exception(UpstreamError(f"no response within {timeout:g} s"))
