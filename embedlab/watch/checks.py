"""Which checks a pool gets, and the one schedule that serves them all.

    pool = WatchPool.of(["a", "a", "b", "b"])        # each worker's model, by index
    pool.keys    # (same-model, a), (same-model, b), (multi-model, a), (multi-model, b),
                 # (counted-once, a), (counted-once, b)
    pool.schedule(requests=6)                         # one window per model, in random order

A pool of one model runs the same-model check on an on/off schedule. A pool of several runs
one window per model (the busy multi-model and mixed scenarios' schedule): the placement
unit of each model (a leak between models) and each replica's share (an idle or skewed
replica) are read from the same blocks, so every check's evidence grows at the whole rate
cap instead of a share of it. Each (check, model) reads its own units of one `BlockEngine`:
    same-model, m    the shares of m's replicas (m has two replicas or more)
    multi-model, m   the placement unit of m (with two models, the one unit both share)
    counted-once, m  the counted unit of m: each of m's requests counted once on m's replicas,
                     neither twice (retries, hedging) nor not at all (a cache, a drop)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import ConfigError
from ..evidence.busy import Schedule
from ..evidence.busy.engine import Unit
from .names import COUNTED_ONCE, MULTI_MODEL, SAME_MODEL

__all__ = ["CheckKey", "WatchPool"]


@dataclass(frozen=True, order=True)
class CheckKey:
    check: str
    model: str

    def __str__(self) -> str:
        return f"{self.check} {self.model}"


@dataclass(frozen=True)
class WatchPool:
    """The workers' models (by index) and routing weights."""

    models: tuple[str, ...]
    weights: tuple[float, ...]

    @classmethod
    def of(cls, models: Sequence[str | None], weights: Sequence[float] | None = None) -> WatchPool:
        if not models or any(m is None or m == "" for m in models):
            raise ConfigError(
                "the watch needs each worker's model (--worker-models, one per system URL, e.g. a,a,b,b)"
            )
        weights = tuple(weights) if weights else (1.0,) * len(models)
        if len(weights) != len(models) or min(weights) <= 0:
            raise ConfigError(f"{len(models)} workers need as many positive weights, got {list(weights)}")
        pool = cls(tuple(str(m) for m in models), tuple(float(w) for w in weights))
        if not pool.keys:
            raise ConfigError(
                f"a pool of one worker of one model ({pool.models[0]}) has nothing to check: "
                "a same-model check needs two replicas, a multi-model check two models"
            )
        return pool

    @property
    def served(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.models))

    def replicas(self, model: str) -> tuple[int, ...]:
        return tuple(i for i, m in enumerate(self.models) if m == model)

    @property
    def keys(self) -> tuple[CheckKey, ...]:
        same = [CheckKey(SAME_MODEL, m) for m in self.served if len(self.replicas(m)) >= 2]
        multi = [CheckKey(MULTI_MODEL, m) for m in self.served] if len(self.served) >= 2 else []
        if not same + multi:
            return ()  # one worker of one model: nothing of routing to check
        return tuple(same + multi + [CheckKey(COUNTED_ONCE, m) for m in self.served])

    def schedule(self, *, requests: int, seed: int | None = None) -> Schedule:
        """On/off windows for one model; one window per model for several. `requests`: per window."""
        if requests < 1:
            raise ConfigError(f"a window needs at least one request, got {requests}")
        extra = {} if seed is None else {"seed": seed}
        if len(self.served) == 1:
            return Schedule.same_model(self.served[0], requests=requests, **extra)
        if len(self.served) > 5:
            raise ConfigError(
                f"the watch schedules up to 5 models in one block, the pool serves {len(self.served)}"
            )
        return Schedule.per_model(self.served, requests=requests, **extra)

    def units_of(self, key: CheckKey, units: Sequence[Unit]) -> tuple[int, ...]:
        """The indices of `units` (a BlockEngine's) that judge `key`."""
        if key.check == SAME_MODEL:
            return tuple(i for i, u in enumerate(units) if u.replica and u.model == key.model)
        if key.check == COUNTED_ONCE:
            return tuple(i for i, u in enumerate(units) if u.counted and u.model == key.model)
        # With two models there is one placement unit, counting both ends of a leak: it judges both.
        two = len(self.served) == 2
        return tuple(i for i, u in enumerate(units) if u.placement and (two or u.model == key.model))
