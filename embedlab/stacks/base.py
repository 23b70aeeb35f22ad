"""What a stack must say: how to start its frontend and workers, and how to see them registered."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from ..defaults import SYSTEM_PORT_ENV, worker_endpoint
from ..hosts import Host
from ..specs import DeploymentSpec, WorkerSpec


@dataclass(frozen=True, kw_only=True)
class ProcessSpec:
    """One process of a deployment: what it is, how to start it."""

    role: str  # "frontend", "worker", or a stack's own service ("etcd")
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    worker: int | None = None  # the worker's index, for role "worker"
    ready_url: str | None = None  # a service is ready when this answers 200
    unset: tuple[str, ...] = ()  # prefixes of inherited variables it must not see (etcd reads ETCD_*)

    @property
    def name(self) -> str:
        """The process's name in logs and errors: `frontend`, `worker-0`, ..."""
        return self.role if self.worker is None else f"{self.role}-{self.worker}"


@dataclass(frozen=True, kw_only=True)
class StackContext:
    """One run of a stack: its directory, hosts, ports and names."""

    spec: DeploymentSpec
    run_dir: Path
    host: str  # where the frontend listens for the harness's traffic
    frontend_port: int
    namespace: str
    hosts: tuple[Host, ...]
    reserve: Callable[[], int]  # a free port, released when the run stops
    python: str = sys.executable

    def host_of(self, index: int) -> Host:
        """The host worker `index` runs on."""
        return self.hosts[self.spec.host_of(index)]

    @property
    def frontend_url(self) -> str:
        return f"http://{self.host}:{self.frontend_port}"

    def endpoint(self, index: int) -> str:
        return self.spec.workers[index].endpoint or worker_endpoint(self.namespace, index)


class Stack(Protocol):
    name: str

    def check(self, spec: DeploymentSpec) -> None:
        """Raise ConfigError for a spec this stack cannot run, before anything starts."""
        ...

    def prepare(self, ctx: StackContext) -> dict[str, str]:
        """Create per-run state; returns environment shared by every process of the run."""
        ...

    def services(self, ctx: StackContext) -> list[ProcessSpec]:
        """Processes the frontend and workers need up first (etcd), each with its `ready_url`."""
        ...

    def frontend(self, ctx: StackContext) -> ProcessSpec: ...

    def worker(self, ctx: StackContext, index: int, worker: WorkerSpec, system_port: int) -> ProcessSpec:
        """Worker `index`'s process; its system server listens on `system_port` (see `system_port_env`)."""
        ...

    def health_url(self, ctx: StackContext) -> str:
        """The frontend's page that lists the instances it dispatches to."""
        ...

    def dispatchable_endpoints(self, health: Any) -> set[str]:
        """Endpoint paths (`ns.comp.ep`) the frontend would dispatch to now, read from `health_url`'s JSON."""
        ...


def worker_engine_args(worker: WorkerSpec) -> list[str]:
    """The engine flags shared by embedlab workers on every stack."""
    argv = ["--engine", worker.engine]
    if worker.model_path is not None:
        argv += ["--model-path", str(worker.model_path)]
    if worker.pooling:
        argv += ["--pooling", worker.pooling]
    if worker.max_model_len:
        argv += ["--max-model-len", str(worker.max_model_len)]
    return argv + list(worker.extra_args)


def system_port_env(system_port: int) -> dict[str, str]:
    """How every stack hands a worker its system port: Dynamo's own variable, the one channel."""
    return {SYSTEM_PORT_ENV: str(system_port)}
