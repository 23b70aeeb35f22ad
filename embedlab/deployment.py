"""Deployments: launch a stack from a spec, or attach to one that already runs.

    with Deployment(DeploymentSpec.same_model(workers=2)) as dep:
        dep.frontend_url, dep.system_urls   # index = worker order

Start-up that fails halfway tears down what it started before the error surfaces.
"""

from __future__ import annotations

import enum
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Sequence

import httpx

from . import clients
from .defaults import (
    CUDA_VISIBLE_ENV, HOST, HTTP_PORT_ENV, NAMESPACE, RUN_ROOT_ENV, STATE_DIR_ENV, STOP_TIMEOUT_S, SYSTEM_PORT_ENV,
    TOKEN_ENV, VLLM_CACHE_ENV, VLLM_STOP_TIMEOUT_S,
)
from .errors import ConfigError
from .metrics import DEFAULT_METRIC, MetricQuery
from .ports import release_port, reserve_port
from .process import ManagedProcess, stop_together
from .specs import DeploymentSpec
from .stacks import ProcessSpec, StackContext, get_stack


class DeploymentState(enum.Enum):
    NEW = "new"
    STARTING = "starting"
    RUNNING = "running"
    STOPPED = "stopped"


def visible_gpus() -> list[str]:
    """GPU ids a worker may be pinned to: CUDA_VISIBLE_DEVICES, else what nvidia-smi lists."""
    env = os.environ.get(CUDA_VISIBLE_ENV)
    if env is not None:
        return [d for d in env.split(",") if d.strip() and d.strip() != "-1"]
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]


def vllm_worker_env(index: int, *, run_dir: Path, env: dict[str, str], on_gpu: bool) -> dict[str, str]:
    """What a vLLM worker needs beyond the run's environment; the user's own settings win.

    - One model-class cache per run (`EMBEDLAB_VLLM_CACHE`): vLLM fills a cold one by
      importing itself once more in a subprocess, 15-30 s of a start on 2 cores. A run
      that restarts a worker finds it warm; an exported EMBEDLAB_VLLM_CACHE keeps one
      across runs, outside the run directory, by the user's choice.
    - On CPU, one core per worker, round robin: vLLM's default (`auto`) binds every
      engine to the first core, so two workers would share one core and leave the other idle.
    """
    extra = {VLLM_CACHE_ENV: env.get(VLLM_CACHE_ENV) or str(run_dir / "vllm-cache")}
    if not on_gpu and not env.get("VLLM_CPU_OMP_THREADS_BIND"):
        cores = sorted(os.sched_getaffinity(0))
        extra["VLLM_CPU_OMP_THREADS_BIND"] = str(cores[index % len(cores)])
    return extra


def default_run_dir(prefix: str = "run") -> Path:
    base = Path(os.environ.get(RUN_ROOT_ENV) or Path(tempfile.gettempdir()) / "embedlab-runs")
    path = base / f"{time.strftime('%Y%m%d-%H%M%S')}-{prefix}-{secrets.token_hex(3)}"
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass(frozen=True)
class Target:
    """What checks and scenarios need from a deployment, launched or attached.

    `system_urls[i]` is worker i's system server; `models[i]` the model it serves (None
    where an attached deployment did not say).
    """

    frontend_url: str
    system_urls: tuple[str, ...]
    models: tuple[str | None, ...]
    metric: MetricQuery = field(default=DEFAULT_METRIC)
    weights: tuple[float, ...] | None = None
    stack: str = "attached"


class Deployment:
    """One frontend and N workers of a stack, as managed subprocesses."""

    def __init__(self, spec: DeploymentSpec, *, run_dir: Path | str | None = None, host: str = HOST) -> None:
        self.spec = spec
        self.stack = get_stack(spec.stack)  # an unknown stack fails here, before anything starts
        self.host = host
        self._run_dir = Path(run_dir) if run_dir is not None else None
        self.state = DeploymentState.NEW
        self.frontend: ManagedProcess | None = None
        self.workers: list[ManagedProcess] = []
        self._ports: list[int] = []
        self._system_ports: list[int] = []
        self._ctx: StackContext | None = None
        self._env: dict[str, str] = {}
        self.startup_seconds: dict[str, float] = {}

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
        return [f"http://{self.host}:{p}" for p in self._system_ports]

    @property
    def models(self) -> list[str]:
        return self.spec.models

    @property
    def log_paths(self) -> dict[str, Path]:
        procs = ([self.frontend] if self.frontend else []) + self.workers
        return {p.name: p.log_path for p in procs}

    @property
    def processes(self) -> list[ManagedProcess]:
        return ([self.frontend] if self.frontend else []) + self.workers

    def target(self) -> Target:
        """What the checks read: the system URLs by worker index, and the spec's counter."""
        query = MetricQuery.parse(self.spec.metric)
        return Target(
            frontend_url=self.frontend_url, system_urls=tuple(self.system_urls), models=tuple(self.models),
            metric=query, weights=tuple(w.weight for w in self.spec.workers), stack=self.spec.stack,
        )

    def endpoint(self, index: int) -> str:
        """Worker `index`'s endpoint path, `namespace.component.endpoint`."""
        return self._context().endpoint(index)

    @property
    def health_url(self) -> str:
        """The frontend's page that lists the instances it dispatches to."""
        return self.stack.health_url(self._context())

    def dispatchable_endpoints(self, client: httpx.Client) -> set[str]:
        """The endpoint paths the frontend would dispatch to now."""
        return self.stack.dispatchable_endpoints(client.get(self.health_url).json())

    def _context(self) -> StackContext:
        if self._ctx is None:
            raise ConfigError(f"the deployment is {self.state.value}; start it first (use it as a context manager)")
        return self._ctx

    # -- lifecycle ------------------------------------------------------------------------

    def __enter__(self) -> "Deployment":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> "Deployment":
        if self.state is not DeploymentState.NEW:
            raise ConfigError(f"a deployment starts once; this one is {self.state.value}")
        self.state = DeploymentState.STARTING
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        self.state = DeploymentState.RUNNING
        return self

    def _start(self) -> None:
        spec = self.spec
        frontend_port = self._reserve()
        self._system_ports = [self._reserve() for _ in spec.workers]
        namespace = spec.namespace or (NAMESPACE if spec.stack == "embedded" else f"embedlab{secrets.token_hex(4)}")
        self._ctx = StackContext(
            spec=spec, run_dir=self.run_dir, host=self.host, frontend_port=frontend_port, namespace=namespace
        )
        self._env = {**os.environ, **self.stack.prepare(self._ctx), **dict(spec.env)}
        # The user's own overrides must not leak in and point processes at other ports.
        for name in (SYSTEM_PORT_ENV, HTTP_PORT_ENV, CUDA_VISIBLE_ENV):
            self._env.pop(name, None)
        started = time.monotonic()
        # Workers start alongside the frontend and register as soon as it answers:
        # start-up costs one interpreter start, not two in a row.
        self.frontend = self._launch(self.stack.frontend(self._ctx))
        gpus = visible_gpus()
        for index in range(len(spec.workers)):
            self.workers.append(self._launch(self._worker_spec(index), gpu=self._gpu_for(index, gpus)))
        with clients.client(timeout=2.0) as client:
            self.startup_seconds["frontend"] = self.frontend.wait_ready(
                lambda: client.get(f"{self.frontend_url}/health").status_code == 200,
                timeout=spec.startup_timeout, what="its /health answered 200",
            )
            for index in range(len(spec.workers)):
                self._wait_worker(client, index)
        self.startup_seconds["total"] = time.monotonic() - started

    def _worker_spec(self, index: int) -> ProcessSpec:
        return self.stack.worker(self._context(), index, self.spec.workers[index], self._system_ports[index])

    def _gpu_for(self, index: int, gpus: Sequence[str]) -> str | None:
        device = self.spec.workers[index].device
        if device == "cpu":
            return ""
        if device is not None:
            return device.removeprefix("cuda:")
        if not gpus or self.spec.workers[index].engine == "hash":
            return None
        return gpus[index % len(gpus)]

    def _launch(self, pspec: ProcessSpec, *, gpu: str | None = None) -> ManagedProcess:
        env = {**self._env, **pspec.env, STATE_DIR_ENV: str(self.run_dir / f"{pspec.name}-state")}
        stop_timeout = STOP_TIMEOUT_S
        if pspec.worker is not None and self.spec.workers[pspec.worker].runs_vllm:
            env.update(vllm_worker_env(pspec.worker, run_dir=self.run_dir, env=env, on_gpu=bool(gpu)))
            stop_timeout = VLLM_STOP_TIMEOUT_S
        if gpu is not None:
            env[CUDA_VISIBLE_ENV] = gpu
        proc = ManagedProcess(
            pspec.name, pspec.argv, log_path=self.run_dir / f"{pspec.name}.log", env=env, stop_timeout=stop_timeout
        )
        return proc.start()

    def _wait_worker(self, client: httpx.Client, index: int) -> None:
        proc = self.workers[index]
        model = self.spec.workers[index].model
        endpoint = self.endpoint(index)
        system_url = self.system_urls[index]

        def ready() -> bool:
            if client.get(f"{system_url}/health").status_code != 200:
                return False
            listed = {m["id"] for m in client.get(f"{self.frontend_url}/v1/models").json().get("data", [])}
            if model not in listed:
                return False
            return endpoint in self.dispatchable_endpoints(client)

        self.startup_seconds[proc.name] = proc.wait_ready(
            ready, timeout=self.spec.startup_timeout,
            what=f"its /health answered 200 and the frontend listed model '{model}' on {endpoint}",
        )

    def _reserve(self) -> int:
        port = reserve_port(self.host)
        self._ports.append(port)
        return port

    def stop(self) -> None:
        """Stop every process, workers before the frontend. Safe to call more than once.

        The workers are stopped together (their SIGTERMs go out in reverse order of start,
        then all are awaited), so teardown takes one worker's shutdown, not N.
        """
        errors: list[BaseException] = []
        for group in (list(reversed(self.workers)), [self.frontend] if self.frontend else []):
            try:
                stop_together(group)
            except Exception as exc:  # keep stopping the rest
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
            raise ConfigError(f"live weights need the embedded frontend; this deployment runs {self.spec.stack}")
        if len(weights) != len(self.workers):
            raise ConfigError(f"{len(self.workers)} workers but {len(weights)} weights")
        # The registry wants the token the frontend was started with, where one is set.
        token = self._env.get(TOKEN_ENV)
        with clients.client(timeout=5.0, headers={"Authorization": f"Bearer {token}"} if token else None) as client:
            instances = {
                i["endpoint"]: i["instance_id"]
                for group in client.get(f"{self.frontend_url}/health").json()["models"].values()
                for i in group
            }
            for index, weight in enumerate(weights):
                endpoint = self.endpoint(index)
                if endpoint not in instances:
                    raise ConfigError(f"worker {index} ({endpoint}) is not registered")
                client.put(f"{self.frontend_url}/registry/instances/{instances[endpoint]}/weight", json={"weight": weight}).raise_for_status()
        self.spec = replace(self.spec, workers=tuple(replace(w, weight=float(x)) for w, x in zip(self.spec.workers, weights)))

    # -- fault work ---------------------------------------------------------------------

    def kill_worker(self, index: int, sig: int = signal.SIGKILL) -> None:
        """Send `sig` to worker `index`'s process group (failover and restart experiments)."""
        self.workers[index].signal(sig)

    def restart_worker(self, index: int) -> None:
        """Stop worker `index` and start it again on the same system port."""
        old = self.workers[index]
        old.stop()
        proc = self._launch(self._worker_spec(index), gpu=self._gpu_for(index, visible_gpus()))
        self.workers[index] = proc
        with clients.client(timeout=2.0) as client:
            self._wait_worker(client, index)


def attach(
    frontend_url: str,
    system_urls: Sequence[str],
    *,
    models: Sequence[str | None] | None = None,
    metric: MetricQuery | str = DEFAULT_METRIC,
    weights: Sequence[float] | None = None,
) -> Target:
    """A deployment already running elsewhere. Launches nothing and stops nothing.

    `system_urls[i]` is worker i; `models[i]`, where given, is the model worker i serves.
    """
    if not system_urls:
        raise ConfigError("attach needs at least one system URL (one per worker)")
    if models is not None and len(models) != len(system_urls):
        raise ConfigError(f"{len(system_urls)} system URLs but {len(models)} models")
    query = MetricQuery.parse(metric) if isinstance(metric, str) else metric
    return Target(
        frontend_url=frontend_url.rstrip("/"), system_urls=tuple(u.rstrip("/") for u in system_urls),
        models=tuple(models) if models is not None else (None,) * len(system_urls), metric=query,
        weights=tuple(weights) if weights else None,
    )


def target_of(deployment: "Deployment | Target") -> Target:
    return deployment.target() if isinstance(deployment, Deployment) else deployment
