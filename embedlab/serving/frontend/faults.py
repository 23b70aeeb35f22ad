"""Deliberate routing faults for the embedded frontend, to prove the checks catch them.

Off by default. Each fault mimics a real dispatch bug:

    leak:p    a fraction p of requests goes to an instance of another model, spread
              evenly (leak:0.1 leaks exactly one request in every ten of a model)
    stick     every request goes to the first instance of its model
    skew:w    a fraction w of a model's traffic goes to its first instance
    ghost     deregistered or lapsed instances keep receiving traffic
    drop:p    a fraction p of requests is answered 503 without dispatch
    slow:ms   the first instance of each model is reached ms milliseconds late
    double:p  a fraction p of a model's requests is served twice, by two instances at once
              (hedging, or a timeout retry whose first attempt still runs): both count it, the
              first answer is relayed (double:0.1 serves exactly one in every ten twice)
    cache     responses are kept by request body and a repeated body is answered from them,
              reaching no worker (LiteLLM's `cache: true`, an HTTP cache in front of embeddings):
              not a routing fault, a router feature a check must not mistake for one
    blind     a KV-aware router ignores the prompt's cached prefix and routes on load alone
              (a tokenizer or block-size mismatch between router and workers does this)
    deaf      the KV events of each model's first instance never reach the router's index
              (a worker whose event publisher is misconfigured): prompts cached there look new
    shared-rr every model's requests take turns on one round-robin position shared by all models
              (vllm production-stack #915): under strictly alternating models, each model's
              requests all land on one of its replicas

Any fault may start late, and stop: `leak:0.01@60s` leaks from 60 s after the frontend
started, `stick@30s-90s` sticks from 30 s to 90 s (the `s` is optional). Intermittent faults
are what a continuous watch exists to catch; each routing process counts from its
own start, which on a multi-process frontend is within a second of the owner's.
"""

from __future__ import annotations

import itertools
import math
import random
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
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
    "double": (True, 0.0, 1.0),
    "cache": (False, 0.0, 0.0),
    "shared-rr": (False, 0.0, 0.0),
    "blind": (False, 0.0, 0.0),
    "deaf": (False, 0.0, 0.0),
}

# The responses `cache` keeps, at most: an LRU of request bodies.
CACHE_ENTRIES = 4096
# The key under which `shared-rr` keeps its one position among the models' (a name no model has).
_SHARED_RR = "\0shared-rr"


# `@START[s]` or `@START[s]-STOP[s]`: seconds after the frontend started.
_WHEN = re.compile(r"^(\d+(?:\.\d+)?)s?(?:-(\d+(?:\.\d+)?)s?)?$")


@dataclass(frozen=True)
class Fault:
    name: str
    param: float = 0.0
    start_s: float = 0.0  # active from this many seconds after the frontend started
    stop_s: float = math.inf  # until this many

    def __str__(self) -> str:
        text = f"{self.name}:{self.param:g}" if CATALOGUE[self.name][0] else self.name
        if self.start_s or not math.isinf(self.stop_s):
            text += f"@{self.start_s:g}s" + ("" if math.isinf(self.stop_s) else f"-{self.stop_s:g}s")
        return text

    def active(self, elapsed_s: float) -> bool:
        return self.start_s <= elapsed_s < self.stop_s


def parse_fault(spec: str) -> Fault:
    """Parse `NAME[:param][@START[-STOP]]`, e.g. `leak:0.1`, `stick`, `slow:50`, `leak:0.01@60s`."""
    spec, at, when = spec.strip().partition("@")
    start, stop = 0.0, math.inf
    if at:
        found = _WHEN.match(when.strip())
        if not found:
            raise ConfigError(
                f"fault {spec!r}: {when!r} is not a start time: write @SECONDS or @START-STOP, e.g. @60s, @30s-90s"
            )
        start = float(found.group(1))
        stop = float(found.group(2)) if found.group(2) is not None else math.inf
        if stop <= start:
            raise ConfigError(f"fault {spec!r}: it stops at {stop:g} s, not after it starts at {start:g} s")
    fault = _parse_kind(spec)
    return Fault(fault.name, fault.param, start, stop)


def _parse_kind(spec: str) -> Fault:
    name, _, raw = spec.partition(":")
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
        self,
        faults: Sequence[Fault],
        *,
        seed: int | None = None,
        shared: SharedRouting | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._configured = tuple(faults)
        self._clock = clock
        self._started = clock()
        self._rng = random.Random(seed)
        # With several routing processes the leak debt is theirs together (shared_routing.py).
        self._shared = shared
        self._ghosts: dict[str, list[Instance]] = {}
        # Per model: leaked share owed so far. Evenly spread leaks make "one leaked
        # request per burst" an exact statement, not a probability. `double` keeps its own.
        self._leak_debt: dict[str, float] = {}
        self._double_debt: dict[str, float] = {}
        self._cache: OrderedDict[bytes, tuple[int, bytes, str]] = OrderedDict()
        self._turn = itertools.count()

    def __bool__(self) -> bool:
        return bool(self._configured)

    @property
    def faults(self) -> dict[str, float]:
        """The faults active now, name -> parameter: a timed one only between its start and stop."""
        elapsed = self._clock() - self._started
        return {f.name: f.param for f in self._configured if f.active(elapsed)}

    def describe(self) -> str:
        return ", ".join(map(str, self._configured))

    def remember(self, instance: Instance) -> None:
        """Instance-table hook: an instance left (deregistered or lapsed)."""
        if "ghost" in self.faults:
            self._ghosts.setdefault(instance.model, []).append(instance)

    def should_drop(self) -> bool:
        p = self.faults.get("drop")
        return p is not None and self._rng.random() < p

    def doubles(self, model: str) -> bool:
        """Whether this request of `model` is served twice (`double:p`, by the debt rule)."""
        p = self.faults.get("double")
        if p is None:
            return False
        if self._shared is not None:
            return self._shared.leak(model + "\0double", p, possible=True)
        debt = self._double_debt.get(model, 0.0) + p
        twice = debt >= 1.0 - 1e-9
        self._double_debt[model] = debt - 1.0 if twice else debt
        return twice

    def second(self, first: Instance, live: Sequence[Instance]) -> Instance:
        """Where a request served twice goes the second time: another live instance, where there is one."""
        others = [i for i in live if i is not first]
        return self._rng.choice(others) if others else first

    def cached(self, body: bytes) -> tuple[int, bytes, str] | None:
        """The response kept for this exact body (`cache`): status, body, content type."""
        if "cache" not in self.faults:
            return None
        found = self._cache.get(body)
        if found is not None:
            self._cache.move_to_end(body)
        return found

    def keep(self, body: bytes, status: int, answer: bytes, content_type: str) -> None:
        if "cache" in self.faults and status == 200:
            self._cache[body] = (status, answer, content_type)
            while len(self._cache) > CACHE_ENTRIES:
                self._cache.popitem(last=False)

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

    def hears(self, instance: Instance, instances: InstanceTable) -> bool:
        """Whether the router applies this instance's KV events (`deaf` loses its model's first's)."""
        if "deaf" not in self.faults:
            return True
        live = instances.live(instance.model)
        return not live or live[0] is not instance

    def candidates(self, model: str, live: list[Instance]) -> list[Instance]:
        ghosts = self._ghosts.get(model) if "ghost" in self.faults else None
        return live + ghosts if ghosts else live

    def pick(
        self,
        model: str,
        live: Sequence[Instance],
        policy: Policy,
        instances: InstanceTable,
        blocks: Sequence[int] = (),
    ) -> Instance:
        faults = self.faults
        if "leak" in faults and self._shared is not None:
            others = [i for m in instances.models() if m != model for i in instances.live(m)]
            if self._shared.leak(model, faults["leak"], possible=bool(others)):
                return self._rng.choice(others)
        elif "leak" in faults:
            debt = self._leak_debt.get(model, 0.0) + faults["leak"]
            if debt >= 1.0 - 1e-9:
                others = [i for m in instances.models() if m != model for i in instances.live(m)]
                if others:
                    self._leak_debt[model] = debt - 1.0
                    return self._rng.choice(others)
            self._leak_debt[model] = min(debt, 1.0)
        if "stick" in faults:
            return live[0]
        if "shared-rr" in faults:
            turn = self._shared.next_position(_SHARED_RR) if self._shared is not None else next(self._turn)
            return live[turn % len(live)]
        if "skew" in faults and len(live) > 1:
            if self._rng.random() < faults["skew"]:
                return live[0]
            return self._rng.choice(live[1:])
        return policy.pick(model, live, () if "blind" in faults else blocks)
