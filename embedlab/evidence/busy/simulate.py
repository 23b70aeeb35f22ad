"""Simulated busy pools: the design evidence for the method, before real processes measure it.

    [sim] = simulate(Pool.same_model(2), backgrounds=[Background("bursty", 1.0)], runs=200, seed=1)
    sim.rate(Verdict.FAILED), sim.seconds_to(Verdict.PASSED, q=0.95)

A pool of workers serves models behind a router (correct: weighted random; or one of the
frontend's faults). Another client sends `multiple` times the check's rate, spread evenly over
the models, through the same router, with one of three shapes over time:

    steady   Poisson at a constant rate
    bursty   1 s at 3x the mean rate, then 2 s silent (a random phase per check)
    ramp     rising linearly from 0 to twice the mean over the budget

Each simulated check runs the real BlockEngine (the same code as a real check, vectorised over
runs) on the counts of its randomized schedule, and stops at its first decision or its budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from ...errors import ConfigError
from ...verdicts import Verdict
from .constants import BUDGET_S, BUSY_CHECK_ALPHA, RATE_PER_S, WINDOW_S
from .engine import BlockEngine
from .schedule import Schedule
from .sequential import Betting, orders

__all__ = ["Background", "Pool", "Simulation", "simulate"]

SHAPES = ("steady", "bursty", "ramp")


@dataclass(frozen=True)
class Pool:
    models: tuple[str, ...]  # each worker's model
    weights: tuple[float, ...] = ()
    fault: str = ""  # "", "leak:P", "stick", "skew:W", "idle", "double:P", "cache:P"

    @classmethod
    def same_model(cls, replicas: int, *, fault: str = "", weights: Sequence[float] = ()) -> Pool:
        return cls(("m",) * replicas, tuple(weights), fault)

    @classmethod
    def multi_model(cls, models: int, replicas: int = 1, *, fault: str = "") -> Pool:
        return cls(tuple(f"m{i}" for i in range(models) for _ in range(replicas)), (), fault)

    @property
    def served(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.models))

    def placement(self) -> tuple[np.ndarray, np.ndarray, float]:
        """(own, other, leak): where the router sends a model's requests that stay on its replicas
        (models served x workers, each row summing to 1), where a leaked one lands (uniformly over
        the other models' replicas; zeros where there are none), and the leak's share."""
        name, _, param = self.fault.partition(":")
        leak = float(param) if name == "leak" and len(self.served) > 1 else 0.0
        kept = replace(self, fault="" if name == "leak" else self.fault)
        own = kept.routing()
        other = np.zeros_like(own)
        for m, model in enumerate(self.served):
            elsewhere = np.array([x != model for x in self.models], dtype=float)
            other[m] = elsewhere / elsewhere.sum() if elsewhere.any() else 0.0
        return own, other, leak

    def routing(self) -> np.ndarray:
        """(models served, workers): where the router sends each model's requests."""
        weights = np.asarray(self.weights or (1.0,) * len(self.models), dtype=float)
        name, _, param = self.fault.partition(":")
        out = np.zeros((len(self.served), len(self.models)))
        for m, model in enumerate(self.served):
            own = np.array([x == model for x in self.models])
            first = int(np.flatnonzero(own)[0])
            p = np.where(own, weights, 0.0)
            if name == "stick":
                p = np.where(np.arange(len(p)) == first, 1.0, 0.0)
            elif name == "skew" and own.sum() > 1:
                p = np.where(own, (1 - float(param)) / (own.sum() - 1), 0.0)
                p[first] = float(param)
            elif name == "idle":
                p[int(np.flatnonzero(own)[-1])] = 0.0
            p = p / p.sum()
            if name == "leak" and (~own).any():
                p = (1 - float(param)) * p + float(param) * (~own) / (~own).sum()
            out[m] = p
        return out


@dataclass(frozen=True)
class Background:
    shape: str = "steady"
    multiple: float = 1.0  # the other client's mean rate, as a multiple of the check's

    def rates(
        self, starts: np.ndarray, window_s: float, budget_s: float, phase: np.ndarray, steps: int = 8
    ) -> np.ndarray:
        """Mean rate over each window (relative to `multiple`=1), per run: (runs, windows), from
        `steps` points in each window."""
        t = starts[None, :, None] + window_s * (np.arange(steps) + 0.5)[None, None, :] / steps
        if self.shape == "steady":
            r = np.ones_like(t + phase[:, None, None])
        elif self.shape == "bursty":
            r = np.where(((t + phase[:, None, None]) % 3.0) < 1.0, 3.0, 0.0)
        elif self.shape == "ramp":
            r = np.broadcast_to(2.0 * t / budget_s, (len(phase), *t.shape[1:]))
        else:
            raise ValueError(f"unknown background shape {self.shape!r}; choose from {SHAPES}")
        return np.asarray(self.multiple * r.mean(axis=-1))


@dataclass
class Simulation:
    verdicts: np.ndarray  # per run: the Verdict's value
    seconds: np.ndarray  # per run: simulated seconds to the verdict (the budget if inconclusive)
    runs: int = field(init=False)

    def __post_init__(self) -> None:
        self.runs = len(self.verdicts)

    def count(self, verdict: Verdict) -> int:
        return int((self.verdicts == verdict.value).sum())

    def rate(self, verdict: Verdict) -> float:
        return self.count(verdict) / self.runs

    def seconds_to(self, verdict: Verdict | None = None, q: float = 0.5) -> float:
        """A quantile of the time to `verdict` (None: to any verdict, inconclusive at the budget)."""
        chosen = self.seconds if verdict is None else self.seconds[self.verdicts == verdict.value]
        return float(np.quantile(chosen, q)) if len(chosen) else float("nan")


def _counts(rng: np.random.Generator, mean: np.ndarray, fano: float) -> np.ndarray:
    """Counts with this mean and variance `fano` x mean: Poisson at 1, negative binomial above it,
    binomial below it (paced arrivals, such as `hey -q`'s, are steadier than Poisson)."""
    mean = np.maximum(mean, 0.0)
    if abs(fano - 1.0) < 1e-9:
        return rng.poisson(mean)
    out = np.zeros(mean.shape, dtype=np.int64)
    some = mean > 0
    if fano > 1:
        r = mean[some] / (fano - 1.0)
        out[some] = rng.negative_binomial(r, r / (r + mean[some]))
    else:
        n = np.maximum(1, np.ceil(mean[some] / (1.0 - fano))).astype(np.int64)
        out[some] = rng.binomial(n, np.minimum(1.0, mean[some] / n))
    return out


def simulate(
    pool: Pool,
    *,
    backgrounds: Sequence[Background] = (Background(),),
    runs: int = 200,
    seed: int = 0,
    rate_per_s: float = RATE_PER_S,
    window_s: float = WINDOW_S,
    budget_s: float = BUDGET_S,
    alpha: float = BUSY_CHECK_ALPHA,
    mix: float = 0.0,
    betting: Betting | None = None,
    requests: int | None = None,
    block_s: float | None = None,
    overhead_s: float = 0.0,
    fano: float = 1.0,
    leak_rule: str = "random",
    router: bool = False,
    span_s: float | None = None,
) -> list[Simulation]:
    """`runs` checks of `pool` under each of `backgrounds` (one batch); each check stops at its first
    decision or its budget. One Simulation per background, in order.

    What a real check measured can stand in for the defaults (bench/verification_power.py fits
    them from real runs): `requests` per window (default: `rate_per_s` x `window_s`; the
    background's rate stays a multiple of `rate_per_s`), `block_s` the wall time a kept block
    costs (the blocks set aside for a late answer and the reads included; default: its windows),
    which bounds the blocks within the budget, `overhead_s` added to every time to verdict (the
    quiet bursts and the sender's fitting before the schedule), `fano` the background's variance
    over its mean per window, and `leak_rule` "debt" for the embedded frontend's `leak:p` (exactly
    one request in 1/p of a model's, the other client's and the check's counted together, the
    check's share of them drawn hypergeometrically) in place of "random" (each request leaks with p).

    Faults beyond the frontend's routing: `double:p` counts each request a second time with
    probability p, on a replica of its model (a timeout retry whose first attempt still counted,
    hedging); `cache:p` answers each with probability p without any worker counting it. `router`:
    the router's own per-model count of the other clients' requests is read beside the workers'
    (exactly: a router that counts what it admits).

    `span_s`: the wall time a window spans from its opening read to its closing one, where it is
    longer than its sending part `window_s` (counters read through Prometheus, each read waiting
    for a scrape of every worker: the sending part plus that wait). The workers' counters then
    take the other client's requests over the whole span, the check's own staying those of the
    sending part; the waits add to every time to verdict, not to the budget, which bounds the
    blocks by `block_s` alone (the schedule's own time). Default: `window_s`, no wait.
    """
    if leak_rule not in ("random", "debt"):
        raise ConfigError(f"leak_rule must be random or debt, got {leak_rule!r}")
    rng = np.random.default_rng(seed)
    served = pool.served
    per_window = int(round(rate_per_s * window_s)) if requests is None else requests
    if len(served) == 1:
        schedule = Schedule.same_model(served[0], requests=per_window, window_s=window_s, seed=0)
    else:
        schedule = Schedule.per_model(served, requests=per_window, mix=mix, window_s=window_s, seed=0)
    doses = np.array([schedule.doses(m) for m in served], dtype=np.int64)  # models, arms
    total = runs * len(backgrounds)
    engine = BlockEngine(
        {m: schedule.doses(m) for m in served},
        pool.models,
        pool.weights or None,
        alpha=alpha,
        batch=(total,),
        betting=betting,
        resolution="decisions",
    )
    own, other, leak = pool.placement()
    kind, _, param = pool.fault.partition(":")
    twice = float(param) if kind == "double" else 0.0
    cached = float(param) if kind == "cache" else 0.0
    arms = len(schedule.arms)
    block = arms * window_s if block_s is None else block_s
    span = window_s if span_s is None else span_s
    wall_block = block + arms * (span - window_s)  # a kept block's wall time, the waits included
    table = orders(arms)
    blocks = max(1, int(budget_s // block + 1e-9))
    starts = np.arange(blocks * arms) * (wall_block / arms)
    steps = max(8, int(np.ceil(8 * span / window_s - 1e-9)))
    # The other client's requests per window and model, over its span: its models evenly, routed
    # like the check's. A ramp rises over the check's wall time (the budget, plus the waits).
    mean = np.concatenate(
        [
            b.rates(starts, span, budget_s * wall_block / block, rng.uniform(0, 3, runs), steps)
            for b in backgrounds
        ]
    ) * (rate_per_s * span / len(served))
    debt = rng.uniform(0, 1, (total, len(served)))  # the leak rule's debt per model, at a random phase
    verdict = np.full(total, Verdict.INCONCLUSIVE.value, dtype=object)
    seconds = np.full(total, overhead_s + blocks * wall_block)
    live = np.arange(total)  # the checks still running, as rows of the engine's batch
    for b in range(blocks):
        n = len(live)
        observed = rng.integers(len(table), size=n)
        arm_at = table[observed]  # runs, arms (the arm in each window)
        sent = doses[:, arm_at].transpose(1, 0, 2)  # runs, models, arms
        deltas = np.zeros((n, len(pool.models), arms))
        others = np.zeros((n, len(served), arms))
        for t in range(arms):
            for m in range(len(served)):
                mine = sent[:, m, t]
                theirs = _counts(rng, mean[live, b * arms + t], fano)
                others[:, m, t] = theirs
                if leak == 0.0:
                    leaked_mine = leaked_theirs = np.zeros(n, dtype=np.int64)
                elif leak_rule == "debt":
                    d = debt[live, m] + leak * (mine + theirs)
                    leaks = np.floor(d + 1e-9).astype(np.int64)
                    debt[live, m] = d - leaks
                    leaks = np.minimum(leaks, mine + theirs)
                    leaked_mine = rng.hypergeometric(np.maximum(mine, 0), np.maximum(theirs, 0), leaks)
                    leaked_mine = np.where(leaks > 0, leaked_mine, 0)
                    leaked_theirs = leaks - leaked_mine
                else:
                    leaked_mine, leaked_theirs = rng.binomial(mine, leak), rng.binomial(theirs, leak)
                stay = mine - leaked_mine + theirs - leaked_theirs
                if cached:
                    stay = stay - rng.binomial(stay, cached)
                if twice:
                    deltas[:, :, t] += rng.multinomial(rng.binomial(stay, twice), own[m])
                deltas[:, :, t] += rng.multinomial(stay, own[m])
                deltas[:, :, t] += rng.multinomial(leaked_mine + leaked_theirs, other[m])
        engine.add_block(deltas, sent.astype(float), observed, others if router else None)
        decision = engine.decide()
        done = decision.failed | decision.passed
        verdict[live[decision.failed]] = Verdict.FAILED.value
        verdict[live[decision.passed & ~decision.failed]] = Verdict.PASSED.value
        seconds[live[done]] = overhead_s + (b + 1) * wall_block
        if done.all():
            break
        if done.any():
            engine.keep(~done)
            live = live[~done]
    return [
        Simulation(verdict[i * runs : (i + 1) * runs], seconds[i * runs : (i + 1) * runs])
        for i in range(len(backgrounds))
    ]
