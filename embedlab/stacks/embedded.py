"""The embedded stack: `embedlab frontend` and `embedlab worker`, no outside service."""

from __future__ import annotations

import httpx

from ..specs import WorkerSpec
from .base import ProcessSpec, StackContext, worker_engine_args


class EmbeddedStack:
    name = "embedded"

    def prepare(self, ctx: StackContext) -> dict[str, str]:
        return {}

    def frontend(self, ctx: StackContext) -> ProcessSpec:
        spec = ctx.spec
        argv = [
            ctx.python, "-m", "embedlab", "frontend", "--host", ctx.host, "--port", str(ctx.frontend_port),
            "--router-mode", spec.router_mode, "--lease-ttl", str(spec.lease_ttl),
        ]
        if spec.seed is not None:
            argv += ["--seed", str(spec.seed)]
        return ProcessSpec(name="frontend", argv=argv + list(spec.frontend_args))

    def worker(self, ctx: StackContext, index: int, worker: WorkerSpec, system_port: int) -> ProcessSpec:
        argv = [
            ctx.python, "-m", "embedlab", "worker", "--served-model-name", worker.model,
            "--endpoint", ctx.endpoint(index), "--frontend-url", ctx.frontend_url,
            "--system-port", str(system_port), "--weight", str(worker.weight),
            "--register-timeout", str(ctx.spec.startup_timeout),
        ]
        return ProcessSpec(name=f"worker-{index}", argv=argv + worker_engine_args(worker))

    def registered_endpoints(self, client: httpx.Client, ctx: StackContext) -> set[str]:
        models = client.get(f"{ctx.frontend_url}/health").json().get("models", {})
        return {i["endpoint"] for instances in models.values() for i in instances}
