"""aiohttp plumbing shared by the frontend and the workers: error JSON, sites, signals."""

from __future__ import annotations

import asyncio
import gc
import ipaddress
import logging
import os
import signal
import socket
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from .openai import ApiError, dumps, error_body

log = logging.getLogger("embedlab.serving")

JSON = "application/json"


def json_response(payload: Any, *, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=dumps(payload), status=status, content_type=JSON, headers=headers)


def error_response(error: ApiError) -> web.Response:
    return web.Response(body=error.body(), status=error.status, content_type=JSON)


_ERROR_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "invalid_request_error",
}


def closing_error(status: int, message: str, *, code: str) -> web.Response:
    """A client error that also closes the connection: its body, unread or broken, must
    not be parsed as the next request."""
    response = error_response(ApiError(status, message, code=code))
    response.force_close()
    return response


def make_app(*, client_max_size: int = 1 << 20) -> web.Application:
    @web.middleware
    async def openai_errors(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """Answer every failure as OpenAI error JSON; a client mistake never becomes a 500.

        One middleware, not one per check: each layer costs every request a call (about 1%
        of a routing process's CPU per request at saturation, py-spy on an H200 machine).
        """
        encoding = request.headers.get("Content-Encoding", "").strip().lower()
        if encoding not in ("", "identity") and request.body_exists:
            # Bodies are read as sent (auto_decompress=False below): aiohttp's own
            # decompression hangs request.read() forever on a truncated deflate stream, and
            # answers other bad encodings in plain text before any handler runs.
            return closing_error(
                415,
                f"Content-Encoding {encoding[:40]!r} is not supported; send the JSON body uncompressed",
                code="unsupported_content_encoding",
            )
        # A body declared over the limit is refused unread. aiohttp would buffer it up to
        # the limit first: 8 MiB per request, and the process's RSS swings with it
        # (docs/benchmarks.md).
        if request.content_length is not None and request.content_length > client_max_size:
            return closing_error(
                413,
                f"The request body is too large: {request.content_length} bytes, the limit is {client_max_size}",
                code="413",
            )
        try:
            return await handler(request)
        except ApiError as exc:
            return error_response(exc)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            message = exc.reason if exc.status != 413 else f"The request body is too large: {exc.text}"
            kind = _ERROR_TYPES.get(
                exc.status, "invalid_request_error" if exc.status < 500 else "server_error"
            )
            return web.Response(
                body=error_body(message, type=kind, code=str(exc.status)),
                status=exc.status,
                content_type=JSON,
            )
        except (web.RequestPayloadError, HttpProcessingError) as exc:
            # Raised by request.read() when the body cannot be read (a broken chunked stream):
            # the client's fault, and the connection's framing is lost, so close it rather
            # than read the next request from the debris.
            return closing_error(
                400, f"The request body could not be read: {' '.join(str(exc).split())}"[:300], code="400"
            )
        except (asyncio.CancelledError, KeyboardInterrupt):
            raise
        except Exception:
            log.exception("unhandled error on %s %s", request.method, request.path)
            return web.Response(
                body=error_body("Internal server error", type="server_error"), status=500, content_type=JSON
            )

    return web.Application(
        middlewares=[openai_errors],
        client_max_size=client_max_size,
        handler_args={"access_log": None, "auto_decompress": False},
    )


async def start_site(
    app: web.Application, host: str, port: int, *, reuse_port: bool = False
) -> tuple[web.AppRunner, int]:
    """Start serving `app`; port 0 takes an ephemeral port. Returns the runner and the bound port.

    `reuse_port`: other processes may listen on the same port (SO_REUSEPORT), and the
    kernel spreads connections over them.
    """
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=2.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port, reuse_address=True, reuse_port=reuse_port or None, backlog=1024)
    await site.start()
    addresses = runner.addresses  # the bound (host, port, ...) of each site's socket
    bound = int(addresses[0][1]) if addresses else port
    return runner, bound


def reuseport_socket(host: str, port: int, *, listen: bool) -> socket.socket:
    """A socket on (host, port) that other processes may bind too (SO_REUSEPORT).

    Listening, the kernel spreads new connections over it and its siblings. Not
    listening, it holds an ephemeral port while the processes that will serve it join
    (a bound socket that does not listen takes no connections).
    """
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(address)
    if listen:
        sock.listen(1024)
        sock.setblocking(False)
    return sock


def is_loopback_host(host: str) -> bool:
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        try:
            return all(
                ipaddress.ip_address(info[4][0]).is_loopback for info in socket.getaddrinfo(host, None)
            )
        except (OSError, ValueError):  # UnicodeError (idna) and NUL bytes are ValueErrors
            return False


def install_event_loop_policy() -> None:
    """uvloop where available: it roughly halves the per-request cost of the proxy hop."""
    try:
        import uvloop
    except ImportError:
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def run_service(main: Callable[[asyncio.Event], Awaitable[int]]) -> int:
    """Run `main(stop)` until it returns; SIGTERM and SIGINT set `stop` for a clean shutdown.

    Once the service has shut down cleanly (sockets closed, lease given back) the process
    exits at once: tearing the interpreter down would only add to every teardown's wait.
    """
    install_event_loop_policy()

    async def runner() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        return await main(stop)

    code = asyncio.run(runner())
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def freeze_heap() -> int:
    """Move every object alive now out of the cyclic collector's sight; how many there were.

    For a server once it has loaded what it keeps for life (a model, its compiled code, a
    tokenizer): a full collection walks every tracked object, and in an engine process
    holding a compiled model that stops the event loop for hundreds of milliseconds,
    stalling every request in flight (docs/benchmarks.md). Frozen, they are never walked;
    what the requests allocate is still collected.
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def die_with_parent(parent: int) -> None:
    """For a process a server started beside itself: SIGTERM when that server dies, even by
    SIGKILL (the kernel's parent-death signal), and exit now if it already has."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # EOF on its socket to the server still ends it
    if os.getppid() != parent:
        os._exit(0)


def configure_logging(level: str = "INFO") -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
