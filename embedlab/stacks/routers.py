"""The routers users choose between, in front of embedlab's own workers: LiteLLM, vllm-router, sglang-router.

Each router runs from a venv of its own under `.routers/<venv>` (built by `make routers`
from the class's own `pins`, or under `$EMBEDLAB_ROUTERS`), since their pins must not
touch the workbench's. Each stack is the router (its frontend) combined with the workers it
fronts, standalone ones given by URL (`standalone.StandaloneWorkers`); the three Rust
routers (vllm-router, sglang-router and `smg.py`'s smg) share their command line and their
`/workers` API through a `RustRouter` part. What the routers probe on a worker (`/health`,
`/v1/models`, `/get_server_info`, `/get_load`) the worker answers; `/get_load`'s shape is
the router's (`load_format`).

`router_mode` takes the router's own policy names (None: the router's default).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import quote

import httpx

from ..cluster.spec import DeploymentSpec, WorkerSpec
from ..cluster.stack import BaseStack, Join, ProcessSpec, StackContext, router_venv
from ..cluster.worker_server import server_of
from ..errors import ConfigError, UnsupportedError
from ..evidence.split import Split
from .standalone import Standalone, StandaloneWorkers, snake_case_policy

__all__ = [
    "LiteLLMStack",
    "RouterRun",
    "RustRouter",
    "SglangRouterStack",
    "VllmRouterStack",
    "router_venv",
    "venv_program",
]


@dataclass(frozen=True, kw_only=True)
class RouterRun:
    """One run of a router: its standalone workers, and the port of its own counters (a Rust
    router's Prometheus exporter; LiteLLM's are not read)."""

    workers: Standalone
    metrics_port: int | None = None

    @property
    def metrics_url(self) -> str:
        return f"http://{self.workers.host}:{self.metrics_port}/metrics"


def venv_program(stack: BaseStack, relative: str) -> str:
    """A program of the stack's own venv; a ConfigError that says how to build it where missing."""
    path = router_venv(str(stack.venv)) / relative
    if not path.exists():
        raise ConfigError(f"the {stack.name} stack needs {path}: run `make routers` (see the README)")
    return str(path)


@dataclass(frozen=True)
class RustRouter:
    """What vllm-router, sglang-router and smg share: their flags, their metrics port, and the
    `/workers` list they answer, where each worker they hold says whether it is healthy."""

    workers: StandaloneWorkers

    def prepare(self, ctx: StackContext[Any]) -> RouterRun:
        # Each defaults its metrics to 0.0.0.0:29000: two at once would collide, so every run has its own.
        return RouterRun(workers=self.workers.prepare(ctx), metrics_port=ctx.reserve())

    def argv(
        self, ctx: StackContext[RouterRun], head: list[str], policy: str | None, *, worker_urls: bool = True
    ) -> list[str]:
        return [
            *head,
            "--host",
            ctx.host,
            "--port",
            str(ctx.frontend_port),
            "--prometheus-host",
            ctx.host,
            "--prometheus-port",
            str(ctx.state.metrics_port),
            *(["--worker-urls", *ctx.state.workers.urls] if worker_urls else []),
            "--policy",
            str(policy),
        ]

    def dispatchable(
        self, ctx: StackContext[RouterRun], health: Any, *, ready_only: bool = False
    ) -> set[str]:
        """The router's worker list: a worker it holds and calls healthy (and, `ready_only`,
        whose status is ready: smg lists a worker being removed until it is gone)."""
        endpoints = ctx.state.workers.endpoint_of
        return {
            endpoints[w["url"]]
            for w in health.get("workers", [])
            if w.get("is_healthy")
            and (not ready_only or w.get("status", "ready") == "ready")
            and w.get("url") in endpoints
        }

    def remove_by_id(self, client: httpx.Client, ctx: StackContext[RouterRun], index: int, name: str) -> None:
        """sglang-router's and smg's removal: by the id it lists the worker under, asynchronously
        (202): the deployment waits until it is gone."""
        url = ctx.state.workers.url(index)
        workers = client.get(f"{ctx.frontend_url}/workers").json().get("workers", [])
        ids = [w["id"] for w in workers if w.get("url") == url]
        if not ids:
            raise UnsupportedError(f"{name} does not list worker {index} ({url})")
        client.delete(f"{ctx.frontend_url}/workers/{ids[0]}").raise_for_status()

    def add(self, client: httpx.Client, ctx: StackContext[RouterRun], worker: dict[str, str]) -> None:
        client.post(f"{ctx.frontend_url}/workers", json=worker).raise_for_status()


def several_models(spec: DeploymentSpec) -> bool:
    return len(set(spec.models)) > 1


class VllmRouterStack(BaseStack):
    """vllm-router: the port opens once every worker answers /health; `/workers` lists them.

    One model's pool runs in its regular mode, which ignores the body's `model`. A pool of
    several models runs in its inference-gateway mode (`--enable-igw`, "multi-model
    support"): it starts with no worker, each worker joins through `POST /workers` with its
    `model_id`, and a request goes only to the workers of its model. Its log assigns each
    model a policy, yet one round-robin position serves them all (the README's finding).
    """

    name = venv = package = "vllm-router"
    pins = ("vllm-router==0.1.17",)
    policies: ClassVar[dict[str, Split]] = {
        "cache_aware": Split.REPORT,
        "round_robin": Split.EXACT,
        "random": Split.WEIGHTS,
        "power_of_two": Split.REPORT,
        "consistent_hash": Split.REPORT,
        "sticky_least_loaded": Split.REPORT,
        "kv_aware": Split.REPORT,
    }
    default_policy = "cache_aware"
    prefix_aware_mode = "cache_aware"  # a prefix tree of the text it routed, per worker
    model_aware = True  # by --enable-igw, for a pool of several models
    names_worker = True  # it passes the worker's `x-embedlab-worker` on
    workers_join = Join.BY_URL
    router: ClassVar[RustRouter] = RustRouter(StandaloneWorkers(load_format="vllm"))

    def policy(self, router_mode: str | None) -> str | None:
        return snake_case_policy(router_mode, self.default_policy)

    def prepare(self, ctx: StackContext[Any]) -> RouterRun:
        return self.router.prepare(ctx)

    def frontend(self, ctx: StackContext[RouterRun]) -> ProcessSpec:
        igw = several_models(ctx.spec)
        head = [venv_program(self, "bin/vllm-router")]
        argv = self.router.argv(ctx, head, self.policy(ctx.spec.router_mode), worker_urls=not igw)
        # Recheck the workers every second at start: its default, 30 s, costs 30 s when a
        # worker is not up at the first look.
        argv += [
            *(["--enable-igw"] if igw else []),
            "--worker-startup-check-interval",
            "1",
            "--worker-startup-timeout-secs",
            str(int(ctx.spec.startup_timeout)),
        ]
        return ProcessSpec(
            role="frontend",
            argv=argv + list(ctx.spec.frontend_args),
            ready_url=f"{ctx.frontend_url}/readiness",
        )

    def worker(
        self, ctx: StackContext[RouterRun], index: int, worker: WorkerSpec, system_port: int
    ) -> ProcessSpec:
        return self.router.workers.process(ctx, ctx.state.workers, index, worker, system_port)

    def health_url(self, ctx: StackContext[RouterRun]) -> str:
        return f"{ctx.frontend_url}/workers"

    def dispatchable_endpoints(self, ctx: StackContext[RouterRun], health: Any) -> set[str]:
        return self.router.dispatchable(ctx, health)

    def direct_url(self, client: httpx.Client, ctx: StackContext[RouterRun], index: int) -> str | None:
        return ctx.state.workers.url(index)

    def listed_models(self, client: httpx.Client, ctx: StackContext[RouterRun]) -> set[str] | None:
        return None  # its /v1/models is one worker's, passed through: it lists no model of its own

    def without_retries(self, spec: DeploymentSpec) -> tuple[str, ...]:
        return ("--disable-retries",)

    def _worker_json(self, ctx: StackContext[RouterRun], index: int) -> dict[str, str]:
        url = ctx.state.workers.url(index)
        if several_models(ctx.spec):
            return {"url": url, "model_id": ctx.spec.workers[index].model, "worker_type": "regular"}
        return {"url": url}

    def join(self, client: httpx.Client, ctx: StackContext[RouterRun], index: int) -> None:
        # In the gateway mode a worker exists for it only once posted; posting one it holds
        # replaces the entry (a worker started again joins again).
        if several_models(ctx.spec):
            self.router.add(client, ctx, self._worker_json(ctx, index))

    def drain(self, client: httpx.Client, ctx: StackContext[RouterRun], index: int) -> None:
        url = ctx.state.workers.url(index)
        client.delete(f"{ctx.frontend_url}/workers/{quote(url, safe='')}").raise_for_status()

    def resume(self, client: httpx.Client, ctx: StackContext[RouterRun], index: int) -> None:
        self.router.add(client, ctx, self._worker_json(ctx, index))


# What sglang-router 0.3.2 was seen to do with `--enable-igw` on a machine without internet.
SGLANG_IGW_OFFLINE = (
    "sglang-router 0.3.2 routes by the body's 'model' only in its inference-gateway mode "
    "(--enable-igw), and that mode does not start without internet: it panics loading the Harmony "
    "vocabulary for its gRPC router ('Failed to load Harmony encoding: error downloading or loading "
    "vocab file'). Its regular mode ignores the body's 'model'. smg, its successor, routes by model "
    "in its regular mode (--stack smg)"
)


class SglangRouterStack(BaseStack):
    """sglang-router: the port opens at once and workers join in the background; `/readiness` waits for one."""

    name = venv = package = "sglang-router"
    pins = ("sglang-router==0.3.2",)
    policies: ClassVar[dict[str, Split]] = {
        "cache_aware": Split.REPORT,
        "round_robin": Split.EXACT,
        "random": Split.WEIGHTS,
        "power_of_two": Split.REPORT,
        "manual": Split.REPORT,
    }
    default_policy = "cache_aware"
    prefix_aware_mode = "cache_aware"  # a prefix tree of the text it routed, per worker
    model_aware = False  # its gateway mode cannot start offline: SGLANG_IGW_OFFLINE
    names_worker = True  # it passes the worker's `x-embedlab-worker` on
    workers_join = Join.BY_URL
    router: ClassVar[RustRouter] = RustRouter(StandaloneWorkers(load_format="sglang"))

    def policy(self, router_mode: str | None) -> str | None:
        return snake_case_policy(router_mode, self.default_policy)

    def prepare(self, ctx: StackContext[Any]) -> RouterRun:
        if several_models(ctx.spec):
            raise UnsupportedError(SGLANG_IGW_OFFLINE)
        return self.router.prepare(ctx)

    def frontend(self, ctx: StackContext[RouterRun]) -> ProcessSpec:
        head = [venv_program(self, "bin/python"), "-m", "sglang_router.launch_router"]
        argv = self.router.argv(ctx, head, self.policy(ctx.spec.router_mode))
        return ProcessSpec(
            role="frontend",
            argv=argv + list(ctx.spec.frontend_args),
            ready_url=f"{ctx.frontend_url}/readiness",
        )

    def worker(
        self, ctx: StackContext[RouterRun], index: int, worker: WorkerSpec, system_port: int
    ) -> ProcessSpec:
        return self.router.workers.process(ctx, ctx.state.workers, index, worker, system_port)

    def health_url(self, ctx: StackContext[RouterRun]) -> str:
        return f"{ctx.frontend_url}/workers"

    def dispatchable_endpoints(self, ctx: StackContext[RouterRun], health: Any) -> set[str]:
        return self.router.dispatchable(ctx, health)

    def direct_url(self, client: httpx.Client, ctx: StackContext[RouterRun], index: int) -> str | None:
        return ctx.state.workers.url(index)

    def without_retries(self, spec: DeploymentSpec) -> tuple[str, ...]:
        return ("--disable-retries",)

    def drain(self, client: httpx.Client, ctx: StackContext[RouterRun], index: int) -> None:
        self.router.remove_by_id(client, ctx, index, self.name)

    def resume(self, client: httpx.Client, ctx: StackContext[RouterRun], index: int) -> None:
        self.router.add(client, ctx, {"url": ctx.state.workers.url(index)})


class LiteLLMStack(BaseStack):
    """The LiteLLM proxy: one deployment per worker under its model's name, `simple-shuffle` by default.

    `frontend_args` may hold `--router-setting KEY=VALUE` pairs, written into the config's
    `router_settings` (e.g. `num_retries=0`); the rest go to the `litellm` command line.

    A master key: `LITELLM_MASTER_KEY` in the run's environment (the harness's own, or
    `DeploymentSpec(env=...)`), which the proxy reads itself: no file of the run holds it. The
    proxy then refuses requests without it, and the run's clients send it (`frontend_key_env`).
    """

    name = venv = package = "litellm"
    pins = ("litellm[proxy]==1.108.7",)
    policies: ClassVar[dict[str, Split]] = {
        "simple_shuffle": Split.WEIGHTS,
        "least_busy": Split.REPORT,
        "usage_based_routing": Split.REPORT,
        "usage_based_routing_v2": Split.REPORT,
        "latency_based_routing": Split.REPORT,
        "cost_based_routing": Split.REPORT,
    }
    default_policy = "simple_shuffle"
    model_aware = True  # one deployment per worker under its model's name
    names_worker = True  # it passes the worker's `x-embedlab-worker` on
    workers_join = Join.BY_URL
    frontend_key_env = "LITELLM_MASTER_KEY"
    lacks: ClassVar[dict[str, str]] = {
        "drains": "the LiteLLM proxy deletes a deployment at run time only with a database (STORE_MODEL_IN_DB)",
    }
    workers: ClassVar[StandaloneWorkers] = StandaloneWorkers(load_format="vllm")

    def policy(self, router_mode: str | None) -> str | None:
        return snake_case_policy(router_mode, self.default_policy)

    def prepare(self, ctx: StackContext[Any]) -> RouterRun:
        return RouterRun(workers=self.workers.prepare(ctx))

    def frontend(self, ctx: StackContext[RouterRun]) -> ProcessSpec:
        settings, args = _router_settings(ctx.spec.frontend_args)
        config = {
            "model_list": [
                {
                    "model_name": worker.model,
                    "litellm_params": {
                        "model": f"openai/{worker.model}",
                        "api_base": url + server_of(worker).prefix,
                        "api_key": "none",
                    },
                    # Else its /health would call /v1/chat/completions and call every deployment unhealthy.
                    "model_info": {"mode": "embedding"},
                }
                for worker, url in zip(ctx.spec.workers, ctx.state.workers.urls)
            ],
            "router_settings": {
                "routing_strategy": str(self.policy(ctx.spec.router_mode)).replace("_", "-"),
                **settings,
            },
            "litellm_settings": {"telemetry": False},
        }
        path = ctx.scratch(ctx.run_dir / "litellm.yaml")
        path.write_text(json.dumps(config, indent=2))  # YAML reads JSON
        argv = [
            venv_program(self, "bin/litellm"),
            "--config",
            str(path),
            "--host",
            ctx.host,
            "--port",
            str(ctx.frontend_port),
            "--num_workers",
            "1",
        ]
        env = {
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # else it downloads a price list at every start
            # Without LITELLM_MASTER_KEY the proxy runs with no key: it listens on loopback only.
            "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true",
        }
        return ProcessSpec(
            role="frontend", argv=argv + args, env=env, ready_url=f"{ctx.frontend_url}/health/readiness"
        )

    def worker(
        self, ctx: StackContext[RouterRun], index: int, worker: WorkerSpec, system_port: int
    ) -> ProcessSpec:
        return self.workers.process(ctx, ctx.state.workers, index, worker, system_port)

    def health_url(self, ctx: StackContext[RouterRun]) -> str:
        # Not /health: that sends a real embedding request to every deployment, and moves the counters.
        return f"{ctx.frontend_url}/v1/model/info"

    def dispatchable_endpoints(self, ctx: StackContext[RouterRun], health: Any) -> set[str]:
        bases = {str((m.get("litellm_params") or {}).get("api_base", "")) for m in health.get("data", [])}
        return {
            ctx.endpoint(i)
            for i, (worker, url) in enumerate(zip(ctx.spec.workers, ctx.state.workers.urls))
            if url + server_of(worker).prefix in bases
        }

    def direct_url(self, client: httpx.Client, ctx: StackContext[RouterRun], index: int) -> str | None:
        return ctx.state.workers.url(index)

    def without_retries(self, spec: DeploymentSpec) -> tuple[str, ...]:
        return ("--router-setting", "num_retries=0")


def _router_settings(args: tuple[str, ...]) -> tuple[dict[str, Any], list[str]]:
    settings: dict[str, Any] = {}
    rest: list[str] = []
    items = iter(args)
    for arg in items:
        if arg == "--router-setting":
            key, _, value = next(items, "").partition("=")
            try:
                settings[key] = json.loads(value)
            except ValueError:
                settings[key] = value
        else:
            rest.append(arg)
    return settings, rest
