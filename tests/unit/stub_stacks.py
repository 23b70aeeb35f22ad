"""A stack that starts nothing, and a run context for it, for the unit tests of stacks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from embedlab import BaseStack, DeploymentSpec, ProcessSpec, StackContext, WorkerSpec
from embedlab.cluster.hosts import Network


class Minimal(BaseStack):
    name = "minimal"

    def frontend(self, ctx: StackContext) -> ProcessSpec:
        return ProcessSpec(role="frontend", argv=["true"])

    def worker(self, ctx: StackContext, index: int, worker: WorkerSpec, system_port: int) -> ProcessSpec:
        return ProcessSpec(role="worker", worker=index, argv=["true"])

    def health_url(self, ctx: StackContext) -> str:
        return f"{ctx.frontend_url}/health"

    def dispatchable_endpoints(self, ctx: StackContext, health: Any) -> set[str]:
        return set()


def context_for(spec: DeploymentSpec, tmp_path: Path, ports: Iterator[int]) -> StackContext:
    """A run context on the local host, its ports drawn from `ports`."""
    return StackContext(
        spec=spec,
        run_dir=tmp_path,
        host="127.0.0.1",
        frontend_port=next(ports),
        namespace="ns",
        hosts=tuple(Network.local().hosts),
        reserve=lambda: next(ports),
        system_ports=tuple(next(ports) for _ in spec.workers),
    )
