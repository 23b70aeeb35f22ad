"""ScenarioPlan: the plain values of a notebook's parameters cell or the CLI, turned into a run.

`run_scenario(plan)` launches the deployment the plan describes (or attaches to one),
runs the scenario, and tears everything down, also when the scenario fails.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from .deployment import Deployment, Target, attach
from .errors import ConfigError
from .metrics import DEFAULT_METRIC
from .scenarios import DEFAULT_SAME_MODEL_REQUESTS, ScenarioResult, multi_model_dispatch, same_model_load_balance
from .specs import SCENARIOS, DeploymentSpec, WorkerSpec

TINY_MODELS = {"tiny-bert": "bert", "tiny-qwen3": "qwen3"}


def _tuple(value: Any, kind: Callable[[Any], Any] = str) -> tuple[Any, ...]:
    """Accept a list, a tuple, a comma-separated string, or nothing."""
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        return tuple(kind(v.strip()) for v in value.split(",") if v.strip())
    if isinstance(value, Iterable):
        return tuple(kind(v) for v in value)
    return (kind(value),)


@dataclass(frozen=True, kw_only=True)
class ScenarioPlan:
    """Everything one scenario run needs, as plain values."""

    scenario: str
    stack: str = "embedded"
    engine: str = "hash"
    models: tuple[str, ...] = ()
    model_paths: tuple[str, ...] = ()
    workers: int = 2
    weights: tuple[float, ...] = ()
    requests: int | None = None  # None: the scenario's default (40 same-model, 10 per burst multi-model, 200 failover)
    concurrency: int | None = None  # None: the scenario's default (4; 8 for failover)
    seed: int | None = 0
    router_mode: str = "weighted-random"
    pooling: str | None = None
    max_model_len: int | None = None
    frontend_url: str = ""
    system_urls: tuple[str, ...] = ()
    metric: str = str(DEFAULT_METRIC)
    run_dir: str = ""
    startup_timeout: float = 180.0
    kill_after: int = 50  # failover: the worker dies after this many responses
    victim: int = 1  # failover: the worker that dies
    worker_args: tuple[str, ...] = ()
    frontend_args: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.scenario not in SCENARIOS:
            raise ConfigError(f"unknown scenario {self.scenario!r}; choose from {', '.join(SCENARIOS)}")
        for name in ("models", "model_paths", "system_urls", "worker_args", "frontend_args"):
            object.__setattr__(self, name, _tuple(getattr(self, name)))
        object.__setattr__(self, "weights", _tuple(self.weights, float))
        if (self.requests is not None and self.requests < 1) or (self.concurrency is not None and self.concurrency < 1):
            raise ConfigError("requests and concurrency must be at least 1")
        if bool(self.frontend_url) != bool(self.system_urls):
            raise ConfigError("attach mode needs both a frontend URL and one system URL per worker")

    @classmethod
    def from_params(cls, **params: Any) -> "ScenarioPlan":
        """Build from a notebook's parameters; unknown names are an error, not a silent no-op."""
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(params) - known)
        if unknown:
            raise ConfigError(f"unknown scenario parameters: {', '.join(unknown)}")
        if params.get("seed") in ("", None):
            params["seed"] = None
        return cls(**params)

    @property
    def attached(self) -> bool:
        return bool(self.frontend_url)

    def resolved_models(self) -> tuple[tuple[str, ...], tuple[str | None, ...]]:
        """Model names and paths, with the defaults for this engine filled in."""
        models, paths = self.models, self.model_paths
        if self.engine == "hash":
            if not models:
                models = ("model-a", "model-b") if self.scenario == "multi-model" else ("embed-model",)
            return models, (None,) * len(models)
        if not models:
            models = ("tiny-bert", "tiny-qwen3") if self.scenario == "multi-model" else ("tiny-bert",)
        if paths and len(paths) not in (1, len(models)):
            raise ConfigError(f"{len(models)} models but {len(paths)} model paths")
        if not paths:
            paths = tuple(str(_tiny_path(m)) for m in models)
        elif len(paths) == 1:
            paths = paths * len(models)
        return models, paths

    def deployment_spec(self) -> DeploymentSpec:
        models, paths = self.resolved_models()
        common = dict(
            engine=self.engine, pooling=self.pooling, max_model_len=self.max_model_len, extra_args=self.worker_args
        )
        if self.scenario != "multi-model":
            weights = self.weights or (1.0,) * self.workers
            if len(weights) != self.workers:
                raise ConfigError(f"{self.workers} workers but {len(weights)} weights")
            workers = tuple(WorkerSpec(model=models[0], model_path=paths[0], weight=w, **common) for w in weights)  # type: ignore[arg-type]
        else:
            workers = tuple(WorkerSpec(model=m, model_path=p, **common) for m, p in zip(models, paths))  # type: ignore[arg-type]
        return DeploymentSpec(
            stack=self.stack, workers=workers, router_mode=self.router_mode, seed=self.seed,
            startup_timeout=self.startup_timeout, frontend_args=self.frontend_args,
        )

    def deployment(self) -> Deployment:
        """The Deployment this plan launches, not started yet (notebooks that keep one across cells)."""
        if self.attached:
            raise ConfigError("this plan attaches to a running deployment; it has nothing to launch")
        return Deployment(self.deployment_spec(), run_dir=self.run_dir or None)

    def run_on(self, deployment: Deployment | Target, *, progress: bool = False) -> ScenarioResult:
        """This plan's scenario on a deployment that the caller started and stops."""
        return _run_on(self, deployment, progress)

    def target(self) -> Target:
        models: Sequence[str | None] | None = None
        if self.models:
            if self.scenario == "same-model":
                models = [self.models[0]] * len(self.system_urls)
            elif len(self.models) == len(self.system_urls):
                models = list(self.models)
            else:
                raise ConfigError(f"{len(self.system_urls)} system URLs but {len(self.models)} models")
        return attach(self.frontend_url, self.system_urls, models=models, metric=self.metric, weights=self.weights or None)

    def slug(self) -> str:
        """A short name for outputs: runs with other parameters never overwrite this one."""
        parts = [self.scenario, self.stack, self.engine]
        if self.models:
            parts.append("+".join(self.models))
        if self.scenario == "same-model" and self.workers != 2:
            parts.append(f"{self.workers}w")
        if self.weights:
            parts.append("w" + ":".join(f"{w:g}" for w in self.weights))
        if self.attached:
            parts.append("attached")
        return "-".join(p.replace("/", "_") for p in parts)


def _tiny_path(model: str) -> Path:
    if model not in TINY_MODELS:
        raise ConfigError(f"model '{model}' needs a --model-path (built-in tiny models: {', '.join(TINY_MODELS)})")
    from .engines.tiny import cached_tiny_model

    return cached_tiny_model(TINY_MODELS[model])


def run_scenario(plan: ScenarioPlan, *, progress: bool = False, on_deployment: Callable[[Deployment], None] | None = None) -> ScenarioResult:
    """Launch (or attach), run the plan's scenario, tear down; returns the result."""
    if plan.attached:
        return _run_on(plan, plan.target(), progress)
    deployment = plan.deployment()
    with deployment:
        if on_deployment is not None:
            on_deployment(deployment)
        result = _run_on(plan, deployment, progress)
    result.extra["startup_seconds"] = deployment.startup_seconds
    result.extra["run_dir"] = str(deployment.run_dir)
    return result


def _run_on(plan: ScenarioPlan, deployment: Deployment | Target, progress: bool) -> ScenarioResult:
    if plan.scenario == "failover":
        from .resilience import failover

        if not isinstance(deployment, Deployment):
            raise ConfigError("failover kills a worker: it cannot run attached")
        return failover(
            deployment, requests=plan.requests or 200, concurrency=plan.concurrency or 8, kill_after=plan.kill_after,
            victim=plan.victim, progress=progress,
        )
    if plan.scenario == "same-model":
        return same_model_load_balance(
            deployment, requests=plan.requests or DEFAULT_SAME_MODEL_REQUESTS, concurrency=plan.concurrency or 4,
            model=plan.models[0] if plan.models else None, weights=plan.weights or None, progress=progress,
        )
    return multi_model_dispatch(
        deployment, plan.resolved_models()[0] if not plan.attached or plan.models else None,
        requests_per_burst=plan.requests or 10, concurrency=plan.concurrency or 4, progress=progress,
    )


def with_overrides(plan: ScenarioPlan, **changes: Any) -> ScenarioPlan:
    return replace(plan, **changes)
