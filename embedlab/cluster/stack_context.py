"""What a stack is given for one run and builds its processes from: the run's context
(`StackContext`, carrying the state the stack's `prepare()` returned), a process to start
(`ProcessSpec`), how a worker comes to its frontend's notice (`Join`), and how any stack
starts embedlab's own worker (`embedlab_worker`, its engine's flags, its system port).

The contract itself, what a stack is and can do, is `stack.py`, which re-exports these.
"""

from __future__ import annotations

import enum
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar, cast

import httpx

from ..defaults import ROUTERS_ENV, SYSTEM_PORT_ENV, worker_endpoint
from .hosts import Host
from .spec import DeploymentSpec, WorkerSpec

__all__ = [
    "Join",
    "ProcessSpec",
    "StackContext",
    "embedlab_worker",
    "openai_models",
    "process_metrics_args",
    "router_venv",
    "system_port_env",
    "worker_engine_args",
]

StateT = TypeVar("StateT")


@dataclass(frozen=True, kw_only=True)
class ProcessSpec:
    """One process of a deployment: what it is, how to start it."""

    role: str  # "frontend", "worker", or a stack's own service ("etcd")
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    worker: int | None = None  # the worker's index, for role "worker"
    ready_url: str | None = None  # a service is ready when this answers 200
    unset: tuple[str, ...] = ()  # prefixes of inherited variables it must not see (etcd reads ETCD_*)
    # What points its files into its state folder, given that folder and the environment it
    # starts with (a worker server that is not embedlab's: `worker_server.WorkerServer.state_env`).
    state_env: Callable[[Path, Mapping[str, str]], Mapping[str, str]] | None = None

    @property
    def name(self) -> str:
        """The process's name in progress, tables and errors: `frontend`, `worker 0`, ..."""
        return self.role if self.worker is None else f"{self.role} {self.worker}"

    @property
    def file_stem(self) -> str:
        """Its files' name in the run dir: `frontend.log`, `worker-0.log`, `worker-0-state/`."""
        return self.name.replace(" ", "-")


@dataclass(frozen=True, kw_only=True)
class StackContext(Generic[StateT]):
    """One run of a stack: its directory, hosts, ports and names, and the state its stack keeps.

    `state` is the stack's own per-run state: the dataclass its `prepare()` returned (the
    ports it reserved, its workers' URLs), None before that and for a stack that keeps none.
    A stack's methods take `StackContext[ItsState]`; the stack object itself keeps nothing
    between runs, so one object serves any number of runs.
    """

    spec: DeploymentSpec
    run_dir: Path
    host: str  # where the frontend listens for the harness's traffic
    frontend_port: int
    namespace: str
    hosts: tuple[Host, ...]
    reserve: Callable[[], int]  # a free port, released when the run stops
    system_ports: tuple[int, ...] = ()
    python: str = sys.executable
    state: StateT = cast(Any, None)  # what the stack's prepare() returned
    # The ports of embedlab workers with a metrics port per ingest process, by worker index:
    # reserved at the worker's first start, so that one started again binds them again.
    metrics_ports: dict[int, tuple[int, ...]] = field(default_factory=dict)
    scratch_paths: list[Path] = field(default_factory=list)
    on_scratch: Callable[[Path], None] = lambda path: None  # the deployment's: delete it if the harness dies

    def scratch(self, path: Path) -> Path:
        """`path`, a file or folder the run's processes use (a config file, etcd's data), which
        the deployment deletes once they have stopped: of a run, only its logs stay behind."""
        if path not in self.scratch_paths:
            self.on_scratch(path)
            self.scratch_paths.append(path)
        return path

    def host_of(self, index: int) -> Host:
        """The host worker `index` runs on."""
        return self.hosts[self.spec.host_of(index)]

    def system_url(self, index: int) -> str:
        """Worker `index`'s system server: /metrics, /health, and embedlab's /drain and /resume."""
        return f"http://{self.host_of(index).address}:{self.system_ports[index]}"

    def metrics_url(self, index: int) -> str:
        """Where worker `index`'s counters are read: its system server, or, for a worker with a
        metrics port per process (`WorkerSpec.metrics_ports`), those ports as `URL+URL`."""
        ports = self.metrics_ports.get(index)
        if not ports:
            return self.system_url(index)
        return "+".join(f"http://{self.host_of(index).address}:{port}" for port in ports)

    @property
    def frontend_url(self) -> str:
        return f"http://{self.host}:{self.frontend_port}"

    def endpoint(self, index: int) -> str:
        worker = self.spec.workers[index]
        if worker.endpoint:
            return worker.endpoint
        if self.spec.endpoints == "model":  # the endpoint of the model's first worker (of its stage)
            index = next(
                i
                for i, w in enumerate(self.spec.workers)
                if (w.model, w.stage) == (worker.model, worker.stage)
            )
        return worker_endpoint(self.namespace, index)


class Join(enum.Enum):
    """How a worker comes to its frontend's notice: what a stack needs of its workers' server
    (`BaseStack.workers_join`) and what a server can do (`WorkerServer.joins`)."""

    REGISTERS = "register with embedlab's frontend"
    DYNAMO = "register with Dynamo's runtime"
    BY_URL = "are given to the frontend by their URL"


def router_venv(name: str) -> Path:
    """The venv `make routers` builds for router venv `name` (under $EMBEDLAB_ROUTERS, else .routers/)."""
    root = os.environ.get(ROUTERS_ENV) or Path(__file__).resolve().parents[2] / ".routers"
    return Path(root) / name


def openai_models(client: httpx.Client, ctx: StackContext[Any]) -> set[str]:
    return {m["id"] for m in client.get(f"{ctx.frontend_url}/v1/models").json().get("data", [])}


def embedlab_worker(
    ctx: StackContext[Any],
    index: int,
    worker: WorkerSpec,
    system_port: int,
    *,
    frontend_url: str,
    args: Sequence[str],
) -> ProcessSpec:
    """Worker `index` as `embedlab worker`: registering with `frontend_url` ("": with nothing,
    for a router given its URL), with the stack's own `args`, then the engine's."""
    argv = [ctx.python, "-m", "embedlab", "worker", "--served-model-name", worker.model]
    argv += [
        "--endpoint",
        ctx.endpoint(index),
        "--frontend-url",
        frontend_url,
        *args,
        *process_metrics_args(ctx, index, worker),
        *worker_engine_args(worker),
    ]
    return ProcessSpec(role="worker", worker=index, argv=argv, env=system_port_env(system_port))


def process_metrics_args(ctx: StackContext[Any], index: int, worker: WorkerSpec) -> list[str]:
    """`--api-processes N --process-metrics-ports P,...` for a worker with a metrics port per
    ingest process; the ports are reserved once per run, so a restarted worker binds them again."""
    if worker.metrics_ports == 1:
        return []
    if index not in ctx.metrics_ports:
        ctx.metrics_ports[index] = tuple(ctx.reserve() for _ in range(worker.metrics_ports))
    listed = ",".join(map(str, ctx.metrics_ports[index]))
    return ["--api-processes", str(worker.metrics_ports), "--process-metrics-ports", listed]


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
