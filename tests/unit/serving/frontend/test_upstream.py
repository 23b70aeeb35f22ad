"""The frontend's lean upstream client against real loopback servers that misbehave on purpose."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from embedlab.serving.frontend.upstream import UpstreamClient, UpstreamError, parse_worker_url


async def serve(
    responses: list[bytes],
    *,
    close_after: bool = False,
    closed: asyncio.Event | None = None,
) -> tuple[asyncio.base_events.Server, str, list[bytes]]:
    """A raw server: answers each request (read up to the body) with the next canned bytes.

    `closed` is set each time the server has closed a connection.
    """
    seen: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while responses:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(
                    [line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")][
                        0
                    ].split(b":")[1]
                )
                seen.append(head + await reader.readexactly(length))
                writer.write(responses.pop(0))
                await writer.drain()
                if close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:  # also when asyncio.run cancels it: an open transport warns when collected
            writer.close()
        await writer.wait_closed()
        if closed is not None:
            closed.set()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}", seen


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def test_content_length_and_keep_alive_reuse() -> None:
    async def main() -> None:
        ok = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
        server, url, seen = await serve([ok, ok])
        client = UpstreamClient(timeout=5)
        first = await client.post(url, b'{"a":1}')
        second = await client.post(url, b'{"b":2}')
        assert (first.status, first.body, second.body) == (200, b"{}", b"{}")
        assert seen[0].endswith(b'{"a":1}') and b"Content-Length: 7" in seen[0]
        assert len(client._pools[url].idle) == 1, "one connection served both requests"
        client.close()
        server.close()

    run(main())


def test_chunked_response_split_across_packets() -> None:
    async def main() -> None:
        chunked = b"HTTP/1.1 400 Bad Request\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
        server, url, _ = await serve([chunked])
        client = UpstreamClient(timeout=5)
        response = await client.post(url, b"{}")
        assert (response.status, response.body) == (400, b"hello world")
        client.close()
        server.close()

    run(main())


def test_stale_idle_connection_is_retried_on_a_fresh_one() -> None:
    async def main() -> None:
        ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
        closed = asyncio.Event()
        server, url, seen = await serve([ok, ok], close_after=True, closed=closed)  # closes after each answer
        client = UpstreamClient(timeout=5)
        await client.post(url, b"{}")
        await closed.wait()  # the pooled connection is now stale
        assert (await client.post(url, b"{}")).status == 200
        assert len(seen) == 2
        client.close()
        server.close()

    run(main())


def test_refused_and_timeout_are_upstream_errors() -> None:
    async def main() -> None:
        server, url, _ = await serve([])
        server.close()
        await server.wait_closed()
        with pytest.raises(UpstreamError, match="cannot connect"):
            await UpstreamClient(timeout=5).post(url, b"{}")

        async def never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                await reader.read()  # until the client gives up and closes
            finally:
                writer.close()

        silent = await asyncio.start_server(never_answer, "127.0.0.1", 0)
        silent_url = f"http://127.0.0.1:{silent.sockets[0].getsockname()[1]}"
        with pytest.raises(UpstreamError, match="no response within 0.2 s"):
            await UpstreamClient(timeout=0.2).post(silent_url, b"{}")
        silent.close()

    run(main())


def test_garbage_and_unframed_responses_are_errors() -> None:
    async def main() -> None:
        for bad, message in (
            (b"NOT HTTP AT ALL\r\n\r\n", "bad status line"),
            (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nbody", "without Content-Length"),
            (b"HTTP/1.1 200 OK\r\nContent-Length: two\r\n\r\n{}", "bad Content-Length"),
            (b"HTTP/1.1 200 OK\r\nContent-Length: -2\r\n\r\n{}", "bad Content-Length"),
        ):
            server, url, _ = await serve([bad])
            with pytest.raises(UpstreamError, match=message):
                await UpstreamClient(timeout=2).post(url, b"{}")
            server.close()

    run(main())


@pytest.mark.parametrize(
    "url,expected",
    [
        ("http://127.0.0.1:9000", ("127.0.0.1", 9000)),
        ("http://127.0.0.1:9000/", ("127.0.0.1", 9000)),
        ("http://LocalHost:1", ("localhost", 1)),
        ("http://[::1]:65535", ("::1", 65535)),
    ],
)
def test_parse_worker_url_accepts_host_and_port(url: str, expected: tuple[str, int]) -> None:
    assert parse_worker_url(url) == expected


@pytest.mark.parametrize(
    "url,message",
    [
        ("http://127.0.0.1:9000 ", "whitespace"),
        (" http://127.0.0.1:9000", "whitespace"),
        ("http://127.0.0.1:90\t00", "printable"),
        ("http://127.0.0.1:9000\n/x", "printable"),
        ("http://127.0.0.1:90 00", "spaces"),
        ("http://h\u00e9:1", "ASCII"),
        ("https://127.0.0.1:9000", "http://"),
        ("127.0.0.1:9000", "http://"),
        ("http://", "no host"),
        ("http://:9000", "no host"),
        ("http://[::1", "does not parse"),
        ("http://127.0.0.1", "port"),
        ("http://127.0.0.1:", "port"),
        ("http://127.0.0.1:0", "port"),
        ("http://127.0.0.1:65536", "port"),
        ("http://127.0.0.1:abc", "port"),
        ("http://127.0.0.1:+9", "port"),
        ("http://127.0.0.1:9000/prefix", "path"),
        ("http://127.0.0.1:9000//", "path"),
        ("http://127.0.0.1:9000?x=1", "query"),
        ("http://127.0.0.1:9000/?", "query"),
        ("http://127.0.0.1:9000#frag", "fragment"),
        ("http://user@127.0.0.1:9000", "user info"),
        ("http://user:pw@127.0.0.1:9000", "user info"),
        ("http://@127.0.0.1:9000", "user info"),
    ],
)
def test_parse_worker_url_refuses_what_it_would_not_connect_to_as_written(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_worker_url(url)


def test_a_bad_worker_url_is_an_upstream_error_not_a_value_error() -> None:
    # The frontend's dispatch retries on UpstreamError only; a ValueError was a 500.
    async def main() -> None:
        with pytest.raises(UpstreamError, match="whitespace"):
            await UpstreamClient(timeout=5).post("http://127.0.0.1:9000 ", b"{}")

    run(main())


def test_timeout_on_a_reused_connection_is_not_retried_on_a_fresh_one() -> None:
    async def main() -> None:
        ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
        seen: list[bytes] = []
        connections = 0

        async def answer_once_then_stall(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal connections
            connections += 1
            try:
                while True:
                    head = await reader.readuntil(b"\r\n\r\n")
                    seen.append(head)
                    await reader.readexactly(2)
                    if len(seen) == 1:
                        writer.write(ok)
                        await writer.drain()
                    else:
                        await reader.read()  # until the client gives up and closes
                        break
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            finally:  # also when asyncio.run cancels it
                writer.close()

        server = await asyncio.start_server(answer_once_then_stall, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        timeout = 0.5
        client = UpstreamClient(timeout=timeout)
        assert (await client.post(url, b"{}")).status == 200
        with pytest.raises(UpstreamError, match="no response within 0.5 s"):
            await client.post(url, b"{}")
        # Counted, not timed: a retry would be a second connection, and a third request seen.
        assert (len(seen), connections) == (2, 1), "the stalled request was sent again on a fresh connection"
        client.close()
        server.close()

    run(main())


def test_connect_is_bounded_by_the_timeout() -> None:
    # A listener whose accept queue is full and never drained: Linux drops further SYNs,
    # so a connect to it hangs as one to a host that drops packets would.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    address = listener.getsockname()
    fillers = []
    try:
        for _ in range(4):
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(address)
            fillers.append(filler)

        async def main() -> None:
            post = UpstreamClient(timeout=0.3).post(f"http://127.0.0.1:{address[1]}", b"{}")
            with pytest.raises(UpstreamError, match="cannot connect to 127.0.0.1:[0-9]+ within 0.3 s"):
                await asyncio.wait_for(post, 10)  # unbounded, the kernel gives up after minutes

        run(main())
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


def test_drop_closes_the_pool_and_a_late_answer_is_not_parked() -> None:
    async def main() -> None:
        ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
        received, release = asyncio.Event(), asyncio.Event()

        async def answer_when_released(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while True:
                    await reader.readuntil(b"\r\n\r\n")
                    await reader.readexactly(2)
                    received.set()
                    await release.wait()
                    writer.write(ok)
                    await writer.drain()
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            finally:  # also when asyncio.run cancels it
                writer.close()

        server = await asyncio.start_server(answer_when_released, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        client = UpstreamClient(timeout=5)
        pending = asyncio.ensure_future(client.post(url, b"{}"))
        await received.wait()  # the request is on the wire, its connection out of any pool
        pool = client._pools[url]
        client.drop(url)
        assert url not in client._pools
        release.set()
        assert (await pending).status == 200
        assert not pool.idle, "a connection was parked in a pool nobody will use again"
        server.close()

    run(main())


def test_a_connection_reset_between_connect_and_send_is_an_upstream_error() -> None:
    """A worker dying right after accepting: the frontend must see a failed dispatch (and retry
    it elsewhere), not a write on a closed transport, which surfaced as a 500 (found by failover)."""
    import struct

    async def reset(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with RST
        writer.transport.abort()

    async def main() -> None:
        server = await asyncio.start_server(reset, "127.0.0.1", 0)
        client = UpstreamClient(timeout=5)
        pool = client._pool(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
        conn = await pool.connect(5)
        deadline = time.monotonic() + 5
        while not conn.closed and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert conn.closed, "the server's reset never arrived"
        with pytest.raises(UpstreamError, match="connection lost before the request went out"):
            conn.send(b"POST / HTTP/1.1\r\n\r\n", b"{}")
        server.close()
        await server.wait_closed()

    run(main())
