"""Hostile input against a live frontend: a subprocess `embedlab frontend` and two hash workers.

Hypothesis generates at least 2,000 requests (random JSON, wrong types, huge and deeply
nested values, invalid UTF-8, wrong content types and encodings, random headers and
methods) against `/v1/embeddings` and the registry. Not one may come back 5xx, every
4xx must be OpenAI error JSON, and valid traffic sent concurrently must all succeed.

Scope: the requests are well-formed HTTP. What aiohttp's HTTP parser rejects before any
embedlab code runs (an unknown method token, a header line over 8 KiB, bytes that are not
HTTP at all) is answered by aiohttp in plain text; `test_protocol_garbage_*` checks that
those are 4xx too and that the frontend keeps serving.
"""

from __future__ import annotations

import gzip
import json
import random
import socket
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from embedlab import Deployment, DeploymentSpec
from embedlab.defaults import MAX_BODY_BYTES as DEFAULT_MAX_BODY
from embedlab.engines.base import EngineOptions

SERVED = ("model-a", "model-b")
HASH_DIM = EngineOptions().dim  # the hash engine's default vector size
EXAMPLES = 2000
# Models that generated registrations may claim. Their instances point at nothing, so
# requests for them would be honest 502s: the embeddings generator never names them,
# and registrations never name a served model (that would hijack the valid traffic).
REG_PREFIX = "fuzz-reg-"
MAX_BODY = DEFAULT_MAX_BODY  # the frontend's default --max-body-bytes


@dataclass(frozen=True)
class Probe:
    """One generated request."""

    kind: str
    method: str
    path: str
    body: bytes = b""
    headers: tuple[tuple[str, bytes], ...] = ()

    def describe(self) -> str:
        head = self.body[:300]
        return f"[{self.kind}] {self.method} {self.path} headers={list(self.headers)!r} body({len(self.body)} B)={head!r}"


# -- strategies ---------------------------------------------------------------------------

_leaves = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.sampled_from([0, -1, 2**31, 2**63 - 1, 2**63, 2**64 - 1])
    | st.floats(allow_nan=True, allow_infinity=True)  # json.dumps writes NaN/Infinity: not JSON
    | st.text(max_size=20)
)
# Kept small: hypothesis spends ~2 ms per example already, and 2,000 examples must stay
# around a minute on two cores. Size comes from the `_huge` and nesting strategies instead.
json_values = st.recursive(
    _leaves,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=8,
)


def _not_registry_model(value: object) -> bool:
    return not (isinstance(value, str) and value.startswith(REG_PREFIX))


_models = (
    st.sampled_from([*SERVED, *SERVED, "", " ", "nope", "MODEL-A", "model-a ", "model-a\x00"]) | json_values
).filter(_not_registry_model)
_token_ids = st.integers(min_value=-3, max_value=2**40) | st.sampled_from(
    [2**31 - 1, 2**31, 2**63, 2**64 - 1]
)
_inputs = st.one_of(
    st.text(max_size=60),
    st.lists(st.text(max_size=20), max_size=8),
    st.lists(_token_ids, max_size=8),
    st.lists(st.lists(_token_ids, max_size=5), max_size=4),
    st.lists(st.one_of(st.text(max_size=5), _token_ids, st.none()), min_size=2, max_size=4),  # mixed types
    json_values,
    st.integers(2040, 2060).map(lambda n: ["x"] * n),  # around OpenAI's 2048-input limit
)
_extras = st.dictionaries(st.text(max_size=12), _leaves, max_size=2)
requests_json = st.builds(
    lambda fields, extra: {**extra, **fields},
    st.fixed_dictionaries(
        {},
        optional={
            "model": _models,
            "input": _inputs,
            "encoding_format": st.sampled_from(["float", "base64", None, "int8", "", "FLOAT"]) | json_values,
            "dimensions": st.integers(-3, HASH_DIM + 3)
            | st.sampled_from([10**7, 2**31, 2**62, 2**64 - 1])
            | json_values,
            "user": st.text(max_size=20) | json_values,
        },
    ),
    _extras,
)

# One field of an otherwise valid request made hostile: random dicts rarely get every
# other field right, so without this the validators' deeper branches and the engine
# (which only sees requests that passed validation) would hardly be reached.
_valid_fields = st.fixed_dictionaries(
    {
        "model": st.sampled_from(SERVED),
        "input": st.sampled_from(["hello", ["a", "b c"], [1, 2, 3], [[4, 5], [6]]]),
    },
    optional={
        "encoding_format": st.sampled_from(["float", "base64"]),
        "dimensions": st.integers(1, HASH_DIM),
        "user": st.text(max_size=8),
    },
)
_hostile_field = st.one_of(
    st.tuples(st.just("input"), _inputs),
    st.tuples(st.just("input"), st.lists(_token_ids, min_size=1, max_size=4)),
    st.tuples(
        st.just("input"), st.lists(st.lists(_token_ids, min_size=1, max_size=3), min_size=1, max_size=3)
    ),
    st.tuples(
        st.just("dimensions"),
        st.integers(HASH_DIM - 2, HASH_DIM + 2) | st.sampled_from([0, -1, 10**7, 2**31, 2**62, 2**64 - 1]),
    ),
    st.tuples(st.just("dimensions"), json_values),
    st.tuples(st.just("encoding_format"), json_values),
    st.tuples(st.just("user"), json_values),
    st.tuples(st.just("model"), _models),
    st.tuples(st.text(max_size=12), json_values),  # an unknown field
)
near_valid_json = st.builds(lambda base, field: {**base, field[0]: field[1]}, _valid_fields, _hostile_field)


def _dumps(value: Any) -> bytes:
    return json.dumps(value).encode()


def _nested(depth: int, shape: str) -> bytes:
    if shape == "list":
        inner = b"[" * depth + b"]" * depth
    elif shape == "dict":
        inner = b'{"a":' * depth + b"1" + b"}" * depth
    else:  # unbalanced: never closes
        inner = b"[" * depth
    return b'{"model": "model-a", "input": ' + inner + b"}"


_huge = st.one_of(
    # a string input just under, at, and over the body limit
    st.sampled_from([1 << 20, MAX_BODY - 64, MAX_BODY + 1, 9 << 20]).map(
        lambda n: b'{"model": "model-a", "input": "' + b"x" * n + b'"}'
    ),
    st.integers(8_000, 12_000).map(
        lambda n: _dumps({"model": "model-b", "input": list(range(n))})
    ),  # > max_model_len
    st.integers(8_000, 12_000).map(lambda n: _dumps({"model": "model-a", "input": "word " * n})),
    st.integers(4_000, 20_000).map(
        lambda n: b'{"model": "model-a", "input": [' + b"9" * n + b"]}"
    ),  # giant integer
    st.integers(1, 2000).map(lambda n: _dumps({"model": "model-a" * n, "input": "x"})),  # long model name
    st.integers(1, 50_000).map(lambda n: _dumps({"model": "model-a", "input": "x", "k" * n: "v" * n})),
)
_bad_utf8 = st.one_of(
    st.binary(min_size=1, max_size=40).map(lambda b: b'{"model": "model-a", "input": "' + b + b'"}'),
    st.binary(min_size=1, max_size=40).map(lambda b: b'{"model": "' + b + b'", "input": "x"}'),
    st.sampled_from([b"\xff\xfe", b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80"]).map(
        lambda b: b'{"model": "model-a", "input": ["ok", "' + b + b'"]}'
    ),
    st.sampled_from(["\\ud800", "\\udfff", "\\ud800\\u0041", "\\u0000"]).map(
        lambda s: b'{"model": "model-a", "input": "' + s.encode() + b'"}'
    ),
    st.text(max_size=20).map(lambda s: _dumps({"model": "model-a", "input": s}).decode().encode("utf-16")),
)
embedding_bodies = st.one_of(
    near_valid_json.map(_dumps),
    near_valid_json.map(_dumps),
    near_valid_json.map(_dumps),
    requests_json.map(_dumps),
    requests_json.map(_dumps),
    json_values.map(_dumps),
    st.builds(_nested, st.integers(1, 300_000), st.sampled_from(["list", "dict", "open"])),
    _huge,
    _bad_utf8,
    st.binary(max_size=200),
    st.just(b""),
)

_registrations = st.fixed_dictionaries(
    {},
    optional={
        "instance_id": st.text(max_size=20) | json_values,
        "endpoint": st.sampled_from(["dynamo.embed-worker-1.generate", "a.b.c", "a.b", "a..c", "", "x.y.z.w"])
        | st.text(max_size=20)
        | json_values,
        "model": st.integers(0, 3).map(lambda i: f"{REG_PREFIX}{i}"),
        "url": st.sampled_from(
            [
                "http://127.0.0.1:1",
                "http://localhost:2",
                "http://[::1]:3",
                "http://10.1.2.3:4",
                "http://example.com",
                "http://[::1",
                "http://a..b/",
                "http://127.0.0.1:abc",
                "http://127.0.0.1:99999",
                "ftp://127.0.0.1",
                "http://",
                "127.0.0.1:5",
                "http://" + "a" * 300,
                "http://\x00x",
            ]
        )
        | st.text(max_size=30)
        | json_values,
        "weight": st.floats(allow_nan=False, allow_infinity=False)
        | st.sampled_from([0, -1, True, 2**64 - 1, 1e308])
        | json_values,
        "pid": json_values,
        "max_model_len": json_values,
    },
)
# Percent-encoded, as a client must send them; the frontend sees the decoded text.
_ids = st.text(max_size=24).filter(lambda s: s not in ("", ".", "..")).map(lambda s: quote(s, safe=""))
_any_method = st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"])


# Strategies are built once, at module level: building them inside a composite costs
# hypothesis a validation pass on every draw.
_content_types = st.sampled_from(
    [
        None,
        "application/json",
        "application/json",
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=zz",
        "application/json; charset=utf-16",
        "",
        "*/*",
        "application/octet-stream",
        "application/json; charset=latin-1",
        "application/json; q=",
    ]
)
# Header values as h11 allows them on the wire: no whitespace at the ends, no CR/LF/NUL.
_header_values = st.binary(max_size=120).map(lambda b: bytes(c if 0x21 <= c != 0x7F else 0x2E for c in b))
_header_names = st.sampled_from(
    [
        "Authorization",
        "Accept",
        "Accept-Encoding",
        "Accept-Language",
        "Cookie",
        "Origin",
        "Range",
        "Referer",
        "If-None-Match",
        "X-Forwarded-For",
        "X-Request-Id",
        "User-Agent",
        "x-embedlab-worker",
        "Cache-Control",
    ]
) | st.from_regex(r"\AX-[A-Za-z0-9-]{1,16}\Z")
_extra_headers = st.dictionaries(_header_names, _header_values, max_size=4)


@st.composite
def _headers(draw: st.DrawFn) -> tuple[tuple[str, bytes], ...]:
    headers: list[tuple[str, bytes]] = []
    content_type = draw(_content_types)
    if content_type is not None:
        headers.append(("Content-Type", content_type.encode()))
    headers += draw(_extra_headers).items()
    return tuple(headers)


_targets = st.sampled_from(
    ["embeddings"] * 12 + ["encoded"] * 2 + ["method"] * 2 + ["registry"] * 4 + ["read", "random"]
)
_encoded_bodies = st.one_of(requests_json.map(_dumps), st.binary(max_size=100))
_encodings = st.sampled_from(["gzip", "deflate", "identity", "gzip, deflate", "GZIP"])
_encoding_modes = st.sampled_from(["compressed", "raw", "truncated"])
_registry_ops = st.sampled_from(
    ["register", "register", "heartbeat", "deregister", "weight", "list", "other"]
)
_registry_bodies = json_values.map(_dumps) | st.binary(max_size=60)
_read_paths = st.sampled_from(["/health", "/metrics", "/v1/models", "/registry/instances"])
_path_text = st.text(max_size=40)
_query_text = st.text(max_size=30)
_short_binary = st.binary(max_size=50)


@st.composite
def probes(draw: st.DrawFn) -> Probe:
    headers = draw(_headers())
    target = draw(_targets)
    if target == "embeddings":
        return Probe("embeddings", "POST", "/v1/embeddings", draw(embedding_bodies), headers)
    if target == "encoded":
        # Content-Encoding over a correctly compressed body, over garbage, or a lie.
        body = draw(_encoded_bodies)
        encoding = draw(_encodings)
        mode = draw(_encoding_modes)
        if mode != "raw" and encoding.lower() == "gzip":
            body = gzip.compress(body)
        elif mode != "raw" and encoding == "deflate":
            body = zlib.compress(body)
        if mode == "truncated":
            body = body[: max(1, len(body) // 2)]
        return Probe(
            f"encoded-{encoding}-{mode}",
            "POST",
            "/v1/embeddings",
            body,
            headers + (("Content-Encoding", encoding.encode()),),
        )
    if target == "method":
        return Probe("method", draw(_any_method), "/v1/embeddings", draw(embedding_bodies), headers)
    if target == "registry":
        op = draw(_registry_ops)
        if op == "register":
            return Probe("registry", "POST", "/registry/instances", _dumps(draw(_registrations)), headers)
        if op == "list":
            return Probe("registry", "GET", "/registry/instances", b"", headers)
        instance, body = draw(_ids), draw(_registry_bodies)
        method, path = {
            "heartbeat": ("PUT", f"/registry/instances/{instance}/heartbeat"),
            "deregister": ("DELETE", f"/registry/instances/{instance}"),
            "weight": ("PUT", f"/registry/instances/{instance}/weight"),
            "other": ("PATCH", "/registry/instances"),
        }[op]
        return Probe("registry", method, path, body, headers)
    if target == "read":
        path = draw(_read_paths)
        query = quote(draw(_query_text), safe="=&")
        return Probe("read", draw(_any_method), path + ("?" + query if query else ""), b"", headers)
    path = "/" + quote(draw(_path_text), safe="/")
    return Probe("random-path", draw(_any_method), path, draw(_short_binary), headers)


# -- the live deployment and the valid traffic -----------------------------------------------


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    spec = DeploymentSpec.multi_model(list(SERVED), seed=0)
    with Deployment(spec, run_dir=tmp_path_factory.mktemp("fuzz-run")) as dep:
        yield dep


@dataclass
class ValidTraffic:
    """Threads that keep sending valid requests and record every outcome."""

    url: str
    threads: int = 1
    outcomes: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _workers: list[threading.Thread] = field(default_factory=list)

    def __enter__(self) -> ValidTraffic:
        for i in range(self.threads):
            thread = threading.Thread(target=self._run, args=(i,), daemon=True)
            thread.start()
            self._workers.append(thread)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._workers:
            thread.join(timeout=60)

    def _run(self, seed: int) -> None:
        rng = random.Random(seed)
        with httpx.Client(base_url=self.url, timeout=60) as client:
            while not self._stop.is_set():
                model = rng.choice(SERVED)
                payload: dict[str, Any] = {
                    "model": model,
                    "input": rng.choice(
                        ["hello", ["a", "b c"], [1, 2, 3], [[4, 5], [6]], "word " * rng.randint(1, 50)]
                    ),
                }
                if rng.random() < 0.3:
                    payload["encoding_format"] = rng.choice(["float", "base64"])
                if rng.random() < 0.3:
                    payload["dimensions"] = rng.randint(1, HASH_DIM)
                try:
                    response = client.post("/v1/embeddings", json=payload)
                except httpx.HTTPError as exc:
                    self.failures.append(f"{payload}: {exc!r}")
                    continue
                served_by = response.headers.get("x-embedlab-worker", "")
                ok = response.status_code == 200 and len(response.json()["data"]) >= 1 and served_by
                (self.outcomes if ok else self.failures).append(
                    f"{payload}: {response.status_code} {served_by} {response.text[:200]}"
                )


def assert_openai_answer(probe: Probe, response: httpx.Response) -> None:
    where = f"{probe.describe()} -> {response.status_code} {response.text[:300]!r}"
    assert response.status_code < 500, f"a 5xx: {where}"
    if response.status_code >= 400 and probe.method != "HEAD":
        assert response.headers.get("content-type", "").startswith("application/json"), f"not JSON: {where}"
        payload = response.json()
        assert isinstance(payload, dict) and set(payload) == {"error"}, f"not an error object: {where}"
        error = payload["error"]
        assert set(error) == {"message", "type", "param", "code"}, f"error fields: {where}"
        assert isinstance(error["message"], str) and error["message"], where
        assert isinstance(error["type"], str) and error["type"], where
    if response.status_code == 200 and probe.method == "POST" and probe.path == "/v1/embeddings":
        assert response.json()["object"] == "list", where


def send(client: httpx.Client, probe: Probe) -> httpx.Response:
    return client.request(probe.method, probe.path, content=probe.body, headers=list(probe.headers))


_J = (("Content-Type", b"application/json"),)
# The bugs this fuzz found, replayed first on every run (hypothesis's explicit phase):
# each was a 5xx, or a request left hanging, before its fix.
FOUND = [
    Probe("found", "POST", "/v1/embeddings", b'{"model": "model-a", "input": [9223372036854775808]}', _J),
    Probe(
        "found", "POST", "/v1/embeddings", b'{"model": "model-b", "input": [[1], [18446744073709551615]]}', _J
    ),
    Probe(
        "found",
        "POST",
        "/v1/embeddings",
        b'{"model": "model-a", "input": "x", "dimensions": 4611686018427387904}',
        _J,
    ),
    Probe(
        "found",
        "POST",
        "/v1/embeddings",
        b'{"model": "model-a", "input": "x", "dimensions": 18446744073709551615}',
        _J,
    ),
    Probe("found", "POST", "/v1/embeddings", b"not gzip", _J + (("Content-Encoding", b"gzip"),)),
    Probe(
        "found",
        "POST",
        "/v1/embeddings",
        zlib.compress(b'{"model": "model-a", "input": "x"}')[:12],
        _J + (("Content-Encoding", b"deflate"),),
    ),
    *(
        Probe(
            "found",
            "POST",
            "/registry/instances",
            _dumps({"instance_id": "f", "endpoint": "f.f.f", "model": REG_PREFIX + "0", "url": url}),
            _J,
        )
        for url in ["http://[::1", "http://a..b/", "http://" + "a" * 64 + ".x/", "http://127.0.0.1:abc"]
    ),
]


def test_fuzz_never_5xx_and_valid_traffic_unharmed(live: Deployment) -> None:
    sent: list[str] = []
    spent: dict[str, float] = {}
    started = time.monotonic()
    client = httpx.Client(base_url=live.frontend_url, timeout=60)

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
        print_blob=True,
    )
    @given(probe=probes())
    def hostile(probe: Probe) -> None:
        t0 = time.monotonic()
        try:
            response = send(client, probe)
        except httpx.TransportError as exc:
            raise AssertionError(f"the frontend dropped the connection: {probe.describe()}: {exc!r}") from exc
        sent.append(probe.kind)
        spent[probe.kind] = spent.get(probe.kind, 0.0) + time.monotonic() - t0
        assert_openai_answer(probe, response)

    for case in FOUND:
        hostile = example(probe=case)(hostile)
    with client, ValidTraffic(live.frontend_url) as valid:
        hostile()
    elapsed = time.monotonic() - started

    kinds = {k: (sent.count(k), round(spent[k], 1)) for k in sorted(set(sent))}
    print(
        f"\nfuzz: {len(sent)} hostile requests in {elapsed:.1f} s; {len(valid.outcomes)} valid ones alongside; {kinds}"
    )
    assert len(sent) >= EXAMPLES + len(FOUND)
    assert valid.failures == [], f"{len(valid.failures)} valid requests failed, first: {valid.failures[:3]}"
    assert len(valid.outcomes) >= 100, "too little valid traffic ran alongside to prove anything"
    # The servers survived, and none of them logged an unhandled error.
    assert all(p.alive() for p in live.processes), [p for p in live.processes if not p.alive()]
    for name, path in live.log_paths.items():
        text = Path(path).read_text(errors="replace")
        assert "unhandled error" not in text and "engine failed" not in text, (
            f"{name} logged an unhandled error"
        )


# -- below the application: what aiohttp's HTTP parser answers itself ----------------------------

GARBAGE = [
    b"\x00\x01\x02 not http\r\n\r\n",
    b"FOO /v1/embeddings HTTP/1.1\r\nHost: x\r\n\r\n",
    b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nX-Long: " + b"a" * 10_000 + b"\r\n\r\n",
    b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n",
    b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
    b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Encoding: br\r\nContent-Length: 2\r\n\r\nxx",
    b"POST /v1/embeddings HTTP/9.9\r\n\r\n",
    b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json; charset=\x7f\r\n\r\n",
    b"GET /" + b"a" * 20_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
]


@pytest.mark.parametrize("raw", GARBAGE, ids=[f"garbage-{i}" for i in range(len(GARBAGE))])
def test_protocol_garbage_is_a_4xx_and_the_frontend_keeps_serving(live: Deployment, raw: bytes) -> None:
    host, port = live.frontend_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(raw)
        answer = b""
        while chunk := sock.recv(65536):  # the server closes after a parse error
            answer += chunk
    status_line = answer.split(b"\r\n", 1)[0]
    assert status_line.startswith(b"HTTP/1.") and status_line.split()[1][:1] == b"4", answer[:300]
    ok = httpx.post(
        f"{live.frontend_url}/v1/embeddings", json={"model": "model-a", "input": "still here"}, timeout=30
    )
    assert ok.status_code == 200


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:abc",
        "http://127.0.0.1:99999",
        "http://[::1",
        "https://127.0.0.1:9",
        "ftp://127.0.0.1:9",
        "http://",
    ],
)
def test_registration_refuses_a_url_the_dispatch_could_not_use(live: Deployment, url: str) -> None:
    # Accepted once, such a URL failed every request for its model with a 502.
    registration = {"instance_id": "u", "endpoint": "u.u.u", "model": REG_PREFIX + "url", "url": url}
    response = httpx.post(f"{live.frontend_url}/registry/instances", json=registration, timeout=10)
    assert response.status_code == 400 and response.json()["error"]["param"] == "url", response.text
