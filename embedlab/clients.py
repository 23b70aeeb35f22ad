"""httpx clients for the harness, sharing one TLS context.

httpx builds a fresh TLS context (loading the CA bundle, ~50 ms) for every client it
makes; a scenario makes several. Loopback deployments are plain HTTP, but attached
ones may not be, so the context is built once, on first use, and shared.
"""

from __future__ import annotations

import ssl
from functools import lru_cache
from typing import Any

import httpx


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
