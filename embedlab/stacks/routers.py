"""The routers users choose between, in front of embedlab's own workers: LiteLLM, vllm-router, sglang-router.

Each router runs from a venv of its own under `.routers/<venv>` (built by `make routers`
from the class's own `pins`, or under `$EMBEDLAB_ROUTERS`), since their pins must not
touch the workbench's. The workers are `embedlab worker`s that register with nothing:
each listens on a port the run reserves (`prepare`, kept in the run's `StackContext.state`),
and the router is given their URLs (in vllm-router's gateway mode, for several
models, each joins through its API instead: `join`). What the routers probe on a worker (`/health`,
`/v1/models`, `/get_server_info`, `/get_load`) the worker answers; `/get_load`'s shape is
the router's (`load_format`).

`router_mode` takes the router's own policy names (None: the router's default).
"""

from __future__ import annotations

import json
from typing import Any, ClassVar
from urllib.parse import quote

import httpx

from ..cluster.spec import DeploymentSpec, WorkerSpec
from ..cluster.stack import BaseStack, ProcessSpec, StackContext, embedlab_worker, router_venv
from ..cluster.worker_server import foreign_worker, server_of
from ..errors import ConfigError, UnsupportedError
from ..evidence.split import Split

__all__ = ["LiteLLMStack", "RouterStack", "SglangRouterStack", "VllmRouterStack", "router_venv"]

WORKER_PORTS = "worker_ports"  # the key of the workers' own ports (by index) in `StackContext.state`


class RouterStack(BaseStack):
    """What the routers share: standalone workers on reserved ports, and the router in front."""

    load_format = "vllm"
    names_worker = True  # each passes the worker's `x-embedlab-worker` on
    retries_switch = True
    # Workers given by URL: any server that serves /v1/embeddings and /health on one port.
    worker_servers = ("embedlab", "vllm-serve", "infinity", "tei")

    def _binary(self, relative: str) -> str:
        path = router_venv(str(self.venv)) / relative
        if not path.exists():
            raise ConfigError(f"the {self.name} stack needs {path}: run `make routers` (see the README)")
        return str(path)

    def policy(self, router_mode: str | None) -> str | None:
        return (router_mode or str(self.default_policy)).replace("-", "_")

    def worker_urls(self, ctx: StackContext) -> list[str]:
        """The URL of each worker (by index), on the port reserved for it when the run was prepared."""
        return [f"http://{ctx.host}:{port}" for port in ctx.state[WORKER_PORTS]]

    def endpoint_of(self, ctx: StackContext) -> dict[str, str]:
        """Worker URL -> its endpoint path."""
        return {url: ctx.endpoint(i) for i, url in enumerate(self.worker_urls(ctx))}

    def prepare(self, ctx: StackContext) -> dict[str, str]:
        # A server of its own serves /metrics and /health on its request port: that is its system port.
        ctx.state[WORKER_PORTS] = [
            ctx.system_ports[i] if server_of(w).foreign else ctx.reserve()
            for i, w in enumerate(ctx.spec.workers)
        ]
        return {}

    def worker(self, ctx: StackContext, index: int, worker: WorkerSpec, system_port: int) -> ProcessSpec:
        if server_of(worker).foreign:
            return foreign_worker(ctx, index, worker, port=ctx.state[WORKER_PORTS][index])
        # Registered with nothing: the router is given the worker's URL.
        own = [
            "--host",
            ctx.host,
            "--port",
            str(ctx.state[WORKER_PORTS][index]),
            "--load-format",
            self.load_format,
        ]
        return embedlab_worker(ctx, index, worker, system_port, frontend_url="", args=own)

    def health_url(self, ctx: StackContext) -> str:
        return f"{ctx.frontend_url}/workers"

    def dispatchable_endpoints(self, ctx: StackContext, health: Any) -> set[str]:
        """The router's worker list: a worker it holds and calls healthy."""
        endpoints = self.endpoint_of(ctx)
        return {
            endpoints[w["url"]]
            for w in health.get("workers", [])
            if w.get("is_healthy") and w.get("url") in endpoints
        }

    def direct_url(self, client: httpx.Client, ctx: StackContext, index: int) -> str | None:
        return self.worker_urls(ctx)[index]

    def without_retries(self, spec: DeploymentSpec) -> tuple[str, ...]:
        """Frontend arguments that switch the router's retries off."""
        return ("--disable-retries",)

    def _rust_router_argv(self, ctx: StackContext, head: list[str], *, worker_urls: bool = True) -> list[str]:
        # Both default their metrics to 0.0.0.0:29000: two at once would collide, so every run has its own.
        port = ctx.reserve()
        ctx.state["metrics_url"] = f"http://{ctx.host}:{port}/metrics"  # the router's own counters
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
            *(["--worker-urls", *self.worker_urls(ctx)] if worker_urls else []),
            "--policy",
            str(self.policy(ctx.spec.router_mode)),
        ]


def several_models(spec: DeploymentSpec) -> bool:
    return len(set(spec.models)) > 1


class VllmRouterStack(RouterStack):
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
    load_format = "vllm"
    model_aware = True  # by --enable-igw, for a pool of several models
    drains = True

    def frontend(self, ctx: StackContext) -> ProcessSpec:
        igw = several_models(ctx.spec)
        argv = self._rust_router_argv(ctx, [self._binary("bin/vllm-router")], worker_urls=not igw)
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

    def listed_models(self, client: httpx.Client, ctx: StackContext) -> set[str] | None:
        return None  # its /v1/models is one worker's, passed through: it lists no model of its own

    def drain(self, client: httpx.Client, ctx: StackContext, index: int) -> None:
        url = self.worker_urls(ctx)[index]
        client.delete(f"{ctx.frontend_url}/workers/{quote(url, safe='')}").raise_for_status()

    def _worker_json(self, ctx: StackContext, index: int) -> dict[str, str]:
        url = self.worker_urls(ctx)[index]
        if several_models(ctx.spec):
            return {"url": url, "model_id": ctx.spec.workers[index].model, "worker_type": "regular"}
        return {"url": url}

    def join(self, client: httpx.Client, ctx: StackContext, index: int) -> None:
        # In the gateway mode a worker exists for it only once posted; posting one it holds
        # replaces the entry (a worker started again joins again).
        if several_models(ctx.spec):
            client.post(f"{ctx.frontend_url}/workers", json=self._worker_json(ctx, index)).raise_for_status()

    def resume(self, client: httpx.Client, ctx: StackContext, index: int) -> None:
        client.post(f"{ctx.frontend_url}/workers", json=self._worker_json(ctx, index)).raise_for_status()


# What sglang-router 0.3.2 was seen to do with `--enable-igw` on a machine without internet.
SGLANG_IGW_OFFLINE = (
    "sglang-router 0.3.2 routes by the body's 'model' only in its inference-gateway mode "
    "(--enable-igw), and that mode does not start without internet: it panics loading the Harmony "
    "vocabulary for its gRPC router ('Failed to load Harmony encoding: error downloading or loading "
    "vocab file'). Its regular mode ignores the body's 'model'. smg, its successor, routes by model "
    "in its regular mode (--stack smg)"
)


class SglangRouterStack(RouterStack):
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
    load_format = "sglang"
    model_aware = False  # its gateway mode cannot start offline: SGLANG_IGW_OFFLINE
    drains = True

    def prepare(self, ctx: StackContext) -> dict[str, str]:
        if not self.model_aware and several_models(ctx.spec):
            raise UnsupportedError(SGLANG_IGW_OFFLINE)
        return super().prepare(ctx)

    def frontend(self, ctx: StackContext) -> ProcessSpec:
        argv = self._rust_router_argv(ctx, [self._binary("bin/python"), "-m", "sglang_router.launch_router"])
        return ProcessSpec(
            role="frontend",
            argv=argv + list(ctx.spec.frontend_args),
            ready_url=f"{ctx.frontend_url}/readiness",
        )

    def drain(self, client: httpx.Client, ctx: StackContext, index: int) -> None:
        # Its workers are removed by id, and asynchronously (202): the deployment waits until it is gone.
        url = self.worker_urls(ctx)[index]
        workers = client.get(f"{ctx.frontend_url}/workers").json().get("workers", [])
        ids = [w["id"] for w in workers if w.get("url") == url]
        if not ids:
            raise UnsupportedError(f"sglang-router does not list worker {index} ({url})")
        client.delete(f"{ctx.frontend_url}/workers/{ids[0]}").raise_for_status()

    def resume(self, client: httpx.Client, ctx: StackContext, index: int) -> None:
        client.post(
            f"{ctx.frontend_url}/workers", json={"url": self.worker_urls(ctx)[index]}
        ).raise_for_status()


class LiteLLMStack(RouterStack):
    """The LiteLLM proxy: one deployment per worker under its model's name, `simple-shuffle` by default.

    `frontend_args` may hold `--router-setting KEY=VALUE` pairs, written into the config's
    `router_settings` (e.g. `num_retries=0`); the rest go to the `litellm` command line.
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
    no_drain = "the LiteLLM proxy deletes a deployment at run time only with a database (STORE_MODEL_IN_DB)"

    def frontend(self, ctx: StackContext) -> ProcessSpec:
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
                for worker, url in zip(ctx.spec.workers, self.worker_urls(ctx))
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

    def dispatchable_endpoints(self, ctx: StackContext, health: Any) -> set[str]:
        bases = {str((m.get("litellm_params") or {}).get("api_base", "")) for m in health.get("data", [])}
        return {
            ctx.endpoint(i)
            for i, (worker, url) in enumerate(zip(ctx.spec.workers, self.worker_urls(ctx)))
            if url + server_of(worker).prefix in bases
        }

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
