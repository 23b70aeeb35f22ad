"""The embedded frontend's KV-aware policy: route a prompt where its prefix is cached, unless load outweighs it.

Each worker posts the events of its prefix cache (blocks stored and removed, `engines/kv.py`)
to the frontend, which applies them to an index of what every instance holds (`KvIndex`).
A request's blocks are hashed the way the workers hash them, and each live instance gets
Dynamo's documented cost (its KV router's `overlap_score_weight * prefill_blocks +
decode_blocks`):

    cost = OVERLAP_WEIGHT * (blocks not cached there) + (blocks in flight there)

with the blocks in flight counted as the instance's requests in flight times this request's
blocks. The lowest cost wins; ties are broken at random, so distinct prefixes spread. So on
an idle pool a prompt whose prefix one instance holds goes there, and a new prefix goes
anywhere; under load a busier instance loses its cached prefix once its in-flight blocks
outweigh the blocks the cache would save.

An embeddings request has no blocks: the cost is load alone (least in flight).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence

from ...engines.kv import KvEvent
from .instances import Instance

__all__ = ["OVERLAP_WEIGHT", "KvAware", "KvIndex"]

OVERLAP_WEIGHT = 1.0  # Dynamo's `--kv-overlap-score-weight` default


class KvIndex:
    """What the router believes each instance holds, from the KV events it applied."""

    def __init__(self) -> None:
        self._blocks: dict[str, set[int]] = {}
        self.applied: Counter[tuple[str, str]] = Counter()  # (instance id, kind) -> events applied

    def apply(self, instance_id: str, events: Sequence[KvEvent]) -> None:
        held = self._blocks.setdefault(instance_id, set())
        for event in events:
            if event.kind == "stored":
                held.update(event.blocks)
            else:
                held.difference_update(event.blocks)
            self.applied[instance_id, event.kind] += 1

    def overlap(self, instance_id: str, hashes: Sequence[int]) -> int:
        held = self._blocks.get(instance_id, set())
        hit = 0
        for h in hashes:
            if h not in held:
                break
            hit += 1
        return hit

    def forget(self, instance_id: str) -> None:
        """An instance left: what it held goes with it (its events applied stay counted)."""
        self._blocks.pop(instance_id, None)


class KvAware:
    """Lowest KV cost, ties at random (the module's docstring gives the cost)."""

    def __init__(self, rng: random.Random, index: KvIndex | None = None) -> None:
        self._rng = rng
        self.index = index or KvIndex()

    def pick(self, model: str, instances: Sequence[Instance], blocks: Sequence[int] = ()) -> Instance:
        if len(instances) == 1:
            return instances[0]
        size = max(len(blocks), 1)
        costs = [
            OVERLAP_WEIGHT * (len(blocks) - self.index.overlap(i.instance_id, blocks)) + i.inflight * size
            for i in instances
        ]
        least = min(costs)
        tied = [i for i, cost in zip(instances, costs, strict=True) if cost == least]
        return tied[0] if len(tied) == 1 else self._rng.choice(tied)
