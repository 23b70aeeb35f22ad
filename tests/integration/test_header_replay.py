"""A served-by header is evidence only where the counters agree (issue 30, point 5).

A router that replays a cached response names a worker on every answer while that worker's
counter stays where it was: the header alone would prove placement. Here a small HTTP proxy
in front of a launched two-model pool forwards the first request of each model and replays
its response (the `x-embedlab-worker` header included) for every later one; another client
keeps the pool busy, so the header path judges placement, and the counters must refute it.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from embedlab import Deployment, DeploymentSpec, multi_model_dispatch
from tests.integration.test_other_traffic import another_client

MODELS = ("model-a", "model-b")


@pytest.fixture
def replaying(tmp_path) -> Iterator[tuple[Deployment, str]]:  # type: ignore[no-untyped-def]
    with Deployment(DeploymentSpec.multi_model(list(MODELS)), run_dir=tmp_path) as dep:
        cache: dict[str, tuple[int, dict[str, str], bytes]] = {}
        lock = threading.Lock()
        upstream = httpx.Client(base_url=dep.frontend_url, timeout=30)

        class Replay(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                response = upstream.get(self.path)
                self._answer(response.status_code, dict(response.headers), response.content)

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                model = json.loads(body)["model"]
                with lock:
                    if model not in cache:
                        r = upstream.post(
                            self.path, content=body, headers={"content-type": "application/json"}
                        )
                        cache[model] = (r.status_code, dict(r.headers), r.content)
                    self._answer(*cache[model])

            def _answer(self, status: int, headers: dict[str, str], content: bytes) -> None:
                self.send_response(status)
                for name, value in headers.items():
                    if name.lower() not in (
                        "content-length",
                        "transfer-encoding",
                        "connection",
                        "date",
                        "server",
                    ):
                        self.send_header(name, value)
                self.send_header("content-length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            def log_message(self, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Replay)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield dep, f"http://127.0.0.1:{server.server_address[1]}"
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=10)
            upstream.close()


def test_a_replayed_header_the_counters_refute_fails_naming_the_worker(replaying) -> None:  # type: ignore[no-untyped-def]
    dep, proxy = replaying
    target = dataclasses.replace(dep.target(), frontend_url=proxy)
    with another_client(dep, MODELS[0]):
        result = multi_model_dispatch(target, requests=44)
    assert result.verdict == "failed", result.summary()
    # model-b's worker (1) takes no other traffic: one forwarded request, 44 responses naming it.
    assert any("worker 1's counter rose by 1 while 44 responses named it" in r for r in result.reasons), (
        result.reasons
    )
    assert all(b.proven_by.startswith("the x-embedlab-worker header") for b in result.bursts), (
        result.summary()
    )
