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

from ...defaults import KIND_PATHS

MAX_HEAD = 64 * 1024
MAX_BODY = 256 * 1024 * 1024


class UpstreamError(Exception):
    """The worker could not be reached, or broke the connection or the protocol."""


class WorkerUrlError(ValueError):
    """A worker URL the upstream client cannot use. `host` is the host it names, where it
    names one, so that registration can still refuse a remote host as remote."""

    def __init__(self, message: str, host: str | None = None) -> None:
        super().__init__(message)
        self.host = host


def parse_worker_url(url: str) -> tuple[str, int]:
    """(host, port) of a worker's request plane: `http://host:port`, optionally with "/".

    The one parser for worker URLs, used by registration, its loopback check and the
    connection pools alike, so that a URL registration accepts is one dispatch can use:
    where two parsers differ, an accepted URL fails at dispatch (a trailing space makes
    the port a ValueError, port 0 becomes 80, a path is silently ignored).
    """
    if url != url.strip():
        raise WorkerUrlError(f"worker URL {url!r} has surrounding whitespace")
    # urlsplit drops tabs and newlines anywhere in a URL, and the resolver would take
    # non-ASCII hosts through IDNA: what is accepted must be what is connected to.
    if not url.isascii() or not url.isprintable() or " " in url:
        raise WorkerUrlError(f"worker URL {url!r} must be printable ASCII without spaces")
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # 'http://[::1' and the like
        raise WorkerUrlError(f"worker URL {url!r} does not parse: {exc}") from None
    host = parts.hostname
    if parts.scheme != "http":
        raise WorkerUrlError(
            f"worker URL {url!r} must be http:// (the upstream client speaks plain HTTP)", host
        )
    if not host:
        raise WorkerUrlError(f"worker URL {url!r} has no host")
    if "@" in parts.netloc:
        raise WorkerUrlError(f"worker URL {url!r} must not carry user info", host)
    if "?" in url or "#" in url:
        raise WorkerUrlError(f"worker URL {url!r} must not carry a query or a fragment", host)
    if parts.path not in ("", "/"):
        # Requests always go to /v1/embeddings: a path prefix would be ignored, not used.
        raise WorkerUrlError(f"worker URL {url!r} must not carry a path", host)
    try:
        port = parts.port
    except ValueError:
        port = None
    if not port:  # missing, out of range, not a number, or 0
        raise WorkerUrlError(f"worker URL {url!r} needs a port from 1 to 65535", host)
    return host, port


@dataclass(slots=True)
class UpstreamResponse:
    status: int
    content_type: str
    body: bytes


class _Connection(asyncio.Protocol):
    """One keep-alive connection; answers one request at a time."""

    def __init__(self, pool: _Pool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.waiter: asyncio.Future[UpstreamResponse] | None = None
        self.closed = False
        self.got_bytes = False
        # The worker closed the connection (not we): only then is a reused connection
        # stale rather than the worker slow.
        self.peer_closed = False
        self.keep_alive = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport; uvloop's implement asyncio.Transport without subclassing it, so no isinstance can narrow.
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed:  # not our own abort()
            self.peer_closed = True
        self.closed = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(UpstreamError(f"connection lost: {exc or 'closed by the worker'}"))
        self.pool.forget(self)

    def eof_received(self) -> None:
        self.peer_closed = True

    def send(self, head: bytes, body: bytes) -> asyncio.Future[UpstreamResponse]:
        assert self.transport is not None
        if self.closed or self.transport.is_closing():
            # The worker reset the connection between connect and send (it died a moment
            # ago): a failed dispatch the frontend retries elsewhere, not a write on a
            # closed transport, which uvloop answers with a RuntimeError (a 500).
            raise UpstreamError("connection lost before the request went out")
        self.waiter = asyncio.get_running_loop().create_future()
        self.buffer.clear()
        self.got_bytes = False
        # Not head + body: that copies the whole body per request. uvloop writes the
        # two buffers with one writev; the stdlib loop joins them (3.11) or uses sendmsg.
        self.transport.writelines((head, body))
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
                value = value.strip()
                # int() would also take '+5', '1_0' and ' 5', and its ValueError escaped
                # data_received instead of failing this request.
                if not (value.isascii() and value.isdigit()):
                    raise UpstreamError(f"bad Content-Length {value[:40]!r}")
                length = int(value)
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
            # Through a view: slicing the bytearray would copy the body once more. The
            # view is released at once, since a bytearray with a live view cannot resize.
            with memoryview(self.buffer) as view:
                body = bytes(view[start : start + length])
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
        self.closed = False
        self._heads: dict[str, bytes] = {}

    def head_prefix(self, path: str) -> bytes:
        head = self._heads.get(path)
        if head is None:
            head = self._heads[path] = (
                f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nContent-Type: application/json\r\n"
            ).encode()
        return head

    def forget(self, conn: _Connection) -> None:
        try:
            self.idle.remove(conn)
        except ValueError:
            pass

    async def connect(self, timeout: float) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            # A host that drops SYNs would otherwise hold the request for the kernel's
            # connect timeout (minutes), outside the request timeout.
            _, conn = await asyncio.wait_for(
                loop.create_connection(lambda: _Connection(self), self.host, self.port), timeout
            )
        except TimeoutError:
            raise UpstreamError(f"cannot connect to {self.host}:{self.port} within {timeout:g} s") from None
        except OSError as exc:
            raise UpstreamError(f"cannot connect to {self.host}:{self.port}: {exc.strerror or exc}") from None
        return conn

    def close(self) -> None:
        # A request in flight on this pool must not park its connection here afterwards:
        # nothing would ever take it out again.
        self.closed = True
        while self.idle:
            self.idle.popleft().abort()


class UpstreamClient:
    """POSTs request bodies to workers' OpenAI routes, reusing connections per worker."""

    def __init__(self, *, timeout: float = 120.0, max_idle_per_worker: int = 256) -> None:
        self.timeout = timeout
        self.max_idle = max_idle_per_worker
        self._pools: dict[str, _Pool] = {}

    def _pool(self, base_url: str) -> _Pool:
        pool = self._pools.get(base_url)
        if pool is None:
            try:
                host, port = parse_worker_url(base_url)
            except ValueError as exc:
                raise UpstreamError(str(exc)) from None
            pool = self._pools[base_url] = _Pool(host, port)
        return pool

    async def post(
        self, base_url: str, body: bytes, path: str = KIND_PATHS["embeddings"]
    ) -> UpstreamResponse:
        pool = self._pool(base_url)
        head = pool.head_prefix(path) + b"Content-Length: %d\r\n\r\n" % len(body)
        # A pooled connection may have been closed by the worker while idle; that is no
        # fault of the worker, so retry once on a fresh connection before reporting one.
        # Only a close by the worker before any byte of the answer counts as stale: a
        # timeout on a reused connection is a slow worker, and retrying it would double
        # the wait.
        while pool.idle:
            conn = pool.idle.pop()
            if conn.closed:
                continue
            try:
                return await self._exchange(pool, conn, head, body)
            except UpstreamError:
                if conn.got_bytes or not conn.peer_closed:
                    raise
                break
        return await self._exchange(pool, await pool.connect(self.timeout), head, body)

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
        if conn.keep_alive and not conn.closed and not pool.closed and len(pool.idle) < self.max_idle:
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
