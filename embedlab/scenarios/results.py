"""What a scenario found, as plain typed data: bursts, per-worker rows, latency, events, verdict.

Views (tables, figures, HTML) read these; nothing here draws or formats for people
beyond the one-line `summary()`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..checks import CheckResult
from ..jsonio import write_json
from ..traffic import BurstResult, latency_ms
from ..verdicts import Verdict

__all__ = [
    "Burst",
    "CounterSample",
    "DrainFigures",
    "Event",
    "FailoverFigures",
    "FaultFigures",
    "MistakeAnswer",
    "OverheadFigures",
    "ScenarioResult",
    "TtlPoint",
    "WorkerInfo",
]


@dataclass(frozen=True)
class WorkerInfo:
    """One worker as the result names it: by index, with its endpoint as detail."""

    index: int
    system_url: str
    model: str | None
    weight: float = 1.0
    endpoint: str | None = None
    host: int = 0  # the simulated host it runs on

    @property
    def label(self) -> str:
        return f"worker {self.index}"


@dataclass
class Burst:
    """One burst: what was sent, what moved, and the check's verdict."""

    name: str
    model: str
    expected: frozenset[int]
    traffic: BurstResult
    check: CheckResult | None = None
    inconclusive: str | None = None
    expected_shares: dict[int, float] = field(default_factory=dict)
    rule: str = ""  # what the check asserted, in words

    def expected_count(self, index: int) -> float:
        return self.traffic.n * self.expected_shares.get(index, 0.0)

    def delta(self, index: int) -> float | None:
        """Worker `index`'s counter delta over this burst, or None where it was not read."""
        row = self.check.row(index) if self.check else None
        return row.delta if row is not None else None

    def observed_shares(self, indices: Sequence[int]) -> list[float]:
        deltas = [self.delta(i) or 0.0 for i in indices]
        total = sum(deltas)
        return [d / total if total > 0 else float("nan") for d in deltas]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "model": self.model,
            "expected": sorted(self.expected),
            "expected_shares": {str(i): s for i, s in sorted(self.expected_shares.items())},
            "check": self.check.to_json() if self.check else None,
            "inconclusive": self.inconclusive,
            "traffic": self.traffic.to_json(),
            "rule": self.rule,
            "deltas": [r.delta for r in self.check.rows] if self.check else None,
        }


@dataclass(frozen=True)
class Event:
    """Something the harness did or saw during a run, `at_s` seconds after the first burst began."""

    at_s: float
    kind: str  # e.g. "kill", "out of dispatch", "drain", "resume"
    detail: str = ""


@dataclass(frozen=True)
class FailoverFigures:
    """What failover measured around the kill. Asserted on some stacks, reported on others."""

    victim: int
    kill_after_responses: int
    killed_at_s: float | None  # seconds into the burst
    excluded_after_s: float | None  # from the kill until the frontend stopped dispatching to it
    lease_ttl_s: float | None  # the embedded frontend's lease; None where the stack decides
    failed_requests: int
    responses_after_kill: int
    errors_window_s: float  # from the kill until the last failed response
    asserted: bool
    victim_counter_before: float


@dataclass(frozen=True)
class DrainFigures:
    """What drain measured: the drained worker's delta during the burst, and whether it came back."""

    victim: int
    victim_delta: float | None
    resumed: bool


@dataclass(frozen=True)
class FaultFigures:
    """What a cluster fault did to steady traffic: reported figures, and the recovery that was asserted."""

    fault: str  # "partition of host 2", "etcd down 3 s"
    started_s: float  # when the fault began, seconds into the traffic
    ended_s: float | None  # when it was undone (heal, etcd ready)
    failed_requests: int
    status_codes: dict[str, int]  # of the failed requests; "0": no HTTP answer at all
    longest_hang_s: float  # the slowest request, failed or not
    served_during_fault: int  # requests answered 200 while the fault lasted
    left_dispatch_after_s: float | None  # from the fault until the frontend stopped listing the victim
    back_after_s: float | None  # from the fault's end until the victim served again
    recovered: bool  # the same-model check after recovery passed


@dataclass(frozen=True)
class TtlPoint:
    """One setting of the lease-TTL sweep: a worker SIGKILLed, and how long the cluster took to notice."""

    lease_ttl_s: float
    left_dispatch_after_s: float | None
    failed_requests: int
    status_codes: dict[str, int]


@dataclass(frozen=True)
class MistakeAnswer:
    """How the frontend answered one kind of client mistake."""

    mistake: str  # "unknown model", "malformed JSON", "missing input"
    status: int
    content_type: str
    openai_error: bool  # the body is {"error": {"message": ...}}, as OpenAI's API answers
    body: str  # its first 200 characters


@dataclass(frozen=True)
class OverheadFigures:
    """Through the frontend against straight to one worker (None where the stack has no HTTP worker URL)."""

    p50_ms_c1: float
    p50_ms_c1_direct: float | None
    rps_c32: float
    rps_c32_direct: float | None
    requests: int


@dataclass(frozen=True)
class CounterSample:
    """Worker `worker`'s counter `at_s` seconds into the traffic; None where it could not be read."""

    at_s: float
    worker: int
    value: float | None


@dataclass
class ScenarioResult:
    """What a scenario found. `passed` is True only for a clean pass; `ok` also for a report.

    A `reported` verdict asserted nothing: its `reasons` are the figures it shows.
    """

    scenario: str
    stack: str
    params: dict[str, Any]
    workers: list[WorkerInfo]
    bursts: list[Burst]
    verdict: Verdict
    reasons: list[str]
    wall_seconds: float = 0.0
    events: list[Event] = field(default_factory=list)
    failover: FailoverFigures | None = None
    drain: DrainFigures | None = None
    fault: FaultFigures | None = None
    ttl_points: list[TtlPoint] = field(default_factory=list)
    samples: list[CounterSample] = field(default_factory=list)  # counters polled through a fault
    mistakes: list[MistakeAnswer] = field(default_factory=list)
    overhead: OverheadFigures | None = None
    discovered: list[dict[str, Any]] = field(
        default_factory=list
    )  # instances etcd lists (attach --etcd-endpoints)
    startup_seconds: dict[str, float] = field(default_factory=dict)
    run_dir: str | None = None

    def __post_init__(self) -> None:
        self.verdict = Verdict(self.verdict)

    @property
    def passed(self) -> bool:
        return self.verdict == Verdict.PASSED

    @property
    def ok(self) -> bool:
        """Nothing asserted failed: passed, or reported (figures shown, not asserted)."""
        return self.verdict.ok

    def summary(self) -> str:
        head = f"{self.scenario} on {self.stack}: {self.verdict.upper()}"
        if self.reasons:
            head += " (" + "; ".join(self.reasons) + ")"
        return head

    def __str__(self) -> str:
        return self.summary()

    def worker_label(self, served_by: str | None) -> str:
        """`worker N` for an `x-embedlab-worker` value (`<endpoint>/<instance>`), by the endpoint."""
        endpoint = (served_by or "").split("/")[0]
        found = next((w for w in self.workers if w.endpoint and w.endpoint == endpoint), None)
        return found.label if found else endpoint

    def latency_ms(self) -> dict[str, float]:
        return latency_ms(r for b in self.bursts for r in b.traffic.records)

    @property
    def p_values(self) -> dict[str, float | None]:
        return {b.name: (b.check.p_value if b.check else None) for b in self.bursts}

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "stack": self.stack,
            "verdict": self.verdict,
            "passed": self.passed,
            "ok": self.ok,
            "reasons": self.reasons,
            "params": self.params,
            "workers": [asdict(w) for w in self.workers],
            "wall_seconds": self.wall_seconds,
            "startup_seconds": self.startup_seconds,
            "run_dir": self.run_dir,
            "latency_ms": self.latency_ms(),
            "p_values": self.p_values,
            "bursts": [b.to_json() for b in self.bursts],
            "events": [asdict(e) for e in self.events],
            "failover": asdict(self.failover) if self.failover else None,
            "drain": asdict(self.drain) if self.drain else None,
            "fault": asdict(self.fault) if self.fault else None,
            "ttl_points": [asdict(p) for p in self.ttl_points],
            "samples": [asdict(x) for x in self.samples],
            "mistakes": [asdict(m) for m in self.mistakes],
            "overhead": asdict(self.overhead) if self.overhead else None,
            "discovered": self.discovered,
        }

    def save_json(self, path: str | Path) -> Path:
        """Write `to_json()` to `path` (parents created): what `embedlab regress` collects."""
        return write_json(path, self.to_json())
