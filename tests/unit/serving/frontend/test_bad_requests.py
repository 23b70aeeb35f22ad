"""Client mistakes get a 4xx with OpenAI error JSON, never a 500, and the frontend keeps serving."""

from __future__ import annotations

import json
import socket

import httpx
import pytest

from embedlab.defaults import MAX_BODY_BYTES as DEFAULT_MAX_BODY

J = {"Content-Type": "application/json"}

BAD: list[tuple[str, bytes, dict[str, str], int, str | None]] = [
    # (case, body, headers, status, param named in the error)
    ("malformed json", b'{"model": "model-a", "input": ', J, 400, None),
    ("not json at all", b"hello", J, 400, None),
    ("empty body", b"", J, 400, None),
    ("json array body", b'["model-a"]', J, 400, None),
    ("json string body", b'"model-a"', J, 400, None),
    ("missing model", b'{"input": "x"}', J, 400, "model"),
    ("model is a number", b'{"model": 3, "input": "x"}', J, 400, "model"),
    ("model is null", b'{"model": null, "input": "x"}', J, 400, "model"),
    ("model is empty", b'{"model": "", "input": "x"}', J, 400, "model"),
    ("missing input", b'{"model": "model-a"}', J, 400, "input"),
    ("input is null", b'{"model": "model-a", "input": null}', J, 400, "input"),
    ("input is a number", b'{"model": "model-a", "input": 5.5}', J, 400, "input"),
    ("input is an object", b'{"model": "model-a", "input": {"a": 1}}', J, 400, "input"),
    ("empty input list", b'{"model": "model-a", "input": []}', J, 400, "input"),
    ("empty string input", b'{"model": "model-a", "input": ""}', J, 400, "input"),
    ("mixed list", b'{"model": "model-a", "input": ["a", 1]}', J, 400, "input"),
    ("booleans as tokens", b'{"model": "model-a", "input": [true, false]}', J, 400, "input"),
    ("negative token", b'{"model": "model-a", "input": [1, -2]}', J, 400, "input"),
    ("float tokens", b'{"model": "model-a", "input": [1.5, 2]}', J, 400, "input"),
    ("empty token list in list", b'{"model": "model-a", "input": [[1], []]}', J, 400, "input"),
    (
        "bad encoding_format",
        b'{"model": "model-a", "input": "x", "encoding_format": "int8"}',
        J,
        400,
        "encoding_format",
    ),
    ("dimensions zero", b'{"model": "model-a", "input": "x", "dimensions": 0}', J, 400, "dimensions"),
    ("dimensions string", b'{"model": "model-a", "input": "x", "dimensions": "8"}', J, 400, "dimensions"),
    ("user not a string", b'{"model": "model-a", "input": "x", "user": 7}', J, 400, "user"),
    ("invalid utf-8", b'{"model": "model-a", "input": "\xff\xfe"}', J, 400, None),
    (
        "deep nesting",
        b'{"model": "model-a", "input": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        J,
        400,
        None,
    ),
    ("huge integer", b'{"model": "model-a", "input": [' + b"9" * 5000 + b"]}", J, 400, None),
    ("too many inputs", json.dumps({"model": "model-a", "input": ["x"] * 2049}).encode(), J, 400, "input"),
    (
        "input over max tokens",
        json.dumps({"model": "model-a", "input": "word " * 100}).encode(),
        J,
        400,
        "input",
    ),
    ("unknown model", b'{"model": "nope", "input": "x"}', J, 404, "model"),
    (
        "wrong content type",
        b"model=model-a&input=x",
        {"Content-Type": "application/x-www-form-urlencoded"},
        400,
        None,
    ),
    (
        "body over the limit",
        b'{"model": "model-a", "input": "' + b"x" * (DEFAULT_MAX_BODY + 10) + b'"}',
        J,
        413,
        None,
    ),
]


def test_table_is_large_enough() -> None:
    assert len(BAD) >= 20


@pytest.mark.parametrize("case,body,headers,status,param", BAD, ids=[c[0] for c in BAD])
def test_bad_request_is_a_4xx_with_error_json(inprocess_stack, case, body, headers, status, param) -> None:  # type: ignore[no-untyped-def]
    with httpx.Client(base_url=inprocess_stack.url, timeout=30) as client:
        response = client.post("/v1/embeddings", content=body, headers=headers)
        assert response.status_code == status, response.text[:300]
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert error["message"]
        if param is not None:
            assert error["param"] == param
        # ... and the frontend still serves.
        ok = client.post("/v1/embeddings", json={"model": "model-a", "input": "still here"})
        assert ok.status_code == 200
        assert len(ok.json()["data"][0]["embedding"]) == 16


def test_known_model_without_live_instance_is_503(inprocess_stack) -> None:  # type: ignore[no-untyped-def]
    worker = inprocess_stack.workers[1]
    inprocess_stack.call(worker.close())
    with httpx.Client(base_url=inprocess_stack.url) as client:
        response = client.post("/v1/embeddings", json={"model": "model-b", "input": "x"})
        assert response.status_code == 503
        assert response.json()["error"]["code"] == "no_live_instance"
        unknown = client.post("/v1/embeddings", json={"model": "zzz", "input": "x"})
        assert unknown.status_code == 404
        assert "model-a" in unknown.json()["error"]["message"], "the 404 lists the served models"


def test_unknown_route_and_method_are_json_errors(inprocess_stack) -> None:  # type: ignore[no-untyped-def]
    with httpx.Client(base_url=inprocess_stack.url) as client:
        assert client.get("/v1/nothing").json()["error"]["type"] == "not_found_error"
        response = client.get("/v1/embeddings")
        assert response.status_code == 405 and "error" in response.json()


BAD_WORKER_URLS = [
    "http://127.0.0.1:9000 ",
    " http://127.0.0.1:9000",
    "http://127.0.0.1:90\t00",
    "http://127.0.0.1:0",
    "http://127.0.0.1",
    "http://127.0.0.1:65536",
    "http://127.0.0.1:abc",
    "http://127.0.0.1:9000/prefix",
    "http://127.0.0.1:9000?x=1",
    "http://127.0.0.1:9000#f",
    "http://user@127.0.0.1:9000",
    "https://127.0.0.1:9000",
    "http://[::1",
    "http://:9000",
    "http://",
]


@pytest.mark.parametrize("url", BAD_WORKER_URLS, ids=[repr(u) for u in BAD_WORKER_URLS])
def test_registration_refuses_a_worker_url_dispatch_would_read_differently(inprocess_stack, url: str) -> None:  # type: ignore[no-untyped-def]
    # Most were registered once, and then failed dispatch with a 500 (the port's
    # ValueError) or went where the URL did not say (port 0 became 80, a path was dropped).
    registration = {"instance_id": "bad-url", "endpoint": "test.bad.generate", "model": "model-a", "url": url}
    with httpx.Client(base_url=inprocess_stack.url, timeout=30) as client:
        response = client.post("/registry/instances", json=registration)
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert (error["type"], error["param"]) == ("invalid_request_error", "url") and error["message"]
        assert "bad-url" not in client.get("/registry/instances").text
        assert client.post("/v1/embeddings", json={"model": "model-a", "input": "x"}).status_code == 200


def test_a_worker_that_leaves_takes_its_connection_pool_along(inprocess_stack) -> None:  # type: ignore[no-untyped-def]
    upstream = inprocess_stack.frontend._upstream
    # A bound port that does not listen: dispatch fails, but only after the client made a
    # pool for it. No real worker, whose heartbeat would register its URL again meanwhile.
    with socket.socket() as unused, httpx.Client(base_url=inprocess_stack.url, timeout=30) as client:
        unused.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{unused.getsockname()[1]}"
        for instance_id in ("p1", "p2"):
            registration = {
                "instance_id": instance_id,
                "endpoint": "test.gone.generate",
                "model": "model-p",
                "url": url + "/",
            }
            assert client.post("/registry/instances", json=registration).status_code == 201
        assert client.post("/v1/embeddings", json={"model": "model-p", "input": "x"}).status_code == 502
        assert url in upstream._pools
        assert client.delete("/registry/instances/p1").status_code == 200
        assert url in upstream._pools, "another instance still serves on that URL"
        assert client.delete("/registry/instances/p2").status_code == 200
        assert url not in upstream._pools
