"""The accounting that binds a router's own per-model counts to the workers' counters (pure).

A router's counts are read at a window boundary just before and just after every worker's
counter (evidence/router.py reads them). From a baseline read (router R0a, workers W0, router
R0b) to a later one (Ra, W, Rb), the requests of model m that reached m's replicas lie between
what the router answered with success and what it admitted:

    answered_ok(Ra) - answered_ok(R0b) - slack  <=  C_m(W) - C_m(W0)  <=  admitted(Rb) - admitted(R0a) + slack + retried

where slack = admitted(R0b) - answered(R0a), the requests in flight at the baseline (and the few
admitted while it was read). Every request a router admits for m and a replica of m counts once
keeps it, whoever sent it: a request counted on m's replicas beyond that was counted twice, came
from another model's traffic, or reached them around the router; one answered with success beyond
it reached no replica of m. It is exact, so one such request shows as soon as nothing of m is in
flight at a boundary, and the excess only grows.

`Accounting` checks it at each boundary and names what it finds, by whose traffic it cannot tell:
a surplus on one model beside answers on another that none of its replicas counted is a leak; a
surplus alone is counted twice (retries beyond the router's own retry count, hedging) or came
around the router (health checks, canaries, a client calling a worker directly); answers with
success that reached no replica, alone, are a response cache (or the router answering for
itself), named and not failed. A request of a served model the router answered "model not found"
was refused by a worker of another model: a leak, whatever the totals say (leaks both ways between
two models at one rate keep them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["Accounting", "Miscount", "RouterCounts"]


@dataclass(frozen=True)
class RouterCounts:
    """One read of a router's counts, per model: admitted, answered (any status), answered with
    success, retried, and answered "model not found" (a model the pool serves: a worker of another
    model got the request and refused it)."""

    admitted: Mapping[str, float]
    answered: Mapping[str, float]
    ok: Mapping[str, float]
    retried: Mapping[str, float] = field(default_factory=dict)
    refused: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Miscount:
    """What the router's counts and the workers' say together, per model, since the baseline:
    `surplus`, requests counted on a model's replicas beyond what the router admitted for it (and
    retried); `unseen`, answers with success beyond what its replicas counted; `lost`, answers of
    any status beyond what they counted (a leaked request a wrong worker refused is one);
    `refused`, requests of a model the pool serves that the router answered "model not found":
    a worker of another model got them, and refused them. Leaks both ways between two models at
    one rate keep every model's total, so only `refused` shows them (where workers refuse)."""

    surplus: Mapping[str, float]
    unseen: Mapping[str, float]
    lost: Mapping[str, float]
    router: str = "router"
    refused: Mapping[str, float] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return any(v > 0 for v in (*self.surplus.values(), *self.refused.values()))

    @property
    def leaked(self) -> dict[str, list[str]]:
        """Per model with a surplus, the other models whose requests may have landed there."""
        return {
            k: [m for m, v in self.lost.items() if v > 0 and m != k]
            for k, v in self.surplus.items()
            if v > 0 and any(x > 0 and m != k for m, x in self.lost.items())
        }

    def reasons(self) -> list[str]:
        return [*self.misplaced().values(), *self.by_model().values()]

    def misplaced(self) -> dict[str, str]:
        """Per model some of whose requests a worker of another model refused, in words."""
        return {
            model: (
                f"{self.router} answered {_requests(n)} of '{model}' with \"model not found\" while the pool "
                f"serves '{model}': a worker of another model got them and refused them (a leak)"
            )
            for model, n in self.refused.items()
            if n > 0
        }

    def by_model(self) -> dict[str, str]:
        """Per model whose replicas counted more than the router admitted, what it shows, in words."""
        out = {}
        leaked = self.leaked
        for model, extra in self.surplus.items():
            if extra <= 0:
                continue
            if model in leaked:
                whence = " and ".join(f"'{m}'" for m in leaked[model])
                out[model] = (
                    f"'{model}''s replicas counted {_requests(extra)} more than {self.router} admitted for "
                    f"'{model}', while {whence} lost as many: requests of {whence} landed on '{model}''s replicas"
                )
            else:
                out[model] = (
                    f"'{model}''s replicas counted {_requests(extra)} more than {self.router} admitted "
                    "for it: some were served twice (a retry whose first attempt still counted, hedging), "
                    "were another model's (a leak, where its requests in flight hide the loss), or reached "
                    "the workers around the router (health checks, canaries, a client calling a worker directly)"
                )
        return out

    def notes(self) -> list[str]:
        return [
            f"{self.router} answered {_requests(n)} of '{model}' with success that no replica of it counted "
            "(a response cache, or the router answering for itself): not judged as routing"
            for model, n in self.unseen.items()
            if n > 0 and model not in {m for ms in self.leaked.values() for m in ms}
        ]


class Accounting:
    """The identity of the module's docstring, checked from a baseline on.

    `models[i]`: worker i's model (None: not read). Feed it each boundary's three reads
    (`check(before, counters, after)`, counters by worker index as absolute values); the first
    sets the baseline."""

    def __init__(self, models: Sequence[str | None], router: str = "router") -> None:
        self.models = list(models)
        self.router = router
        self.served = [m for m in dict.fromkeys(models) if m is not None]
        self._base: tuple[RouterCounts, dict[str, float], RouterCounts] | None = None

    def _by_model(self, counters: Sequence[float]) -> dict[str, float]:
        found = {m: 0.0 for m in self.served}
        for model, value in zip(self.models, counters):
            if model is not None:
                found[model] += value
        return found

    def restart(self) -> None:
        """Forget the baseline (after a reset, a worker left out, or a miscount named once)."""
        self._base = None

    def check(self, before: RouterCounts, counters: Sequence[float], after: RouterCounts) -> Miscount | None:
        """None at the baseline; else what the reads say since it (every figure 0: they agree)."""
        counted = self._by_model(counters)
        if self._base is None:
            self._base = (before, counted, after)
            return None
        (b0, c0, a0) = self._base
        surplus: dict[str, float] = {}
        unseen: dict[str, float] = {}
        lost: dict[str, float] = {}
        refused: dict[str, float] = {}
        for m in self.served:
            slack = max(0.0, a0.admitted.get(m, 0.0) - b0.answered.get(m, 0.0))
            moved = counted[m] - c0[m]
            admitted = after.admitted.get(m, 0.0) - b0.admitted.get(m, 0.0)
            retried = after.retried.get(m, 0.0) - b0.retried.get(m, 0.0)
            ok = before.ok.get(m, 0.0) - a0.ok.get(m, 0.0)
            answered = before.answered.get(m, 0.0) - a0.answered.get(m, 0.0)
            surplus[m] = max(0.0, moved - admitted - retried - slack)
            unseen[m] = max(0.0, ok - slack - moved)
            lost[m] = max(0.0, answered - slack - moved)
            refused[m] = max(0.0, before.refused.get(m, 0.0) - b0.refused.get(m, 0.0))
        return Miscount(surplus, unseen, lost, self.router, refused)

    def others(self, previous: RouterCounts, now: RouterCounts, sent: Mapping[str, int]) -> dict[str, float]:
        """Per model, the requests the router admitted between two reads less the check's own."""
        return {
            m: now.admitted.get(m, 0.0) - previous.admitted.get(m, 0.0) - sent.get(m, 0) for m in self.served
        }


def _requests(n: float) -> str:
    return f"{n:g} request" + ("" if n == 1 else "s")
