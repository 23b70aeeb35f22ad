"""The embedded worker: an engine behind a request plane, a system port, and a lease.

Start-up order matters for honest readiness: the system server answers 503 first, the
engine loads, the request plane binds an ephemeral loopback port, the instance
registers with the frontend, and only then does `/health` turn 200.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest

from ...defaults import KV_EVENTS_PATH, LEASE_TTL_S, api_processes_for
from ...engines import create_engine
from ...engines.kv import KvEvent
from ...errors import EngineError
from ..http import freeze_heap, json_response, make_app, start_site
from .config import WorkerConfig
from .metrics import Board, BoardCollector, GcPauses, WorkerMetrics
from .multiprocess.pool import IngestPool
from .request_plane import RequestPlane

__all__ = ["EXIT_CONFLICT", "EXIT_START_FAILED", "Worker", "WorkerConfig", "serve_worker"]

log = logging.getLogger("embedlab.worker")

EXIT_CONFLICT = 3
EXIT_START_FAILED = 1


class Worker:
    def __init__(self, config: WorkerConfig, *, own_process: bool = False) -> None:
        self.config = config
        # The process is this worker's alone (`serve_worker`): its start-up heap is frozen.
        self.own_process = own_process
        self.metrics = WorkerMetrics(config.labels)
        self.registry = self.metrics.prom  # what the system port's /metrics exposes
        self.engine = create_engine(config.engine, config.engine_options)
        self.gc = GcPauses()
        self._state = "starting"
        self.url = ""
        self.board: Board | None = None  # with ingest processes: their counters and our state
        self.pool: IngestPool | None = None
        self.plane = RequestPlane(
            config,
            engine=self.engine,
            metrics=self.metrics,
            state=lambda: self.state,
            url=lambda: self.url,
            describe=self._describe,
        )
        self.request_app = self.plane.app
        self.system_app = make_app()
        self.system_app.add_routes(
            [
                web.get("/metrics", self.metrics_text),
                web.get("/health", self.plane.health),
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

    @property
    def state(self) -> str:
        return self._state

    @state.setter
    def state(self, value: str) -> None:
        self._state = value
        if self.board is not None:
            self.board.state = value

    @property
    def label(self) -> str:
        return self.plane.label

    async def _describe(self) -> dict[str, object] | None:
        describe = getattr(self.engine, "describe", None)
        info = describe() if describe is not None else None
        if self.pool is not None and info is not None:
            # where a request's time goes: per ingest process, and this process's collector
            info = {**info, "ingest": self.pool.stats(), "gc": self.gc.stats()}
        return info

    # -- system port --------------------------------------------------------------------

    async def metrics_text(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.registry), content_type="text/plain", charset="utf-8")

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
        if self.own_process:
            log.info("%d objects of the engine's start frozen (out of the collector's walks)", freeze_heap())
        processes = self._api_processes()
        if processes > 1:
            self.pool = IngestPool(
                cfg, self.engine, processes=processes, state=self.state, on_failure=self._ingest_failed
            )
            await self.pool.start()
            self.board = self.pool.board
            # The system port reads every ingest process's counters, summed; or none, where
            # each process shows its own on a port of its own.
            self.registry = CollectorRegistry(auto_describe=True)
            if not cfg.process_metrics_ports:
                self.registry.register(BoardCollector(self.board, cfg.labels))
            self.url = self.pool.url
        else:
            runner, port = await start_site(self.request_app, cfg.host, cfg.port)
            self._runners.append(runner)
            self.url = f"http://{cfg.host}:{port}"
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5))
        if not cfg.standalone:
            self.state = "registering"
            self.lease_ttl = await self._register(deadline=time.monotonic() + cfg.register_timeout)
            if self.pool is None:  # ingest processes keep caches of their own, and publish none
                self.plane.publish = self._publish_kv
        self.state = "ready"
        log.info(
            "worker ready: model %s on %s, instance %s, request plane %s",
            cfg.served_model_name,
            cfg.endpoint,
            cfg.instance_id,
            self.url,
        )

    def _ingest_failed(self, code: int) -> None:
        self.exit_code = code
        self.fatal.set()

    def _api_processes(self) -> int:
        asked = self.config.api_processes
        if asked == 1 or (asked is None and not getattr(self.engine, "owns_device", False)):
            return 1
        if not hasattr(self.engine, "ingest_spec"):
            if asked is None:
                return 1
            raise EngineError(f"the {self.config.engine} engine cannot run with --api-processes {asked}")
        return asked or api_processes_for(os.cpu_count() or 1)

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

    async def _publish_kv(self, events: list[KvEvent]) -> None:
        """Post the prefix cache's events to the frontend's KV index; a lost post is the router's
        loss, which its view of the events shows beside this worker's own count."""
        assert self._session is not None
        path = KV_EVENTS_PATH.format(instance_id=self.config.instance_id)
        try:
            async with self._session.post(
                f"{self.config.frontend_url.rstrip('/')}{path}",
                json={"events": [e.to_json() for e in events]},
                headers=self._auth(),
            ) as resp:
                if resp.status >= 300:
                    log.warning("the frontend refused KV events: HTTP %d", resp.status)
        except (TimeoutError, aiohttp.ClientError) as exc:
            log.warning("KV events not delivered: %s", exc)

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
        if self.pool is not None:
            await self.pool.stop()  # ingest processes finish what they hold, the engine still up
        for runner in reversed(self._runners):
            await runner.cleanup()
        if self._session is not None:
            await self._session.close()
        await self.engine.close()
        self.gc.close()


class RegistrationRefused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


async def serve_worker(config: WorkerConfig, stop: asyncio.Event) -> int:
    worker = Worker(config, own_process=True)
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
