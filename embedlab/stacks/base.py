"""What a stack must say: how to start its frontend and workers, and how to see them registered."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import httpx

from ..specs import DeploymentSpec, WorkerSpec


@dataclass(frozen=True, kw_only=True)
class ProcessSpec:
    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class StackContext:
    """One run of a stack: its directory, ports and names."""

    spec: DeploymentSpec
    run_dir: Path
    host: str
    frontend_port: int
    namespace: str
    python: str = sys.executable

    @property
    def frontend_url(self) -> str:
        return f"http://{self.host}:{self.frontend_port}"

    def endpoint(self, index: int) -> str:
        worker = self.spec.workers[index]
        return worker.endpoint or f"{self.namespace}.embed-worker-{index + 1}.generate"


class Stack(Protocol):
    name: str

    def prepare(self, ctx: StackContext) -> dict[str, str]:
        """Create per-run state; returns environment shared by every process of the run."""
        ...

    def frontend(self, ctx: StackContext) -> ProcessSpec: ...

    def worker(self, ctx: StackContext, index: int, worker: WorkerSpec, system_port: int) -> ProcessSpec: ...

    def registered_endpoints(self, client: httpx.Client, ctx: StackContext) -> set[str]:
        """Endpoint paths (`ns.comp.ep`) with a live instance the frontend knows."""
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
