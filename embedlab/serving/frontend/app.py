"""The embedded frontend: OpenAI embeddings, completions and chat routed by model name over registered workers.

Dispatch is one lookup and one pick: the request's `model` selects the live instances
that registered it, the routing policy picks one, and the request body is forwarded
unchanged to that instance's request plane. The response names the instance in the
`x-embedlab-worker` header, so every request can be attributed as well as counted.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from prometheus_client import generate_latest

from ...defaults import (
    FRONTEND_PROCESSES,
    KIND_PATHS,
    KV_EVENTS_PATH,
    LEASE_TTL_S,
    MAX_BODY_BYTES,
    REQUEST_TIMEOUT_S,
    TOKEN_ENV,
)
from ...engines.kv import KvEvent, block_hashes, words
from ...errors import ConfigError
from ..generation import parse_generate_request
from ..http import JSON, error_response, is_loopback_host, json_response, make_app, start_site
from ..openai import WORKER_HEADER, ApiError, bad_request, loads, parse_embedding_request
from .dispatch import make_policy
from .faults import Fault, FaultInjector, parse_fault
from .instances import Instance, InstanceTable
from .kv_router import KvAware
from .metrics import FrontendMetrics
from .registry_api import RegistryService
from .shared_routing import SharedRouting
from .upstream import UpstreamClient, UpstreamError

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
    # Each response names its instance (`x-embedlab-worker`); off, the frontend names none, as
    # most routers do, and a check must judge it from the counters (and the router's own counts).
    names_worker: bool = True
    processes: int = (
        FRONTEND_PROCESSES  # routing processes on the port (serving/frontend/multiprocess/owner.py)
    )

    def __post_init__(self) -> None:
        if self.processes < 1:
            raise ConfigError(f"--processes must be at least 1, got {self.processes}")
        if not is_loopback_host(self.host) and not self.token:
            raise ConfigError(
                f"refusing to bind {self.host}: a frontend reachable beyond loopback needs a shared token "
                f"in ${TOKEN_ENV} for registration and the registry endpoints"
            )
        make_policy(self.router_mode)  # fail at configuration time, not at the first request
        if self.router_mode == "kv" and self.processes > 1:
            raise ConfigError("router mode 'kv' keeps its KV index in one process: run it with processes=1")

    def settings(self) -> dict[str, Any]:
        """Plain data for another routing process (the token travels in its environment)."""
        fields = {name: getattr(self, name) for name in self.__dataclass_fields__ if name != "token"}
        return {**fields, "faults": [str(f) for f in self.faults]}

    @classmethod
    def from_settings(cls, settings: dict[str, Any], *, token: str | None) -> FrontendConfig:
        return cls(**{**settings, "faults": tuple(parse_fault(f) for f in settings["faults"])}, token=token)


class Frontend:
    """The aiohttp application and its state; `start()` serves it, `close()` stops it."""

    def __init__(
        self, config: FrontendConfig, *, index: int = 0, shared: SharedRouting | None = None
    ) -> None:
        self.config = config
        self.index = index  # 0: the process that owns the instance table
        seed = config.seed + index if config.seed is not None else None
        self.faults = FaultInjector(config.faults, seed=seed, shared=shared)
        self.instances = InstanceTable(ttl=config.lease_ttl, on_remove=self._instance_left)
        self.policy = make_policy(config.router_mode, seed=seed, shared=shared)
        self.metrics = FrontendMetrics(self.instances)
        self.registry = RegistryService(
            self.instances, token=config.token, allow_remote_workers=config.allow_remote_workers
        )
        # Set by multiprocess/owner.py where several processes route; None where one routes alone.
        self.forward: Callable[[str, str, bytes, str], Awaitable[tuple[int, bytes]]] | None = None
        self.changed: Callable[[str], Awaitable[None]] | None = None  # the owner publishes the table
        self.changed_soon: Callable[[], None] | None = None
        self.gather: Callable[[], Awaitable[bytes]] | None = None  # the metrics of every process
        self.suspected: Callable[[Instance], None] | None = None
        self.app = make_app(client_max_size=config.max_body_bytes)
        self.app.add_routes(
            [
                web.post(KIND_PATHS["embeddings"], self.embeddings),
                web.post(KIND_PATHS["completions"], self.completions),
                web.post(KIND_PATHS["chat"], self.chat),
                web.post(KV_EVENTS_PATH, self.kv_events),
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

    async def start(self, *, port: int | None = None, announce: bool = True) -> int:
        self._upstream = UpstreamClient(timeout=self.config.request_timeout)
        self._runner, self.port = await start_site(
            self.app,
            self.config.host,
            self.config.port if port is None else port,
            reuse_port=self.config.processes > 1,
        )
        if self.index == 0:  # replicas get lapsed leases from the owner (and the shared clock)
            self._sweeper = asyncio.create_task(self._sweep())
        if self.faults and self.index == 0:
            log.warning(
                "FAULT INJECTION IS ON: %s. This frontend routes wrongly on purpose.", self.faults.describe()
            )
        if announce:
            self.announce()
        return self.port

    def announce(self) -> None:
        log.info(
            "frontend listening on http://%s:%d (router %s%s)",
            self.config.host,
            self.port,
            self.config.router_mode,
            f", {self.config.processes} routing processes" if self.config.processes > 1 else "",
        )

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._upstream is not None:
            self._upstream.close()

    def _instance_left(self, instance: Instance) -> None:
        if self.index == 0:  # a replica's ghosts are the owner's
            self.faults.remember(instance)
        if isinstance(self.policy, KvAware):
            self.policy.index.forget(instance.instance_id)
        if self.changed_soon is not None:
            self.changed_soon()
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
        return await self._serve("embeddings", request)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve("completions", request)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._serve("chat", request)

    async def _serve(self, kind: str, request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        metrics = self.metrics
        metrics.inflight_now += 1
        model_label = "__invalid__"
        status = 500
        try:
            body = await request.read()
            blocks: list[int] = []
            if kind == "embeddings":
                model = parse_embedding_request(body).model
            else:
                parsed = parse_generate_request(kind, body)
                model = parsed.model
                if isinstance(self.policy, KvAware):
                    blocks = block_hashes(words(parsed.prompt))
            model_label = model if self.instances.is_known(model) else "__unknown__"
            metrics.admitted(model_label)
            response = await self._dispatch(model, body, KIND_PATHS[kind], blocks)
            status = response.status
            return response
        except ApiError as exc:
            status = exc.status
            return error_response(exc)
        except web.HTTPRequestEntityTooLarge:
            status = 413
            raise
        finally:
            metrics.inflight_now -= 1
            metrics.answered(model_label, status, time.perf_counter() - started)

    async def kv_events(self, request: web.Request) -> web.Response:
        """A worker's prefix-cache events, applied to the KV index (where the policy keeps one)."""
        try:
            self.registry.authorize(request.headers.get("Authorization", ""))
            instance = self.instances.get(request.match_info["instance_id"])
            if instance is None:
                raise ApiError(404, "Unknown instance", type="not_found_error", code="unknown_instance")
            payload = loads(await request.read())
            raw = payload.get("events") if isinstance(payload, dict) else None
            if not isinstance(raw, list):
                raise bad_request("'events' must be a list", param="events")
            try:
                events = [KvEvent.from_json(e) for e in raw]
            except (KeyError, TypeError, ValueError) as exc:
                raise bad_request(f"a KV event is malformed: {exc}", param="events") from None
        except ApiError as exc:
            return error_response(exc)
        if isinstance(self.policy, KvAware) and (
            not self.faults or self.faults.hears(instance, self.instances)
        ):
            self.policy.index.apply(instance.instance_id, events)
            for event in events:
                self.metrics.kv_applied(instance, event.kind)
        return json_response({"applied": len(events)})

    async def _dispatch(self, model: str, body: bytes, path: str, blocks: Sequence[int]) -> web.Response:
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
        kept = self.faults.cached(body) if self.faults else None
        if kept is not None:  # answered from the cache: no worker sees it, none is named
            status, answer, content_type = kept
            return web.Response(body=answer, status=status, headers={"Content-Type": content_type})
        failure = ""
        candidates: Sequence[Instance] = live
        for attempt in range(2):
            instance = (
                self.faults.pick(model, candidates, self.policy, self.instances, blocks)
                if self.faults
                else self.policy.pick(model, candidates, blocks)
            )
            if self.faults and self.faults.doubles(model):
                # Both attempts run to their end (each worker counts it), the first answer is relayed.
                twice = self.faults.second(instance, candidates)
                result, _ = await asyncio.gather(
                    self._forward(instance, body, live, path), self._forward(twice, body, live, path)
                )
            else:
                result = await self._forward(instance, body, live, path)
            if isinstance(result, web.Response):
                if self.faults and isinstance(result.body, bytes):
                    self.faults.keep(body, result.status, result.body, result.content_type)
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

    async def _forward(
        self, instance: Instance, body: bytes, live: Sequence[Instance], path: str
    ) -> web.Response | str:
        """Send the body to one instance; a Response to relay, or why the instance failed."""
        assert self._upstream is not None
        if self.faults:
            delay = self.faults.delay_seconds(instance, live)
            if delay:
                await asyncio.sleep(delay)
        instance.inflight += 1
        try:
            upstream = await self._upstream.post(instance.url, body, path)
        except UpstreamError as exc:
            # Cannot connect, or the connection died: keep it out of dispatch until it heartbeats again.
            self.instances.mark_suspect(instance.instance_id)
            if self.suspected is not None:
                self.suspected(instance)
            log.warning("instance %s failed: %s", instance.label, exc)
            return f"{instance.label}: {exc}"
        finally:
            instance.inflight -= 1
        if upstream.status >= 500:
            return (
                f"{instance.label} answered {upstream.status}: {upstream.body[:200].decode(errors='replace')}"
            )
        headers = {"Content-Type": upstream.content_type}
        if self.config.names_worker:
            headers[WORKER_HEADER] = instance.label
        return web.Response(body=upstream.body, status=upstream.status, headers=headers)

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
        body = await self.gather() if self.gather is not None else generate_latest(self.metrics.prom)
        return web.Response(body=body, content_type="text/plain", charset="utf-8")

    # -- registry -----------------------------------------------------------------------

    async def register(self, request: web.Request) -> web.Response:
        return await self._registry(request, "register")

    async def list_instances(self, request: web.Request) -> web.Response:
        return await self._registry(request, "list")

    async def heartbeat(self, request: web.Request) -> web.Response:
        return await self._registry(request, "heartbeat")

    async def deregister(self, request: web.Request) -> web.Response:
        return await self._registry(request, "deregister")

    async def set_weight(self, request: web.Request) -> web.Response:
        return await self._registry(request, "weight")

    async def _registry(self, request: web.Request, op: str) -> web.Response:
        call = self.forward or self.registry_call
        status, body = await call(
            op,
            request.match_info.get("instance_id", ""),
            await request.read(),
            request.headers.get("Authorization", ""),
        )
        return web.Response(body=body, status=status, content_type=JSON)

    async def registry_call(
        self, op: str, instance_id: str, body: bytes, authorization: str
    ) -> tuple[int, bytes]:
        """A registry request against this process's own table (the owner's, or the only one)."""
        status, answer = self.registry.call(op, instance_id, body, authorization)
        if status < 300 and self.changed is not None:
            await self.changed(op)
        return status, answer


async def serve_frontend(config: FrontendConfig, stop: asyncio.Event) -> int:
    frontend = Frontend(config)
    await frontend.start()
    try:
        await stop.wait()
    finally:
        await frontend.close()
    return 0
