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
from dataclasses import dataclass, field

import numpy as np

from ...verdicts import Verdict
from .constants import ALPHA, BUDGET_S, RATE_PER_S, WINDOW_S
from .engine import BlockEngine
from .schedule import Schedule
from .sequential import Betting, orders

__all__ = ["Background", "Pool", "Simulation", "simulate"]

SHAPES = ("steady", "bursty", "ramp")


@dataclass(frozen=True)
class Pool:
    models: tuple[str, ...]  # each worker's model
    weights: tuple[float, ...] = ()
    fault: str = ""  # "", "leak:P", "stick", "skew:W", "idle"

    @classmethod
    def same_model(cls, replicas: int, *, fault: str = "", weights: Sequence[float] = ()) -> Pool:
        return cls(("m",) * replicas, tuple(weights), fault)

    @classmethod
    def multi_model(cls, models: int, replicas: int = 1, *, fault: str = "") -> Pool:
        return cls(tuple(f"m{i}" for i in range(models) for _ in range(replicas)), (), fault)

    @property
    def served(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.models))

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

    def rates(self, starts: np.ndarray, window_s: float, budget_s: float, phase: np.ndarray) -> np.ndarray:
        """Mean rate over each window (relative to `multiple`=1), per run: (runs, windows)."""
        steps = 8
        t = starts[None, :, None] + window_s * (np.arange(steps) + 0.5)[None, None, :] / steps
        if self.shape == "steady":
            r = np.ones_like(t + phase[:, None, None])
        elif self.shape == "bursty":
            r = np.where(((t + phase[:, None, None]) % 3.0) < 1.0, 3.0, 0.0)
        elif self.shape == "ramp":
            r = np.broadcast_to(2.0 * t / budget_s, (len(phase), *t.shape[1:]))
        else:
            raise ValueError(f"unknown background shape {self.shape!r}; choose from {SHAPES}")
        return self.multiple * r.mean(axis=-1)


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


def simulate(
    pool: Pool,
    *,
    backgrounds: Sequence[Background] = (Background(),),
    runs: int = 200,
    seed: int = 0,
    rate_per_s: float = RATE_PER_S,
    window_s: float = WINDOW_S,
    budget_s: float = BUDGET_S,
    alpha: float = ALPHA,
    mix: float = 0.0,
    betting: Betting | None = None,
) -> list[Simulation]:
    """`runs` checks of `pool` under each of `backgrounds` (one batch); each check stops at its first
    decision or its budget. One Simulation per background, in order."""
    rng = np.random.default_rng(seed)
    served = pool.served
    requests = int(round(rate_per_s * window_s))
    if len(served) == 1:
        schedule = Schedule.same_model(served[0], requests=requests, window_s=window_s, seed=0)
    else:
        schedule = Schedule.per_model(served, requests=requests, mix=mix, window_s=window_s, seed=0)
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
    routing = pool.routing()
    arms = len(schedule.arms)
    table = orders(arms)
    blocks = schedule.blocks_within(budget_s)
    starts = np.arange(blocks * arms) * window_s
    # The other client's requests per window and worker: its models evenly, routed like the check's.
    mean = np.concatenate(
        [b.rates(starts, window_s, budget_s, rng.uniform(0, 3, runs)) for b in backgrounds]
    ) * (rate_per_s * window_s)
    spread = routing.mean(axis=0)  # workers
    verdict = np.full(total, Verdict.INCONCLUSIVE.value, dtype=object)
    seconds = np.full(total, blocks * arms * window_s)
    live = np.arange(total)  # the checks still running, as rows of the engine's batch
    for b in range(blocks):
        n = len(live)
        observed = rng.integers(len(table), size=n)
        arm_at = table[observed]  # runs, arms (the arm in each window)
        sent = doses[:, arm_at].transpose(1, 0, 2)  # runs, models, arms
        deltas = np.zeros((n, len(pool.models), arms))
        for t in range(arms):
            for m in range(len(served)):
                deltas[:, :, t] += rng.multinomial(sent[:, m, t], routing[m])
            deltas[:, :, t] += rng.poisson(mean[live, b * arms + t, None] * spread[None, :])
        engine.add_block(deltas, sent.astype(float), observed)
        decision = engine.decide()
        done = decision.failed | decision.passed
        verdict[live[decision.failed]] = Verdict.FAILED.value
        verdict[live[decision.passed & ~decision.failed]] = Verdict.PASSED.value
        seconds[live[done]] = (b + 1) * arms * window_s
        if done.all():
            break
        if done.any():
            engine.keep(~done)
            live = live[~done]
    return [
        Simulation(verdict[i * runs : (i + 1) * runs], seconds[i * runs : (i + 1) * runs])
        for i in range(len(backgrounds))
    ]
