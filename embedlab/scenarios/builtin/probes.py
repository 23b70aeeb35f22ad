"""What a client meets at the frontend: its answers to mistakes, and what it adds to each request.

client_mistakes(dep)   # unknown model, malformed JSON, missing input: 4xx with OpenAI error JSON?
overhead(dep)          # latency at c=1 and throughput at c=32, through the frontend and direct
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from ...cluster.deployment import Deployment
from ...errors import ConfigError
from ...evidence import clients
from ...evidence.clients import run_sync
from ...evidence.target import Target, target_of
from ...evidence.traffic import asend_burst, probes
from ...verdicts import Verdict
from ..burst import BurstSpec, judge, run_burst, serving, status_codes, workers_of
from ..params import knob, with_knobs
from ..registry import Scenario
from ..result import DataFigures, ScenarioResult

if TYPE_CHECKING:
    from ..plan import ScenarioPlan

__all__ = [
    "MistakeAnswer",
    "MistakesFigures",
    "MistakesParams",
    "OverheadFigures",
    "OverheadParams",
    "client_mistakes",
    "overhead",
    "run_client_mistakes",
    "run_overhead",
]

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


@dataclass(frozen=True, kw_only=True)
class MistakesParams:
    repeat: int = knob(20, "unknown-model requests sent in a row before the valid burst", min=0)
    requests: int = knob(20, "valid requests right after them", min=1)
    concurrency: int = knob(4, "valid requests in flight at once", min=1)


@dataclass(frozen=True, kw_only=True)
class OverheadParams:
    requests: int = knob(400, "requests at c=32 on each path (a quarter of them at c=1)", min=4)


@dataclass(frozen=True)
class MistakeAnswer:
    """How the frontend answered one kind of client mistake."""

    mistake: str  # "unknown model", "malformed JSON", "missing input"
    status: int
    content_type: str
    openai_error: bool  # the body is {"error": {"message": ...}}, as OpenAI's API answers
    body: str  # its first 200 characters


@dataclass(frozen=True)
class MistakesFigures(DataFigures):
    """Each mistake's answer, and how the valid burst right after a run of them fared."""

    answers: tuple[MistakeAnswer, ...]
    after_ok: int
    after_sent: int
    codes: dict[str, int]  # HTTP status of the valid requests that failed

    def rows(self) -> list[tuple[str, str]]:
        rows = []
        for m in self.answers:
            kind = (
                "OpenAI error JSON"
                if m.openai_error
                else f"not OpenAI error JSON ({m.content_type or 'no content type'})"
            )
            rows.append((m.mistake, f"HTTP {m.status}, {kind}: {m.body[:80]}"))
        return rows + [("valid requests right after", f"{self.after_ok} of {self.after_sent} answered")]

    def key_figures(self) -> dict[str, Any]:
        shown = {m.mistake: f"{m.status}{'' if m.openai_error else ' plain'}" for m in self.answers}
        codes = f" (HTTP {', '.join(sorted(self.codes))})" if self.codes else ""
        return {**shown, "after mistakes": f"{self.after_ok}/{self.after_sent} ok{codes}"}


@dataclass(frozen=True)
class OverheadFigures(DataFigures):
    """Through the frontend against straight to one worker (None where the stack has no HTTP worker URL)."""

    p50_ms_c1: float
    p50_ms_c1_direct: float | None
    rps_c32: float
    rps_c32_direct: float | None
    requests: int

    def rows(self) -> list[tuple[str, str]]:
        direct = (
            "no HTTP worker URL"
            if self.p50_ms_c1_direct is None
            else f"{self.p50_ms_c1_direct:.2f} ms direct"
        )
        wide = "no HTTP worker URL" if self.rps_c32_direct is None else f"{self.rps_c32_direct:.0f}/s direct"
        return [
            ("p50 at c=1", f"{self.p50_ms_c1:.2f} ms through the frontend, {direct}"),
            ("throughput at c=32", f"{self.rps_c32:.0f}/s through the frontend, {wide}"),
        ]

    def key_figures(self) -> dict[str, Any]:
        added = (
            ""
            if self.p50_ms_c1_direct is None
            else f" ({self.p50_ms_c1 - self.p50_ms_c1_direct:+.2f} vs direct)"
        )
        share = "" if not self.rps_c32_direct else f" ({self.rps_c32 / self.rps_c32_direct:.0%} of direct)"
        return {"p50": f"{self.p50_ms_c1:.2f} ms{added}", "c=32": f"{self.rps_c32:.0f}/s{share}"}


def client_mistakes(
    deployment: Deployment | Target,
    *,
    params: MistakesParams | None = None,
    **knobs: Any,
) -> ScenarioResult:
    """Each mistake once: a 4xx, with OpenAI error JSON. Then `repeat` unknown-model requests, and
    right after them a burst of valid ones, which must all be answered and counted (a router that
    counts a worker's 404 as its failure can take itself down for everyone). Its knobs
    (`MistakesParams`) come in `params`, or as keywords."""
    params = with_knobs(MistakesParams, params, knobs, scenario="client-mistakes")
    repeat, requests = params.repeat, params.requests
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
        concurrency=params.concurrency,
        inputs=probes().take(requests),
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
        params={**asdict(params), "model": model},
        workers=workers_of(deployment),
        bursts=[burst],
        verdict=verdict,
        reasons=reasons,
        wall_seconds=time.monotonic() - started,
        figures=MistakesFigures(
            answers=tuple(answers),
            after_ok=burst.traffic.n - len(burst.traffic.failures),
            after_sent=burst.traffic.n,
            codes=status_codes([burst]),
        ),
    )


def overhead(
    deployment: Deployment | Target, *, params: OverheadParams | None = None, **knobs: Any
) -> ScenarioResult:
    """Latency at c=1 and throughput at c=32, through the frontend and straight to worker 0. Reported:
    a Python client measures the router and itself (bench/router_overhead.py uses hey)."""
    params = with_knobs(OverheadParams, params, knobs, scenario="overhead")
    requests = params.requests
    if not isinstance(deployment, Deployment):
        raise ConfigError(
            "overhead compares the frontend with a worker's own URL: it needs a deployment embedlab launched"
        )
    model, indices = serving(deployment, None, at_least=1)
    direct = deployment.direct_url(indices[0])
    started = time.monotonic()

    async def measure(base: str, concurrency: int) -> Any:
        n = requests if concurrency > 1 else max(1, requests // 4)
        return await asend_burst(base, model, n, concurrency=concurrency, inputs=probes().take(n))

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
        params={**asdict(params), "direct": direct},
        workers=workers_of(deployment),
        bursts=[],
        verdict=Verdict.FAILED if failed else Verdict.REPORTED,
        reasons=reasons,
        wall_seconds=time.monotonic() - started,
        figures=figures,
    )


# -- as registered scenarios: run(target, plan) -------------------------------------------------


def run_client_mistakes(target: Deployment | Target, plan: ScenarioPlan) -> ScenarioResult:
    return client_mistakes(target, params=plan.params)


def run_overhead(target: Deployment | Target, plan: ScenarioPlan) -> ScenarioResult:
    return overhead(target, params=plan.params)


CLIENT_MISTAKES = Scenario(
    name="client-mistakes", run=run_client_mistakes, params=MistakesParams,
    help="unknown model, malformed body, missing field: each a 4xx with OpenAI error JSON, and valid "
    "traffic still flows right after a run of mistakes",
)  # fmt: skip
OVERHEAD = Scenario(
    name="overhead", run=run_overhead, params=OverheadParams, launches=True,
    help="latency and throughput through the frontend against straight to a worker, at c=1 and c=32 (reported)",
)  # fmt: skip
