"""What a client meets at the frontend: its answers to mistakes, and what it adds to each request.

client_mistakes(dep)   # unknown model, malformed JSON, missing input: 4xx with OpenAI error JSON?
overhead(dep)          # latency at c=1 and throughput at c=32, through the frontend and direct
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from .. import clients
from ..deployment import Deployment
from ..errors import ConfigError
from ..targets import Target, target_of
from ..traffic import asend_burst, default_inputs, run_sync
from ..verdicts import Verdict
from .bursts import BurstSpec, judge, run_burst, serving, workers_of
from .results import MistakeAnswer, OverheadFigures, ScenarioResult

if TYPE_CHECKING:
    from .plans import ScenarioPlan

__all__ = ["client_mistakes", "overhead", "run_client_mistakes", "run_overhead"]

JSON = {"Content-Type": "application/json"}


def _mistakes(model: str) -> list[tuple[str, bytes]]:
    return [
        ("unknown model", json.dumps({"model": "no-such-model", "input": "x"}).encode()),
        ("malformed JSON", b'{"model": "' + model.encode() + b'", "input": '),
        ("missing input", json.dumps({"model": model}).encode()),
    ]


def _openai_error(body: str) -> bool:
    try:
        parsed = json.loads(body)
    except ValueError:
        return False
    error = parsed.get("error") if isinstance(parsed, dict) else None
    return isinstance(error, dict) and isinstance(error.get("message"), str)


def client_mistakes(
    deployment: Deployment | Target, *, repeat: int = 20, requests: int = 20, concurrency: int = 4
) -> ScenarioResult:
    """Each mistake once: a 4xx, with OpenAI error JSON. Then `repeat` unknown-model requests, and
    right after them a burst of valid ones, which must all be answered and counted (a router that
    counts a worker's 404 as its failure can take itself down for everyone)."""
    target = target_of(deployment)
    model, indices = serving(target, None, at_least=1)
    url = target.frontend_url + "/v1/embeddings"
    started = time.monotonic()
    answers = []
    with clients.client(timeout=30.0) as client:
        for mistake, body in _mistakes(model):
            response = client.post(url, content=body, headers=JSON)
            answers.append(
                MistakeAnswer(
                    mistake=mistake,
                    status=response.status_code,
                    content_type=response.headers.get("content-type", ""),
                    openai_error=_openai_error(response.text),
                    body=response.text[:200],
                )
            )
        unknown = _mistakes(model)[0][1]
        for _ in range(repeat):
            client.post(url, content=unknown, headers=JSON)
    after = BurstSpec(
        name=f"{model}, right after {repeat} unknown-model requests",
        model=model,
        expected=frozenset(indices),
        requests=requests,
        concurrency=concurrency,
        inputs=default_inputs(requests),
        require_all=False,
    )
    burst = run_sync(run_burst(target, after))
    verdict, reasons = judge([burst], exact_total=True)
    for a in answers:
        if not 400 <= a.status < 500:
            reasons.append(f"{a.mistake}: HTTP {a.status}, not a 4xx")
        elif not a.openai_error:
            reasons.append(
                f"{a.mistake}: HTTP {a.status} {a.content_type or 'without a content type'}, not OpenAI error JSON"
            )
    if verdict == Verdict.PASSED and reasons:
        verdict = Verdict.FAILED
    return ScenarioResult(
        scenario="client-mistakes",
        stack=target.stack,
        params={"repeat": repeat, "requests": requests, "model": model},
        workers=workers_of(deployment),
        bursts=[burst],
        verdict=verdict,
        reasons=reasons,
        wall_seconds=time.monotonic() - started,
        mistakes=answers,
    )


def overhead(deployment: Deployment, *, requests: int = 400) -> ScenarioResult:
    """Latency at c=1 and throughput at c=32, through the frontend and straight to worker 0. Reported:
    a Python client measures the router and itself (bench/router_overhead.py uses hey)."""
    if not isinstance(deployment, Deployment):
        raise ConfigError(
            "overhead compares the frontend with a worker's own URL: it needs a deployment embedlab launched"
        )
    model, indices = serving(deployment, None, at_least=1)
    direct = deployment.direct_url(indices[0])
    started = time.monotonic()

    async def measure(base: str, concurrency: int) -> Any:
        n = requests if concurrency > 1 else max(1, requests // 4)
        return await asend_burst(base, model, n, concurrency=concurrency, inputs=default_inputs(n))

    def both(concurrency: int) -> tuple[Any, Any]:
        via = run_sync(measure(deployment.frontend_url, concurrency))
        return via, (run_sync(measure(direct, concurrency)) if direct else None)

    single, single_direct = both(1)
    wide, wide_direct = both(32)
    figures = OverheadFigures(
        p50_ms_c1=single.latency_ms()["p50"],
        p50_ms_c1_direct=single_direct.latency_ms()["p50"] if single_direct else None,
        rps_c32=wide.throughput,
        rps_c32_direct=wide_direct.throughput if wide_direct else None,
        requests=requests,
    )
    failed = sum(len(b.failures) for b in (single, single_direct, wide, wide_direct) if b is not None)
    added = (
        ""
        if figures.p50_ms_c1_direct is None
        else f" ({figures.p50_ms_c1 - figures.p50_ms_c1_direct:+.2f} ms against direct)"
    )
    share = (
        ""
        if figures.rps_c32_direct is None
        else f" ({figures.rps_c32 / figures.rps_c32_direct:.0%} of direct)"
    )
    reasons = [
        f"c=1: p50 {figures.p50_ms_c1:.2f} ms{added}",
        f"c=32: {figures.rps_c32:.0f} requests/s{share}",
    ]
    if failed:
        reasons.append(f"{failed} requests failed")
    return ScenarioResult(
        scenario="overhead",
        stack=deployment.spec.stack,
        params={"requests": requests, "direct": direct},
        workers=workers_of(deployment),
        bursts=[],
        verdict=Verdict.FAILED if failed else Verdict.REPORTED,
        reasons=reasons,
        wall_seconds=time.monotonic() - started,
        overhead=figures,
    )


# -- as registered scenarios: run(target, plan) -------------------------------------------------


def run_client_mistakes(target: Deployment | Target, plan: ScenarioPlan) -> ScenarioResult:
    return client_mistakes(target, requests=plan.requests, concurrency=plan.concurrency)  # type: ignore[arg-type]


def run_overhead(target: Deployment | Target, plan: ScenarioPlan) -> ScenarioResult:
    return overhead(target, requests=plan.requests)  # type: ignore[arg-type]
