"""Starting a run's processes and knowing when each is ready; starting one again; stopping them all.

The order is the stack's: its services first (etcd), each until its `ready_url` answers;
then the frontend and the workers side by side (a worker registers as soon as the frontend
answers, so start-up costs one interpreter start, not two in a row); then each worker until
its /health answers, the frontend lists its model and dispatches to its endpoint. A worker
that must start again (a fault, the restart policy) comes back through `respawn_worker`,
the one relaunch. `placement.py` decides what each process gets (its folder, GPU, vLLM
settings); this module runs them, on the deployment's own process lists.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import httpx

from ..defaults import (
    CUDA_VISIBLE_ENV,
    HTTP_PORT_ENV,
    STATE_DIR_ENV,
    STOP_TIMEOUT_S,
    SYSTEM_PORT_ENV,
    VLLM_CACHE_ENV,
    VLLM_STOP_TIMEOUT_S,
)
from ..errors import DeploymentStoppedError, ServerStartError
from ..evidence import clients
from ..plugins import child_env
from .placement import gpu_for, visible_gpus, vllm_worker_env
from .process import ManagedProcess, register_cleanup, stop_together, unregister_cleanup
from .worker_server import runs_vllm

if TYPE_CHECKING:
    from .events import LaunchReport
    from .spec import DeploymentSpec
    from .stack import BaseStack, ProcessSpec, StackContext

__all__ = ["Launcher", "delete_scratch", "drop_scratch", "keep_scratch", "stop_all"]


class Launchable(Protocol):
    """What the launcher reaches of a deployment (a `Deployment` is one): its lists it fills."""

    spec: DeploymentSpec
    stack: BaseStack
    frontend: ManagedProcess | None
    workers: list[ManagedProcess]
    services: dict[str, ManagedProcess]
    startup_seconds: dict[str, float]
    lock: threading.RLock
    stopping: threading.Event

    @property
    def run_dir(self) -> Path: ...

    @property
    def context(self) -> StackContext: ...

    def dispatchable_endpoints(self, client: httpx.Client) -> set[str]: ...


class Launcher:
    """The processes of one run of `deployment`, whose stack prepared `prepared` (its environment)."""

    def __init__(self, deployment: Launchable, *, report: LaunchReport, prepared: Mapping[str, str]) -> None:
        self._dep = deployment
        self._report = report
        # Safe-path mode and absolute plugin paths: no process of the run imports from its folder.
        self.env = child_env({**os.environ, **prepared, **dict(deployment.spec.env)})
        # The user's own overrides must not leak in and point processes at other ports.
        for name in (SYSTEM_PORT_ENV, HTTP_PORT_ENV, CUDA_VISIBLE_ENV):
            self.env.pop(name, None)
        self._service_specs: dict[str, ProcessSpec] = {}

    def start_all(self) -> None:
        dep, ctx = self._dep, self._dep.context
        with clients.client(timeout=2.0) as client:
            for service in dep.stack.services(ctx):
                self._service_specs[service.role] = service
                dep.services[service.role] = self.launch(service)
                self._wait_service(client, service)
            frontend = dep.stack.frontend(ctx)
            dep.frontend = self.launch(frontend)
            ready_url = frontend.ready_url or f"{ctx.frontend_url}/health"
            gpus = visible_gpus()
            for index, worker in enumerate(dep.spec.workers):
                dep.workers.append(self.launch(self._worker_spec(index), gpu=gpu_for(index, worker, gpus)))
            dep.startup_seconds["frontend"] = self._report.wait(
                dep.frontend,
                lambda: client.get(ready_url).status_code == 200,
                timeout=dep.spec.startup_timeout,
                what=f"{ready_url} answered 200",
            )
            for index in range(len(dep.spec.workers)):
                self._wait_worker(client, index)

    def _worker_spec(self, index: int) -> ProcessSpec:
        ctx = self._dep.context
        return self._dep.stack.worker(ctx, index, self._dep.spec.workers[index], ctx.system_ports[index])

    def launch(self, pspec: ProcessSpec, *, gpu: str | None = None) -> ManagedProcess:
        """Start `pspec` with the run's environment, its own on top, on its host; its log in the run dir."""
        run_dir, ctx = self._dep.run_dir, self._dep.context
        env = {k: v for k, v in self.env.items() if not (pspec.unset and k.startswith(pspec.unset))}
        state_dir = ctx.scratch(run_dir / f"{pspec.file_stem}-state")
        env.update({**pspec.env, STATE_DIR_ENV: str(state_dir)})
        stop_timeout = STOP_TIMEOUT_S
        if pspec.worker is not None and runs_vllm(self._dep.spec.workers[pspec.worker]):
            env.update(vllm_worker_env(pspec.worker, run_dir=run_dir, env=env, on_gpu=bool(gpu)))
            if Path(env[VLLM_CACHE_ENV]).parent == run_dir:  # the run's own, not one the user keeps
                ctx.scratch(Path(env[VLLM_CACHE_ENV]))
            stop_timeout = VLLM_STOP_TIMEOUT_S
        if pspec.state_env is not None:
            env.update(pspec.state_env(state_dir, env))
        if gpu is not None:
            env[CUDA_VISIBLE_ENV] = gpu
        on_host = self._dep.context.host_of(pspec.worker) if pspec.worker is not None else None
        argv = on_host.wrap(pspec.argv) if on_host is not None else pspec.argv
        log_path = run_dir / f"{pspec.file_stem}.log"
        proc = ManagedProcess(pspec.name, argv, log_path=log_path, env=env, stop_timeout=stop_timeout)
        return self._report.started(proc.start())

    def _wait_service(self, client: httpx.Client, service: ProcessSpec) -> None:
        proc, url = self._dep.services[service.role], service.ready_url
        if url is not None:
            self._dep.startup_seconds[proc.name] = self._report.wait(
                proc,
                lambda: client.get(url).status_code == 200,
                timeout=self._dep.spec.startup_timeout,
                what=f"{url} answered 200",
            )

    def _wait_worker(
        self, client: httpx.Client, index: int, *, cancelled: threading.Event | None = None
    ) -> None:
        dep, ctx = self._dep, self._dep.context
        proc = dep.workers[index]
        model, endpoint, system_url = (
            dep.spec.workers[index].model,
            ctx.endpoint(index),
            ctx.system_url(index),
        )

        joined = False

        def ready() -> bool:
            nonlocal joined
            if cancelled is not None and cancelled.is_set():
                raise ServerStartError(
                    f"{proc.name}: the deployment is stopping", name=proc.name, log_path=proc.log_path
                )
            if client.get(f"{system_url}/health").status_code != 200:
                return False
            if not joined:
                dep.stack.join(client, dep.context, index)
                joined = True
            listed = dep.stack.listed_models(client, dep.context)
            if listed is not None and model not in listed:
                return False
            return endpoint in dep.dispatchable_endpoints(client)

        dep.startup_seconds[proc.name] = self._report.wait(
            proc,
            ready,
            timeout=dep.spec.startup_timeout,
            what=f"its /health answered 200 and the frontend listed model '{model}' on endpoint {endpoint}",
        )

    def respawn_worker(self, index: int) -> ManagedProcess:
        """Stop worker `index` (or reap it, if it exited) and start it again on its host and system port."""
        dep = self._dep
        with dep.lock:
            if dep.stopping.is_set():
                raise DeploymentStoppedError("the deployment is stopping")
            dep.workers[index].stop()
            gpu = gpu_for(index, dep.spec.workers[index], visible_gpus())
            dep.workers[index] = self.launch(self._worker_spec(index), gpu=gpu)
            return dep.workers[index]

    def wait_worker(self, index: int, *, cancelled: threading.Event | None = None) -> None:
        with clients.client(timeout=2.0) as client:
            self._wait_worker(client, index, cancelled=cancelled)

    def relaunch_service(self, role: str) -> ManagedProcess:
        with self._dep.lock:
            self._dep.services[role] = self.launch(self._service_specs[role])
        with clients.client(timeout=2.0) as client:
            self._wait_service(client, self._service_specs[role])
        return self._dep.services[role]


def stop_all(deployment: Launchable) -> list[BaseException]:
    """Stop the workers (together, in reverse order of start), then the frontend, then the services.

    Returns what failed to stop; a failure never keeps the rest running.
    """
    with deployment.lock:
        groups = [
            list(reversed(deployment.workers)),
            [deployment.frontend] if deployment.frontend else [],
            list(deployment.services.values()),
        ]
    errors: list[BaseException] = []
    for group in groups:
        try:
            stop_together(group)
        except Exception as exc:  # keep stopping the rest
            errors.append(exc)
    return errors


def _removal(path: Path) -> tuple[str, ...]:
    return ("rm", "-rf", "--", str(path))


def keep_scratch(path: Path) -> None:
    """Before a run makes `path` (`StackContext.scratch`): delete it should the harness die."""
    register_cleanup(_removal(path))


def drop_scratch(path: Path) -> None:
    """Delete `path` (kept by `keep_scratch`); once it is gone, the watchdog forgets it."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
    unregister_cleanup(_removal(path))


def delete_scratch(ctx: StackContext) -> list[BaseException]:
    """Delete what the run's processes used, once they have stopped; returns what failed."""
    errors: list[BaseException] = []
    for path in reversed(ctx.scratch_paths):
        try:
            drop_scratch(path)
        except OSError as exc:
            errors.append(exc)
    return errors
