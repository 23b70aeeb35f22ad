"""The frontend's lean upstream client against real loopback servers that misbehave on purpose."""

from __future__ import annotations

import asyncio

import pytest

from embedlab.serve.upstream import UpstreamClient, UpstreamError


async def serve(
    responses: list[bytes], *, close_after: bool = False, closed: asyncio.Event | None = None,
) -> tuple[asyncio.base_events.Server, str, list[bytes]]:
    """A raw server: answers each request (read up to the body) with the next canned bytes.

    `closed` is set each time the server has closed a connection.
    """
    seen: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while responses:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int([l for l in head.split(b"\r\n") if l.lower().startswith(b"content-length")][0].split(b":")[1])
                seen.append(head + await reader.readexactly(length))
                writer.write(responses.pop(0))
                await writer.drain()
                if close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
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
        response = await UpstreamClient(timeout=5).post(url, b"{}")
        assert (response.status, response.body) == (400, b"hello world")
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
            await reader.read()  # until the client gives up and closes

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
        ):
            server, url, _ = await serve([bad])
            with pytest.raises(UpstreamError, match=message):
                await UpstreamClient(timeout=2).post(url, b"{}")
            server.close()

    run(main())
