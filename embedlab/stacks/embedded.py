"""The embedded stack: `embedlab frontend` and `embedlab worker`, no outside service."""

from __future__ import annotations

from typing import Any

import httpx

from ..errors import ConfigError, UnsupportedError
from ..specs import DeploymentSpec, WorkerSpec
from .base import ProcessSpec, StackContext, openai_models, system_port_env, worker_engine_args

# Router mode -> how a same-model split is judged under it.
SPLITS = {"weighted-random": "weights", "round-robin": "exact", "least-inflight": "report"}


class EmbeddedStack:
    name = "embedded"

    def check(self, spec: DeploymentSpec) -> None:
        # The embedded frontend keeps its own registry, and its workers register on loopback.
        if spec.hosts != 1:
            raise ConfigError(
                f"the embedded stack runs on one host; hosts={spec.hosts} needs stack='dynamo' with discovery='etcd'"
            )
        if spec.discovery != "file":
            raise ConfigError(
                "discovery is the dynamo stack's setting; the embedded frontend keeps its own registry"
            )
        if spec.router_mode is not None and spec.router_mode not in SPLITS:
            raise ConfigError(
                f"the embedded frontend has no router mode {spec.router_mode!r}; choose from {', '.join(SPLITS)}"
            )

    def split_for(self, router_mode: str | None) -> str:
        return SPLITS[router_mode or "weighted-random"]

    def listed_models(self, client: httpx.Client, ctx: StackContext) -> set[str] | None:
        return openai_models(client, ctx)

    def drain(self, client: httpx.Client, ctx: StackContext, index: int) -> None:
        # The worker deregisters and keeps serving: a correct frontend sends it nothing more.
        client.post(f"{ctx.system_url(index)}/drain").raise_for_status()

    def resume(self, client: httpx.Client, ctx: StackContext, index: int) -> None:
        client.post(f"{ctx.system_url(index)}/resume").raise_for_status()

    def direct_url(self, client: httpx.Client, ctx: StackContext, index: int) -> str | None:
        health = client.get(f"{ctx.frontend_url}/health").json()
        found = [
            i["address"]
            for group in health.get("models", {}).values()
            for i in group
            if i["endpoint"] == ctx.endpoint(index)
        ]
        return found[0] if found else None

    def without_retries(self, spec: DeploymentSpec) -> tuple[str, ...]:
        raise UnsupportedError(
            "embedlab's frontend always retries a failed dispatch once, on another instance"
        )

    def prepare(self, ctx: StackContext) -> dict[str, str]:
        return {}

    def services(self, ctx: StackContext) -> list[ProcessSpec]:
        return []

    def frontend(self, ctx: StackContext) -> ProcessSpec:
        spec = ctx.spec
        argv = [
            ctx.python,
            "-m",
            "embedlab",
            "frontend",
            "--host",
            ctx.host,
            "--port",
            str(ctx.frontend_port),
            "--router-mode",
            spec.router_mode or "weighted-random",
            "--lease-ttl",
            str(spec.lease_ttl),
        ]
        if spec.seed is not None:
            argv += ["--seed", str(spec.seed)]
        return ProcessSpec(role="frontend", argv=argv + list(spec.frontend_args))

    def worker(self, ctx: StackContext, index: int, worker: WorkerSpec, system_port: int) -> ProcessSpec:
        argv = [
            ctx.python,
            "-m",
            "embedlab",
            "worker",
            "--served-model-name",
            worker.model,
            "--endpoint",
            ctx.endpoint(index),
            "--frontend-url",
            ctx.frontend_url,
            "--weight",
            str(worker.weight),
            "--register-timeout",
            str(ctx.spec.startup_timeout),
        ]
        return ProcessSpec(
            role="worker",
            worker=index,
            argv=argv + worker_engine_args(worker),
            env=system_port_env(system_port),
        )

    def health_url(self, ctx: StackContext) -> str:
        return f"{ctx.frontend_url}/health"

    def dispatchable_endpoints(self, health: Any) -> set[str]:
        # A suspect instance failed a dispatch; the frontend skips it until it heartbeats again.
        return {
            i["endpoint"]
            for group in health.get("models", {}).values()
            for i in group
            if not i.get("suspect")
        }
