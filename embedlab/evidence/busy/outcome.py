"""What a busy-pool (or quiet-pool) verdict says: plain, frozen data, with its evidence.

Every verdict names how placement was proven (`ProvenBy`) and carries its power sentence:
the faults it ruled out, or, inconclusive, what it could still rule out.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field

from ...verdicts import Verdict
from ..stats import percent

__all__ = ["BusyVerdict", "ProvenBy", "ShareEstimate"]


class ProvenBy(enum.StrEnum):
    """How a verdict knows where the check's requests went."""

    QUIET = "the counters on a quiet pool"
    SCHEDULE = "the schedule's on-minus-off counts"
    ATTRIBUTION = "per-response attribution"
    ROUTER = "the router's own per-model counts beside the workers'"


@dataclass(frozen=True)
class ShareEstimate:
    """The share of one model's requests the check saw counted on a unit (a replica, or all of the model's).

    `low`/`high` bound it at the verdict's confidence, valid at whatever block the check stopped
    (a confidence sequence); NaN where every value tested was ruled out. `moved`: a share of
    zero is ruled out. `fits`: the expected share is not ruled out.
    """

    unit: str
    model: str
    workers: tuple[int, ...]
    expected: float
    estimate: float
    low: float
    high: float
    moved: bool
    fits: bool

    def describe(self) -> str:
        bounds = "none fits" if math.isnan(self.low) else f"{percent(self.low)} to {percent(self.high)}"
        return f"{self.unit}: {percent(self.estimate)} of '{self.model}' ({bounds}; expected {percent(self.expected)})"


@dataclass(frozen=True)
class BusyVerdict:
    """One check's verdict over the schedule so far.

    `placement`: one estimate per model sent, where the schedule sends two or more (the share
    counted on its own replicas; the rest landed elsewhere); `replicas`: one per replica of a
    model with two replicas or more; `counted`: one per model, how many times each of its requests
    was counted on its replicas (1: once). `power`: the faults ruled out, in words. `how`: the
    evidence behind `proven_by`. `other_traffic`: per model, the requests the check did not send
    while it ran.
    """

    verdict: Verdict
    reasons: tuple[str, ...]
    placement: tuple[ShareEstimate, ...]
    replicas: tuple[ShareEstimate, ...]
    power: str
    proven_by: ProvenBy
    how: str
    windows: int
    seconds: float
    confidence: float
    counted: tuple[ShareEstimate, ...] = ()
    other_traffic: dict[str, float] = field(default_factory=dict)

    def summary(self) -> str:
        why = f" ({'; '.join(self.reasons)})" if self.reasons else ""
        return (
            f"{self.verdict.value.upper()}{why}: {self.power}; proven by {self.proven_by.value}, {self.how}"
        )

    def to_json(self) -> dict[str, object]:
        def share(s: ShareEstimate) -> dict[str, object]:
            return {
                "unit": s.unit,
                "model": s.model,
                "workers": list(s.workers),
                "expected": s.expected,
                "estimate": s.estimate,
                "low": None if math.isnan(s.low) else s.low,
                "high": None if math.isnan(s.high) else s.high,
                "moved": s.moved,
                "fits": s.fits,
            }

        return {
            "verdict": self.verdict.value,
            "reasons": list(self.reasons),
            "placement": [share(s) for s in self.placement],
            "replicas": [share(s) for s in self.replicas],
            "counted": [share(s) for s in self.counted],
            "other_traffic": dict(self.other_traffic),
            "power": self.power,
            "proven_by": self.proven_by.value,
            "how": self.how,
            "windows": self.windows,
            "seconds": self.seconds,
            "confidence": self.confidence,
        }
