"""The embedded frontend: OpenAI `/v1/embeddings` routed by model name over registered workers.

Dispatch is one lookup and one pick: the request's `model` selects the live instances
that registered it, the routing policy picks one, and the request body is forwarded
unchanged to that instance's request plane. The response names the instance in the
`x-embedlab-worker` header, so every request can be attributed as well as counted.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

from ..defaults import LEASE_TTL_S, MAX_BODY_BYTES, REQUEST_TIMEOUT_S, TOKEN_ENV
from ..errors import ConfigError
from .faults import Fault, FaultInjector
from .http import error_response, is_loopback_host, json_response, make_app, start_site
from .instances import Instance, InstanceTable, RegistrationConflict
from .openai import WORKER_HEADER, ApiError, bad_request, loads, parse_embedding_request
from .router import make_policy
from .upstream import UpstreamClient, UpstreamError, WorkerUrlError, parse_worker_url

log = logging.getLogger("embedlab.frontend")


@dataclass(frozen=True, kw_only=True)
class FrontendConfig:
    """Settings of `embedlab frontend`; every field has the CLI's default."""

    host: str = "127.0.0.1"
    port: int = 8000
    router_mode: str = "weighted-random"
    seed: int | None = None
    lease_ttl: float = LEASE_TTL_S
    max_body_bytes: int = MAX_BODY_BYTES
    request_timeout: float = REQUEST_TIMEOUT_S
    token: str | None = field(default=None, repr=False)
    allow_remote_workers: bool = False
    faults: tuple[Fault, ...] = ()

    def __post_init__(self) -> None:
        if not is_loopback_host(self.host) and not self.token:
            raise ConfigError(
                f"refusing to bind {self.host}: a frontend reachable beyond loopback needs a shared token "
                f"in ${TOKEN_ENV} for registration and the registry endpoints"
            )
        make_policy(self.router_mode)  # fail at configuration time, not at the first request


class _Metrics:
    def __init__(self, instances: InstanceTable) -> None:
        self.prom = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "embedlab_frontend_requests",
            "Requests to /v1/embeddings by model and status code.",
            ["model", "status"],
            registry=self.prom,
        )
        self.duration = Histogram(
            "embedlab_frontend_request_duration_seconds",
            "Time to answer /v1/embeddings.",
            ["model"],
            registry=self.prom,
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )
        self.inflight = Gauge(
            "embedlab_frontend_inflight_requests", "Requests being answered.", registry=self.prom
        )
        self.retries = Counter(
            "embedlab_frontend_retries",
            "Requests retried on another instance.",
            ["model"],
            registry=self.prom,
        )
        self.prom.register(_LiveInstances(instances))


class _LiveInstances:
    """Reads the instance table at scrape time, so the gauge can never go stale."""

    def __init__(self, instances: InstanceTable) -> None:
        self._instances = instances

    def describe(self) -> list[GaugeMetricFamily]:
        return []

    def collect(self) -> list[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "embedlab_frontend_live_instances", "Live instances per model.", labels=["model"]
        )
        for model in self._instances.models():
            family.add_metric([model], len(self._instances.live(model)))
        return [family]


class Frontend:
    """The aiohttp application and its state; `start()` serves it, `close()` stops it."""

    def __init__(self, config: FrontendConfig) -> None:
        self.config = config
        self.faults = FaultInjector(config.faults, seed=config.seed)
        self.instances = InstanceTable(ttl=config.lease_ttl, on_remove=self._instance_left)
        self.policy = make_policy(config.router_mode, seed=config.seed)
        self.metrics = _Metrics(self.instances)
        self.app = make_app(client_max_size=config.max_body_bytes)
        self.app.add_routes(
            [
                web.post("/v1/embeddings", self.embeddings),
                web.get("/v1/models", self.models),
                web.get("/health", self.health),
                web.get("/metrics", self.metrics_text),
                web.post("/registry/instances", self.register),
                web.get("/registry/instances", self.list_instances),
                web.put("/registry/instances/{instance_id}/heartbeat", self.heartbeat),
                web.delete("/registry/instances/{instance_id}", self.deregister),
                web.put("/registry/instances/{instance_id}/weight", self.set_weight),
            ]
        )
        self._upstream: UpstreamClient | None = None
        self._runner: web.AppRunner | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self.port: int | None = None

    async def start(self) -> int:
        self._upstream = UpstreamClient(timeout=self.config.request_timeout)
        self._runner, self.port = await start_site(self.app, self.config.host, self.config.port)
        self._sweeper = asyncio.create_task(self._sweep())
        if self.faults:
            log.warning(
                "FAULT INJECTION IS ON: %s. This frontend routes wrongly on purpose.", self.faults.describe()
            )
        log.info(
            "frontend listening on http://%s:%d (router %s)",
            self.config.host,
            self.port,
            self.config.router_mode,
        )
        return self.port

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._upstream is not None:
            self._upstream.close()

    def _instance_left(self, instance: Instance) -> None:
        self.faults.remember(instance)
        # Idle connections to a worker that left would otherwise stay open, and its pool
        # in the client for good; another instance may still serve on the same URL.
        if self._upstream is not None and not any(i.url == instance.url for i in self.instances.instances()):
            self._upstream.drop(instance.url)

    async def _sweep(self) -> None:
        # Four sweeps per TTL: a lapsed lease leaves dispatch well within 2 TTLs.
        while True:
            await asyncio.sleep(self.config.lease_ttl / 4)
            for instance in self.instances.expire():
                log.warning("lease lapsed: %s (model %s) left dispatch", instance.label, instance.model)

    # -- OpenAI API -----------------------------------------------------------------

    async def embeddings(self, request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        metrics = self.metrics
        metrics.inflight.inc()
        model_label = "__invalid__"
        status = 500
        try:
            body = await request.read()
            parsed = parse_embedding_request(body)
            model_label = parsed.model if self.instances.is_known(parsed.model) else "__unknown__"
            response = await self._dispatch(parsed.model, body)
            status = response.status
            return response
        except ApiError as exc:
            status = exc.status
            return error_response(exc)
        except web.HTTPRequestEntityTooLarge:
            status = 413
            raise
        finally:
            metrics.inflight.dec()
            metrics.requests.labels(model_label, str(status)).inc()
            metrics.duration.labels(model_label).observe(time.perf_counter() - started)

    async def _dispatch(self, model: str, body: bytes) -> web.Response:
        live = self.instances.live(model)
        if self.faults:
            live = self.faults.candidates(model, live)
        if not live:
            if self.instances.is_known(model):
                raise ApiError(
                    503,
                    f"Model '{model}' has no live instance",
                    type="service_unavailable",
                    code="no_live_instance",
                )
            served = ", ".join(self.instances.models()) or "none"
            raise ApiError(
                404,
                f"The model '{model}' does not exist. Served models: {served}",
                type="not_found_error",
                param="model",
                code="model_not_found",
            )
        if self.faults and self.faults.should_drop():
            raise ApiError(
                503, "Dropped by fault injection (drop)", type="service_unavailable", code="fault_drop"
            )
        failure = ""
        candidates: Sequence[Instance] = live
        for attempt in range(2):
            instance = (
                self.faults.pick(model, candidates, self.policy, self.instances)
                if self.faults
                else self.policy.pick(model, candidates)
            )
            result = await self._forward(instance, body, live)
            if isinstance(result, web.Response):
                return result
            failure = result
            if attempt == 0:
                self.metrics.retries.labels(model).inc()
                candidates = [i for i in self.instances.live(model) if i is not instance]
                if not candidates:
                    break
        raise ApiError(
            502,
            f"No instance of '{model}' could answer: {failure}",
            type="upstream_error",
            code="upstream_failed",
        )

    async def _forward(self, instance: Instance, body: bytes, live: Sequence[Instance]) -> web.Response | str:
        """Send the body to one instance; a Response to relay, or why the instance failed."""
        assert self._upstream is not None
        if self.faults:
            delay = self.faults.delay_seconds(instance, live)
            if delay:
                await asyncio.sleep(delay)
        instance.inflight += 1
        try:
            upstream = await self._upstream.post(instance.url, body)
        except UpstreamError as exc:
            # Cannot connect, or the connection died: keep it out of dispatch until it heartbeats again.
            self.instances.mark_suspect(instance.instance_id)
            log.warning("instance %s failed: %s", instance.label, exc)
            return f"{instance.label}: {exc}"
        finally:
            instance.inflight -= 1
        if upstream.status >= 500:
            return (
                f"{instance.label} answered {upstream.status}: {upstream.body[:200].decode(errors='replace')}"
            )
        return web.Response(
            body=upstream.body,
            status=upstream.status,
            headers={"Content-Type": upstream.content_type, WORKER_HEADER: instance.label},
        )

    async def models(self, request: web.Request) -> web.Response:
        now = int(time.time())
        data = [
            {"id": m, "object": "model", "created": now, "owned_by": "embedlab"}
            for m in self.instances.models()
        ]
        return json_response({"object": "list", "data": data})

    async def health(self, request: web.Request) -> web.Response:
        return json_response(
            {
                "status": "healthy",
                "router_mode": self.config.router_mode,
                "lease_ttl_s": self.config.lease_ttl,
                "faults": self.faults.describe() or None,
                "models": self.instances.describe(),
            }
        )

    async def metrics_text(self, request: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(self.metrics.prom), content_type="text/plain", charset="utf-8"
        )

    # -- registry -----------------------------------------------------------------------

    def _authorize(self, request: web.Request) -> None:
        token = self.config.token
        if not token:
            return
        given = request.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            raise ApiError(
                401,
                "The registry needs 'Authorization: Bearer <token>'",
                type="authentication_error",
                code="invalid_token",
            )

    async def register(self, request: web.Request) -> web.Response:
        self._authorize(request)
        payload = loads(await request.read())
        if not isinstance(payload, dict):
            raise bad_request("A registration must be a JSON object")
        fields = {
            "instance_id": str,
            "endpoint": str,
            "model": str,
            "url": str,
        }
        for name, kind in fields.items():
            if not isinstance(payload.get(name), kind) or not payload[name]:
                raise bad_request(f"'{name}' must be a non-empty string", param=name)
        weight = payload.get("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight > 0:
            raise bad_request("'weight' must be a positive number", param="weight")
        url = payload["url"]
        # Refuse here what the dispatch cannot use: a URL that does not parse ('http://h:abc',
        # 'http://[::1') or https (the upstream client speaks plain HTTP) was accepted and
        # then failed every request for the model with a 502. The upstream client's own
        # parser decides, so that what registers is exactly what dispatch can connect to.
        try:
            host: str | None = parse_worker_url(url)[0]
            invalid: WorkerUrlError | None = None
        except WorkerUrlError as exc:
            host, invalid = exc.host, exc
        # A URL that names a remote host is refused as remote even when it is also
        # malformed: 'http://127.0.0.1@example.com:9' is a remote worker in disguise.
        if host is not None and not self.config.allow_remote_workers and not is_loopback_host(host):
            raise ApiError(
                403,
                f"Worker URL {url} is not on loopback; start the frontend with --allow-remote-workers to accept it",
                type="permission_error",
                param="url",
                code="remote_worker_refused",
            )
        if invalid is not None:
            raise bad_request(
                f"Bad 'url': {invalid}; it must be http://host:port, optionally with a trailing '/'",
                param="url",
            )
        pid = payload.get("pid")
        max_len = payload.get("max_model_len")
        try:
            instance = self.instances.register(
                instance_id=payload["instance_id"],
                endpoint=payload["endpoint"],
                model=payload["model"],
                url=url,
                weight=float(weight),
                pid=pid if isinstance(pid, int) else None,
                max_model_len=max_len if isinstance(max_len, int) else None,
            )
        except RegistrationConflict as exc:
            log.error("%s", exc.message)
            raise ApiError(
                409, exc.message, type="conflict_error", param="model", code="registration_conflict"
            ) from None
        except ValueError as exc:
            raise bad_request(str(exc)) from None
        log.info(
            "registered %s (model %s, weight %g, %s)",
            instance.label,
            instance.model,
            instance.weight,
            instance.url,
        )
        return json_response(
            {"instance_id": instance.instance_id, "lease_ttl_s": self.instances.ttl}, status=201
        )

    async def heartbeat(self, request: web.Request) -> web.Response:
        self._authorize(request)
        instance_id = request.match_info["instance_id"]
        if not self.instances.heartbeat(instance_id):
            raise ApiError(
                404,
                f"No live lease for instance {instance_id}; register again",
                type="not_found_error",
                code="lease_unknown",
            )
        return json_response({"instance_id": instance_id, "lease_ttl_s": self.instances.ttl})

    async def deregister(self, request: web.Request) -> web.Response:
        self._authorize(request)
        instance_id = request.match_info["instance_id"]
        if not self.instances.deregister(instance_id):
            raise ApiError(404, f"No instance {instance_id}", type="not_found_error", code="lease_unknown")
        log.info("deregistered %s", instance_id)
        return json_response({"instance_id": instance_id, "deregistered": True})

    async def set_weight(self, request: web.Request) -> web.Response:
        """Change one instance's routing weight live (experiments: weight sweeps)."""
        self._authorize(request)
        instance_id = request.match_info["instance_id"]
        payload = loads(await request.read())
        weight = payload.get("weight") if isinstance(payload, dict) else None
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight > 0:
            raise bad_request("'weight' must be a positive number", param="weight")
        if not self.instances.set_weight(instance_id, float(weight)):
            raise ApiError(404, f"No instance {instance_id}", type="not_found_error", code="lease_unknown")
        log.info("weight of %s set to %g", instance_id, weight)
        return json_response({"instance_id": instance_id, "weight": float(weight)})

    async def list_instances(self, request: web.Request) -> web.Response:
        self._authorize(request)
        return json_response({"models": self.instances.describe()})


async def serve_frontend(config: FrontendConfig, stop: asyncio.Event) -> int:
    frontend = Frontend(config)
    await frontend.start()
    try:
        await stop.wait()
    finally:
        await frontend.close()
    return 0


def token_from_env() -> str | None:
    return os.environ.get(TOKEN_ENV) or None
