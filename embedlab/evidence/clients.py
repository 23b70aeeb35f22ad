"""httpx clients for the harness, sharing one TLS context; and `run_sync` for sync callers.

httpx builds a fresh TLS context (loading the CA bundle, ~50 ms) for every client it
makes; a scenario makes several. Loopback deployments are plain HTTP, but attached
ones may not be, so the context is built once, on first use, and shared.

`scrape_client` is the client for reading many workers at once: a small connection pool
per worker behind one client (see `PerOriginTransport`).

Credentials are applied here, by origin: a client made while an `access.Access` is granted
sends the frontend its API key and the metrics their scrape config's headers, each only
to its own origin, and trusts each metrics origin as its `tls_config` says.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextvars
import ssl
from collections.abc import AsyncIterator, Callable, Coroutine
from functools import lru_cache
from typing import Any, TypeVar

import httpx

from . import access

T = TypeVar("T")


@lru_cache(maxsize=1)
def tls() -> ssl.SSLContext:
    # httpx's own context (certifi's CAs, SSL_CERT_FILE/SSL_CERT_DIR): the same trust a
    # plain httpx client has, built once.
    return httpx.create_ssl_context()


def client(**options: Any) -> httpx.Client:
    options.setdefault("verify", tls())
    return httpx.Client(**_granted(options, httpx.HTTPTransport))


def async_client(**options: Any) -> httpx.AsyncClient:
    options.setdefault("verify", tls())
    return httpx.AsyncClient(**_granted(options, httpx.AsyncHTTPTransport))


class _ByOrigin(httpx.Auth):
    """Each request gets the credentials in force for its origin (`access.headers_for`), at the
    time it is sent; a header the caller set stays, and so does a URL's own `user:password@`."""

    def auth_flow(self, request: httpx.Request) -> Any:
        if "Authorization" not in request.headers:
            if request.url.userinfo:  # what httpx does for one when a client has no auth of its own
                pair = f"{request.url.username}:{request.url.password or ''}".encode()
                request.headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
            else:
                request.headers.update(access.headers_for(request.url))
        yield request


def _granted(options: dict[str, Any], transport: Any) -> dict[str, Any]:
    """`options`, with what is granted now applied: credentials by origin, and a transport of its
    own TLS trust for each metrics origin whose scrape config sets one (unless the caller passes
    a transport: `PerOriginTransport` looks the trust up itself)."""
    granted = access.in_force()
    if not granted:
        return options
    options.setdefault("auth", _ByOrigin())
    if "transport" not in options and "mounts" not in options:
        mounts = {
            at: transport(verify=access.context_for(at), retries=0)
            for grant in granted
            for at in grant.metric_origins()
        }
        if mounts:
            options["mounts"] = mounts
    return options


class PerOriginTransport(httpx.AsyncBaseTransport):
    """One small keep-alive pool per origin (scheme, host, port), behind one client.

    A single httpx pool serving N workers at once is slow in two ways: it keeps only 20
    connections alive by default, so every snapshot of a larger pool reconnects to the
    rest; and httpcore re-scans every connection against every queued request at each
    change, so a snapshot of N workers costs on the order of N^2 steps. Measured on 2
    cores, 64 hash workers, one concurrent GET of every /metrics: 95-160 ms on one shared
    pool, 60-80 ms with a pool per worker (a client per worker is as fast, but an
    httpx.AsyncClient costs ~0.6 ms to build, a transport ~3 us).
    """

    def __init__(self, *, connections: int = 1, verify: ssl.SSLContext | bool | None = None) -> None:
        self._limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        self._verify = verify  # None: the trust in force for each origin (`access.context_for`), else tls()
        self._pools: dict[tuple[bytes, bytes, int | None], httpx.AsyncHTTPTransport] = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        key = (url.raw_scheme, url.raw_host, url.port)
        pool = self._pools.get(key)
        if pool is None:
            verify = self._verify if self._verify is not None else (access.context_for(url) or tls())
            # retries=0: a retried connect would hide a worker that refused the first one.
            pool = self._pools[key] = httpx.AsyncHTTPTransport(verify=verify, limits=self._limits, retries=0)
        return await pool.handle_async_request(request)

    async def aclose(self) -> None:
        pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            await pool.aclose()


class LaneTransport(httpx.AsyncBaseTransport):
    """`lanes` pools of one keep-alive connection each behind one client, a request on a free one.

    httpcore 1.0.9's pool re-scans every connection at each change (encode/httpcore#1035, open):
    a burst of 32 in flight on one pool of 32 connections spent 3.8 of its 6.2 s profiled in
    `_assign_requests_to_connections`. A pool of one connection scans one. A lane is taken when a
    request goes out and given back when its response is closed, so no more than `lanes` are in
    flight; more wait for a lane, as they would for a pool's connection.
    """

    def __init__(self, lanes: int, *, verify: ssl.SSLContext | bool | None = None) -> None:
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        verify = tls() if verify is None else verify
        self._lanes = [
            httpx.AsyncHTTPTransport(verify=verify, limits=limits, retries=0) for _ in range(max(1, lanes))
        ]
        self._free: asyncio.Queue[httpx.AsyncHTTPTransport] = asyncio.Queue()
        for lane in self._lanes:
            self._free.put_nowait(lane)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        lane = await self._free.get()
        try:
            response = await lane.handle_async_request(request)
        except BaseException:
            self._free.put_nowait(lane)
            raise
        assert isinstance(response.stream, httpx.AsyncByteStream)
        return httpx.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=_Released(response.stream, lambda: self._free.put_nowait(lane)),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        for lane in self._lanes:
            await lane.aclose()


class _Released(httpx.AsyncByteStream):
    """A response's body that gives its lane back once it is closed."""

    def __init__(self, stream: httpx.AsyncByteStream, release: Callable[[], None]) -> None:
        self._stream, self._release = stream, release

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            yield chunk

    async def aclose(self) -> None:
        release, self._release = self._release, lambda: None
        try:
            await self._stream.aclose()
        finally:
            release()


def lanes_client(lanes: int, *, timeout: float) -> httpx.AsyncClient:
    """An async client for a burst of `lanes` requests in flight to one frontend (LaneTransport)."""
    return async_client(timeout=timeout, transport=LaneTransport(lanes))


def scrape_client(*, timeout: float = 5.0) -> httpx.AsyncClient:
    """An async client for concurrent reads of many workers: a keep-alive connection to each."""
    return async_client(timeout=timeout, transport=PerOriginTransport())


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine from sync code, also inside Jupyter, whose event loop is already running."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        # The caller's context goes with it: the run's probes (traffic.probing) among it.
        return pool.submit(contextvars.copy_context().run, asyncio.run, coro).result()
