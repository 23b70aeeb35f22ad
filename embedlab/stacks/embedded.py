"""The embedded stack: `embedlab frontend` and `embedlab worker`, no outside service."""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from ..specs import DeploymentSpec, WorkerSpec
from .base import ProcessSpec, StackContext, system_port_env, worker_engine_args


class EmbeddedStack:
    name = "embedded"

    def check(self, spec: DeploymentSpec) -> None:
        # The embedded frontend keeps its own registry, and its workers register on loopback.
        if spec.hosts != 1:
            raise ConfigError(f"the embedded stack runs on one host; hosts={spec.hosts} needs stack='dynamo' with discovery='etcd'")
        if spec.discovery != "file":
            raise ConfigError("discovery is the dynamo stack's setting; the embedded frontend keeps its own registry")

    def prepare(self, ctx: StackContext) -> dict[str, str]:
        return {}

    def services(self, ctx: StackContext) -> list[ProcessSpec]:
        return []

    def frontend(self, ctx: StackContext) -> ProcessSpec:
        spec = ctx.spec
        argv = [
            ctx.python, "-m", "embedlab", "frontend", "--host", ctx.host, "--port", str(ctx.frontend_port),
            "--router-mode", spec.router_mode, "--lease-ttl", str(spec.lease_ttl),
        ]
        if spec.seed is not None:
            argv += ["--seed", str(spec.seed)]
        return ProcessSpec(role="frontend", argv=argv + list(spec.frontend_args))

    def worker(self, ctx: StackContext, index: int, worker: WorkerSpec, system_port: int) -> ProcessSpec:
        argv = [
            ctx.python, "-m", "embedlab", "worker", "--served-model-name", worker.model,
            "--endpoint", ctx.endpoint(index), "--frontend-url", ctx.frontend_url, "--weight", str(worker.weight),
            "--register-timeout", str(ctx.spec.startup_timeout),
        ]
        return ProcessSpec(
            role="worker", worker=index, argv=argv + worker_engine_args(worker), env=system_port_env(system_port)
        )

    def health_url(self, ctx: StackContext) -> str:
        return f"{ctx.frontend_url}/health"

    def dispatchable_endpoints(self, health: Any) -> set[str]:
        # A suspect instance failed a dispatch; the frontend skips it until it heartbeats again.
        return {i["endpoint"] for group in health.get("models", {}).values() for i in group if not i.get("suspect")}
