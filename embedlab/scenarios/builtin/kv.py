"""KV-aware routing, proven from the workers' counters: prefix affinity and participation.

    prefix-affinity    groups of completions (or chats) that share a prefix, one group at a time:
                       on an idle pool a KV-aware router keeps each group on one worker
    kv-participation   prompts that share nothing, more of them than workers: every worker
                       takes part (dynamo #7836: 3 of 5 decode workers got all the traffic)

Each group is one burst between two counter snapshots, so where its requests went is read
from the workers' own counters, not from the router. What the router promises, by the cost
it documents (Dynamo's KV router: `overlap_weight * new prefill blocks + blocks in flight`,
temperature 0; embedded's `kv` policy, `serving/frontend/kv_router.py`): a prompt goes to the
worker whose cache holds most of it unless load outweighs the saving. Sent one at a time, no
load is ever in flight, so a group's first request goes anywhere and every later one must
follow it: the verdict fails any group that split. Sent with `concurrency` above 1, the cost
no longer predicts one worker: the split is reported, not asserted.

Both run at the stack's own prefix-aware policy (router mode `PREFIX_AWARE`: embedded's and
Dynamo's `kv`, the Rust routers' `cache_aware`) unless the plan names a mode; a stack that has
none gives the verdict unsupported, with its reason, and nothing is launched.

Where a group split, the cause is named when the layout explains it: the workers of the
model on several endpoints behind a router that picks an endpoint before it looks at any
cache (Dynamo's frontend picks a worker set at random, weighted by instances). The router's
view of the workers' KV events (`evidence/kv_view.py`) is shown beside the counters: a
worker whose events never reached the router is named.
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from ...cluster.deployment import Deployment
from ...cluster.stack import PREFIX_AWARE
from ...cluster.worker_server import server_of
from ...errors import ConfigError
from ...evidence.clients import run_sync
from ...evidence.kv_view import KvView, kv_view
from ...evidence.prompts import distinct_prompts, prefix_groups
from ...evidence.target import Target, target_of
from ...verdicts import Verdict
from ..burst import BurstSpec, judge, run_burst, serving, workers_of
from ..params import knob, with_knobs
from ..registry import Scenario
from ..result import Burst, DataFigures, ScenarioResult

__all__ = [
    "AffinityParams",
    "KvFigures",
    "ParticipationFigures",
    "ParticipationParams",
    "participation_requests",
    "prefix_affinity",
    "kv_participation",
]

KINDS = ("completions", "chat")
# The chance a correct router with random tie-breaks leaves some worker out, at most.
PARTICIPATION_MISS = 0.001


@dataclass(frozen=True, kw_only=True)
class AffinityParams:
    groups: int = knob(4, "groups of requests, each sharing a prefix of its own", min=1)
    per_group: int = knob(6, "requests per group, sent one group at a time", min=2)
    prefix_tokens: int = knob(256, "tokens each group's prompts share (in the model's tokenizer)", min=1)
    suffix_tokens: int = knob(16, "tokens of each prompt's own suffix", min=1)
    kind: str = knob("completions", "the request type: completions or chat", choices=KINDS)
    concurrency: int = knob(
        1, "requests of a group in flight at once (above 1: reported, not asserted)", min=1
    )


@dataclass(frozen=True, kw_only=True)
class ParticipationParams:
    requests: int = knob(
        0, "prompts that share nothing (0: enough that a random router misses a worker < 0.1 %)", min=0
    )
    prompt_tokens: int = knob(128, "tokens of each prompt", min=1)
    kind: str = knob("completions", "the request type: completions or chat", choices=KINDS)
    concurrency: int = knob(1, "requests in flight at once", min=1)


def participation_requests(workers: int, miss: float = PARTICIPATION_MISS) -> int:
    """The fewest new prompts after which a router that places each at random among `workers`
    leaves some worker out with probability at most `miss` (a union bound: workers * (1 - 1/workers)^n)."""
    if workers < 2:
        return 1
    return math.ceil(math.log(miss / workers) / math.log(1 - 1 / workers))


@dataclass(frozen=True)
class KvFigures(DataFigures):
    """Where each group's requests went, by the workers' counters, and the router's view of the caches."""

    structure: str
    groups: list[dict[str, float]]  # per group: worker index -> its counter's rise
    view: KvView | None
    endpoints: dict[int, str]

    def rows(self) -> list[tuple[str, str]]:
        rows = [("prompts", self.structure)]
        for g, split in enumerate(self.groups):
            shown = ", ".join(f"worker {i} +{d:g}" for i, d in sorted(split.items(), key=_by_index) if d)
            rows.append((f"group {g}", shown or "no counts"))
        if self.view is not None:
            rows += self.view.rows()
        return rows

    def key_figures(self) -> dict[str, Any]:
        return {"groups that stayed on one worker": sum(1 for s in self.groups if _movers(s) == 1)}


@dataclass(frozen=True)
class ParticipationFigures(DataFigures):
    """Where the new prefixes went, by the workers' counters, and the router's view of the caches."""

    split: dict[str, float]  # worker index -> its counter's rise
    view: KvView | None

    def rows(self) -> list[tuple[str, str]]:
        shown = ", ".join(f"worker {i} +{d:g}" for i, d in sorted(self.split.items(), key=_by_index))
        return [("new prefixes", shown), *(self.view.rows() if self.view is not None else [])]

    def key_figures(self) -> dict[str, Any]:
        return {"workers that took part": f"{sum(1 for d in self.split.values() if d)} of {len(self.split)}"}


def _by_index(item: tuple[str, float]) -> int:
    return int(item[0])


def _movers(split: dict[str, float] | dict[int, float]) -> int:
    return sum(1 for d in split.values() if d)


def check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ConfigError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")


def model_path(target: Deployment | Target, indices: list[int]) -> str | None:
    """Whose tokenizer counts the prompts: the first worker's server says (None: embedlab's words)."""
    if isinstance(target, Deployment):
        worker = target.spec.workers[indices[0]]
        path = server_of(worker).model_directory(worker)
        return None if path is None else str(path)
    return None


def _endpoint_cause(target: Deployment | Target, indices: list[int]) -> str:
    """Why the layout defeats a KV router, where it does: the model's workers on several endpoints
    behind a stack that picks an endpoint before any cache is looked at."""
    if not isinstance(target, Deployment) or not target.stack.picks_endpoint_first:
        return ""
    endpoints = sorted({target.endpoint(i) for i in indices})
    if len(endpoints) < 2:
        return ""
    return (
        f"the cause is the layout: the model's {len(indices)} workers are on {len(endpoints)} endpoints "
        f"({', '.join(endpoints)}); {target.stack.display} first picks one endpoint (a worker set, by "
        "its live instances, never by cache) and only then lets its router choose among that endpoint's "
        "instances, so its KV router never compares workers of different endpoints. Give the workers of "
        "one model one endpoint (`--endpoints model`, DeploymentSpec.endpoints='model')"
    )


def prefix_affinity(
    target: Deployment | Target,
    *,
    params: AffinityParams | None = None,
    model: str | None = None,
    progress: bool = False,
    **knobs: Any,
) -> ScenarioResult:
    """Send each group of shared-prefix prompts as its own burst; each group must stay on one worker."""
    params = with_knobs(AffinityParams, params, knobs, scenario="prefix-affinity")
    check_kind(params.kind)
    model, indices = serving(target, model)
    started = time.monotonic()
    prompts = prefix_groups(
        params.groups,
        params.per_group,
        prefix_tokens=params.prefix_tokens,
        suffix_tokens=params.suffix_tokens,
        nonce=secrets.token_hex(4),
        model_path=model_path(target, indices),
    )
    found = target_of(target)
    view_before = kv_view(found)
    bursts: list[Burst] = []
    for g, group in enumerate(prompts.prompts):
        spec = BurstSpec(
            name=f"group {g}",
            model=model,
            expected=frozenset(indices),
            requests=len(group),
            concurrency=params.concurrency,
            inputs=list(group),
            kind=params.kind,
            require_all=False,
            rule="every request of the group on the worker that served its first",
        )
        bursts.append(run_sync(run_burst(found, spec, progress=progress)))
    view = kv_view(found, since=view_before)
    verdict, reasons = judge(bursts, exact_total=True)
    splits = [{i: b.delta(i) or 0.0 for i in indices} for b in bursts]
    if verdict is Verdict.PASSED:
        split = [g for g, s in enumerate(splits) if _movers(s) > 1]
        if params.concurrency > 1:
            verdict = Verdict.REPORTED
            reasons = [
                f"{params.concurrency} requests in flight: the router's cost weighs load against the cached "
                f"prefix, so it predicts no single worker; {len(split)} of {len(splits)} groups split"
            ]
        elif split:
            verdict = Verdict.FAILED
            reasons = [
                f"group {g} split: "
                + ", ".join(f"worker {i} +{d:g}" for i, d in sorted(splits[g].items()) if d)
                + " (on an idle pool every request after the first must follow the cached prefix)"
                for g in split
            ]
            cause = _endpoint_cause(target, indices)
            if cause:
                reasons.append(cause)
            if view is not None:
                reasons += view.findings()
        elif view is not None and view.findings():
            verdict, reasons = Verdict.FAILED, view.findings()
        else:
            reasons = [f"each of the {len(splits)} groups stayed on one worker ({prompts.describe()})"]
    return ScenarioResult(
        scenario="prefix-affinity",
        stack=found.stack,
        params={**asdict(params), "model": model},
        workers=workers_of(target),
        bursts=bursts,
        verdict=verdict,
        reasons=reasons,
        wall_seconds=time.monotonic() - started,
        figures=KvFigures(
            structure=prompts.describe(),
            groups=[{str(i): d for i, d in s.items()} for s in splits],
            view=view,
            endpoints={i: w.endpoint or "" for i, w in enumerate(workers_of(target))},
        ),
    )


def kv_participation(
    target: Deployment | Target,
    *,
    params: ParticipationParams | None = None,
    model: str | None = None,
    progress: bool = False,
    **knobs: Any,
) -> ScenarioResult:
    """Send prompts that share nothing, more than the workers: every worker must take part."""
    params = with_knobs(ParticipationParams, params, knobs, scenario="kv-participation")
    check_kind(params.kind)
    model, indices = serving(target, model)
    started = time.monotonic()
    n = params.requests or participation_requests(len(indices))
    prompts = distinct_prompts(
        n, tokens=params.prompt_tokens, nonce=secrets.token_hex(4), model_path=model_path(target, indices)
    )
    found = target_of(target)
    view_before = kv_view(found)
    spec = BurstSpec(
        name=f"{model}: {n} new prefixes",
        model=model,
        expected=frozenset(indices),
        requests=n,
        concurrency=params.concurrency,
        inputs=prompts,
        kind=params.kind,
        require_all=True,
        rule="every worker takes part",
    )
    burst = run_sync(run_burst(found, spec, progress=progress))
    view = kv_view(found, since=view_before)
    verdict, reasons = judge([burst], exact_total=True)
    miss = len(indices) * (1 - 1 / len(indices)) ** n
    # Every worker cached something new: a worker whose events the router never applied shows here.
    findings = view.findings() if view is not None else []
    if verdict in (Verdict.PASSED, Verdict.FAILED) and findings:
        verdict, reasons = Verdict.FAILED, [*(reasons if verdict is Verdict.FAILED else []), *findings]
    elif verdict is Verdict.PASSED:
        reasons = [
            f"all {len(indices)} workers took part in {n} new prefixes (a router placing them at random "
            f"would leave one out with probability {miss:.2%} at most)"
        ]
    return ScenarioResult(
        scenario="kv-participation",
        stack=found.stack,
        params={**asdict(params), "model": model, "requests": n},
        workers=workers_of(target),
        bursts=[burst],
        verdict=verdict,
        reasons=reasons,
        wall_seconds=time.monotonic() - started,
        power=f"a worker left out of {n} new prefixes is caught; a correct random router is accused "
        f"with probability {miss:.2%} at most",
        figures=ParticipationFigures(split={str(i): burst.delta(i) or 0.0 for i in indices}, view=view),
    )


# -- as registered scenarios: run(target, plan) -------------------------------------------------


def on_plan(check: Callable[..., ScenarioResult]) -> Callable[[Deployment | Target, Any], ScenarioResult]:
    """`check(target, params=, model=, progress=)` as a registered scenario's `run(target, plan)`:
    the plan's knobs, its first model (None: the only one served) and its progress bars."""

    def run(target: Deployment | Target, plan: Any) -> ScenarioResult:
        first = plan.models[0] if plan.models else None
        return check(target, params=plan.params, model=first, progress=plan.progress)

    return run


PREFIX_AFFINITY = Scenario(
    name="prefix-affinity", run=on_plan(prefix_affinity), params=AffinityParams,
    deployment={"router_mode": PREFIX_AWARE},
    help="groups of completions sharing a prefix, one group at a time: a KV-aware router keeps each "
    "group on one worker (the router's view of the KV events beside it)",
)  # fmt: skip

KV_PARTICIPATION = Scenario(
    name="kv-participation", run=on_plan(kv_participation), params=ParticipationParams,
    deployment={"router_mode": PREFIX_AWARE},
    help="prompts that share nothing, more of them than workers: every worker takes part (dynamo #7836)",
)  # fmt: skip
