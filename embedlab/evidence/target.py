"""What checks and scenarios read from a deployment, launched or attached: its URLs by worker index.

    target = attach("http://cluster:8000", ["http://w0:8081", "http://w1:8081"], models=["a", "b"])
    target = attach(url, [["http://w0:8081", "http://w0:8082"], ...])  # a worker with two metrics ports

`attach` launches nothing and stops nothing: the deployment runs elsewhere (the launch
scripts, another host, a Kubernetes port-forward).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError
from .metrics import DEFAULT_METRIC, MetricQuery, port_urls, worker_url
from .router import RouterMetrics

__all__ = ["Target", "attach", "check_system_urls", "target_of"]


@dataclass(frozen=True)
class Target:
    """What checks and scenarios need from a deployment, launched or attached.

    `system_urls[i]` is worker i's system server (its metrics ports' URLs joined by `+`,
    where it has several); `models[i]` the model it serves (None where an attached
    deployment did not say).
    """

    frontend_url: str
    system_urls: tuple[str, ...]
    models: tuple[str | None, ...]
    metric: MetricQuery = field(default=DEFAULT_METRIC)
    weights: tuple[float, ...] | None = None
    stack: str = "attached"
    # Worker i's endpoint, where the stack names the serving worker on each response
    # (`x-embedlab-worker`): placement that other clients' traffic cannot fake. Empty: none.
    endpoints: tuple[str, ...] = ()
    # What the router's own per-worker counters say it sent (index -> count), where it keeps
    # them: read beside the workers' counters around each burst, a second source of truth.
    router_counts: Callable[[], dict[int, float] | None] | None = field(default=None, compare=False)
    # Dynamo 1.6.1's frontend log, where given (JSON lines, its push router at info): each burst
    # sends a request id with every request and reads the worker picked for it there
    # (evidence/dynamo_log.py), placement that other clients' traffic cannot fake. "": none.
    dynamo_log: str = ""
    # Where the router counts, per model, what it takes and answers (evidence/router.py): read
    # beside the workers' at every window of a busy check. None: it keeps no such counts, or
    # an attached deployment did not say where.
    router_metrics: RouterMetrics | None = None

    def index_of(self, served_by: str | None) -> int | None:
        """The worker index a response's `x-embedlab-worker` (`<endpoint>/<instance>`) names."""
        endpoint = (served_by or "").split("/")[0]
        if not endpoint or self.endpoints.count(endpoint) != 1:
            return None  # unnamed, unknown, or shared by several workers (one endpoint per model)
        return self.endpoints.index(endpoint)


def attach(
    frontend_url: str,
    system_urls: Sequence[str | Sequence[str]],
    *,
    models: Sequence[str | None] | None = None,
    metric: MetricQuery | str = DEFAULT_METRIC,
    weights: Sequence[float] | None = None,
    dynamo_log: str = "",
    router_metrics: RouterMetrics | None = None,
) -> Target:
    """A deployment already running elsewhere. Launches nothing and stops nothing.

    `system_urls[i]` is worker i: its system URL, or, for a worker that counts on several
    metrics ports (one per process), a list of their URLs (or them joined by `+`), whose
    counts are summed. `models[i]`, where given, is the model worker i serves. `dynamo_log`:
    the path of a Dynamo 1.6.1 frontend's log, written with `defaults.DYNAMO_ATTRIBUTION_ENV`
    set, by which a burst on a busy pool attributes each response to its worker. `router_metrics`:
    where the router counts per model what it takes and answers (`router.router_metrics(url)`), read
    beside the workers' counters at every window of a busy check.
    """
    if not system_urls:
        raise ConfigError(
            "attach needs each worker's system URL, the /metrics it counts on: --system-url URL, once "
            "per worker (e.g. --system-url http://w0:8081 --system-url http://w1:8081)"
        )
    check_system_urls(system_urls, models=models)
    query = MetricQuery.parse(metric) if isinstance(metric, str) else metric
    return Target(
        frontend_url=frontend_url.rstrip("/"),
        system_urls=tuple(map(worker_url, system_urls)),
        models=tuple(models) if models is not None else (None,) * len(system_urls),
        metric=query,
        weights=tuple(weights) if weights else None,
        dynamo_log=dynamo_log,
        router_metrics=router_metrics,
    )


def check_system_urls(
    system_urls: Sequence[str | Sequence[str]],
    *,
    models: Sequence[str | None] | None = None,
    what: str = "models",
) -> None:
    """Refuse a worker listed twice (its counter would be read as two workers', each one's
    delta the whole of it, and a check over them would judge a pool that does not exist),
    and `models`, where given, that do not name one model per system URL."""
    if models is not None and len(models) != len(system_urls):
        named = [m for m in models if m]
        shape = (
            ",".join(named[i * len(named) // len(system_urls)] for i in range(len(system_urls)))
            if named
            else "A,A,B,B"
        )
        raise ConfigError(
            f"{len(system_urls)} system URLs but {len(models)} {what}: give one per worker, in the order "
            f"of the system URLs (--worker-models {shape} for {len(system_urls)} workers; "
            f"models=[...] from Python)"
        )
    workers: dict[str, list[int]] = {}
    for index, urls in enumerate(system_urls):
        # One port read as two workers' is the same mistake as one URL given twice.
        for url in port_urls(worker_url(urls)):
            workers.setdefault(url.rstrip("/"), []).append(index)
    twice = {url: at for url, at in workers.items() if len(at) > 1}
    if twice:
        shown = "; ".join(
            f"{url} as workers {', '.join(map(str, at[:-1]))} and {at[-1]}" for url, at in twice.items()
        )
        raise ConfigError(f"a system URL is given more than once ({shown}): give each worker's once")


def target_of(deployment: Any) -> Target:
    """A Target as it is, or what a running Deployment's `target()` says."""
    return deployment if isinstance(deployment, Target) else deployment.target()
