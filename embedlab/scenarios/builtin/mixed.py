"""Interleaved traffic over a whole pool: every model's requests at once, as real clients send them.

    result = mixed_traffic(dep)        # M models x K replicas: one burst per send order
    table(result), plot(result)

Bursts of one model at a time never exercise router state shared across models (a
round-robin index shared by every model sends all of one model's requests to one replica
when the models alternate; Dynamo #8551 is a report of that kind). Each burst here
interleaves the models in one send order (`alternate`: A, B, A, B, ...; `random`: a seeded
mix) and is judged per model, from every worker's counter: every replica of the model
moved; its replicas' counters account exactly for its requests (a request counted on
another model's replica shows as one missing here and one too many there); and its split
fits its weights as the stack's policy says (exact for round-robin, the binomial or
chi-square test for random, reported for cache-aware).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from ...cluster.deployment import Deployment
from ...defaults import FAIRNESS_ALPHA, SPLIT_CONFIRM
from ...errors import ConfigError
from ...evidence.busy import leak_power, leak_requests, quiet_power, required_requests
from ...evidence.clients import run_sync
from ...evidence.counters import fairness_p_value
from ...evidence.split import Split
from ...evidence.stats import still_chance
from ...evidence.target import Target, target_of
from ...evidence.traffic import probes
from ...verdicts import Verdict
from ..burst import BurstSpec, judge, run_burst, served_models, workers_of
from ..params import knob, with_knobs
from ..registry import Scenario
from ..result import Burst, DataFigures, ScenarioResult, WorkerInfo
from ..schedule import BusyKnobs, needs_schedule
from .placement import Placement, placement_busy, too_few

if TYPE_CHECKING:
    from ..plan import ScenarioPlan

__all__ = [
    "PATTERNS",
    "MixedFigures",
    "MixedParams",
    "ModelSplit",
    "mixed_traffic",
    "run_mixed",
    "send_order",
]

PATTERNS = ("alternate", "random")
# The orders whose power rests on the order in which the router sees the requests, and the bug
# class each exists to catch. Such a burst is sent one request at a time: through concurrent lanes
# the order reaches the router reordered, and behind a round-robin position shared by every model
# a 2x2 pool then passed with splits of 14/30 and 30/14 (p = 0.023), where sent in order every
# request of a model lands on one replica.
ORDERED = {
    "alternate": "a round-robin position shared by every model (vllm production-stack #915), "
    "which sends all of one model's requests to one replica when models alternate",
}


@dataclass(frozen=True, kw_only=True)
class MixedParams(BusyKnobs):
    patterns: tuple[str, ...] = knob(
        PATTERNS, "send orders, one burst each: alternate (models in turn), random"
    )
    # None: per model, the most of what a 1-in-10 leak (44) and its replicas' split need to be
    # caught with 99 % (power.required_requests: 40 for two equal replicas): 44 on a 2x2 pool.
    requests: int | None = knob(
        None,
        "requests per model in each burst; None: enough for 99 % power against a leak, an idle replica and a skew",
        min=1,
    )
    concurrency: int = knob(
        8, "requests in flight at once, in the random order (alternate sends one at a time, in order)", min=1
    )
    order_seed: int = knob(0, "the seed of the random send order")

    def __post_init__(self) -> None:
        unknown = [p for p in self.patterns if p not in PATTERNS]
        if unknown or not self.patterns:
            raise ConfigError(
                f"mixed: patterns must be some of {', '.join(PATTERNS)}, got {list(self.patterns)}"
            )

    def describe(self) -> str:
        each = "the pool's own number of" if self.requests is None else str(self.requests)
        return (
            f"one burst per send order ({', '.join(self.patterns)}), {each} requests per model each, "
            + ", ".join(
                f"{p} one at a time" if p in ORDERED else f"{p} at concurrency {self.concurrency}"
                for p in self.patterns
            )
        )


@dataclass(frozen=True)
class ModelSplit:
    """One model's share of one interleaved burst."""

    burst: str
    model: str
    replicas: tuple[int, ...]
    sent: int
    counted: float  # by its replicas' counters
    deltas: tuple[float, ...]  # per replica, in index order
    p_value: float | None
    verdict: str  # this model's own: passed, failed, reported, or inconclusive with its burst
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class MixedFigures(DataFigures):
    splits: tuple[ModelSplit, ...]
    judged: str  # the Split that judged each model's replicas

    def rows(self) -> list[tuple[str, str]]:
        rows = []
        for s in self.splits:
            p = "" if s.p_value is None else f", p = {s.p_value:.3g}"
            why = f" ({'; '.join(s.reasons)})" if s.reasons else ""
            counted = f"{s.counted:.0f} counted for {s.sent} sent"
            split = "/".join(f"{d:.0f}" for d in s.deltas)
            rows.append((f"{s.burst}: {s.model}", f"{counted}, split {split}{p}: {s.verdict}{why}"))
        return rows + [("split judged by", self.judged)]

    def key_figures(self) -> dict[str, Any]:
        return {f"{s.burst} {s.model}": "/".join(f"{d:.0f}" for d in s.deltas) for s in self.splits} | {
            "judged": self.judged
        }


def send_order(models: Sequence[str], per_model: int, pattern: str, *, seed: int = 0) -> list[str]:
    """The model of each request in send order: `alternate` takes them in turn, `random` a
    seeded shuffle of the same requests (each model `per_model` times in both)."""
    order = [models[i % len(models)] for i in range(per_model * len(models))]
    if pattern == "random":
        random.Random(seed).shuffle(order)
    elif pattern != "alternate":
        raise ConfigError(f"unknown send order {pattern!r}; choose from {', '.join(PATTERNS)}")
    return order


def mixed_traffic(
    deployment: Deployment | Target,
    *,
    params: MixedParams | None = None,
    split: Split = Split.WEIGHTS,
    progress: bool = False,
    **knobs: Any,
) -> ScenarioResult:
    """One interleaved burst per send order over every model of the pool, judged per model.

    Its knobs (`MixedParams`) come in `params`, or as keywords: `mixed_traffic(dep, requests=20)`.
    `requests` None sizes the bursts from the pool; one too small to catch a 1-in-10 leak, an
    idle replica and a 0.9/0.1 skew with 99 % ends inconclusive, never passed. A busy pool (or
    `busy`) runs the randomized schedule up to `budget_s` (one model per window: interleaving
    models inside a window cut leak detection in half, docs/busy-method.md).
    """
    params = with_knobs(MixedParams, params, knobs, scenario="mixed")
    target = target_of(deployment)
    served_models(target.frontend_url)
    pool = _Pool.of(target)
    workers = workers_of(deployment)
    requests = pool.requests() if params.requests is None else params.requests
    recorded = {**asdict(params), "requests": requests, "models": pool.models, "split": str(split)}
    placement = Placement("mixed", deployment, target, recorded, params.budget_s)

    def busy(bursts: list[Burst]) -> ScenarioResult:
        figures = MixedFigures(splits=(), judged=str(split))
        return placement_busy(placement, pool.models, pool.weights, bursts, figures=figures)

    if params.busy:
        return busy([])
    bursts, splits = [], []
    for pattern in params.patterns:
        burst, judged = _judged(target, pool, pattern, requests, params, split, workers, progress)
        bursts.append(burst)
        chance = [s.model for s in judged if _chance_split(s, split)]
        if chance and judge([burst], exact_total=True)[0] == Verdict.PASSED:
            again, rejudged = _judged(
                target, pool, pattern, requests * SPLIT_CONFIRM, params, split, workers, progress,
                name=f"{pattern} (confirming)",
            )  # fmt: skip
            bursts.append(again)
            judged = _confirmed(judged, rejudged, chance, requests * SPLIT_CONFIRM)
        splits += judged
    if needs_schedule(bursts):
        return busy(bursts)
    power, short = _mixed_power(requests, pool.own, split)
    power += "".join(
        f"; the {p} order reached the router as sent, one request at a time, so {ORDERED[p]} fails it"
        for p in params.patterns
        if p in ORDERED
    )
    verdict, reasons = _mixed_verdict(bursts, splits, split, short)
    figures = MixedFigures(splits=tuple(splits), judged=str(split))
    return placement.result(bursts, verdict, reasons, figures=figures, power=power)


@dataclass(frozen=True)
class _Pool:
    """The pool's models and which workers serve each, with their weights."""

    models: list[str]
    of_model: dict[str, list[int]]  # each model's replicas, by worker index
    weights: list[float]  # by worker index

    @classmethod
    def of(cls, target: Target) -> _Pool:
        if any(m is None for m in target.models):
            raise ConfigError(
                "mixed needs to know which model each worker serves: --worker-models, one per system URL "
                "in their order (e.g. --worker-models A,A,B,B), or attach(..., models=[...]) from Python"
            )
        models = list(dict.fromkeys(m for m in target.models if m is not None))
        if len(models) < 2:
            raise ConfigError(
                f"mixed interleaves several models; this pool serves {models} (same-model checks one)"
            )
        of_model = {m: [i for i, w in enumerate(target.models) if w == m] for m in models}
        return cls(models, of_model, list(target.weights or [1.0] * len(target.models)))

    @property
    def own(self) -> dict[str, list[float]]:
        """Each model's replicas' weights."""
        return {m: [self.weights[i] for i in self.of_model[m]] for m in self.models}

    def requests(self) -> int:
        """Per model, the most of what a leak and each model's split need to be caught with 99 %."""
        own = self.own
        return max([leak_requests(), *(required_requests(w).requests for w in own.values() if len(w) > 1)])

    def must_move(self, requests: int, split: Split) -> tuple[frozenset[int], str]:
        """The replicas that must each move, where a correct router rarely leaves one still, and
        the rule's sentence for it."""
        still = {m: still_chance(w, requests) for m, w in self.own.items()}
        loose = [m for m in self.models if split is Split.REPORT or still[m].value >= FAIRNESS_ALPHA]
        must_move = frozenset(i for m in self.models if m not in loose for i in self.of_model[m])
        if split is Split.REPORT:
            return must_move, "a still replica is not asserted (the policy decides)"
        return must_move, "every replica moves" + "".join(
            f" (not asserted for {m}: a correct router leaves one of its replicas still {still[m].of_the_time()})"
            for m in loose
        )


def _judged(
    target: Target,
    pool: _Pool,
    pattern: str,
    requests: int,
    params: MixedParams,
    split: Split,
    workers: list[WorkerInfo],
    progress: bool,
    *,
    name: str = "",
) -> tuple[Burst, list[ModelSplit]]:
    """One interleaved burst of `requests` per model in `pattern`'s order, and each model's split
    of it (none where the burst read no counters)."""
    must_move, moves = pool.must_move(requests, split)
    order = send_order(pool.models, requests, pattern, seed=params.order_seed)
    burst = _interleaved(
        target,
        pool,
        name or pattern,
        order,
        1 if pattern in ORDERED else params.concurrency,
        must_move,
        moves,
        split,
        progress,
    )
    if burst.check is None:
        return burst, []
    sent = Counter(order)
    return burst, [
        _judge_model(burst, m, pool.of_model[m], pool.weights, sent[m], split, workers, must_move)
        for m in pool.models
    ]


def _chance_split(s: ModelSplit, split: Split) -> bool:
    """The model failed on its split's p-value alone: every request counted, every replica moved."""
    return (
        split is Split.WEIGHTS
        and s.verdict == Verdict.FAILED
        and len(s.reasons) == 1
        and s.p_value is not None
        and s.p_value < FAIRNESS_ALPHA
    )


def _confirmed(
    first: list[ModelSplit], again: list[ModelSplit], chance: list[str], requests: int
) -> list[ModelSplit]:
    """Each model whose first split did not fit, judged by its confirming burst's split (a
    correct random router fails both with probability alpha squared, as same-model's does), the
    first split said beside it; the confirming burst judges every other model as well."""
    second = {s.model: s for s in again}
    out = []
    for s in first:
        if s.model not in chance:
            out.append(s)
            continue
        g = second[s.model]
        shown = "/".join(f"{d:.0f}" for d in g.deltas)
        said = f"{s.reasons[0]}; a confirming burst of {requests} requests per model split {shown}"
        if g.verdict == Verdict.PASSED:
            out.append(
                replace(
                    s,
                    verdict=str(Verdict.PASSED),
                    reasons=(f"{said}: it fits (a chance split, not a fault)",),
                )
            )
        elif g.verdict == Verdict.FAILED:
            out.append(replace(s, reasons=(f"{said}: it does not fit either", *g.reasons)))
        else:
            out.append(replace(s, verdict=g.verdict, reasons=(f"{said}: it decided nothing", *g.reasons)))
    return out + [g for g in again if g.model not in chance]


def _interleaved(
    target: Target,
    pool: _Pool,
    name: str,
    order: list[str],
    concurrency: int,
    must_move: frozenset[int],
    moves: str,
    split: Split,
    progress: bool,
) -> Burst:
    """One burst in `order`, each worker's expected share the model's share of the order times
    the replica's share of its model's weight."""
    spec = BurstSpec(
        name=name,
        model="+".join(pool.models),
        expected=frozenset(i for indices in pool.of_model.values() for i in indices),
        requests=len(order),
        concurrency=concurrency,
        inputs=probes().take(len(order)),
        models=order,
        require_all=False,
        must_move=must_move,
        rule=f"{name} send order: per model, {moves}, its replicas count exactly its "
        f"requests, and its split fits its weights ({split})",
    )
    burst = run_sync(run_burst(target, spec, progress=progress))
    sent = Counter(order)
    burst.expected_shares = {
        i: sent[m] / len(order) * pool.weights[i] / sum(pool.own[m])
        for m in pool.models
        for i in pool.of_model[m]
    }
    return burst


def _mixed_verdict(
    bursts: list[Burst], splits: list[ModelSplit], split: Split, short: list[str]
) -> tuple[Verdict, list[str]]:
    """The bursts' own verdict, then each model's: a failed model fails it, REPORT reports the
    splits, and bursts too small for the target power leave it inconclusive."""
    verdict, reasons = judge(bursts, exact_total=True)
    if verdict != Verdict.PASSED:
        return verdict, reasons
    failed = [s for s in splits if s.verdict == Verdict.FAILED]
    if failed:
        return Verdict.FAILED, [f"{s.burst}: {s.model}: {r}" for s in failed for r in s.reasons]
    if split is Split.REPORT:
        return Verdict.REPORTED, [
            f"{s.burst}: {s.model} split {'/'.join(f'{d:.0f}' for d in s.deltas)}" for s in splits
        ]
    if short:
        return Verdict.INCONCLUSIVE, short
    # A chance split that its confirming burst cleared is said, not hidden.
    return verdict, [
        f"{s.burst}: {s.model}: {r}" for s in splits if s.verdict == Verdict.PASSED for r in s.reasons
    ]


def _mixed_power(requests: int, pool: dict[str, list[float]], split: Split) -> tuple[str, list[str]]:
    """What each interleaved burst of `requests` per model catches, and why it falls short of the
    target where it does: a leak of 1 in 10, an idle replica and a 0.9/0.1 skew, each with 99 %."""
    parts, short = [leak_power(requests).sentence], list[str]()
    # Models whose replicas are weighted alike are one sentence: said once for the pool, not per model.
    alike: dict[tuple[float, ...], list[str]] = {}
    for model, weights in pool.items():
        if len(weights) >= 2 and split is not Split.REPORT:
            alike.setdefault(tuple(weights), []).append(model)
    for shared, models in alike.items():
        q = quiet_power(requests, shared)
        named = " and ".join(f"'{m}'" for m in models) + (", each" if len(models) > 1 else "")
        parts.append(f"{named}: {q.sentence}")
        if split is Split.WEIGHTS and (why := too_few(q)):
            short.extend(f"{model}: {why}" for model in models)
    return "; ".join(parts), short


def _judge_model(
    burst: Burst,
    model: str,
    replicas: list[int],
    weights: list[float],
    sent: int,
    split: Split,
    workers: list[WorkerInfo],
    must_move: frozenset[int],
) -> ModelSplit:
    deltas = [burst.delta(i) or 0.0 for i in replicas]
    counted = sum(deltas)
    reasons = []
    answered = sum(1 for r in burst.traffic.records if r.model == model and r.ok)
    if counted != sent and answered == sent:
        reasons.append(f"its replicas counted {counted:g} for {sent} requests sent")
    own = [weights[i] for i in replicas]
    silent = [i for i, d in zip(replicas, deltas) if d <= 0 and i in must_move]
    if silent:
        reasons.append("no traffic reached " + ", ".join(f"worker {i}" for i in silent))
    p_value = fairness_p_value(deltas, own) if len(replicas) > 1 else None
    if split is Split.WEIGHTS and p_value is not None and p_value < FAIRNESS_ALPHA:
        reasons.append(
            f"split {'/'.join(f'{d:.0f}' for d in deltas)} is unlikely under weights {own} (p={p_value:.2g})"
        )
    if split is Split.EXACT and len(deltas) > 1 and max(deltas) - min(deltas) > 1:
        reasons.append(f"round-robin split {'/'.join(f'{d:.0f}' for d in deltas)} is not even")
    elsewhere = _served_elsewhere(burst, model, replicas, workers)
    if elsewhere:
        reasons.append(
            f"{elsewhere} of its responses came from another model's replica (by the frontend's header)"
        )
    verdict = Verdict.FAILED if reasons else (Verdict.REPORTED if split is Split.REPORT else Verdict.PASSED)
    if burst.inconclusive:
        # The counters carry traffic embedlab did not send: these figures judge nothing.
        verdict, reasons = Verdict.INCONCLUSIVE, ["not judged: the burst is inconclusive"]
    return ModelSplit(
        burst=burst.name, model=model, replicas=tuple(replicas), sent=sent, counted=counted, deltas=tuple(deltas),
        p_value=p_value, verdict=str(verdict), reasons=tuple(reasons),
    )  # fmt: skip


def _served_elsewhere(burst: Burst, model: str, replicas: list[int], workers: list[WorkerInfo]) -> int:
    """Responses for `model` that the frontend says another model's replica served (0 where it names none)."""
    own = {workers[i].endpoint for i in replicas if workers[i].endpoint}
    named = [r.worker.split("/")[0] for r in burst.traffic.records if r.model == model and r.ok and r.worker]
    return sum(1 for endpoint in named if own and endpoint not in own)


def run_mixed(target: Deployment | Target, plan: ScenarioPlan) -> ScenarioResult:
    split = (
        target.stack.split_for(target.spec.router_mode) if isinstance(target, Deployment) else Split.WEIGHTS
    )
    return mixed_traffic(target, params=plan.params, split=split, progress=plan.progress)


MIXED = Scenario(
    name="mixed", run=run_mixed, params=MixedParams, layout="per-model", deployment={"workers": 2},
    help="every model's requests interleaved in one burst per send order: per model, every replica "
    "moves, its replicas count exactly its requests, and its split fits its weights",
)  # fmt: skip
