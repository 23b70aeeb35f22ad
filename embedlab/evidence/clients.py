"""httpx clients for the harness, sharing one TLS context; and `run_sync` for sync callers.

httpx builds a fresh TLS context (loading the CA bundle, ~50 ms) for every client it
makes; a scenario makes several. Loopback deployments are plain HTTP, but attached
ones may not be, so the context is built once, on first use, and shared.

`scrape_client` is the client for reading many workers at once: a small connection pool
per worker behind one client (see `PerOriginTransport`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ssl
from collections.abc import Coroutine
from functools import lru_cache
from typing import Any, TypeVar

import httpx

T = TypeVar("T")


@lru_cache(maxsize=1)
def tls() -> ssl.SSLContext:
    # httpx's own context (certifi's CAs, SSL_CERT_FILE/SSL_CERT_DIR): the same trust a
    # plain httpx client has, built once.
    return httpx.create_ssl_context()


def client(**options: Any) -> httpx.Client:
    options.setdefault("verify", tls())
    return httpx.Client(**options)


def async_client(**options: Any) -> httpx.AsyncClient:
    options.setdefault("verify", tls())
    return httpx.AsyncClient(**options)


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
        self._verify = tls() if verify is None else verify
        self._pools: dict[tuple[bytes, bytes, int | None], httpx.AsyncHTTPTransport] = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        key = (url.raw_scheme, url.raw_host, url.port)
        pool = self._pools.get(key)
        if pool is None:
            # retries=0: a retried connect would hide a worker that refused the first one.
            pool = self._pools[key] = httpx.AsyncHTTPTransport(
                verify=self._verify, limits=self._limits, retries=0
            )
        return await pool.handle_async_request(request)

    async def aclose(self) -> None:
        pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            await pool.aclose()


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
        return pool.submit(asyncio.run, coro).result()
