"""What a scenario found, as plain typed data: bursts, per-worker rows, latency, events, verdict.

Views (tables, figures, HTML) read these; nothing here draws or formats for people
beyond the one-line `summary()`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path
from typing import Any, Protocol

from ..cluster.events import Event
from ..cluster.supervisor import GAVE_UP
from ..evidence.busy import BusyVerdict
from ..evidence.counters import CheckResult
from ..evidence.traffic import BurstResult, latency_ms
from ..jsonio import write_json
from ..verdicts import Verdict

__all__ = [
    "Burst",
    "DataFigures",
    "Figures",
    "ScenarioResult",
    "ScheduleRun",
    "ScheduleWindow",
    "Unread",
    "WorkerInfo",
    "given_up",
    "worker_label",
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
    engine: str | None = None  # what computes its embeddings (hash, transformers, ...); None: attached

    @property
    def label(self) -> str:
        return f"worker {self.index}"


@dataclass(frozen=True)
class Unread:
    """A worker whose counter a burst could not read: down, restarting or unreachable then.

    Its delta is unknown, so the burst decides nothing (`Burst.inconclusive` says `reason`);
    the scenario puts it on its timeline (`event`).
    """

    worker: int | None  # None where the reader did not know the worker's index
    when: str  # "before the burst", "after the burst"
    at: float  # time.perf_counter() when the read failed
    error: str  # what the read met: the ScrapeError's message

    @property
    def reason(self) -> str:
        return f"worker {self.worker} could not be read {self.when}"

    def event(self, origin: float, burst: str) -> Event:
        """This read on a timeline that starts at `origin` (a `time.perf_counter()`)."""
        return Event(self.at, "unreadable", f"{burst}: {self.reason}").after(origin)


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
    # Worker index -> what its counter moved in the quiet windows around the burst: traffic
    # embedlab did not send. Named, never judged: the burst is then inconclusive.
    other_traffic: dict[int, float] = field(default_factory=dict)
    # How placement was proven where the counters could not prove it ("": by the counters).
    proven_by: str = ""
    # Worker index -> what the router's own counters moved over the burst (None: it keeps none).
    router_deltas: dict[int, float] | None = None
    # The worker that could not be read, where that made the burst inconclusive.
    unread: Unread | None = None
    # Its bodies replay an earlier run's (a nonce given on purpose): a cache may answer them.
    replayed: bool = False

    def router_disagreement(self) -> str | None:
        """Where the router's own counts differ from the workers': a finding, in words."""
        if self.router_deltas is None or self.check is None:
            return None
        workers = {r.index: r.delta for r in self.check.rows}
        if all(self.router_deltas.get(i, 0.0) == d for i, d in workers.items()):
            return None
        shown = ", ".join(
            f"worker {i}: router {self.router_deltas.get(i, 0.0):g}, worker {d:g}"
            for i, d in sorted(workers.items())
        )
        return f"the router's own counters disagree with the workers' ({shown})"

    def attribution_note(self) -> str:
        moved = ", ".join(f"worker {i} +{d:g}" for i, d in sorted(self.other_traffic.items()))
        return (
            f"placement proven by {self.proven_by}, not by the counters: they also counted traffic "
            f"embedlab did not send ({moved} in the quiet windows)"
        )

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
            "other_traffic": {str(i): d for i, d in sorted(self.other_traffic.items())},
            "proven_by": self.proven_by or "counters",
            "router_deltas": None
            if self.router_deltas is None
            else {str(i): d for i, d in sorted(self.router_deltas.items())},
            "router_disagrees": self.router_disagreement(),
            "deltas": [r.delta for r in self.check.rows] if self.check else None,
            "unread": asdict(self.unread) if self.unread else None,
        }


@dataclass(frozen=True)
class ScheduleWindow:
    """One window of a busy check's schedule: its arm, when it ran (seconds from the schedule's
    start), every worker's counter delta over it, and the check's own requests in it."""

    index: int
    arm: str  # "off", "on", or the model whose requests it sent
    start_s: float
    end_s: float
    deltas: tuple[float, ...]  # by worker index
    sent: dict[str, int]  # answered before the window's closing snapshot, by model
    late: int = 0  # still in flight at that snapshot
    kept: bool = True  # False: its block had a late request or a stale read, and was set aside (run again)
    # Per model, the other clients' requests the router took in the window (its own counts less
    # the check's), where they are read; None where they are not.
    others: dict[str, float] | None = None
    # Its closing read through Prometheus found a worker's scrape missing or stale: its deltas are
    # unknown (NaN), and its block was cut there.
    stale: bool = False


@dataclass
class ScheduleRun:
    """A check run as a randomized on/off schedule (a busy pool): its windows and its verdict.

    `verdict` None: the schedule was cut short (`why`: a worker unread, a counter reset) and
    decides nothing. `traffic`: every request the check sent, over every window.
    """

    windows: list[ScheduleWindow]
    verdict: BusyVerdict | None
    traffic: BurstResult
    seed: int
    window_s: float
    rate_per_s: float
    why: str = ""
    worker_models: tuple[str | None, ...] = ()  # each worker's model, by index (None: left out, not read)

    def on_minus_off(self) -> dict[int, float]:
        """Worker index -> what the check's own traffic did to its counter, the other clients'
        cancelled out, over the blocks kept: its counts in on windows minus those in off windows
        (same-model), or in its own model's windows minus the mean of the other models' (per model)."""
        kept = [w for w in self.windows if w.kept]
        arms = list(dict.fromkeys(w.arm for w in kept))
        workers = len(kept[0].deltas) if kept else 0
        by_arm = {a: [sum(w.deltas[i] for w in kept if w.arm == a) for i in range(workers)] for a in arms}
        if "off" in by_arm:
            on = [a for a in arms if a != "off"]
            return {i: sum(by_arm[a][i] for a in on) - by_arm["off"][i] for i in range(workers)}
        moved = {}
        for i in range(workers):
            own = self.worker_models[i] if i < len(self.worker_models) else None
            others = [by_arm[a][i] for a in arms if a != own]
            mine = by_arm[own][i] if own in by_arm else 0.0
            moved[i] = mine - (sum(others) / len(others) if others else 0.0)
        return moved

    @property
    def set_aside(self) -> int:
        """Windows whose block had a late answer or a stale read, run again: they judge nothing."""
        return sum(not w.kept for w in self.windows)

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict.to_json() if self.verdict else None,
            "set_aside": self.set_aside,
            "why": self.why,
            "seed": self.seed,
            "window_s": self.window_s,
            "rate_per_s": self.rate_per_s,
            "requests": self.traffic.n,
            "windows": [asdict(w) for w in self.windows],
            "on_minus_off": {str(i): d for i, d in self.on_minus_off().items()},
        }


def given_up(events: Iterable[Event]) -> list[str]:
    """What the restart policy recorded of each worker it gave up on, its log's last lines included."""
    return [e.detail for e in events if e.kind == GAVE_UP]


def worker_label(workers: Sequence[WorkerInfo], served_by: str | None) -> str:
    """`worker N` for an `x-embedlab-worker` value (`<endpoint>/<instance>`), by the endpoint."""
    endpoint = (served_by or "").split("/")[0]
    found = next((w for w in workers if w.endpoint and w.endpoint == endpoint), None)
    return found.label if found else endpoint


class Figures(Protocol):
    """What a scenario measured beyond the counters, in the one shape every view reads.

    `rows()` is its table, `(figure, value)` pairs in words (what `figures_table(result)`
    shows); `key_figures()` the few that the regression index, the history and a conformance
    cell show, label -> value (a number, or a few words); `to_json()` everything, for
    `results.json`. A scenario defines its own class; nothing switches on its name.
    """

    def rows(self) -> list[tuple[str, str]]: ...

    def key_figures(self) -> dict[str, Any]: ...

    def to_json(self) -> dict[str, Any]: ...


class DataFigures:
    """`to_json()` for a figures dataclass: its fields, nested dataclasses included."""

    def to_json(self) -> dict[str, Any]:
        if not is_dataclass(self):
            raise TypeError(f"{type(self).__name__} takes DataFigures' to_json but is no dataclass")
        return asdict(self)


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
    figures: Figures | None = None  # what the scenario measured beyond the counters
    # The instances etcd lists (attach with --etcd-endpoints), beside what the counters said.
    discovered: list[dict[str, Any]] = field(default_factory=list)
    startup_seconds: dict[str, float] = field(default_factory=dict)
    run_dir: str | None = None
    # What ran behind the stack: the workers' engine ("hash"; "hash+vllm" for a mix); "": not
    # known (attached). Left empty, it is read from the workers.
    engine: str = ""
    # The smallest faults the check would have caught with 99 % probability, in words (same-model,
    # multi-model, mixed; "": a scenario that judges no placement), and how placement was proven
    # (a ProvenBy value: the counters on a quiet pool, the schedule, per-response attribution).
    power: str = ""
    proven_by: str = ""
    # The randomized schedule, where the pool was busy (or --busy asked for it): its verdict is the check's.
    schedule: ScheduleRun | None = None
    # The run's request bodies (evidence.traffic.Probes): its nonce and seed, by which it can be
    # replayed on purpose (`nonce=`), and how many it drew; {}: none recorded.
    probes: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.verdict = Verdict(self.verdict)
        if not self.engine:
            self.engine = "+".join(dict.fromkeys(w.engine for w in self.workers if w.engine))

    @property
    def where(self) -> str:
        """What it ran on, for people: `embedded (hash)`, or `attached`."""
        return f"{self.stack} ({self.engine})" if self.engine else self.stack

    @classmethod
    def without_run(
        cls, scenario: str, stack: str, verdict: Verdict, reason: str, *, engine: str = ""
    ) -> ScenarioResult:
        """A verdict the scenario measured nothing for; `reason` says why."""
        return cls(
            scenario=scenario,
            stack=stack,
            params={},
            workers=[],
            bursts=[],
            verdict=verdict,
            reasons=[reason],
            engine=engine,
        )

    def note_given_up(self, events: Iterable[Event]) -> None:
        """Each worker its deployment's restart policy gave up on is a reason, first, and the run
        cannot pass: it lost that worker for good."""
        lost = given_up(events)
        self.reasons = [*(f"the restart policy gave up on {detail}" for detail in lost), *self.reasons]
        if lost and self.verdict in (Verdict.PASSED, Verdict.REPORTED):
            self.verdict = Verdict.FAILED

    @property
    def passed(self) -> bool:
        return self.verdict == Verdict.PASSED

    @property
    def ok(self) -> bool:
        """Nothing asserted failed: passed, or reported (figures shown, not asserted)."""
        return self.verdict.ok

    def summary(self) -> str:
        head = f"{self.scenario} on {self.where}: {self.verdict.upper()}"
        # How placement was proven where the counters could not: part of what the verdict says.
        said = [*self.reasons, *(f"{b.name}: {b.attribution_note()}" for b in self.bursts if b.proven_by)]
        return head + (" (" + "; ".join(said) + ")" if said else "")

    def __str__(self) -> str:
        return self.summary()

    def evidence(self) -> str:
        """What the verdict stands on, in a line: its power and how placement was proven ("": none said)."""
        said = [f"power: {self.power}"] if self.power else []
        if self.proven_by:
            how = ""
            if self.schedule and self.schedule.verdict:
                aside = self.schedule.set_aside
                again = f"; {aside} windows set aside for a late answer and run again" if aside else ""
                how = f" ({self.schedule.verdict.how}{again})"
            said.append(f"placement proven by {self.proven_by}{how}")
        return "; ".join(said)

    def worker_label(self, served_by: str | None) -> str:
        """`worker N` for an `x-embedlab-worker` value (`<endpoint>/<instance>`), by the endpoint."""
        return worker_label(self.workers, served_by)

    def latency_ms(self) -> dict[str, float]:
        scheduled = self.schedule.traffic.records if self.schedule else []
        return latency_ms([*(r for b in self.bursts for r in b.traffic.records), *scheduled])

    @property
    def p_values(self) -> dict[str, float | None]:
        return {b.name: (b.check.p_value if b.check else None) for b in self.bursts}

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "stack": self.stack,
            "engine": self.engine,
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
            "figures": self.figures.to_json() if self.figures is not None else None,
            "key_figures": self.key_figures(),
            "discovered": self.discovered,
            "power": self.power,
            "proven_by": self.proven_by,
            "schedule": self.schedule.to_json() if self.schedule else None,
            "probes": self.probes,
        }

    def key_figures(self) -> dict[str, Any]:
        """What the index, the history diff and a conformance cell show of this run.

        The bursts' own figures (p-values, latency, per-worker deltas, failed requests),
        then under `own` the scenario's, read through the `Figures` protocol.
        """
        return {
            "verdict": self.verdict,
            "p_values": {k: v for k, v in self.p_values.items() if v is not None},
            "latency_ms": self.latency_ms(),
            "deltas": {b.name: [r.delta for r in b.check.rows] if b.check else None for b in self.bursts},
            "expected": {b.name: sorted(b.expected) for b in self.bursts},
            "failed_requests": sum(len(b.traffic.failures) for b in self.bursts),
            "router_counts": self.router_counts_note(),
            "own": self.figures.key_figures() if self.figures is not None else {},
        }

    def router_counts_note(self) -> str | None:
        """Whether the router's own per-worker counters agreed with the workers' over every
        burst (None where it keeps none)."""
        read = [b for b in self.bursts if b.router_deltas is not None]
        if not read:
            return None
        disagreements = [f"{b.name}: {d}" for b in read if (d := b.router_disagreement())]
        return (
            "; ".join(disagreements)
            or f"the router's own counters agree with the workers' over {len(read)} burst{'s' * (len(read) > 1)}"
        )

    def save_json(self, path: str | Path) -> Path:
        """Write `to_json()` to `path` (parents created): what `embedlab regress` collects."""
        return write_json(path, self.to_json())
