"""Deployments: launch a stack from a spec, or attach to one that already runs.

    with Deployment(DeploymentSpec.same_model(workers=2)) as dep:
        dep.frontend_url, dep.system_urls   # index = worker order

Start-up that fails halfway tears down what it started before the error surfaces; `progress=`
watches it (`embedlab.progress`); a stopped deployment raises `DeploymentStoppedError`. A
deployment over several hosts (`DeploymentSpec.hosts`) creates their network namespaces
first and deletes them last; the faults of a real cluster (`partition`, `heal`,
`kill_host`, `restart_etcd`, `kill_worker`) are methods, each recorded in `events`.
"""

from __future__ import annotations

import enum
import os
import secrets
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import httpx

from . import clients
from .defaults import (
    CUDA_VISIBLE_ENV,
    HOST,
    HTTP_PORT_ENV,
    NAMESPACE,
    STATE_DIR_ENV,
    STOP_TIMEOUT_S,
    SYSTEM_PORT_ENV,
    TOKEN_ENV,
    VLLM_STOP_TIMEOUT_S,
)
from .errors import ConfigError, DeploymentStoppedError, ServerStartError
from .hosts import Network
from .launching import default_run_dir, gpu_for, visible_gpus, vllm_worker_env
from .metrics import MetricQuery
from .ports import release_port, reserve_port
from .process import ManagedProcess, stop_together
from .progress import LaunchObserver, LaunchReport
from .specs import DeploymentSpec
from .stacks import ProcessSpec, StackContext, get_stack
from .targets import Target

__all__ = ["Deployment", "DeploymentEvent", "DeploymentState"]

RESTART_POLL_S = 0.1


class DeploymentState(enum.Enum):
    NEW = "new"
    STARTING = "starting"
    RUNNING = "running"
    STOPPED = "stopped"


@dataclass(frozen=True)
class DeploymentEvent:
    """A fault the harness caused or a restart it made, at `time.perf_counter()` time `at`."""

    at: float
    kind: str  # "partition", "heal", "kill host", "kill worker", "etcd stopped", "etcd ready", "exit", "restart"
    detail: str = ""


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
        self.spec = spec
        self._report = LaunchReport(progress, active=lambda: self.state is DeploymentState.STARTING)
        self.stack = get_stack(spec.stack)  # an unknown stack fails here, before anything starts
        self.stack.check(spec)  # what this stack cannot run, namespaces without privileges included
        self.host = host
        self._run_dir = Path(run_dir) if run_dir is not None else None
        self.state = DeploymentState.NEW
        self.frontend: ManagedProcess | None = None
        self.workers: list[ManagedProcess] = []
        self.services: dict[str, ManagedProcess] = {}
        self._service_specs: dict[str, ProcessSpec] = {}
        self.network: Network = Network.local()
        self.events: list[DeploymentEvent] = []
        self.startup_seconds: dict[str, float] = {}
        self._ports: list[int] = []
        self._system_ports: list[int] = []
        self._ctx: StackContext | None = None
        self._env: dict[str, str] = {}
        self._stopping = threading.Event()
        self._supervisor: threading.Thread | None = None
        self._lock = threading.RLock()

    # -- what it exposes ------------------------------------------------------------------

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
        return [f"http://{self._context().host_of(i).address}:{p}" for i, p in enumerate(self._system_ports)]

    @property
    def models(self) -> list[str]:
        return self.spec.models

    @property
    def processes(self) -> list[ManagedProcess]:
        return [*self.services.values(), *([self.frontend] if self.frontend else []), *self.workers]

    @property
    def log_paths(self) -> dict[str, Path]:
        return {p.name: p.log_path for p in self.processes}

    @property
    def etcd_url(self) -> str | None:
        """The run's etcd client URL (dynamo on etcd), else None."""
        return getattr(self.stack, "etcd_url", None)

    def target(self) -> Target:
        """What the checks read: the system URLs by worker index, and the spec's counter."""
        return Target(
            frontend_url=self.frontend_url,
            system_urls=tuple(self.system_urls),
            models=tuple(self.models),
            metric=MetricQuery.parse(self.spec.metric),
            weights=tuple(w.weight for w in self.spec.workers),
            stack=self.spec.stack,
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
        return self.stack.dispatchable_endpoints(client.get(self.health_url).json())

    def _context(self) -> StackContext:
        if self.state is DeploymentState.STOPPED:
            raise DeploymentStoppedError()
        if self.state is DeploymentState.RUNNING and self.frontend is not None and not self.frontend.alive():
            f = self.frontend
            why = f"its frontend (pid {f.pid}) exited with code {f.returncode}"
            raise DeploymentStoppedError(why, log_path=f.log_path, tail=f.log_tail(10))
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
        if any(w.restart == "on-exit" for w in self.spec.workers):
            self._supervisor = threading.Thread(target=self._supervise, name="embedlab-restarts", daemon=True)
            self._supervisor.start()
        return self

    def _start(self) -> None:
        spec = self.spec
        started = time.monotonic()
        self.run_dir.mkdir(parents=True, exist_ok=True)  # stacks write their config files here first
        self.network = Network.create(run_id=secrets.token_hex(3), hosts=spec.hosts)
        frontend_port = self._reserve()
        self._system_ports = [self._reserve() for _ in spec.workers]
        namespace = spec.namespace or (
            NAMESPACE if spec.stack == "embedded" else f"embedlab{secrets.token_hex(4)}"
        )
        self._ctx = StackContext(
            spec=spec,
            run_dir=self.run_dir,
            host=self.host,
            frontend_port=frontend_port,
            namespace=namespace,
            hosts=tuple(self.network.hosts),
            reserve=self._reserve,
            system_ports=tuple(self._system_ports),
        )
        self._env = {**os.environ, **self.stack.prepare(self._ctx), **dict(spec.env)}
        # The user's own overrides must not leak in and point processes at other ports.
        for name in (SYSTEM_PORT_ENV, HTTP_PORT_ENV, CUDA_VISIBLE_ENV):
            self._env.pop(name, None)
        with clients.client(timeout=2.0) as client:
            for service in self.stack.services(self._ctx):
                self._service_specs[service.role] = service
                self.services[service.role] = self._launch(service)
                self._wait_service(client, service)
            # Workers start alongside the frontend and register as soon as it answers:
            # start-up costs one interpreter start, not two in a row.
            frontend = self.stack.frontend(self._ctx)
            self.frontend = self._launch(frontend)
            ready_url = frontend.ready_url or f"{self.frontend_url}/health"
            gpus = visible_gpus()
            for index in range(len(spec.workers)):
                self.workers.append(
                    self._launch(self._worker_spec(index), gpu=gpu_for(index, spec.workers[index], gpus))
                )
            self.startup_seconds["frontend"] = self._report.wait(
                self.frontend,
                lambda: client.get(ready_url).status_code == 200,
                timeout=spec.startup_timeout,
                what=f"{ready_url} answered 200",
            )
            for index in range(len(spec.workers)):
                self._wait_worker(client, index)
        self.startup_seconds["total"] = time.monotonic() - started

    def _worker_spec(self, index: int) -> ProcessSpec:
        return self.stack.worker(self._context(), index, self.spec.workers[index], self._system_ports[index])

    def _launch(self, pspec: ProcessSpec, *, gpu: str | None = None) -> ManagedProcess:
        env = (
            {k: v for k, v in self._env.items() if not k.startswith(pspec.unset)}
            if pspec.unset
            else dict(self._env)
        )
        env.update({**pspec.env, STATE_DIR_ENV: str(self.run_dir / f"{pspec.file_stem}-state")})
        stop_timeout = STOP_TIMEOUT_S
        if pspec.worker is not None and self.spec.workers[pspec.worker].runs_vllm:
            env.update(vllm_worker_env(pspec.worker, run_dir=self.run_dir, env=env, on_gpu=bool(gpu)))
            stop_timeout = VLLM_STOP_TIMEOUT_S
        if gpu is not None:
            env[CUDA_VISIBLE_ENV] = gpu
        argv = (
            self._context().host_of(pspec.worker).wrap(pspec.argv) if pspec.worker is not None else pspec.argv
        )
        proc = ManagedProcess(
            pspec.name,
            argv,
            log_path=self.run_dir / f"{pspec.file_stem}.log",
            env=env,
            stop_timeout=stop_timeout,
        )
        return self._report.started(proc.start())

    def _wait_service(self, client: httpx.Client, service: ProcessSpec) -> None:
        proc, url = self.services[service.role], service.ready_url
        if url is not None:
            self.startup_seconds[proc.name] = self._report.wait(
                proc,
                lambda: client.get(url).status_code == 200,
                timeout=self.spec.startup_timeout,
                what=f"{url} answered 200",
            )

    def _wait_worker(
        self, client: httpx.Client, index: int, *, cancelled: threading.Event | None = None
    ) -> None:
        proc = self.workers[index]
        model = self.spec.workers[index].model
        endpoint = self.endpoint(index)
        system_url = self.system_urls[index]

        def ready() -> bool:
            if cancelled is not None and cancelled.is_set():
                raise ServerStartError(
                    f"{proc.name}: the deployment is stopping", name=proc.name, log_path=proc.log_path
                )
            if client.get(f"{system_url}/health").status_code != 200:
                return False
            listed = self.stack.listed_models(client, self._context())
            if listed is not None and model not in listed:
                return False
            return endpoint in self.dispatchable_endpoints(client)

        self.startup_seconds[proc.name] = self._report.wait(
            proc,
            ready,
            timeout=self.spec.startup_timeout,
            what=f"its /health answered 200 and the frontend listed model '{model}' on endpoint {endpoint}",
        )

    def direct_url(self, index: int) -> str | None:
        """Worker `index`'s own HTTP base URL, bypassing the frontend (None where it speaks no HTTP)."""
        with clients.client(timeout=5.0) as client:
            return self.stack.direct_url(client, self._context(), index)

    def drain(self, index: int, *, timeout: float = 30.0) -> None:
        """Take worker `index` out of dispatch while it keeps serving, and wait until the frontend
        says so (UnsupportedError where the stack has no way)."""
        self._dispatch_change(index, self.stack.drain, listed=False, timeout=timeout)
        self._event("drain", f"worker {index}")

    def resume(self, index: int, *, timeout: float = 30.0) -> None:
        """Put a drained worker back, and wait until the frontend dispatches to it again."""
        self._dispatch_change(index, self.stack.resume, listed=True, timeout=timeout)
        self._event("resume", f"worker {index}")

    def _dispatch_change(
        self, index: int, change: Callable[..., None], *, listed: bool, timeout: float
    ) -> None:
        endpoint = self.endpoint(index)
        with clients.client(timeout=5.0) as client:
            change(client, self._context(), index)
            deadline = time.monotonic() + timeout
            while (endpoint in self.dispatchable_endpoints(client)) != listed:
                if time.monotonic() > deadline:
                    state = "back in" if listed else "out of"
                    raise ServerStartError(
                        f"worker {index} ({endpoint}) was not {state} dispatch within {timeout:g} s"
                    )
                time.sleep(0.05)

    def _reserve(self) -> int:
        port = reserve_port(self.host)
        self._ports.append(port)
        return port

    def stop(self) -> None:
        """Stop every process (workers, then the frontend, then services), then delete the hosts.

        Safe to call more than once. The workers are stopped together (their SIGTERMs go out
        in reverse order of start, then all are awaited), so teardown takes one worker's
        shutdown, not N.
        """
        self._stopping.set()
        if self._supervisor is not None:
            self._supervisor.join(timeout=STOP_TIMEOUT_S)
        errors: list[BaseException] = []
        with self._lock:
            groups = [
                list(reversed(self.workers)),
                [self.frontend] if self.frontend else [],
                list(self.services.values()),
            ]
        for group in groups:
            try:
                stop_together(group)
            except Exception as exc:  # keep stopping the rest
                errors.append(exc)
        try:
            self.network.destroy()
        except Exception as exc:
            errors.append(exc)
        for port in self._ports:
            release_port(port)
        self._ports.clear()
        self.state = DeploymentState.STOPPED
        if errors:
            raise errors[0]

    def set_weights(self, weights: Sequence[float]) -> None:
        """Change the routing weight of every worker, live (embedded stack only)."""
        if self.spec.stack != "embedded":
            raise ConfigError(
                f"live weights need the embedded frontend; this deployment runs {self.spec.stack}"
            )
        if len(weights) != len(self.workers):
            raise ConfigError(f"{len(self.workers)} workers but {len(weights)} weights")
        # The registry wants the token the frontend was started with, where one is set.
        token = self._env.get(TOKEN_ENV)
        with clients.client(
            timeout=5.0, headers={"Authorization": f"Bearer {token}"} if token else None
        ) as client:
            instances = {
                i["endpoint"]: i["instance_id"]
                for group in client.get(f"{self.frontend_url}/health").json()["models"].values()
                for i in group
            }
            for index, weight in enumerate(weights):
                endpoint = self.endpoint(index)
                if endpoint not in instances:
                    raise ConfigError(f"worker {index} ({endpoint}) is not registered")
                client.put(
                    f"{self.frontend_url}/registry/instances/{instances[endpoint]}/weight",
                    json={"weight": weight},
                ).raise_for_status()
        self.spec = replace(
            self.spec, workers=tuple(replace(w, weight=float(x)) for w, x in zip(self.spec.workers, weights))
        )

    # -- the faults of a real cluster ---------------------------------------------------------

    def _event(self, kind: str, detail: str = "") -> DeploymentEvent:
        event = DeploymentEvent(time.perf_counter(), kind, detail)
        with self._lock:
            self.events.append(event)
        return event

    def kill_worker(self, index: int, sig: int = signal.SIGKILL) -> None:
        """Send `sig` to worker `index`'s process group."""
        self.workers[index].signal(sig)
        self._event("kill worker", f"worker {index} {signal.Signals(sig).name}")

    def kill_host(self, host: int) -> None:
        """SIGKILL every process on `host`, as a machine that lost power."""
        on_host = [i for i in range(len(self.workers)) if self.host_of(i) == host]
        for index in on_host:
            self.workers[index].signal(signal.SIGKILL)
        self._event("kill host", f"host {host}: workers {on_host}")

    def partition(self, host: int) -> None:
        """Cut `host` off the network: its link goes down."""
        self.network.partition(host)
        self._event("partition", f"host {host}")

    def heal(self, host: int) -> None:
        """Bring `host`'s link back up."""
        self.network.heal(host)
        self._event("heal", f"host {host}")

    def restart_etcd(self, *, down_for: float = 0.0) -> None:
        """Stop etcd, keep it down `down_for` seconds, then start it again on the same data dir and ports."""
        old, spec = self.services.get("etcd"), self._service_specs.get("etcd")
        if old is None or spec is None:
            raise ConfigError("this deployment runs no etcd (the dynamo stack with discovery='etcd' does)")
        old.stop()
        self._event("etcd stopped")
        self._stopping.wait(down_for)  # the outage itself, cut short by a stop
        self.services["etcd"] = self._launch(spec)
        with clients.client(timeout=2.0) as client:
            self._wait_service(client, spec)
        self._event("etcd ready")

    def restart_worker(self, index: int) -> None:
        """Stop worker `index` and start it again on its host and system port."""
        with self._lock:
            self.workers[index].stop()
            self.workers[index] = self._launch(
                self._worker_spec(index), gpu=gpu_for(index, self.spec.workers[index], visible_gpus())
            )
        with clients.client(timeout=2.0) as client:
            self._wait_worker(client, index)
        self._event("restart", f"worker {index}")

    def _supervise(self) -> None:
        """The restart policy: a worker with restart="on-exit" that exits comes back on its host."""
        watched = [i for i, w in enumerate(self.spec.workers) if w.restart == "on-exit"]
        with clients.client(timeout=2.0) as client:
            while not self._stopping.wait(RESTART_POLL_S):
                for index in watched:
                    with self._lock:
                        proc = self.workers[index]
                        if self._stopping.is_set() or proc.alive():
                            continue
                        self._event("exit", f"worker {index} (code {proc.returncode})")
                        proc.stop()
                        self.workers[index] = self._launch(
                            self._worker_spec(index),
                            gpu=gpu_for(index, self.spec.workers[index], visible_gpus()),
                        )
                    try:
                        self._wait_worker(client, index, cancelled=self._stopping)
                        self._event("restart", f"worker {index} serving again on host {self.host_of(index)}")
                    except (ServerStartError, DeploymentStoppedError) as exc:  # a stop, or a dead frontend
                        self._event("restart failed", f"worker {index}: {str(exc).splitlines()[0]}")
