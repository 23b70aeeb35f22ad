"""What checks and scenarios read from a deployment, launched or attached: its URLs by worker index.

    target = attach("http://cluster:8000", ["http://w0:8081", "http://w1:8081"], models=["a", "b"])
    target = attach(url, [["http://w0:8081", "http://w0:8082"], ...])  # a worker with two metrics ports

`attach` launches nothing and stops nothing: the deployment runs elsewhere (the launch
scripts, another host, a Kubernetes port-forward). Where it asks for credentials, `attach`
takes them as its users give them (`api_key`, else `$OPENAI_API_KEY`; `scrape_config`, a file
of Prometheus' scrape-config fields: evidence/access.py; the HTTP config of a Prometheus the
counters are read through, which `prometheus_counters(..., http_config=...)` carries), and
`check_access` tries them on every endpoint before a scenario sends anything.
"""

from __future__ import annotations

import asyncio
import os
import re
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from ..defaults import API_KEY_ENV, SCRAPE_CONCURRENCY
from ..errors import AccessError, ConfigError
from . import clients
from .access import Access, ScrapeAuth, access_for, granted, prometheus_access
from .counters import CounterSource
from .metrics import DEFAULT_METRIC, MetricQuery, metrics_url, port_urls, worker_url
from .prom_source import HttpConfig, PrometheusCounters
from .router import RouterMetrics

__all__ = ["Target", "attach", "check_access", "check_prometheus_access", "check_system_urls", "target_of"]

PROMETHEUS = "Prometheus"  # how a check names it
# What a Prometheus answers (behind a proxy too: an API path, which every one forwards) without
# touching the TSDB: one cheap GET, by which the credentials are tried.
PROMETHEUS_PROBE = "/api/v1/status/buildinfo"


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
    # Where the checks read the workers' counters, where not from their /metrics: Prometheus' API
    # (evidence/prom_source.py), each burst aligned to its scrapes. None: each worker's /metrics.
    counters: CounterSource | None = field(default=None, compare=False)
    # What the harness presents to it (the frontend's API key, the metrics' scrape config), granted
    # while a scenario runs on it; its secrets print as ***.
    access: Access | None = field(default=None, compare=False, repr=False)

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
    api_key: str | None = None,
    scrape_config: str | Path | ScrapeAuth | None = None,
    counters: CounterSource | None = None,
) -> Target:
    """A deployment already running elsewhere. Launches nothing and stops nothing.

    `api_key`: the frontend's key, sent as `Authorization: Bearer` to it alone (None or "":
    `$OPENAI_API_KEY`, where set). `scrape_config`: how to read the workers' metrics, a file of
    Prometheus' scrape-config fields (`authorization`, `basic_auth`, `tls_config`) or a
    `ScrapeAuth` read from one.

    `system_urls[i]` is worker i: its system URL, or, for a worker that counts on several
    metrics ports (one per process), a list of their URLs (or them joined by `+`), whose
    counts are summed. `models[i]`, where given, is the model worker i serves. `dynamo_log`:
    the path of a Dynamo 1.6.1 frontend's log, written with `defaults.DYNAMO_ATTRIBUTION_ENV`
    set, by which a burst on a busy pool attributes each response to its worker. `router_metrics`:
    where the router counts per model what it takes and answers (`router.router_metrics(url)`), read
    beside the workers' counters at every window of a busy check. `counters`: where to read the
    workers' counters instead of their /metrics (`prom_source.prometheus_counters(url, system_urls)`:
    through Prometheus, each burst and each busy window aligned to its scrapes); the HTTP config it
    was given (`http_config=`) is what Prometheus' origin is sent while a scenario runs.
    """
    if not system_urls:
        raise ConfigError(
            "attach needs each worker's system URL, the /metrics it counts on: --system-url URL, once "
            "per worker (e.g. --system-url http://w0:8081 --system-url http://w1:8081)"
        )
    check_system_urls(system_urls, models=models)
    query = MetricQuery.parse(metric) if isinstance(metric, str) else metric
    urls = tuple(map(worker_url, system_urls))
    key, key_from = (
        (api_key, "--api-key") if api_key else (os.environ.get(API_KEY_ENV, ""), f"${API_KEY_ENV}")
    )
    return Target(
        frontend_url=frontend_url.rstrip("/"),
        system_urls=urls,
        models=tuple(models) if models is not None else (None,) * len(system_urls),
        metric=query,
        weights=tuple(weights) if weights else None,
        dynamo_log=dynamo_log,
        router_metrics=router_metrics,
        counters=counters,
        access=access_for(
            frontend_url.rstrip("/"),
            [port for url in urls for port in port_urls(metrics_url(url))],
            api_key=key,
            key_from=key_from,
            scrape_config=scrape_config,
            prometheus_url=counters.url if isinstance(counters, PrometheusCounters) else "",
            prometheus_http_config=counters.http_config if isinstance(counters, PrometheusCounters) else None,
        ),
    )


def check_access(target: Target, *, timeout: float = 10.0) -> None:
    """Before any burst: the frontend, every metrics URL and the Prometheus the counters are read
    through (where they are) take what the harness presents.

    One GET of the frontend's /v1/models, one of each metrics URL and one of Prometheus'
    `PROMETHEUS_PROBE`, with what is granted (a scenario run grants `target.access`). A 401 or
    403, or a TLS handshake that fails, is an `AccessError` of one line naming the endpoint and
    why, the frontend's first, then by worker, then Prometheus. Anything else (a frontend
    without /v1/models, a worker down) is left to the scenario, which reports it as it always has.
    """
    asked = [("the frontend", f"{target.frontend_url}/v1/models")] + [
        (f"worker {index}'s metrics", port)
        for index, url in enumerate(target.system_urls)
        for port in port_urls(metrics_url(url))
    ]
    if isinstance(target.counters, PrometheusCounters):
        asked.append((PROMETHEUS, target.counters.url + PROMETHEUS_PROBE))
    clients.run_sync(_check_access(asked, target.access, timeout))


def check_prometheus_access(
    prometheus_url: str, http_config: HttpConfig = None, *, timeout: float = 10.0
) -> None:
    """`check_access` of the Prometheus at `prometheus_url` alone, with `http_config` (a file of its
    HTTP config, or one read) granted: before anything else is asked of it (its targets, to find
    the workers or to place them), so that a refusal is its one line, not a failed discovery."""
    access = prometheus_access(prometheus_url, http_config) or Access(prometheus=prometheus_url)
    with granted(access):
        asked = [(PROMETHEUS, prometheus_url.rstrip("/") + PROMETHEUS_PROBE)]
        clients.run_sync(_check_access(asked, access, timeout))


async def _check_access(asked: Sequence[tuple[str, str]], access: Access | None, timeout: float) -> None:
    gate = asyncio.Semaphore(SCRAPE_CONCURRENCY)
    async with clients.async_client(timeout=timeout) as http:

        async def one(who: str, url: str) -> AccessError | None:
            async with gate:
                try:
                    response = await http.get(url)
                except httpx.HTTPError as exc:
                    failure = _tls_failure(exc)
                    return None if failure is None else _refused(access, who, url, None, failure)
            if _refuses(who, response.status_code):
                return _refused(access, who, url, response.status_code, _said(response, access))
            return None

        found = await asyncio.gather(*(one(*item) for item in asked))
    for error in found:
        if error is not None:
            raise error


def _refuses(who: str, status: int) -> bool:
    """Whether an answer stops the run. The frontend: any error but 404 and 405 (one that lists no
    models), since a router may refuse a key in its own way (LiteLLM 1.108 without a database: 400
    "No connected db." for a wrong key, 500 for none). A worker's metrics, and Prometheus: 400,
    401 and 403 (nginx answers 400 where a client certificate is missing); a 5xx is a broken
    worker, which the scenario reports as it always has."""
    if who == "the frontend":
        return status >= 400 and status not in (404, 405)
    return status in (400, 401, 403)


def _said(response: httpx.Response, access: Access | None) -> str:
    """The status's phrase and, where the body says more (an OpenAI error, an HTML title), that:
    one short line, with any secret of `access` masked."""
    said = ""
    try:
        error = response.json().get("error")
        said = str(error.get("message", "") if isinstance(error, dict) else error or "")
    except (ValueError, AttributeError):
        title = re.search(r"<title>(.*?)</title>", response.text, re.S)
        said = title.group(1) if title else ""
    said = " ".join(said.split())[:160]
    for secret in access.secrets() if access is not None else ():
        said = said.replace(secret, "***")
    phrase = response.reason_phrase
    return f"{phrase}: {said}" if said and said not in phrase and phrase not in said else said or phrase


def _tls_failure(exc: BaseException) -> str | None:
    """Why a TLS handshake failed, where that is what `exc` (or what it was raised from) says."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return f"certificate verify failed: {getattr(seen, 'verify_message', None) or seen.strerror}"
        if isinstance(seen, ssl.SSLError):
            return str(seen.reason or seen).replace("_", " ").lower()
        seen = seen.__cause__ or seen.__context__
    return None


def _refused(access: Access | None, who: str, url: str, status: int | None, why: str) -> AccessError:
    """One line: which endpoint refused, what it was given, why, and what to look at."""
    access = access or Access()
    # A worker's metrics are read with the scrape config, Prometheus with its HTTP config: the same fields.
    scrape, option, config, a_config = (
        (access.prometheus_auth, "--prometheus-http-config", "HTTP config", "an HTTP config")
        if who == PROMETHEUS
        else (access.scrape, "--scrape-config", "scrape config", "a scrape config")
    )
    if who == "the frontend":
        given = f"the API key from {access.key_from}" if access.api_key else "no API key"
        refused = status in (401, 403)
        if status is None:
            hint = "its certificate is checked against the system's CAs (SSL_CERT_FILE names others)"
        elif access.api_key:
            also = "" if refused else ", and the frontend's log"
            hint = f"check the key{also} (--api-key overrides ${API_KEY_ENV})"
        elif refused:
            hint = f"give --api-key, or set ${API_KEY_ENV}"
        else:
            hint = (
                f"if it wants an API key, give --api-key or set ${API_KEY_ENV}; else see the frontend's log"
            )
    else:
        given = scrape.describe() if scrape is not None else f"no {config}"
        if status is None and (scrape is None or not scrape.ca_file):
            hint = f"give the CA that signed its certificate as tls_config.ca_file in {option}"
        elif status is None and scrape is not None:
            hint = f"is {scrape.ca_file} the CA that signed its certificate, for this host name?"
        elif status == 400 and not (scrape and scrape.cert_file):
            hint = f"does it want a client certificate (tls_config.cert_file and key_file in {option})?"
        elif scrape is None:
            hint = f"give its credentials in {a_config} ({option} FILE: authorization or basic_auth)"
        else:
            hint = f"check the credentials in {scrape.source}"
    what = f"failed the TLS handshake: {why}" if status is None else f"answered HTTP {status} {why}".rstrip()
    return AccessError(
        f"{who} at {url} {what} (given {given}): {hint}", url=url, endpoint=who, status=status, reason=why
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
