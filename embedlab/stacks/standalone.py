"""Standalone workers: the worker part of every stack whose frontend is given its workers' URLs.

The routers (vllm-router, sglang-router, smg, LiteLLM) and the balancers (HAProxy, nginx)
front workers that register with nothing: each listens on a port the run reserves, and
the frontend is given their URLs (in vllm-router's gateway mode each joins through its API
instead: its `join`). Any worker server that serves its OpenAI routes and /health on one
port can be one (`Join.BY_URL`): embedlab's worker, given `--host`/`--port` and the shape
of `/get_load` its router reads (`load_format`), or a server of its own (`vllm serve`,
Infinity), whose one port is its system port too.

A stack holds a `StandaloneWorkers` (how they start) and keeps the run's `Standalone` (where
they listen) in its state: the part is composed into each stack, not inherited.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..cluster.spec import WorkerSpec
from ..cluster.stack import ProcessSpec, StackContext, embedlab_worker
from ..cluster.worker_server import foreign_worker, server_of

__all__ = ["Standalone", "StandaloneWorkers", "snake_case_policy"]


@dataclass(frozen=True, kw_only=True)
class Standalone:
    """One run's standalone workers: where each listens, and its endpoint path, by index."""

    host: str
    ports: tuple[int, ...]
    endpoints: tuple[str, ...]

    @property
    def urls(self) -> list[str]:
        return [f"http://{self.host}:{port}" for port in self.ports]

    def url(self, index: int) -> str:
        return f"http://{self.host}:{self.ports[index]}"

    def address(self, index: int) -> str:
        """Worker `index`'s request port as `host:port`, as a balancer's config names it."""
        return f"{self.host}:{self.ports[index]}"

    @property
    def endpoint_of(self) -> dict[str, str]:
        """Worker URL -> its endpoint path."""
        return dict(zip(self.urls, self.endpoints))


@dataclass(frozen=True)
class StandaloneWorkers:
    """How a stack runs workers that register with nothing; `load_format` is the shape of the
    `/get_load` answer its router reads (vLLM's or SGLang's)."""

    load_format: str = "vllm"

    def prepare(self, ctx: StackContext[Any]) -> Standalone:
        """A port for each worker: a server of its own serves /metrics and /health on its request
        port, so that port is its system port; embedlab's worker gets one of its own."""
        ports = tuple(
            ctx.system_ports[i] if server_of(w).foreign else ctx.reserve()
            for i, w in enumerate(ctx.spec.workers)
        )
        endpoints = tuple(ctx.endpoint(i) for i in range(len(ctx.spec.workers)))
        return Standalone(host=ctx.host, ports=ports, endpoints=endpoints)

    def process(
        self, ctx: StackContext[Any], workers: Standalone, index: int, worker: WorkerSpec, system_port: int
    ) -> ProcessSpec:
        """Worker `index`'s process: its server's own argv, or embedlab's worker registered with nothing."""
        port = workers.ports[index]
        if server_of(worker).foreign:
            return foreign_worker(ctx, index, worker, port=port)
        own = ["--host", ctx.host, "--port", str(port), "--load-format", self.load_format]
        return embedlab_worker(ctx, index, worker, system_port, frontend_url="", args=own)


def snake_case_policy(router_mode: str | None, default: str | None) -> str:
    """A router mode in the spelling the routers' and balancers' policy tables use
    (`round-robin` and `round_robin` alike)."""
    return str(router_mode or default).replace("-", "_")
