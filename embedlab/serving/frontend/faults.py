"""Deliberate routing faults for the embedded frontend, to prove the checks catch them.

Off by default. Each fault mimics a real dispatch bug:

    leak:p    a fraction p of requests goes to an instance of another model, spread
              evenly (leak:0.1 leaks exactly one request in every ten of a model)
    stick     every request goes to the first instance of its model
    skew:w    a fraction w of a model's traffic goes to its first instance
    ghost     deregistered or lapsed instances keep receiving traffic
    drop:p    a fraction p of requests is answered 503 without dispatch
    slow:ms   the first instance of each model is reached ms milliseconds late
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from ...errors import ConfigError
from .dispatch import Policy
from .instances import Instance, InstanceTable
from .shared_routing import SharedRouting

# name -> (takes a parameter, lower bound, upper bound)
CATALOGUE: dict[str, tuple[bool, float, float]] = {
    "leak": (True, 0.0, 1.0),
    "stick": (False, 0.0, 0.0),
    "skew": (True, 0.0, 1.0),
    "ghost": (False, 0.0, 0.0),
    "drop": (True, 0.0, 1.0),
    "slow": (True, 0.0, 600_000.0),
}


@dataclass(frozen=True)
class Fault:
    name: str
    param: float = 0.0

    def __str__(self) -> str:
        return f"{self.name}:{self.param:g}" if CATALOGUE[self.name][0] else self.name


def parse_fault(spec: str) -> Fault:
    """Parse `NAME[:param]`, e.g. `leak:0.1`, `stick`, `slow:50`."""
    name, _, raw = spec.strip().partition(":")
    if name not in CATALOGUE:
        raise ConfigError(f"unknown fault {name!r}; choose from {', '.join(CATALOGUE)}")
    takes_param, low, high = CATALOGUE[name]
    if not takes_param:
        if raw:
            raise ConfigError(f"fault {name!r} takes no parameter")
        return Fault(name)
    if not raw:
        raise ConfigError(f"fault {name!r} needs a parameter: {name}:VALUE")
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"fault {name!r}: {raw!r} is not a number") from None
    if not low <= value <= high:
        raise ConfigError(f"fault {name!r}: {value:g} is outside [{low:g}, {high:g}]")
    return Fault(name, value)


class FaultInjector:
    """Applies the configured faults around the normal routing policy."""

    def __init__(
        self, faults: Sequence[Fault], *, seed: int | None = None, shared: SharedRouting | None = None
    ) -> None:
        self.faults = {f.name: f.param for f in faults}
        self._rng = random.Random(seed)
        # With several routing processes the leak debt is theirs together (shared_routing.py).
        self._shared = shared
        self._ghosts: dict[str, list[Instance]] = {}
        # Per model: leaked share owed so far. Evenly spread leaks make "one leaked
        # request per burst" an exact statement, not a probability.
        self._leak_debt: dict[str, float] = {}

    def __bool__(self) -> bool:
        return bool(self.faults)

    def describe(self) -> str:
        return ", ".join(str(Fault(name, param)) for name, param in self.faults.items())

    def remember(self, instance: Instance) -> None:
        """Instance-table hook: an instance left (deregistered or lapsed)."""
        if "ghost" in self.faults:
            self._ghosts.setdefault(instance.model, []).append(instance)

    def should_drop(self) -> bool:
        p = self.faults.get("drop")
        return p is not None and self._rng.random() < p

    def delay_seconds(self, instance: Instance, live: Sequence[Instance]) -> float:
        ms = self.faults.get("slow")
        if ms is None or not live or instance is not live[0]:
            return 0.0
        return ms / 1000.0

    def ghosts(self) -> dict[str, list[Instance]]:
        return self._ghosts

    def set_ghosts(self, ghosts: dict[str, list[Instance]]) -> None:
        """A routing process's copy of the owner's ghosts."""
        self._ghosts = ghosts

    def candidates(self, model: str, live: list[Instance]) -> list[Instance]:
        ghosts = self._ghosts.get(model)
        return live + ghosts if ghosts else live

    def pick(
        self, model: str, live: Sequence[Instance], policy: Policy, instances: InstanceTable
    ) -> Instance:
        if "leak" in self.faults and self._shared is not None:
            others = [i for m in instances.models() if m != model for i in instances.live(m)]
            if self._shared.leak(model, self.faults["leak"], possible=bool(others)):
                return self._rng.choice(others)
        elif "leak" in self.faults:
            debt = self._leak_debt.get(model, 0.0) + self.faults["leak"]
            if debt >= 1.0 - 1e-9:
                others = [i for m in instances.models() if m != model for i in instances.live(m)]
                if others:
                    self._leak_debt[model] = debt - 1.0
                    return self._rng.choice(others)
            self._leak_debt[model] = min(debt, 1.0)
        if "stick" in self.faults:
            return live[0]
        if "skew" in self.faults and len(live) > 1:
            if self._rng.random() < self.faults["skew"]:
                return live[0]
            return self._rng.choice(live[1:])
        return policy.pick(model, live)
