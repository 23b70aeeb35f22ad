"""The routers users choose between, in front of embedlab's own workers: LiteLLM, vllm-router, sglang-router.

Each router runs from a venv of its own under `.routers/<name>` (built by `make routers`
from pyproject.toml's `router-*` pins, or under `$EMBEDLAB_ROUTERS`), since their pins
must not touch the workbench's. The workers are `embedlab worker`s that register with
nothing: each listens on a port the run reserves, and the router is given their URLs.
What the routers probe on a worker (`/health`, `/v1/models`, `/get_server_info`,
`/get_load`) the worker answers; `/get_load`'s shape is the router's (`load_format`).

`router_mode` takes the router's own policy names (None: the router's default).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from ..defaults import ROUTERS_ENV
from ..errors import ConfigError, UnsupportedError
from ..specs import DeploymentSpec, WorkerSpec
from .base import ProcessSpec, StackContext, system_port_env, worker_engine_args

__all__ = ["LiteLLMStack", "SglangRouterStack", "VllmRouterStack", "router_venv"]


def router_venv(name: str) -> Path:
    """The venv `make routers` builds for router `name`."""
    root = os.environ.get(ROUTERS_ENV) or Path(__file__).resolve().parents[2] / ".routers"
    return Path(root) / name


class RouterStack:
    """What the three routers share: standalone workers on reserved ports, and the router in front."""

    name = ""
    venv = ""
    policies: dict[str, str] = {}  # policy -> how a same-model split is judged (weights, exact, report)
    default_policy = ""
    load_format = "vllm"

    def __init__(self) -> None:
        self._urls: list[str] = []
        self._endpoints: dict[str, str] = {}  # worker URL -> endpoint path
        self.metrics_url = ""  # the router's own Prometheus page, where it has one

    def _binary(self, relative: str) -> str:
        path = router_venv(self.venv) / relative
        if not path.exists():
            raise ConfigError(f"the {self.name} stack needs {path}: run `make routers` (see the README)")
        return str(path)

    def check(self, spec: DeploymentSpec) -> None:
        if spec.hosts != 1 or spec.discovery != "file":
            raise ConfigError(
                f"the {self.name} stack runs on one host, with no discovery service of its own to choose"
            )
        if spec.router_mode is not None and spec.router_mode.replace("-", "_") not in self.policies:
            raise ConfigError(
                f"{self.name} has no policy {spec.router_mode!r}; choose from {', '.join(self.policies)}"
            )
        if any(w.weight != 1.0 for w in spec.workers):
            raise ConfigError(
                f"the {self.name} stack takes no per-worker weights here; leave every weight at 1"
            )

    def policy(self, spec: DeploymentSpec) -> str:
        return (spec.router_mode or self.default_policy).replace("-", "_")

    def split_for(self, router_mode: str | None) -> str:
        return self.policies[(router_mode or self.default_policy).replace("-", "_")]

    def prepare(self, ctx: StackContext) -> dict[str, str]:
        self._urls = [f"http://{ctx.host}:{ctx.reserve()}" for _ in ctx.spec.workers]
        self._endpoints = {url: ctx.endpoint(i) for i, url in enumerate(self._urls)}
        return {}

    def services(self, ctx: StackContext) -> list[ProcessSpec]:
        return []

    def worker(self, ctx: StackContext, index: int, worker: WorkerSpec, system_port: int) -> ProcessSpec:
        port = self._urls[index].rsplit(":", 1)[1]
        argv = [
            ctx.python,
            "-m",
            "embedlab",
            "worker",
            "--served-model-name",
            worker.model,
            "--endpoint",
            ctx.endpoint(index),
            "--frontend-url",
            "",
            "--host",
            ctx.host,
            "--port",
            port,
            "--load-format",
            self.load_format,
            *worker_engine_args(worker),
        ]
        return ProcessSpec(role="worker", worker=index, argv=argv, env=system_port_env(system_port))

    def health_url(self, ctx: StackContext) -> str:
        return f"{ctx.frontend_url}/workers"

    def dispatchable_endpoints(self, health: Any) -> set[str]:
        """The router's worker list: a worker it holds and calls healthy."""
        return {
            self._endpoints[w["url"]]
            for w in health.get("workers", [])
            if w.get("is_healthy") and w.get("url") in self._endpoints
        }

    def listed_models(self, client: httpx.Client, ctx: StackContext) -> set[str] | None:
        return {m["id"] for m in client.get(f"{ctx.frontend_url}/v1/models").json().get("data", [])}

    def drain(self, client: httpx.Client, ctx: StackContext, index: int) -> None:
        raise UnsupportedError(f"{self.name} has no API to take a worker out of dispatch")

    def resume(self, client: httpx.Client, ctx: StackContext, index: int) -> None:
        raise UnsupportedError(f"{self.name} has no API to take a worker back")

    def direct_url(self, client: httpx.Client, ctx: StackContext, index: int) -> str | None:
        return self._urls[index]

    def without_retries(self, spec: DeploymentSpec) -> tuple[str, ...]:
        """Frontend arguments that switch the router's retries off."""
        return ("--disable-retries",)

    def _rust_router_argv(self, ctx: StackContext, head: list[str]) -> list[str]:
        # Both default their metrics to 0.0.0.0:29000: two at once would collide, so every run has its own.
        port = ctx.reserve()
        self.metrics_url = f"http://{ctx.host}:{port}/metrics"
        return [
            *head,
            "--host",
            ctx.host,
            "--port",
            str(ctx.frontend_port),
            "--prometheus-host",
            ctx.host,
            "--prometheus-port",
            str(port),
            "--worker-urls",
            *self._urls,
            "--policy",
            self.policy(ctx.spec),
        ]


class VllmRouterStack(RouterStack):
    """vllm-router: the port opens once every worker answers /health; `/workers` lists them."""

    name = venv = "vllm-router"
    policies = {
        "cache_aware": "report",
        "round_robin": "exact",
        "random": "weights",
        "power_of_two": "report",
        "consistent_hash": "report",
        "sticky_least_loaded": "report",
        "kv_aware": "report",
    }
    default_policy = "cache_aware"
    load_format = "vllm"

    def frontend(self, ctx: StackContext) -> ProcessSpec:
        argv = self._rust_router_argv(ctx, [self._binary("bin/vllm-router")])
        # Recheck the workers every second at start: its default, 30 s, costs 30 s when a
        # worker is not up at the first look.
        argv += [
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

    def listed_models(self, client: httpx.Client, ctx: StackContext) -> set[str] | None:
        return None  # its /v1/models is one worker's, passed through: it lists no model of its own

    def drain(self, client: httpx.Client, ctx: StackContext, index: int) -> None:
        client.delete(f"{ctx.frontend_url}/workers/{quote(self._urls[index], safe='')}").raise_for_status()

    def resume(self, client: httpx.Client, ctx: StackContext, index: int) -> None:
        client.post(f"{ctx.frontend_url}/workers", json={"url": self._urls[index]}).raise_for_status()


class SglangRouterStack(RouterStack):
    """sglang-router: the port opens at once and workers join in the background; `/readiness` waits for one."""

    name = venv = "sglang-router"
    policies = {
        "cache_aware": "report",
        "round_robin": "exact",
        "random": "weights",
        "power_of_two": "report",
        "manual": "report",
    }
    default_policy = "cache_aware"
    load_format = "sglang"

    def frontend(self, ctx: StackContext) -> ProcessSpec:
        argv = self._rust_router_argv(ctx, [self._binary("bin/python"), "-m", "sglang_router.launch_router"])
        return ProcessSpec(
            role="frontend",
            argv=argv + list(ctx.spec.frontend_args),
            ready_url=f"{ctx.frontend_url}/readiness",
        )

    def drain(self, client: httpx.Client, ctx: StackContext, index: int) -> None:
        # Its workers are removed by id, and asynchronously (202): the deployment waits until it is gone.
        workers = client.get(f"{ctx.frontend_url}/workers").json().get("workers", [])
        ids = [w["id"] for w in workers if w.get("url") == self._urls[index]]
        if not ids:
            raise UnsupportedError(f"sglang-router does not list worker {index} ({self._urls[index]})")
        client.delete(f"{ctx.frontend_url}/workers/{ids[0]}").raise_for_status()

    def resume(self, client: httpx.Client, ctx: StackContext, index: int) -> None:
        client.post(f"{ctx.frontend_url}/workers", json={"url": self._urls[index]}).raise_for_status()


class LiteLLMStack(RouterStack):
    """The LiteLLM proxy: one deployment per worker under its model's name, `simple-shuffle` by default.

    `frontend_args` may hold `--router-setting KEY=VALUE` pairs, written into the config's
    `router_settings` (e.g. `num_retries=0`); the rest go to the `litellm` command line.
    """

    name = venv = "litellm"
    policies = {
        "simple_shuffle": "weights",
        "least_busy": "report",
        "usage_based_routing": "report",
        "usage_based_routing_v2": "report",
        "latency_based_routing": "report",
        "cost_based_routing": "report",
    }
    default_policy = "simple_shuffle"

    def frontend(self, ctx: StackContext) -> ProcessSpec:
        settings, args = _router_settings(ctx.spec.frontend_args)
        config = {
            "model_list": [
                {
                    "model_name": worker.model,
                    "litellm_params": {
                        "model": f"openai/{worker.model}",
                        "api_base": f"{url}/v1",
                        "api_key": "none",
                    },
                    # Else its /health would call /v1/chat/completions and call every deployment unhealthy.
                    "model_info": {"mode": "embedding"},
                }
                for worker, url in zip(ctx.spec.workers, self._urls)
            ],
            "router_settings": {"routing_strategy": self.policy(ctx.spec).replace("_", "-"), **settings},
            "litellm_settings": {"telemetry": False},
        }
        path = ctx.run_dir / "litellm.yaml"
        path.write_text(json.dumps(config, indent=2))  # YAML reads JSON
        argv = [
            self._binary("bin/litellm"),
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
            # No master key: the proxy listens on loopback only, and the harness sends no credentials.
            "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true",
        }
        return ProcessSpec(
            role="frontend", argv=argv + args, env=env, ready_url=f"{ctx.frontend_url}/health/readiness"
        )

    def health_url(self, ctx: StackContext) -> str:
        # Not /health: that sends a real embedding request to every deployment, and moves the counters.
        return f"{ctx.frontend_url}/v1/model/info"

    def dispatchable_endpoints(self, health: Any) -> set[str]:
        bases = {
            str((m.get("litellm_params") or {}).get("api_base", "")).removesuffix("/v1")
            for m in health.get("data", [])
        }
        return {endpoint for url, endpoint in self._endpoints.items() if url in bases}

    def drain(self, client: httpx.Client, ctx: StackContext, index: int) -> None:
        raise UnsupportedError(
            "the LiteLLM proxy deletes a deployment at run time only with a database (STORE_MODEL_IN_DB)"
        )

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
