"""How the frontend picks one instance among the live instances of a model.

Policies are registered by name, like papermill's engines, so the CLI's
`--router-mode` is a lookup rather than an if/elif chain.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Sequence
from typing import Protocol

from ...errors import ConfigError
from .instances import Instance
from .kv_router import KvAware
from .shared_routing import SharedRouting


class Policy(Protocol):
    """`blocks`: the request's prompt as KV block hashes (completions and chat), which only a
    KV-aware policy reads; () for embeddings."""

    def pick(self, model: str, instances: Sequence[Instance], blocks: Sequence[int] = ()) -> Instance: ...


class WeightedRandom:
    """Weighted random over instance weights: Dynamo's choice across worker sets."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def pick(self, model: str, instances: Sequence[Instance], blocks: Sequence[int] = ()) -> Instance:
        if len(instances) == 1:
            return instances[0]
        total = 0.0
        for instance in instances:
            total += instance.weight
        point = self._rng.random() * total
        for instance in instances:
            point -= instance.weight
            if point < 0:
                return instance
        return instances[-1]


class RoundRobin:
    """Each model cycles through its instances in registration order.

    With several routing processes the position is theirs together, so the split stays
    exact over all of a model's requests.
    """

    def __init__(self, rng: random.Random, shared: SharedRouting | None = None) -> None:
        self._counters: dict[str, itertools.count[int]] = {}
        self._shared = shared

    def pick(self, model: str, instances: Sequence[Instance], blocks: Sequence[int] = ()) -> Instance:
        if self._shared is not None:
            return instances[self._shared.next_position(model) % len(instances)]
        counter = self._counters.get(model)
        if counter is None:
            counter = self._counters[model] = itertools.count()
        return instances[next(counter) % len(instances)]


class LeastInflight:
    """Fewest requests in flight; ties are broken at random, never always the first."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def pick(self, model: str, instances: Sequence[Instance], blocks: Sequence[int] = ()) -> Instance:
        least = min(i.inflight for i in instances)
        tied = [i for i in instances if i.inflight == least]
        return tied[0] if len(tied) == 1 else self._rng.choice(tied)


POLICIES: dict[str, Callable[[random.Random], Policy]] = {
    "weighted-random": WeightedRandom,
    "round-robin": RoundRobin,
    "least-inflight": LeastInflight,
    "kv": KvAware,  # prefix-aware: kv_router.py
}


def make_policy(mode: str, *, seed: int | None = None, shared: SharedRouting | None = None) -> Policy:
    try:
        factory = POLICIES[mode]
    except KeyError:
        raise ConfigError(f"unknown router mode {mode!r}; choose from {', '.join(POLICIES)}") from None
    if factory is RoundRobin and shared is not None:
        return RoundRobin(random.Random(seed), shared)
    return factory(random.Random(seed))
