"""The embedded stack: `embedlab frontend` and `embedlab worker`, no outside service."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any, ClassVar

import httpx

from ..cluster.spec import DeploymentSpec, WorkerSpec
from ..cluster.stack import BaseStack, Join, ProcessSpec, StackContext, embedlab_worker
from ..defaults import NAMESPACE
from ..errors import ConfigError
from ..evidence.router import RouterMetrics, known_router
from ..evidence.split import Split


class EmbeddedStack(BaseStack):
    """embedlab's own frontend keeps its own registry, and its workers register on loopback:
    one host, no discovery service, per-worker weights that can change live."""

    name = "embedded"
    title = "the embedded frontend"
    policies: ClassVar[dict[str, Split]] = {
        "weighted-random": Split.WEIGHTS,
        "round-robin": Split.EXACT,
        "least-inflight": Split.REPORT,
        "kv": Split.REPORT,  # prefix-aware: embeddings go to the least loaded
    }
    default_policy = "weighted-random"
    prefix_aware_mode = "kv"  # over its workers' KV events (serving/frontend/kv_router.py)
    worker_weights = True
    model_aware = True
    names_worker = True
    workers_join = Join.REGISTERS
    asserts_failover = True  # its leases are embedlab's: zero loss, out of dispatch within 2 TTLs
    lacks: ClassVar[dict[str, str]] = {
        "retries_switch": "embedlab's frontend always retries a failed dispatch once, on another instance",
        "worker_servers": (
            "the embedded frontend routes only to workers that register with it (embedlab's worker); "
            "a server given by URL never registers"
        ),
    }
    package = "embedlab"

    def namespace(self, spec: DeploymentSpec) -> str:
        return spec.namespace or NAMESPACE  # the seed's launch script's

    def failover_watch_s(self, spec: DeploymentSpec) -> float:
        return 3 * spec.lease_ttl

    def own_counts(self, ctx: StackContext[Any]) -> RouterMetrics:
        return known_router(ctx.frontend_url, "embedlab_frontend_requests_admitted_total")

    def lease_ttl_s(self, spec: DeploymentSpec) -> float | None:
        return spec.lease_ttl

    def drain(self, client: httpx.Client, ctx: StackContext[None], index: int) -> None:
        # The worker deregisters and keeps serving: a correct frontend sends it nothing more.
        client.post(f"{ctx.system_url(index)}/drain").raise_for_status()

    def resume(self, client: httpx.Client, ctx: StackContext[None], index: int) -> None:
        client.post(f"{ctx.system_url(index)}/resume").raise_for_status()

    def _instances(self, client: httpx.Client, ctx: StackContext[None]) -> list[dict[str, Any]]:
        health = client.get(self.health_url(ctx)).json()
        return [i for group in health.get("models", {}).values() for i in group]

    def direct_url(self, client: httpx.Client, ctx: StackContext[None], index: int) -> str | None:
        found = [i["address"] for i in self._instances(client, ctx) if i["endpoint"] == ctx.endpoint(index)]
        return found[0] if found else None

    def set_weights(self, client: httpx.Client, ctx: StackContext[None], weights: Sequence[float]) -> None:
        """Through the frontend's registry API; `client` carries the run's token, where one is set."""
        instances = {i["endpoint"]: i["instance_id"] for i in self._instances(client, ctx)}
        for index, weight in enumerate(weights):
            endpoint = ctx.endpoint(index)
            if endpoint not in instances:
                raise ConfigError(f"worker {index} ({endpoint}) is not registered")
            client.put(
                f"{ctx.frontend_url}/registry/instances/{instances[endpoint]}/weight",
                json={"weight": weight},
            ).raise_for_status()

    def frontend(self, ctx: StackContext[None]) -> ProcessSpec:
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
            str(self.policy(spec.router_mode)),
            "--lease-ttl",
            str(spec.lease_ttl),
        ]
        if spec.seed is not None:
            argv += ["--seed", str(spec.seed)]
        return ProcessSpec(role="frontend", argv=argv + list(spec.frontend_args))

    def worker(
        self, ctx: StackContext[None], index: int, worker: WorkerSpec, system_port: int
    ) -> ProcessSpec:
        own = ["--weight", str(worker.weight), "--register-timeout", str(ctx.spec.startup_timeout)]
        return embedlab_worker(ctx, index, worker, system_port, frontend_url=ctx.frontend_url, args=own)

    def health_url(self, ctx: StackContext[None]) -> str:
        return f"{ctx.frontend_url}/health"

    def dispatchable_endpoints(self, ctx: StackContext[None], health: Any) -> set[str]:
        return set(self.dispatchable_instances(ctx, health))

    def dispatchable_instances(self, ctx: StackContext[None], health: Any) -> Counter[str]:
        # A suspect instance failed a dispatch; the frontend skips it until it heartbeats again.
        return Counter(
            i["endpoint"]
            for group in health.get("models", {}).values()
            for i in group
            if not i.get("suspect")
        )
