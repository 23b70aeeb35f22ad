"""Deployments: launch a stack from a spec, or attach to one that already runs.

    with Deployment(DeploymentSpec.same_model(workers=2)) as dep:
        dep.frontend_url, dep.system_urls   # index = worker order
        dep.outages.kill_worker(1)          # the faults of a real cluster, each in dep.events
        dep.steering.drain(0)               # dispatch changes, the stack's own way

Start-up that fails halfway tears down what it started before the error surfaces; `progress=`
watches it (`embedlab.progress`); a stopped deployment raises `DeploymentStoppedError`. A
deployment over several hosts (`DeploymentSpec.hosts`) creates their network namespaces
first and deletes them last. This module keeps a deployment's lifecycle and its addresses.
Its parts never reach back to it: the launcher (`launcher.py`) builds the run's `Processes`
(`processes.py`: the processes by role, their lock, the live weights) and fills it; the
faults (`outages.py`), drains and live weights (`steering.py`) and the restart policy
(`supervisor.py`) are given the launcher and the run's event log. What each stack can do is
its own (`embedlab.stacks`, named in `stack_registry.py`). The spec it was started with is
never replaced; `spec` reads it with the live weights.
"""

from __future__ import annotations

import enum
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

from ..defaults import HOST, STOP_TIMEOUT_S
from ..errors import ConfigError, DeploymentStoppedError
from ..evidence import clients
from ..evidence.access import Access, Secret, grant
from ..evidence.metrics import MetricQuery
from ..evidence.target import Target
from ..progress import LaunchObserver
from .events import EventLog, LaunchReport
from .hosts import Network
from .launcher import Launcher, delete_scratch, keep_scratch
from .managed_process import ManagedProcess
from .outages import Outages
from .ports import release_port, reserve_port
from .processes import Processes
from .provisioning import default_run_dir
from .spec import DeploymentSpec
from .stack import CountsBackends, StackContext, prepare_run
from .stack_registry import get_stack
from .steering import Steering
from .supervisor import Supervisor
from .worker_server import check_servers, names_worker, spec_metric

__all__ = ["Deployment", "DeploymentState"]


class DeploymentState(enum.Enum):
    NEW = "new"
    STARTING = "starting"
    RUNNING = "running"
    STOPPED = "stopped"


class Deployment:
    """One frontend and N workers of a stack, as managed subprocesses, on one host or several."""

    def __init__(
        self,
        spec: DeploymentSpec,
        *,
        run_dir: Path | str | None = None,
        host: str = HOST,
        progress: LaunchObserver | None = None,
    ) -> None:
        self._spec = spec
        self._report = LaunchReport(progress, active=lambda: self.state is DeploymentState.STARTING)
        self.stack = get_stack(spec.stack)  # an unknown stack fails here, before anything starts
        self.stack.check(spec)  # what this stack cannot run, namespaces without privileges included
        self.host = host
        self._run_dir = Path(run_dir) if run_dir is not None else None
        self.state = DeploymentState.NEW
        self.network: Network = Network.local()
        self.events = EventLog()
        self._ports: list[int] = []
        self._ctx: StackContext | None = None
        # Built once the run starts: the launcher, the `Processes` it fills, and the parts that act on them.
        self._launcher: Launcher | None = None
        self._outages: Outages | None = None
        self._steering: Steering | None = None
        self._supervisor: Supervisor | None = None
        # Withdraws the frontend's key (`BaseStack.frontend_key_env`) from the clients, once it stops.
        self._withdraw_key: Callable[[], None] = lambda: None

    # -- what it exposes ------------------------------------------------------------------

    @property
    def spec(self) -> DeploymentSpec:
        """What runs: the spec it was started with, with the workers' live weights (`steering.set_weights`)."""
        procs = self._processes()
        if procs is None or procs.weights == tuple(w.weight for w in self._spec.workers):
            return self._spec
        return replace(self._spec, workers=tuple(map(procs.worker_spec, range(len(self._spec.workers)))))

    @property
    def frontend(self) -> ManagedProcess | None:
        procs = self._processes()
        return procs.frontend if procs is not None else None

    @property
    def workers(self) -> list[ManagedProcess]:
        """The workers' processes by index (a copy: a fault or a restart swaps one in the run's own list)."""
        procs = self._processes()
        return list(procs.workers) if procs is not None else []

    @property
    def services(self) -> dict[str, ManagedProcess]:
        procs = self._processes()
        return dict(procs.services) if procs is not None else {}

    @property
    def startup_seconds(self) -> dict[str, float]:
        """How long each process took to be ready, by name, and the whole start ("total")."""
        procs = self._processes()
        return procs.startup_seconds if procs is not None else {}

    @property
    def outages(self) -> Outages:
        """The faults of a real cluster, caused on purpose (`outages.py`); once it has started."""
        if self._outages is None:
            raise _not_started()
        return self._outages

    @property
    def steering(self) -> Steering:
        """Drains, resumes and live weights, the stack's own way (`steering.py`); once it has started."""
        if self._steering is None:
            raise _not_started()
        return self._steering

    @property
    def run_dir(self) -> Path:
        if self._run_dir is None:
            self._run_dir = default_run_dir(self.spec.stack)
        return self._run_dir

    @property
    def frontend_url(self) -> str:
        return self._context().frontend_url

    @property
    def system_urls(self) -> list[str]:
        ctx = self._context()
        return [ctx.system_url(i) for i in range(len(ctx.system_ports))]

    @property
    def models(self) -> list[str]:
        return self.spec.models

    @property
    def processes(self) -> list[ManagedProcess]:
        procs = self._processes()
        return procs.all if procs is not None else []

    @property
    def log_paths(self) -> dict[str, Path]:
        return {p.name: p.log_path for p in self.processes}

    @property
    def etcd_url(self) -> str | None:
        """The run's etcd client URL, where its stack runs one (dynamo on etcd), else None."""
        return self.stack.etcd_url(self._context())

    def target(self) -> Target:
        """What the checks read: the system URLs by worker index, and the spec's counter."""
        return Target(
            frontend_url=self.frontend_url,
            system_urls=tuple(map(self._context().metrics_url, range(len(self.spec.workers)))),
            models=tuple(self.models),
            metric=MetricQuery.parse(spec_metric(self.spec.metric, self.spec.workers)),
            weights=tuple(w.weight for w in self.spec.workers),
            stack=self.spec.stack,
            endpoints=tuple(map(self.endpoint, range(len(self.system_urls))))
            if self.stack.names_worker and names_worker(self.spec)
            else (),
            router_counts=self.backend_counts if isinstance(self.stack, CountsBackends) else None,
            router_metrics=self.stack.own_counts(self._context()),
        )

    def endpoint(self, index: int) -> str:
        """Worker `index`'s endpoint path, `namespace.component.endpoint`."""
        return self._context().endpoint(index)

    def host_of(self, index: int) -> int:
        """The host worker `index` runs on."""
        return self.spec.host_of(index)

    @property
    def health_url(self) -> str:
        """The frontend's page that lists the instances it dispatches to."""
        return self.stack.health_url(self._context())

    def dispatchable_endpoints(self, client: httpx.Client) -> set[str]:
        """The endpoint paths the frontend would dispatch to now."""
        return self.read_dispatchable(client.get(self.health_url).json())

    def read_dispatchable(self, health: Any) -> set[str]:
        """The endpoint paths in `health`, the JSON of `health_url` that the caller fetched (async callers)."""
        return self.stack.dispatchable_endpoints(self._context(), health)

    def direct_url(self, index: int) -> str | None:
        """Worker `index`'s own HTTP base URL, bypassing the frontend (None where it speaks no HTTP)."""
        with clients.client(timeout=5.0) as client:
            return self.stack.direct_url(client, self._context(), index)

    def backend_counts(self) -> dict[int, float] | None:
        """What the router's own per-backend counters say it sent each worker (None where it keeps none)."""
        if not isinstance(self.stack, CountsBackends):
            return None
        with clients.client(timeout=5.0) as client:
            return self.stack.backend_counts(client, self._context())

    @property
    def context(self) -> StackContext:
        """The run's StackContext (a DeploymentStoppedError once it stopped, or its frontend exited)."""
        return self._context()

    @property
    def token(self) -> str | None:
        """The token the run's processes were given (EMBEDLAB_TOKEN), where one is set."""
        return self._launcher.token if self._launcher else None

    def _processes(self) -> Processes | None:
        return self._launcher.processes if self._launcher is not None else None

    def _context(self) -> StackContext:
        if self.state is DeploymentState.STOPPED:
            raise DeploymentStoppedError()
        procs = self._processes()
        if self.state is DeploymentState.RUNNING and procs is not None:
            procs.check_frontend()
        if self._ctx is None:
            raise ConfigError(
                f"the deployment is {self.state.value}; start it first (use it as a context manager)"
            )
        return self._ctx

    # -- lifecycle ------------------------------------------------------------------------

    def __enter__(self) -> Deployment:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Deployment:
        if self.state is not DeploymentState.NEW:
            raise ConfigError(f"a deployment starts once; this one is {self.state.value}")
        self.state = DeploymentState.STARTING
        try:
            self._start()
        except BaseException as exc:
            self._report.failed(exc)
            self.stop()
            raise
        self._report.emit("done", seconds=self.startup_seconds["total"])
        self.state = DeploymentState.RUNNING
        if any(w.restart == "on-exit" for w in self._spec.workers):
            self._supervisor = Supervisor(self._launched(), self.events).start()
        return self

    def _start(self) -> None:
        spec = self._spec
        started = time.monotonic()
        self.run_dir.mkdir(parents=True, exist_ok=True)  # stacks write their config files here first
        self.network = Network.create(run_id=secrets.token_hex(3), hosts=spec.hosts)
        frontend_port = self._reserve()
        self._ctx = StackContext(
            spec=spec,
            run_dir=self.run_dir,
            host=self.host,
            frontend_port=frontend_port,
            namespace=self.stack.namespace(spec),
            hosts=tuple(self.network.hosts),
            reserve=self._reserve,
            system_ports=tuple(self._reserve() for _ in spec.workers),
            on_scratch=keep_scratch,
        )
        check_servers(self.stack, spec)  # a worker server the stack cannot run: unsupported, with why
        self._ctx, env = prepare_run(self.stack, self._ctx)  # the context now carries the stack's state
        launcher = Launcher(self.stack, self._ctx, report=self._report, prepared=env)
        self._launcher = launcher
        named = self.stack.frontend_key_env
        if named and launcher.env.get(named):
            # The frontend requires the key it was given: every client of the run (readiness, bursts,
            # the restart thread) sends it to the frontend's origin, and nowhere else.
            key = Access(
                frontend=self._ctx.frontend_url, api_key=Secret(launcher.env[named]), key_from=f"${named}"
            )
            self._withdraw_key = grant(key)
        self._outages = Outages(launcher, self.network, self.events)
        self._steering = Steering(launcher, self.events)
        launcher.start_all()
        launcher.processes.startup_seconds["total"] = time.monotonic() - started

    # -- starting one process again (a fault, the restart policy) ---------------------------

    def respawn_worker(self, index: int) -> ManagedProcess:
        """Stop worker `index` (or reap it, if it exited) and start it again on its host and
        system port: the one relaunch, which `outages.restart_worker` and the supervisor share.
        Then `wait_worker`. A deployment that is stopping starts nothing new."""
        return self._launched().respawn_worker(index)

    def wait_worker(self, index: int, *, cancelled: threading.Event | None = None) -> None:
        """Wait until worker `index` serves: its /health answers and the frontend dispatches to it."""
        self._launched().wait_worker(index, cancelled=cancelled)

    def relaunch_service(self, role: str) -> ManagedProcess:
        """Start service `role` (etcd) again from its spec, on its ports and data, and wait until it is ready."""
        return self._launched().relaunch_service(role)

    def _launched(self) -> Launcher:
        if self._launcher is None:
            raise _not_started()
        return self._launcher

    # -- teardown -----------------------------------------------------------------------------

    def _reserve(self) -> int:
        port = reserve_port(self.host)
        self._ports.append(port)
        return port

    def stop(self) -> None:
        """Stop every process (workers, then the frontend, then services), then delete what they
        used (`StackContext.scratch`: configs, etcd's data, state folders) and the hosts; the logs stay.

        Safe to call more than once. The workers are stopped together (their SIGTERMs go out
        in reverse order of start, then all are awaited), so teardown takes one worker's
        shutdown, not N.
        """
        procs = self._processes()
        if procs is not None:
            procs.stopping.set()  # waits and restarts end early
        if self._supervisor is not None:
            self._supervisor.join(timeout=STOP_TIMEOUT_S)
        errors = procs.stop_all() if procs is not None else []
        if self._ctx is not None:
            errors += delete_scratch(self._ctx)
        try:
            self.network.destroy()
        except Exception as exc:
            errors.append(exc)
        for port in self._ports:
            release_port(port)
        self._ports.clear()
        self._withdraw_key()
        self.state = DeploymentState.STOPPED
        if errors:
            raise errors[0]


def _not_started() -> ConfigError:
    return ConfigError("the deployment has not started; start it first (use it as a context manager)")
