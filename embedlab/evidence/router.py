"""A router's own per-model counts: where they are, which series they are, one read of them.

Routers count what they take: Dynamo's frontend `dynamo_frontend_requests_started_total{model}`
when it accepts a request and `dynamo_frontend_requests_total{model,status}` when it answers;
the embedded frontend `embedlab_frontend_requests_admitted_total{model}` and
`embedlab_frontend_requests_total{model,status}`. Read at a window boundary, just before and just
after every worker's counter, they say two things no counter of a worker can:

- the other clients' traffic per model, known rather than estimated: the busy check reads its
  units net of it (evidence/busy/engine.py), which takes their noise out;
- an identity that holds whoever sent what, which `accounting.Accounting` checks.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from ..errors import ConfigError, MetricsError, ScrapeError
from .accounting import RouterCounts
from .metrics import MetricQuery, metrics_url, parse_snapshot

__all__ = ["RouterMetrics", "detect_router", "known_router", "read_router", "router_metrics"]


@dataclass(frozen=True)
class RouterMetrics:
    """Where a router's own counts are and which series they are: `admitted` counts a request when
    the router takes it, `answered` when it answers (`success`: the labels of a successful answer),
    `retried` each retry on another worker (None: it keeps none, or never retries)."""

    url: str
    admitted: MetricQuery
    answered: MetricQuery
    success: tuple[tuple[str, str], ...]
    retried: MetricQuery | None = None
    model_label: str = "model"
    name: str = "router"
    # The labels of an answer "model not found" (a worker of another model refused it); (): none known.
    refused: tuple[tuple[str, str], ...] = ()
    # Where no label marks success (`success` empty): its errors, counted apart, less from `answered`.
    errors: MetricQuery | None = None

    @property
    def metrics(self) -> str:
        return metrics_url(self.url)


def _lazy(selector: str) -> MetricQuery:
    """A router's series appear at their first increment: none yet is 0."""
    query = MetricQuery.parse(selector)
    return MetricQuery(query.name, query.labels, lazy=True)


@dataclass(frozen=True)
class _Known:
    name: str
    answered: str
    success: tuple[tuple[str, str], ...]
    retried: str = ""
    refused: tuple[tuple[str, str], ...] = ()
    errors: str = ""


# The routers whose own counts embedlab knows, by the admitted series each exports.
KNOWN: dict[str, _Known] = {
    "embedlab_frontend_requests_admitted_total": _Known(
        "the embedded frontend", "embedlab_frontend_requests_total", (("status", "200"),),
        "embedlab_frontend_retries_total", (("status", "404"),),
    ),
    "smg_router_requests_total": _Known(
        "smg", "smg_router_request_duration_seconds_count", (), errors="smg_router_request_errors_total"
    ),
    "dynamo_frontend_requests_started_total": _Known(
        "Dynamo's frontend", "dynamo_frontend_requests_total", (("status", "success"),), "",
        (("error_type", "not_found"),),
    ),
}  # fmt: skip


def known_router(url: str, admitted: str) -> RouterMetrics:
    """The RouterMetrics of a router embedlab knows by its admitted series' name."""
    found = KNOWN[admitted]
    return RouterMetrics(
        url=url,
        admitted=_lazy(admitted),
        answered=_lazy(found.answered),
        success=found.success,
        retried=_lazy(found.retried) if found.retried else None,
        name=found.name,
        refused=found.refused,
        errors=_lazy(found.errors) if found.errors else None,
    )


def router_metrics(
    url: str, *, admitted: str = "", answered: str = "", success: str = "", retried: str = ""
) -> RouterMetrics | None:
    """A router's counts at `url` given by their selectors (`success`: `label=value`, the labels
    of a successful answer); None where `url` is empty. Without selectors, `detect_router` reads
    the URL once to find a router it knows."""
    if not url:
        return None
    if not admitted:
        return detect_router(url)
    if not answered or not success:
        raise ConfigError(
            "a router's own counts need its admitted and answered counters and the label of a "
            "successful answer, e.g. --router-admitted my_requests_started_total --router-answered "
            "my_requests_total --router-success status=success"
        )
    pairs = []
    for part in success.split(","):
        label, eq, value = part.partition("=")
        if not eq or not label.strip():
            raise ConfigError(f"--router-success takes label=value, got {part!r}")
        pairs.append((label.strip(), value.strip().strip('"')))
    return RouterMetrics(
        url=url,
        admitted=_lazy(admitted),
        answered=_lazy(answered),
        success=tuple(pairs),
        retried=_lazy(retried) if retried else None,
    )


def detect_router(url: str, *, timeout: float = 5.0) -> RouterMetrics:
    """The known router whose counts `url` serves (its /metrics), read once."""
    from . import clients

    try:
        with clients.client(timeout=timeout) as http:
            text = http.get(metrics_url(url)).raise_for_status().text
    except httpx.HTTPError as exc:
        raise ConfigError(f"cannot read the router's metrics at {metrics_url(url)}: {exc}") from exc
    for admitted in KNOWN:
        if admitted.removesuffix("_total") in text:
            return known_router(url, admitted)
    names = ", ".join(KNOWN)
    raise ConfigError(
        f"{metrics_url(url)} serves none of the per-model counters embedlab knows ({names}): name "
        "yours with --router-admitted, --router-answered and --router-success"
    )


def parse_router(text: str, metrics: RouterMetrics) -> RouterCounts:
    def by_model(query: MetricQuery, only: tuple[tuple[str, str], ...] = ()) -> dict[str, float]:
        found: dict[str, float] = {}
        for labels, value in parse_snapshot(text, url=metrics.url, query=query).series:
            named = dict(labels)
            if all(named.get(k) == v for k, v in only):
                model = named.get(metrics.model_label, "")
                found[model] = found.get(model, 0.0) + value
        return found

    answered = by_model(metrics.answered)
    if metrics.success:
        ok = by_model(metrics.answered, metrics.success)
    else:
        failed = by_model(metrics.errors) if metrics.errors else {}
        ok = {m: n - failed.get(m, 0.0) for m, n in answered.items()}
    return RouterCounts(
        admitted=by_model(metrics.admitted),
        answered=answered,
        ok=ok,
        retried=by_model(metrics.retried) if metrics.retried else {},
        refused=by_model(metrics.answered, metrics.refused) if metrics.refused else {},
    )


async def read_router(metrics: RouterMetrics, client: httpx.AsyncClient) -> RouterCounts:
    """One read of the router's counts; a router that cannot be read raises ScrapeError."""
    try:
        response = await client.get(metrics.metrics)
        response.raise_for_status()
    except httpx.HTTPError as exc:
        raise ScrapeError(
            f"cannot read {metrics.name}'s own counts at {metrics.metrics}: {exc.__class__.__name__}: {exc}",
            url=metrics.metrics,
        ) from exc
    try:
        return parse_router(response.text, metrics)
    except MetricsError as exc:
        raise ScrapeError(str(exc), url=metrics.metrics) from exc
