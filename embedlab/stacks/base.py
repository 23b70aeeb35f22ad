"""What a stack must say: how to start its frontend and workers, and how to see them registered."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx

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
        """The process's name in progress, tables and errors: `frontend`, `worker 0`, ..."""
        return self.role if self.worker is None else f"{self.role} {self.worker}"

    @property
    def file_stem(self) -> str:
        """Its files' name in the run dir: `frontend.log`, `worker-0.log`, `worker-0-state/`."""
        return self.name.replace(" ", "-")


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
    system_ports: tuple[int, ...] = ()
    python: str = sys.executable

    def host_of(self, index: int) -> Host:
        """The host worker `index` runs on."""
        return self.hosts[self.spec.host_of(index)]

    def system_url(self, index: int) -> str:
        """Worker `index`'s system server: /metrics, /health, and embedlab's /drain and /resume."""
        return f"http://{self.host_of(index).address}:{self.system_ports[index]}"

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

    def listed_models(self, client: httpx.Client, ctx: StackContext) -> set[str] | None:
        """The models the frontend lists (/v1/models), or None where it lists none of its own."""
        ...

    def split_for(self, router_mode: str | None) -> str:
        """How a same-model split is judged under this mode: weights, exact or report."""
        ...

    def drain(self, client: httpx.Client, ctx: StackContext, index: int) -> None:
        """Take worker `index` out of dispatch while it keeps serving; UnsupportedError where impossible."""
        ...

    def resume(self, client: httpx.Client, ctx: StackContext, index: int) -> None:
        """Put a drained worker back."""
        ...

    def without_retries(self, spec: DeploymentSpec) -> tuple[str, ...]:
        """Frontend arguments that switch the frontend's retries off; UnsupportedError where it has no switch."""
        ...

    def direct_url(self, client: httpx.Client, ctx: StackContext, index: int) -> str | None:
        """Worker `index`'s own HTTP /v1/embeddings base URL, bypassing the frontend; None where it has none."""
        ...


def openai_models(client: httpx.Client, ctx: StackContext) -> set[str]:
    return {m["id"] for m in client.get(f"{ctx.frontend_url}/v1/models").json().get("data", [])}


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
