"""smg (Shepherd Model Gateway) 1.13: sglang-router renamed sgl-model-gateway, continued on PyPI as `smg`.

    embedlab scenario same-model --stack smg --router-mode round_robin

The newer row beside sglang-router 0.3.2, from its own venv `.routers/smg` (`make routers`),
started as `smg launch` with the workers' URLs: the Rust routers' part (`routers.RustRouter`)
and standalone workers, as sglang-router's stack is. What it was found to do, and how the
stack uses it:

- **Model-aware in its regular mode.** It reads each worker's model from the worker and
  keeps one worker group (and one policy instance) per model: a request goes only to the
  workers of its body's `model`, an unknown one is a 404 in OpenAI error JSON, and
  `/v1/models` lists the models of its workers. `--enable-igw` ("multi-model support")
  ignores `--worker-urls` (workers then join only through `POST /workers`) and routes
  alike, so the stack stays in the regular mode and multi-model is a real check.
- **Policies** by its own names through `--router-mode`; `round_robin` is judged exact,
  `random` against the weights, the rest reported. Its default is `cache_aware`.
- **Drain** through its worker API, as sglang-router's: `DELETE /workers/{id}` (202). It
  lists the worker as `draining` (unhealthy, sent nothing new) for about 5 s, then drops
  it; `POST /workers {"url": ...}` answers 409 until then, so `resume` waits for that.
- **Retries:** `--disable-retries` (one attempt) for `without_retries`.
- **Attribution:** responses carry `x-smg-routed-worker-id` with the worker's URL. The
  opaque `x-smg-worker-id` that sglang PR #34976 proposed is not in 1.13.0 (that PR was
  closed); embedlab's own `x-embedlab-worker` passes through as well.
- **Its metrics are per worker:** `smg_worker_requests_total{worker=URL, model}`, counted
  at each send (a retry counts again), on a loopback port the run reserves
  (`backend_counts`).
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

import httpx
from prometheus_client.parser import text_string_to_metric_families

from ..cluster.spec import DeploymentSpec, WorkerSpec
from ..cluster.stack import BaseStack, Join, ProcessSpec, StackContext
from ..errors import ServerError
from ..evidence.router import RouterMetrics, known_router
from ..evidence.split import Split
from .routers import RouterRun, RustRouter, venv_program
from .standalone import StandaloneWorkers, snake_case_policy

__all__ = ["SmgStack"]

# Requests smg sent to each worker, labelled with the worker's URL.
WORKER_REQUESTS = "smg_worker_requests_total"
# After SIGTERM it waits for requests in flight up to this long (its default: 180 s, past
# the harness's stop timeout, after which the group is SIGKILLed anyway).
SHUTDOWN_GRACE_S = 5
# A removed worker stays listed, draining, for its drain settle time (5 s by default).
REMOVAL_TIMEOUT_S = 30.0


class SmgStack(BaseStack):
    """smg in its regular (model-aware) mode, workers given by URL."""

    name = venv = package = "smg"
    pins = ("smg==1.13.0",)
    policies: ClassVar[dict[str, Split]] = {
        "cache_aware": Split.REPORT,
        "round_robin": Split.EXACT,
        "random": Split.WEIGHTS,
        "power_of_two": Split.REPORT,
        "least_load": Split.REPORT,
        "consistent_hashing": Split.REPORT,
        "prefix_hash": Split.REPORT,
        "manual": Split.REPORT,
        "passthrough": Split.REPORT,
    }
    default_policy = "cache_aware"
    prefix_aware_mode = "cache_aware"  # a prefix tree of the text it routed, per worker
    model_aware = True  # its regular mode keeps one worker group per model
    names_worker = True  # it passes the worker's `x-embedlab-worker` on
    workers_join = Join.BY_URL
    router: ClassVar[RustRouter] = RustRouter(StandaloneWorkers(load_format="sglang"))

    def policy(self, router_mode: str | None) -> str | None:
        return snake_case_policy(router_mode, self.default_policy)

    def prepare(self, ctx: StackContext[Any]) -> RouterRun:
        return self.router.prepare(ctx)

    def frontend(self, ctx: StackContext[RouterRun]) -> ProcessSpec:
        argv = self.router.argv(
            ctx, [venv_program(self, "bin/smg"), "launch"], self.policy(ctx.spec.router_mode)
        )
        # Recheck the workers every second at start (its default waits 30 s between looks),
        # and give up when the deployment does.
        argv += [
            "--worker-startup-check-interval",
            "1",
            "--worker-startup-timeout-secs",
            str(int(ctx.spec.startup_timeout)),
            "--shutdown-grace-period-secs",
            str(SHUTDOWN_GRACE_S),
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
        """Workers it lists as healthy and ready (a worker being removed is listed until it is gone)."""
        return self.router.dispatchable(ctx, health, ready_only=True)

    def direct_url(self, client: httpx.Client, ctx: StackContext[RouterRun], index: int) -> str | None:
        return ctx.state.workers.url(index)

    def without_retries(self, spec: DeploymentSpec) -> tuple[str, ...]:
        return ("--disable-retries",)

    def drain(self, client: httpx.Client, ctx: StackContext[RouterRun], index: int) -> None:
        self.router.remove_by_id(client, ctx, index, self.name)

    def resume(self, client: httpx.Client, ctx: StackContext[RouterRun], index: int) -> None:
        url = ctx.state.workers.url(index)
        deadline = time.monotonic() + REMOVAL_TIMEOUT_S
        while any(w.get("url") == url for w in client.get(f"{ctx.frontend_url}/workers").json()["workers"]):
            if time.monotonic() > deadline:
                raise ServerError(
                    f"smg still lists worker {index} ({url}) {REMOVAL_TIMEOUT_S:g} s after its removal began",
                    name="frontend",
                )
            time.sleep(0.1)
        self.router.add(client, ctx, {"url": url})

    def own_counts(self, ctx: StackContext[RouterRun]) -> RouterMetrics:
        # Per model, on its own metrics port: each request as it routes it, each as it answers, its errors.
        return known_router(ctx.state.metrics_url, "smg_router_requests_total")

    def backend_counts(self, client: httpx.Client, ctx: StackContext[RouterRun]) -> dict[int, float]:
        """Requests smg says it sent to each worker since it started (each send: retries count again)."""
        index = {url: i for i, url in enumerate(ctx.state.workers.urls)}
        counts = {i: 0.0 for i in range(len(index))}
        for family in text_string_to_metric_families(client.get(ctx.state.metrics_url).text):
            if family.type != "counter":
                continue
            for sample in family.samples:
                if sample.name == WORKER_REQUESTS and sample.labels.get("worker") in index:
                    counts[index[sample.labels["worker"]]] += sample.value
        return counts
