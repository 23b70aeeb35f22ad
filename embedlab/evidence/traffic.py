"""Bounded bursts of /v1/embeddings requests, every response validated and recorded.

No automatic retries anywhere: a retry would hide exactly the failures embedlab exists
to show.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import functools
import random
import secrets
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx

from ..defaults import GENERATE_KINDS, KIND_PATHS, REQUEST_ID_HEADER, WORKER_HEADER
from ..errors import ConfigError, TrafficError
from ..progress import Bar
from . import clients

if TYPE_CHECKING:
    import pandas as pd

_loads: Callable[[bytes], Any]
try:  # a required dependency, about 5x faster on vectors; the GPU machines' image lacks it
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - depends on the environment
    from json import loads as _loads

Input = str | list[str] | list[int] | list[list[int]]

_WORDS = "the quick brown fox jumps over the lazy dog while embeddings route across workers".split()


def default_inputs(n: int, *, seed: int = 0, words: int = 8) -> list[str]:
    """Distinct short sentences, reproducible from the seed: the same `n` every call. A check sends
    `probes().take(n)` instead, which no cache has seen."""
    rng = random.Random(seed)
    return [f"request {i}: " + " ".join(rng.choice(_WORDS) for _ in range(words)) for i in range(n)]


@dataclass
class Probes:
    """Request bodies no cache can answer: every input a run sends carries the run's nonce and a
    running count, so no body repeats within a run, nor across runs (a router that caches responses
    by body, LiteLLM's `cache: true` or an HTTP cache, would answer a repeated one without any
    worker counting it). The words follow from `seed` and the count: a run replayed with the same
    nonce and seed sends the same bodies in the same order, on purpose (`replayed`)."""

    nonce: str = field(default_factory=lambda: secrets.token_hex(6))
    seed: int = 0
    replayed: bool = False
    drawn: int = 0  # bodies taken so far

    def take(self, n: int, *, words: int = 8) -> list[str]:
        first, self.drawn = self.drawn, self.drawn + n
        rng = random.Random(f"{self.seed}:{first}")
        return [
            f"probe {self.nonce}.{first + i}: " + " ".join(rng.choice(_WORDS) for _ in range(words))
            for i in range(n)
        ]

    def to_json(self) -> dict[str, Any]:
        return {"nonce": self.nonce, "seed": self.seed, "bodies": self.drawn, "replayed": self.replayed}


_PROBES: contextvars.ContextVar[Probes | None] = contextvars.ContextVar("embedlab_probes", default=None)


def probes() -> Probes:
    """The running check's probes (`probing`); outside one, fresh ones each call."""
    return _PROBES.get() or Probes()


@contextlib.contextmanager
def probing(nonce: str = "", *, seed: int = 0) -> Iterator[Probes]:
    """Every body sent inside draws from one `Probes`: a fresh nonce, or `nonce` to replay a run."""
    current = Probes(nonce, seed, replayed=True) if nonce else Probes(seed=seed)
    token = _PROBES.set(current)
    try:
        yield current
    finally:
        _PROBES.reset(token)


@dataclass(frozen=True, slots=True)
class RequestRecord:
    index: int
    model: str
    started: float  # seconds since the burst began
    latency: float  # seconds
    status: int  # 0: no HTTP response at all
    worker: str | None
    inputs: int
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def latency_ms(records: Iterable[RequestRecord]) -> dict[str, float]:
    """p50, p90, p99 and mean of the answered requests, in ms; NaN where none was answered.

    The one latency summary: bursts, scenario results and sweeps all report through it.
    """
    import numpy as np

    values = np.array([r.latency for r in records if r.ok], dtype=float) * 1000.0
    if values.size == 0:
        return {"p50": float("nan"), "p90": float("nan"), "p99": float("nan"), "mean": float("nan")}
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99), "mean": float(values.mean())}


@dataclass
class BurstResult:
    model: str
    n: int
    concurrency: int
    records: list[RequestRecord]
    wall_seconds: float
    started_at: float = field(default_factory=time.time)
    origin: float = 0.0  # time.perf_counter() at the burst's start: records' `started` count from here

    @property
    def failures(self) -> list[RequestRecord]:
        return [r for r in self.records if not r.ok]

    @property
    def ok(self) -> bool:
        return not self.failures and len(self.records) == self.n

    def served_by(self) -> Counter[str]:
        """Responses per serving instance, from the `x-embedlab-worker` header."""
        return Counter(r.worker for r in self.records if r.ok and r.worker)

    def latency_ms(self) -> dict[str, float]:
        return latency_ms(self.records)

    @property
    def throughput(self) -> float:
        return len(self.records) / self.wall_seconds if self.wall_seconds > 0 else float("nan")

    def to_frame(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame([{f: getattr(r, f) for f in RequestRecord.__slots__} for r in self.records])

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "n": self.n,
            "concurrency": self.concurrency,
            "failed": len(self.failures),
            "wall_seconds": self.wall_seconds,
            "latency_ms": self.latency_ms(),
            "served_by": dict(self.served_by()),
            "errors": [f"request {r.index}: {r.error}" for r in self.failures[:10]],
        }


def _validate(body: Any, model: str, inputs: int, dims: set[int]) -> str | None:
    """Why a 200 response breaks the embeddings contract, or None."""
    if not isinstance(body, dict) or not isinstance(body.get("data"), list):
        return "response has no 'data' list"
    data = body["data"]
    if len(data) != inputs:
        return f"{len(data)} vectors for {inputs} inputs"
    if body.get("model") != model:
        return f"response names model {body.get('model')!r}, not {model!r}"
    for item in data:
        vector = item.get("embedding") if isinstance(item, dict) else None
        if isinstance(vector, str):  # base64 float32
            size = len(vector) * 3 // 4 // 4
        elif isinstance(vector, list) and vector:
            size = len(vector)
        else:
            return "an item has no embedding"
        dims.add(size)
    if len(dims) > 1:
        return f"inconsistent dimensions in the burst: {sorted(dims)}"
    return None


# The answer a completion or chat request asks for: short, since placement, not text, is checked.
GENERATE_MAX_TOKENS = 4


def request_body(kind: str, model: str, item: Input, encoding_format: str) -> dict[str, Any]:
    """The JSON body of one request of `kind` (defaults.KIND_PATHS): a chat request sends `item`
    as its user message."""
    if kind == "embeddings":
        return {"model": model, "input": item, "encoding_format": encoding_format}
    if kind == "completions":
        return {"model": model, "prompt": item, "max_tokens": GENERATE_MAX_TOKENS}
    return {
        "model": model,
        "messages": [{"role": "user", "content": item}],
        "max_tokens": GENERATE_MAX_TOKENS,
    }


def _validate_generated(body: Any, model: str) -> str | None:
    """Why a 200 completion or chat response breaks its contract, or None."""
    if not isinstance(body, dict) or not isinstance(body.get("choices"), list) or not body["choices"]:
        return "response has no 'choices'"
    if body.get("model") != model:
        return f"response names model {body.get('model')!r}, not {model!r}"
    return None


async def asend_burst(
    frontend_url: str,
    model: str,
    n: int,
    *,
    concurrency: int = 4,
    inputs: Sequence[Input] | None = None,
    timeout: float = 60.0,
    encoding_format: str = "float",
    progress: bool = False,
    on_response: Callable[[RequestRecord], None] | None = None,
    client: httpx.AsyncClient | None = None,
    rate: float | None = None,
    models: Sequence[str] | None = None,
    request_ids: str | None = None,
    kind: str = "embeddings",
) -> BurstResult:
    """Send `n` requests for `model` with at most `concurrency` in flight; record every one.

    `kind`: embeddings, completions or chat (`defaults.KIND_PATHS`); for the two that
    generate, each input is a prompt (chat: the user's message).

    `request_ids`, a prefix: request i carries `x-request-id: {prefix}{i}`, by which a router's
    own log can name the worker it picked (Dynamo 1.6.1's frontend: evidence/dynamo_log.py).

    `models`, one per request, interleaves several models in one burst (request i asks for
    `models[i]`); `model` then only names the burst.

    With `rate`, request i leaves no earlier than i / rate seconds after the first: steady
    traffic through a fault, where a burst as fast as possible would be over before the
    fault had any effect. `concurrency` then only bounds how many may hang at once.
    """
    if n < 1 or concurrency < 1 or (rate is not None and rate <= 0):
        raise ConfigError("n and concurrency must be at least 1, and a rate positive")
    if kind not in KIND_PATHS:
        raise ConfigError(f"unknown request kind {kind!r}; choose from {', '.join(KIND_PATHS)}")
    if models is not None and len(models) != n:
        raise ConfigError(f"{n} requests but {len(models)} models for them")
    model_of = list(models) if models is not None else [model] * n
    payloads = list(inputs) if inputs else probes().take(n)
    url = frontend_url.rstrip("/") + KIND_PATHS[kind]
    records: list[RequestRecord] = []
    dims: dict[str, set[int]] = {}  # per model: each model's vectors have one size
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(n):
        queue.put_nowait(i)
    bar = Bar(total=n, desc=model, unit="req") if progress else None
    own = client is None
    http = client or clients.lanes_client(min(concurrency, n), timeout=timeout)
    t0 = time.perf_counter()

    async def one(i: int) -> RequestRecord:
        item = payloads[i % len(payloads)]
        count = len(item) if isinstance(item, list) and item and not isinstance(item[0], int) else 1
        started = time.perf_counter()
        status, worker, error = 0, None, None
        try:
            response = await http.post(
                url,
                json=request_body(kind, model_of[i], item, encoding_format),
                headers={REQUEST_ID_HEADER: f"{request_ids}{i}"} if request_ids is not None else None,
            )
            status = response.status_code
            # LiteLLM passes a backend's headers on with an `llm_provider-` prefix.
            worker = response.headers.get(WORKER_HEADER) or response.headers.get(
                f"llm_provider-{WORKER_HEADER}"
            )
            if status != 200:
                error = f"HTTP {status}: {response.text[:200]}"
            elif kind in GENERATE_KINDS:
                error = _validate_generated(_loads(response.content), model_of[i])
            else:
                error = _validate(
                    _loads(response.content), model_of[i], count, dims.setdefault(model_of[i], set())
                )
        except httpx.HTTPError as exc:
            error = f"{exc.__class__.__name__}: {exc}"
        except ValueError as exc:
            error = f"response is not JSON: {exc}"
        ended = time.perf_counter()
        return RequestRecord(i, model_of[i], started - t0, ended - started, status, worker, count, error)

    async def lane() -> None:
        while True:
            try:
                i = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            if rate is not None:
                await asyncio.sleep(max(0.0, t0 + i / rate - time.perf_counter()))
            record = await one(i)
            records.append(record)
            if bar is not None:
                bar.update(1)
            if on_response is not None:
                on_response(record)

    try:
        await asyncio.gather(*(lane() for _ in range(min(concurrency, n))))
    finally:
        if bar is not None:
            failed = sum(not r.ok for r in records)
            bar.close(
                f"{len(records)} of {n} requests for '{model}' sent in {time.perf_counter() - t0:.2f} s"
                + (f", {failed} failed" if failed else "")
            )
        if own:
            await http.aclose()
    records.sort(key=lambda r: r.index)
    return BurstResult(
        model=model,
        n=n,
        concurrency=concurrency,
        records=records,
        wall_seconds=time.perf_counter() - t0,
        origin=t0,
    )


def send_burst(frontend_url: str, model: str, n: int, **options: Any) -> BurstResult:
    """`asend_burst`, from sync code (notebooks included). Same keyword options."""
    return clients.run_sync(asend_burst(frontend_url, model, n, **options))


def embed(
    frontend_url: str, model: str, inputs: Sequence[str], *, timeout: float = 60.0
) -> list[list[float]]:
    """The vectors the deployment returns for `inputs`, in one request, in input order."""
    url = frontend_url.rstrip("/") + KIND_PATHS["embeddings"]
    try:
        with clients.client(timeout=timeout) as client:
            response = client.post(
                url, json={"model": model, "input": list(inputs), "encoding_format": "float"}
            )
        response.raise_for_status()
        data = sorted(response.json()["data"], key=lambda d: d["index"])
        return [list(map(float, d["embedding"])) for d in data]
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        raise TrafficError(f"cannot embed through {url}: {exc.__class__.__name__}: {exc}") from exc


class WindowSender:
    """The busy checks' one sender (evidence/busy/driver.py drives it): a window's requests sent at
    once, in the background, through `http`; the list `send` returns fills with their records as
    they are answered. `keep`: every record, its start counted from the check's start, in
    `records` (a one-shot check's traffic; the watch, which runs for days, keeps none)."""

    def __init__(
        self,
        frontend_url: str,
        http: httpx.AsyncClient,
        *,
        limits: int,
        timeout: float,
        inputs: Callable[[int], Sequence[Input]] | None = None,
        on_response: Callable[[RequestRecord], None] | None = None,
        on_error: Callable[[BaseException], None] | None = None,
        keep: bool = True,
    ) -> None:
        self.frontend_url, self.http, self.limits, self.timeout = frontend_url, http, limits, timeout
        self.inputs = inputs or (lambda n: probes().take(n))
        self.on_response, self.on_error, self.keep = on_response, on_error, keep
        self.records: list[RequestRecord] = []
        self.pending: set[asyncio.Task[BurstResult]] = set()

    def send(self, requests: Mapping[str, int], *, name: str, at: float) -> list[RequestRecord]:
        answered: list[RequestRecord] = []
        n = sum(requests.values())
        if not n:
            return answered

        def answer(record: RequestRecord) -> None:
            answered.append(record)
            if self.on_response is not None:
                self.on_response(record)

        task = asyncio.create_task(
            asend_burst(
                self.frontend_url,
                name,
                n,
                concurrency=min(n, self.limits),
                inputs=self.inputs(n),
                timeout=self.timeout,
                client=self.http,
                models=[m for m, k in requests.items() for _ in range(k)],
                on_response=answer,
            )
        )
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)
        task.add_done_callback(functools.partial(self._done, at))
        return answered

    def _done(self, at: float, task: asyncio.Task[BurstResult]) -> None:
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            if self.on_error is not None:
                self.on_error(error)
            return
        if self.keep:
            self.records += [dataclasses.replace(r, started=r.started + at) for r in task.result().records]

    async def settle(self) -> None:
        """Wait for every request in flight."""
        if self.pending:
            await asyncio.gather(*self.pending, return_exceptions=True)

    def cancel(self) -> None:
        """Cancel every request in flight (a stop: a hung frontend never holds the exit)."""
        for task in list(self.pending):
            task.cancel()
