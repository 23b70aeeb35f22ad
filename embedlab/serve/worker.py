"""The embedded worker: an engine behind a request plane, a system port, and a lease.

Start-up order matters for honest readiness: the system server answers 503 first, the
engine loads, the request plane binds an ephemeral loopback port, the instance
registers with the frontend, and only then does `/health` turn 200.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import sys
import time
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from ..defaults import LEASE_TTL_S, MAX_BODY_BYTES, METRIC, WORKER_HEADER
from ..engines import EngineOptions, InvalidInput, check_dimensions, create_engine
from ..errors import ConfigError, EngineError
from .http import error_response, json_response, make_app, start_site
from .instances import validate_endpoint
from .openai import ApiError, bad_request, embedding_response, parse_embedding_request

log = logging.getLogger("embedlab.worker")

EXIT_CONFLICT = 3
EXIT_START_FAILED = 1
# GET /get_load, as each router reads it (power-of-two): the two want incompatible shapes on
# one path, so the stack that launches the worker says which.
LOAD_FORMATS = {
    "vllm": lambda inflight: {"load": inflight},
    "sglang": lambda inflight: [
        {"dp_rank": 0, "num_reqs": inflight, "num_waiting_reqs": 0, "num_tokens": inflight}
    ],
}


@dataclass(frozen=True, kw_only=True)
class WorkerConfig:
    """Settings of `embedlab worker`."""

    engine: str
    served_model_name: str
    endpoint: str
    frontend_url: str
    engine_options: EngineOptions = field(default_factory=EngineOptions)
    system_port: int = 0
    system_host: str = "127.0.0.1"
    host: str = "127.0.0.1"
    port: int = 0
    weight: float = 1.0
    instance_id: str = field(default_factory=lambda: secrets.token_hex(8))
    token: str | None = field(default=None, repr=False)
    register_timeout: float = 60.0
    max_body_bytes: int = MAX_BODY_BYTES
    load_format: str = "vllm"  # the shape of GET /get_load: vllm-router's or sglang-router's

    @property
    def standalone(self) -> bool:
        """No embedlab frontend to register with: a router in front was given this worker's URL."""
        return not self.frontend_url

    def __post_init__(self) -> None:
        validate_endpoint(self.endpoint)
        if self.weight <= 0:
            raise ConfigError(f"--weight must be positive, got {self.weight}")
        if self.load_format not in LOAD_FORMATS:
            raise ConfigError(
                f"--load-format must be one of {', '.join(LOAD_FORMATS)}, got {self.load_format!r}"
            )

    @property
    def labels(self) -> dict[str, str]:
        namespace, component, endpoint = self.endpoint.split(".")
        return {
            "dynamo_namespace": namespace,
            "dynamo_component": component,
            "dynamo_endpoint": endpoint,
            "model": self.served_model_name,
            "worker_id": self.instance_id,
        }


class WorkerMetrics:
    """The Prometheus contract the harness reads, on a registry of this worker's own."""

    def __init__(self, labels: dict[str, str]) -> None:
        self.prom = CollectorRegistry(auto_describe=True)
        names = list(labels)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, names, registry=self.prom)

        # .labels() now, so every series is exported at 0 before the first request.
        # The counter every check reads (prometheus_client adds the _total suffix).
        self.requests = counter(METRIC.removesuffix("_total"), "Requests this worker received.").labels(
            **labels
        )
        self.errors = counter(
            "dynamo_component_errors", "Requests this worker answered with an error."
        ).labels(**labels)
        self.request_bytes = counter("dynamo_component_request_bytes", "Request body bytes received.").labels(
            **labels
        )
        self.response_bytes = counter("dynamo_component_response_bytes", "Response body bytes sent.").labels(
            **labels
        )
        self.duration = Histogram(
            "dynamo_component_request_duration_seconds",
            "Time to answer a request.",
            names,
            registry=self.prom,
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        ).labels(**labels)
        self.inflight = Gauge(
            "dynamo_component_inflight_requests", "Requests being answered.", names, registry=self.prom
        ).labels(**labels)


class Worker:
    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        self.metrics = WorkerMetrics(config.labels)
        self.engine = create_engine(config.engine, config.engine_options)
        self.state = "starting"
        self.url = ""
        self.request_app = make_app(client_max_size=config.max_body_bytes)
        # What routers probe on a worker's own port, beside the embeddings themselves.
        self.request_app.add_routes(
            [
                web.post("/v1/embeddings", self.embeddings),
                web.get("/health", self.health),
                web.get("/v1/models", self.models),
                *(
                    web.get(path, self.server_info)
                    for path in ("/get_server_info", "/server_info", "/get_model_info", "/model_info")
                ),
                web.get("/get_load", self.load),
            ]
        )
        self.inflight = 0
        self.system_app = make_app()
        self.system_app.add_routes(
            [
                web.get("/metrics", self.metrics_text),
                web.get("/health", self.health),
                web.get("/live", self.live),
                web.post("/drain", self.drain),
                web.post("/resume", self.resume),
            ]
        )
        self._runners: list[web.AppRunner] = []
        self._session: aiohttp.ClientSession | None = None
        self.fatal = asyncio.Event()
        self.exit_code = 0
        self.lease_ttl = LEASE_TTL_S

    # -- request plane ------------------------------------------------------------------

    async def embeddings(self, request: web.Request) -> web.Response:
        metrics = self.metrics
        metrics.requests.inc()  # once per request received, before decoding, as Dynamo counts
        metrics.inflight.inc()
        self.inflight += 1
        started = time.perf_counter()
        try:
            body = await request.read()
            metrics.request_bytes.inc(len(body))
            parsed = parse_embedding_request(body)
            if parsed.model != self.config.served_model_name:
                raise ApiError(
                    404,
                    f"The model '{parsed.model}' does not exist. Served models: {self.config.served_model_name}",
                    type="not_found_error",
                    param="model",
                    code="model_not_found",
                )
            check_dimensions(self.engine, parsed.dimensions)
            result = await self.engine.embed(parsed.inputs, dimensions=parsed.dimensions)
            payload = embedding_response(
                model=self.config.served_model_name,
                vectors=result.vectors,
                prompt_tokens=result.prompt_tokens,
                encoding_format=parsed.encoding_format,
            )
            metrics.response_bytes.inc(len(payload))
            # Routers pass a worker's headers on: through them, each response names its worker.
            return web.Response(
                body=payload, content_type="application/json", headers={WORKER_HEADER: self.label}
            )
        except ApiError as exc:
            metrics.errors.inc()
            return error_response(exc)
        except InvalidInput as exc:
            metrics.errors.inc()
            return error_response(bad_request(str(exc), param=exc.param, code=exc.code))
        except web.HTTPException:
            metrics.errors.inc()
            raise
        except Exception as exc:  # an engine failure is the server's fault: a 500 the frontend may retry
            metrics.errors.inc()
            log.exception("engine failed")
            return error_response(
                ApiError(500, f"The engine failed: {exc.__class__.__name__}: {exc}", type="server_error")
            )
        finally:
            metrics.inflight.dec()
            self.inflight -= 1
            metrics.duration.observe(time.perf_counter() - started)

    # -- system port --------------------------------------------------------------------

    async def metrics_text(self, request: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(self.metrics.prom), content_type="text/plain", charset="utf-8"
        )

    async def health(self, request: web.Request) -> web.Response:
        payload = {
            "status": "ready" if self.state == "ready" else "notready",
            "state": self.state,
            "model": self.config.served_model_name,
            "endpoint": self.config.endpoint,
            "instance_id": self.config.instance_id,
            "engine": self.config.engine,
            "url": self.url,
        }
        describe = getattr(self.engine, "describe", None)
        if describe is not None and self.state not in ("starting", "loading"):
            payload["engine_info"] = describe()  # e.g. the captured CUDA graph buckets, the batch histogram
        return json_response(payload, status=200 if self.state == "ready" else 503)

    @property
    def label(self) -> str:
        return f"{self.config.endpoint}/{self.config.instance_id}"

    async def models(self, request: web.Request) -> web.Response:
        """OpenAI's model list: the one model this worker serves."""
        model = {"id": self.config.served_model_name, "object": "model", "owned_by": "embedlab", "created": 0}
        return json_response({"object": "list", "data": [model]})

    async def server_info(self, request: web.Request) -> web.Response:
        # served_model_name alone: with a model_path, sglang-router tries to download a tokenizer.
        return json_response(
            {"served_model_name": self.config.served_model_name, "max_model_len": self.engine.max_model_len}
        )

    async def load(self, request: web.Request) -> web.Response:
        return json_response(LOAD_FORMATS[self.config.load_format](self.inflight))

    async def live(self, request: web.Request) -> web.Response:
        return json_response({"status": "live"})

    async def drain(self, request: web.Request) -> web.Response:
        """Leave the frontend's registry but keep serving: the first step of a rolling restart.

        A correct frontend sends a drained worker nothing more; the `drain` scenario checks it.
        """
        if self.state == "ready":
            await self._deregister()
            self.state = "draining"  # /health answers 503: a router's health check takes it out too
            log.info("drained: deregistered, still serving on %s", self.url)
        return json_response({"state": self.state}, status=200 if self.state == "draining" else 409)

    async def resume(self, request: web.Request) -> web.Response:
        """Register again after a drain."""
        if self.state == "draining":
            if not self.config.standalone:
                self.lease_ttl = await self._register(
                    deadline=time.monotonic() + self.config.register_timeout
                )
            self.state = "ready"
            log.info("resumed: registered again")
        return json_response({"state": self.state}, status=200 if self.state == "ready" else 409)

    # -- lifecycle ----------------------------------------------------------------------

    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.config.token}"} if self.config.token else {}

    async def start(self) -> None:
        cfg = self.config
        runner, system_port = await start_site(self.system_app, cfg.system_host, cfg.system_port)
        self._runners.append(runner)
        log.info("system server on http://%s:%d (metrics, health, live)", cfg.system_host, system_port)
        self.state = "loading"
        await self.engine.start()
        runner, port = await start_site(self.request_app, cfg.host, cfg.port)
        self._runners.append(runner)
        self.url = f"http://{cfg.host}:{port}"
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5))
        if not cfg.standalone:
            self.state = "registering"
            self.lease_ttl = await self._register(deadline=time.monotonic() + cfg.register_timeout)
        self.state = "ready"
        log.info(
            "worker ready: model %s on %s, instance %s, request plane %s",
            cfg.served_model_name,
            cfg.endpoint,
            cfg.instance_id,
            self.url,
        )

    async def _register(self, *, deadline: float) -> float:
        """Register, waiting for the frontend to come up. Returns the heartbeat interval."""
        assert self._session is not None
        cfg = self.config
        payload = {
            "instance_id": cfg.instance_id,
            "endpoint": cfg.endpoint,
            "model": cfg.served_model_name,
            "url": self.url,
            "weight": cfg.weight,
            "pid": os.getpid(),
            "max_model_len": self.engine.max_model_len,
        }
        delay = 0.01
        while True:
            try:
                async with self._session.post(
                    f"{cfg.frontend_url.rstrip('/')}/registry/instances", json=payload, headers=self._auth()
                ) as resp:
                    body = await resp.json(content_type=None)
                    if resp.status == 201:
                        return float(body.get("lease_ttl_s", LEASE_TTL_S))
                    message = (
                        body.get("error", {}).get("message", str(body))
                        if isinstance(body, dict)
                        else str(body)
                    )
                    raise RegistrationRefused(resp.status, message)
            except (TimeoutError, aiohttp.ClientConnectionError) as exc:
                if time.monotonic() > deadline:
                    raise EngineError(f"could not reach the frontend at {cfg.frontend_url}: {exc}") from exc
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.1)

    async def heartbeat_forever(self, ttl: float) -> None:
        if self.config.standalone:
            return
        assert self._session is not None
        url = f"{self.config.frontend_url.rstrip('/')}/registry/instances/{self.config.instance_id}/heartbeat"
        while True:
            await asyncio.sleep(ttl / 3)
            if self.state != "ready":
                continue  # drained or stopping: let the lease go
            try:
                async with self._session.put(url, headers=self._auth()) as resp:
                    if resp.status == 404:
                        # The lease lapsed or the frontend restarted: register again.
                        log.warning("lease unknown to the frontend; registering again")
                        ttl = await self._register(deadline=time.monotonic() + self.config.register_timeout)
            except RegistrationRefused as exc:
                print(exc.message, file=sys.stderr, flush=True)
                self.exit_code = EXIT_CONFLICT if exc.status == 409 else EXIT_START_FAILED
                self.fatal.set()
                return
            except (TimeoutError, aiohttp.ClientError, EngineError) as exc:
                log.warning("heartbeat failed: %s", exc)

    async def _deregister(self) -> None:
        if self.config.standalone:
            return
        assert self._session is not None
        try:
            async with self._session.delete(
                f"{self.config.frontend_url.rstrip('/')}/registry/instances/{self.config.instance_id}",
                headers=self._auth(),
                timeout=aiohttp.ClientTimeout(total=1),
            ):
                pass
        except (TimeoutError, aiohttp.ClientError):
            pass  # the lease lapses on its own

    async def close(self) -> None:
        if self._session is not None and self.state == "ready":
            self.state = "stopping"
            await self._deregister()
        for runner in reversed(self._runners):
            await runner.cleanup()
        if self._session is not None:
            await self._session.close()
        await self.engine.close()


class RegistrationRefused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


async def serve_worker(config: WorkerConfig, stop: asyncio.Event) -> int:
    worker = Worker(config)
    # A stop during start-up cancels the start rather than waiting for it: a vLLM engine
    # takes a minute to start on 2 cores, and registration waits for a frontend that a
    # launch script may already have stopped.
    starting = asyncio.create_task(worker.start())
    stopper = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({starting, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if not starting.done():
            starting.cancel()
            await asyncio.wait({starting})
            if not starting.cancelled() and starting.exception() is not None:
                log.info("start-up ended by the stop request: %s", starting.exception())
            await worker.close()
            return 0
        starting.result()
    except RegistrationRefused as exc:
        print(exc.message, file=sys.stderr, flush=True)
        await worker.close()
        return EXIT_CONFLICT if exc.status == 409 else EXIT_START_FAILED
    except EngineError as exc:
        print(f"embedlab worker: {exc}", file=sys.stderr, flush=True)
        await worker.close()
        return EXIT_START_FAILED
    heartbeat = asyncio.create_task(worker.heartbeat_forever(worker.lease_ttl))
    fatal = asyncio.create_task(worker.fatal.wait())
    await asyncio.wait({stopper, fatal}, return_when=asyncio.FIRST_COMPLETED)
    for task in (heartbeat, stopper, fatal):
        task.cancel()
    await worker.close()
    return worker.exit_code
