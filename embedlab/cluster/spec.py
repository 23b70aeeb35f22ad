"""Frozen descriptions of what to launch: a deployment is a stack plus an ordered list of workers.

Plain data: which stacks exist is the stack registry's business (`embedlab.stacks`), and a
`Deployment` refuses an unknown one before anything starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..defaults import (
    DISCOVERY,
    ENGINE,
    LEASE_TTL_S,
    METRIC,
    RESTART_BACKOFF_S,
    RESTART_LIMIT,
    RESTART_WINDOW_S,
    STACK,
    STARTUP_TIMEOUT_S,
    WORKER_SERVER,
)
from ..engines import engine_traits
from ..errors import ConfigError

RESTART_POLICIES = ("never", "on-exit")
DISCOVERY_BACKENDS = ("file", "etcd")
# A worker's part in disaggregated serving: it only prefills (computes the prompt's KV cache and
# hands it on) or only decodes; a worker with no stage does both.
STAGES = ("prefill", "decode")


@dataclass(frozen=True, kw_only=True)
class WorkerSpec:
    """One worker. Its index in `DeploymentSpec.workers` is its index in every check."""

    model: str
    engine: str = ENGINE
    model_path: Path | str | None = None
    endpoint: str | None = None  # default: <namespace>.embed-worker-<n>.generate
    weight: float = 1.0
    device: str | None = None  # None: one GPU per worker where GPUs exist, else cpu
    pooling: str | None = None
    max_model_len: int | None = None
    extra_args: tuple[str, ...] = ()
    # The program the worker runs (`cluster.worker_server`): embedlab's own worker ("embedlab",
    # with `engine`), "vllm-serve", "infinity" (both serve `model_path`), or "dynamo-vllm":
    # Dynamo's own `python -m dynamo.vllm --embedding-worker`.
    server: str = WORKER_SERVER
    # Metrics ports of one worker: 1, or one per ingest process of embedlab's worker
    # (`--api-processes N`, each process counting its own requests on a port of its own, as
    # Dynamo's multi-process embedding workers do); the checks sum them.
    metrics_ports: int = 1
    host: int | None = None  # the simulated host it runs on; None: spread round-robin (see DeploymentSpec)
    restart: str = "never"  # or "on-exit": the deployment starts it again, on its host, whenever it exits
    # on-exit: the wait before a restart (seconds), doubled for each restart in the window; and
    # at most `restart_limit` restarts within `restart_window` seconds: its next exit is "gave up".
    restart_backoff: float = RESTART_BACKOFF_S
    restart_limit: int = RESTART_LIMIT
    restart_window: float = RESTART_WINDOW_S
    stage: str | None = None  # "prefill" or "decode" (STAGES); None: aggregated, it does both

    @property
    def runs_vllm(self) -> bool:
        """Its engine runs vLLM (whether its server runs that engine, or is vLLM itself, the
        server says: `worker_server.runs_vllm`)."""
        return engine_traits(self.engine).runs_vllm

    def __post_init__(self) -> None:
        if not self.model:
            raise ConfigError("a worker needs a model name")
        if self.weight <= 0:
            raise ConfigError(f"worker weight must be positive, got {self.weight}")
        # By the engine's trait alone: a spec's engine is the hash one unless it says otherwise,
        # and a server of its own gets a model directory from the plan (`worker_server.model_dir`).
        if self.model_path is None and engine_traits(self.engine).needs_model:
            raise ConfigError(f"the {self.engine} engine needs a model_path")
        ports = self.metrics_ports
        if isinstance(ports, bool) or not isinstance(ports, int) or ports < 1:
            raise ConfigError(f"metrics_ports must be a whole number of at least 1, got {ports!r}")
        if self.endpoint is not None and len(self.endpoint.split(".")) != 3:
            raise ConfigError(f"endpoint must be 'namespace.component.endpoint', got {self.endpoint!r}")
        if self.stage is not None and self.stage not in STAGES:
            raise ConfigError(f"stage must be one of {', '.join(STAGES)} or none, got {self.stage!r}")
        if self.restart not in RESTART_POLICIES:
            raise ConfigError(f"restart must be one of {', '.join(RESTART_POLICIES)}, got {self.restart!r}")
        limit = self.restart_limit
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigError(f"restart_limit must be a whole number of at least 1, got {limit!r}")
        if not self.restart_backoff >= 0:
            raise ConfigError(f"restart_backoff must be 0 or more seconds, got {self.restart_backoff!r}")
        if not self.restart_window > 0:
            raise ConfigError(
                f"restart_window must be a positive number of seconds, got {self.restart_window!r}"
            )


ENDPOINT_LAYOUTS = ("worker", "model")


@dataclass(frozen=True, kw_only=True)
class DeploymentSpec:
    """A frontend of `stack` and its workers."""

    stack: str = STACK
    workers: tuple[WorkerSpec, ...]
    router_mode: str | None = None  # the frontend's policy, in its own names; None: its default
    seed: int | None = None
    namespace: str | None = (
        None  # default: the stack's (`BaseStack.namespace`): "dynamo" on embedded, else unique
    )
    frontend_args: tuple[str, ...] = ()
    startup_timeout: float = STARTUP_TIMEOUT_S
    lease_ttl: float = LEASE_TTL_S
    metric: str = METRIC  # the counter the checks read on every worker, e.g. 'name{label="value"}'
    env: tuple[tuple[str, str], ...] = field(default=())
    # Host 0 is the harness's own; hosts 1..N-1 are network namespaces the run creates.
    hosts: int = 1
    discovery: str = DISCOVERY  # file (one host), or etcd, which the run starts (where the stack has it)
    # Dynamo's canary health checks on every worker, where the stack sends them (`SendsCanaries`).
    canaries: bool = False
    # Where the workers' endpoints come from, unless a WorkerSpec names its own: "worker", one
    # endpoint each (as the seed's launch script names them), or "model", one per model, its
    # workers instances of one endpoint (what a router that chooses inside one endpoint needs).
    endpoints: str = "worker"

    def __post_init__(self) -> None:
        if self.endpoints not in ENDPOINT_LAYOUTS:
            raise ConfigError(
                f"endpoints must be one of {', '.join(ENDPOINT_LAYOUTS)}, got {self.endpoints!r}"
            )
        if not self.workers:
            raise ConfigError("a deployment needs at least one worker")
        object.__setattr__(self, "workers", tuple(self.workers))
        if isinstance(self.hosts, bool) or not isinstance(self.hosts, int) or self.hosts < 1:
            raise ConfigError(f"hosts must be a whole number of at least 1, got {self.hosts!r}")
        if not isinstance(self.canaries, bool):
            raise ConfigError(f"canaries must be true or false, got {self.canaries!r}")
        if self.discovery not in DISCOVERY_BACKENDS:
            raise ConfigError(
                f"discovery must be one of {', '.join(DISCOVERY_BACKENDS)}, got {self.discovery!r}"
            )
        for index, worker in enumerate(self.workers):
            if worker.host is not None and not 0 <= worker.host < self.hosts:
                raise ConfigError(
                    f"worker {index} is placed on host {worker.host}, but the deployment has hosts 0..{self.hosts - 1}"
                )
        for model in {w.model for w in self.workers if w.stage is not None}:
            stages = {w.stage for w in self.workers if w.model == model}
            if stages != set(STAGES):
                raise ConfigError(
                    f"model {model!r}: a disaggregated model needs prefill and decode workers, and no "
                    f"others; its workers are {', '.join(sorted(str(s or 'aggregated') for s in stages))}"
                )

    def host_of(self, index: int) -> int:
        """The host worker `index` runs on: its own `host`, else round-robin over the hosts
        other than host 0 (which holds the frontend and etcd), else host 0."""
        placed = self.workers[index].host
        if placed is not None:
            return placed
        return 1 + index % (self.hosts - 1) if self.hosts > 1 else 0

    @property
    def models(self) -> list[str]:
        """Worker index -> model name."""
        return [w.model for w in self.workers]

    @classmethod
    def same_model(
        cls,
        model: str = "embed-model",
        *,
        workers: int = 2,
        engine: str = ENGINE,
        model_path: Path | str | None = None,
        weights: Sequence[float] | None = None,
        stack: str = STACK,
        **options: Any,
    ) -> DeploymentSpec:
        """N workers of one model, each on its own endpoint."""
        weights = list(weights) if weights else [1.0] * workers
        if len(weights) != workers:
            raise ConfigError(f"{workers} workers but {len(weights)} weights")
        specs = tuple(
            WorkerSpec(model=model, engine=engine, model_path=model_path, weight=float(w)) for w in weights
        )
        return cls(stack=stack, workers=specs, **options)

    @classmethod
    def multi_model(
        cls,
        models: Sequence[str],
        *,
        engine: str = ENGINE,
        model_paths: Sequence[Path | str | None] | None = None,
        stack: str = STACK,
        **options: Any,
    ) -> DeploymentSpec:
        """One worker per model, in order: worker i serves models[i]."""
        paths = list(model_paths) if model_paths else [None] * len(models)
        if len(paths) != len(models):
            raise ConfigError(f"{len(models)} models but {len(paths)} model paths")
        specs = tuple(WorkerSpec(model=m, engine=engine, model_path=p) for m, p in zip(models, paths))
        return cls(stack=stack, workers=specs, **options)

    @classmethod
    def pool(
        cls,
        models: Sequence[str],
        *,
        replicas: int | Sequence[int] = 2,
        weights: Sequence[float] | None = None,
        engine: str = ENGINE,
        model_paths: Sequence[Path | str | None] | None = None,
        stack: str = STACK,
        **options: Any,
    ) -> DeploymentSpec:
        """M models with K replicas each (or `replicas[m]` of model m), model by model: worker
        indices 0..K-1 serve models[0], the next K models[1], and so on; each worker on an
        endpoint of its own, as the seed names them. `weights`, one per worker in that order."""
        counts = [replicas] * len(models) if isinstance(replicas, int) else list(replicas)
        if len(counts) != len(models) or any(isinstance(k, bool) or k < 1 for k in counts):
            raise ConfigError(f"{len(models)} models need one replica count of at least 1 each, got {counts}")
        paths = list(model_paths) if model_paths else [None] * len(models)
        if len(paths) != len(models):
            raise ConfigError(f"{len(models)} models but {len(paths)} model paths")
        shapes = [(m, p) for m, p, k in zip(models, paths, counts) for _ in range(k)]
        weights = list(weights) if weights else [1.0] * len(shapes)
        if len(weights) != len(shapes):
            raise ConfigError(f"{len(shapes)} workers but {len(weights)} weights")
        specs = tuple(
            WorkerSpec(model=m, engine=engine, model_path=p, weight=float(w))
            for (m, p), w in zip(shapes, weights)
        )
        return cls(stack=stack, workers=specs, **options)
