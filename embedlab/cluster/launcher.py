"""Starting a run's processes and knowing when each is ready; starting one again.

The order is the stack's: its services first (etcd), each until its `ready_url` answers;
then the frontend and the workers side by side (a worker registers as soon as the frontend
answers, so start-up costs one interpreter start, not two in a row); then each worker until
its /health answers, the frontend lists its model and dispatches to its endpoint. A worker
that must start again (a fault, the restart policy) comes back through `respawn_worker`,
the one relaunch. `provisioning.py` decides what each process gets (its folder, GPU, vLLM
settings); this module runs them. The launcher builds the run's `Processes`
(`processes.py`), which owns them and their lock, and is the only part that puts a process
in it; the faults, the restart policy and steering are given the launcher, never the deployment.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from ..defaults import (
    CUDA_VISIBLE_ENV,
    HTTP_PORT_ENV,
    STATE_DIR_ENV,
    STOP_TIMEOUT_S,
    SYSTEM_PORT_ENV,
    TOKEN_ENV,
    VLLM_CACHE_ENV,
    VLLM_STOP_TIMEOUT_S,
)
from ..errors import DeploymentStoppedError, ServerStartError
from ..evidence import clients
from ..plugins import child_env
from .managed_process import ManagedProcess, register_cleanup, unregister_cleanup
from .processes import Processes
from .provisioning import gpu_for, visible_gpus, vllm_worker_env
from .worker_server import runs_vllm, server_of

if TYPE_CHECKING:
    from .events import LaunchReport
    from .stack import BaseStack, ProcessSpec, StackContext

__all__ = ["Launcher", "delete_scratch", "drop_scratch", "keep_scratch"]


class Launcher:
    """The processes of one run of `stack` in `ctx`, which the stack prepared (`prepared`: its environment).

    It builds the run's `Processes` (`processes`) and fills it, as the only part that starts one.
    """

    def __init__(
        self, stack: BaseStack, ctx: StackContext, *, report: LaunchReport, prepared: Mapping[str, str]
    ) -> None:
        self.stack = stack
        self.processes = Processes(ctx.spec)
        self._ctx = ctx
        self._report = report
        self._started = False
        # Safe-path mode and absolute plugin paths: no process of the run imports from its folder.
        self.env = child_env({**os.environ, **prepared, **dict(ctx.spec.env)})
        # The user's own overrides must not leak in and point processes at other ports.
        for name in (SYSTEM_PORT_ENV, HTTP_PORT_ENV, CUDA_VISIBLE_ENV):
            self.env.pop(name, None)
        self._service_specs: dict[str, ProcessSpec] = {}

    @property
    def context(self) -> StackContext:
        """The run's context; once it has started, a `DeploymentStoppedError` when it is stopping or its
        frontend has exited (a restart or a wait then ends at once, saying why)."""
        if self._started:
            if self.processes.stopping.is_set():
                raise DeploymentStoppedError()
            self.processes.check_frontend()
        return self._ctx

    @property
    def token(self) -> str | None:
        """The token the run's processes were given (EMBEDLAB_TOKEN), where one is set."""
        return self.env.get(TOKEN_ENV)

    def dispatchable_endpoints(self, client: httpx.Client) -> set[str]:
        """The endpoint paths the frontend would dispatch to now."""
        ctx = self.context
        return self.stack.dispatchable_endpoints(ctx, client.get(self.stack.health_url(ctx)).json())

    def start_all(self) -> None:
        procs, ctx, spec = self.processes, self._ctx, self._ctx.spec
        with clients.client(timeout=2.0) as client:
            for service in self.stack.services(ctx):
                self._service_specs[service.role] = service
                with procs.lock:
                    procs.services[service.role] = self.launch(service)
                self._wait_service(client, service)
            frontend = self.stack.frontend(ctx)
            started = self.launch(frontend)
            with procs.lock:
                procs.frontend = started
            ready_url = frontend.ready_url or f"{ctx.frontend_url}/health"
            gpus = visible_gpus()
            for index, worker in enumerate(spec.workers):
                launched = self.launch(self._worker_spec(index), gpu=gpu_for(index, worker, gpus))
                with procs.lock:
                    procs.workers.append(launched)
            procs.startup_seconds["frontend"] = self._report.wait(
                started,
                lambda: client.get(ready_url).status_code == 200,
                timeout=spec.startup_timeout,
                what=f"{ready_url} answered 200",
            )
            for index in range(len(spec.workers)):
                self._wait_worker(client, index)
        self._started = True

    def _worker_spec(self, index: int) -> ProcessSpec:
        ctx = self.context
        return self.stack.worker(ctx, index, self.processes.worker_spec(index), ctx.system_ports[index])

    def launch(self, pspec: ProcessSpec, *, gpu: str | None = None) -> ManagedProcess:
        """Start `pspec` with the run's environment, its own on top, on its host; its log in the run dir."""
        ctx = self.context
        run_dir = ctx.run_dir
        env = {k: v for k, v in self.env.items() if not (pspec.unset and k.startswith(pspec.unset))}
        state_dir = ctx.scratch(run_dir / f"{pspec.file_stem}-state")
        env.update({**pspec.env, STATE_DIR_ENV: str(state_dir)})
        stop_timeout = STOP_TIMEOUT_S
        if pspec.worker is not None and runs_vllm(ctx.spec.workers[pspec.worker]):
            env.update(vllm_worker_env(pspec.worker, run_dir=run_dir, env=env, on_gpu=bool(gpu)))
            if Path(env[VLLM_CACHE_ENV]).parent == run_dir:  # the run's own, not one the user keeps
                ctx.scratch(Path(env[VLLM_CACHE_ENV]))
            stop_timeout = VLLM_STOP_TIMEOUT_S
        if pspec.state_env is not None:
            env.update(pspec.state_env(state_dir, env))
        if gpu is not None:
            env[CUDA_VISIBLE_ENV] = gpu
        on_host = ctx.host_of(pspec.worker) if pspec.worker is not None else None
        argv = on_host.wrap(pspec.argv) if on_host is not None else pspec.argv
        log_path = run_dir / f"{pspec.file_stem}.log"
        proc = ManagedProcess(pspec.name, argv, log_path=log_path, env=env, stop_timeout=stop_timeout)
        return self._report.started(proc.start())

    def _wait_service(self, client: httpx.Client, service: ProcessSpec) -> None:
        proc, url = self.processes.services[service.role], service.ready_url
        if url is not None:
            self.processes.startup_seconds[proc.name] = self._report.wait(
                proc,
                lambda: client.get(url).status_code == 200,
                timeout=self._ctx.spec.startup_timeout,
                what=f"{url} answered 200",
            )

    def _wait_worker(
        self, client: httpx.Client, index: int, *, cancelled: threading.Event | None = None
    ) -> None:
        ctx, stack = self._ctx, self.stack
        proc = self.processes.workers[index]
        model, endpoint, system_url = (
            ctx.spec.workers[index].model,
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
            if client.get(f"{system_url}{server_of(ctx.spec.workers[index]).ready_path}").status_code != 200:
                return False
            if not joined:
                stack.join(client, self.context, index)
                joined = True
            listed = stack.listed_models(client, self.context)
            if listed is not None and model not in listed:
                return False
            # Workers that share an endpoint (one per model) are each an instance of it: this one is
            # listed once the endpoint has as many instances as its workers up to this one.
            sharing = sum(1 for i in range(index + 1) if ctx.endpoint(i) == endpoint)
            health = client.get(stack.health_url(ctx)).json()
            return stack.dispatchable_instances(ctx, health).get(endpoint, 0) >= sharing

        self.processes.startup_seconds[proc.name] = self._report.wait(
            proc,
            ready,
            timeout=ctx.spec.startup_timeout,
            what=f"its /health answered 200 and the frontend listed model '{model}' on endpoint {endpoint}",
        )

    def respawn_worker(self, index: int) -> ManagedProcess:
        """Stop worker `index` (or reap it, if it exited) and start it again on its host and system
        port, with its live weight. A run that is stopping starts nothing new."""
        procs = self.processes
        with procs.lock:
            if procs.stopping.is_set():
                raise DeploymentStoppedError("the deployment is stopping")
            procs.workers[index].stop()
            gpu = gpu_for(index, procs.spec.workers[index], visible_gpus())
            procs.workers[index] = self.launch(self._worker_spec(index), gpu=gpu)
            return procs.workers[index]

    def wait_worker(self, index: int, *, cancelled: threading.Event | None = None) -> None:
        """Wait until worker `index` serves: its /health answers and the frontend dispatches to it."""
        with clients.client(timeout=2.0) as client:
            self._wait_worker(client, index, cancelled=cancelled)

    def relaunch_service(self, role: str) -> ManagedProcess:
        """Start service `role` (etcd) again from its spec, on its ports and data, and wait until it is ready."""
        with self.processes.lock:
            self.processes.services[role] = self.launch(self._service_specs[role])
        with clients.client(timeout=2.0) as client:
            self._wait_service(client, self._service_specs[role])
        return self.processes.services[role]


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
