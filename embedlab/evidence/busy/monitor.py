"""BusyMonitor: one check's windows in, a verdict out as soon as the evidence suffices.

    schedule = Schedule.same_model("m", requests=20)
    monitor = BusyMonitor(schedule, models=["m", "m"], weights=[1, 1])
    for window in schedule.windows():
        ...                                   # snapshot at the boundary, send, wait for the window's end
        monitor.add(WindowRecord(index=window.index, deltas=deltas, sent={"m": answered}))
        verdict = monitor.verdict()           # None: go on; at the budget it is never None
        if verdict is not None:
            break

The false-alarm rate holds at whatever block the check stops, and over an unbounded horizon
(a continuous watch restarts a monitor after each alarm): see sequential.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ...errors import ConfigError
from ...verdicts import Verdict
from ..stats import percent
from .constants import BUDGET_S, BUSY_CHECK_ALPHA, LATE_TOLERANCE, LEAK, SKEW, SKEWED_STRICTER, SURPLUS
from .engine import BlockEngine, Decision, Unit
from .outcome import BusyVerdict, ProvenBy, ShareEstimate
from .schedule import Schedule, WindowRecord

if TYPE_CHECKING:  # the one name it takes of the accounting: the monitor is fed its findings
    from ..accounting import Miscount

__all__ = ["BusyMonitor"]


class BusyMonitor:
    """Feed it every window's record, in order; ask it for a verdict after each.

    `models`: each worker's model, by index (None: left out, its deltas ignored); `weights`: each worker's routing weight (default equal).
    """

    def __init__(
        self,
        schedule: Schedule,
        models: Sequence[str | None],
        weights: Sequence[float] | None = None,
        *,
        alpha: float = BUSY_CHECK_ALPHA,
        skew: float = SKEW,
        leak: float = LEAK,
        surplus: float = SURPLUS,
        budget_s: float = BUDGET_S,
    ) -> None:
        self.schedule = schedule
        self.models = list(models)
        self.budget_s = budget_s
        self.engine = BlockEngine.of(
            schedule,
            self.models,
            weights,
            alpha=alpha,
            skew=skew,
            leak=leak,
            surplus=surplus,
        )
        self._pending: list[WindowRecord] = []
        self.windows = 0
        self.sent = 0
        self.late = 0
        # Per model: the check's own requests, and the other clients' (the router's count where it
        # is read; else its replicas' counters less the check's, which holds where each request is
        # counted once on its model's replicas: what the counted units test).
        self.own: dict[str, int] = {m: 0 for m in self.engine.models_sent}
        self.others: dict[str, float] = {m: 0.0 for m in self.engine.models_sent}
        self.router_read = False
        # The router's own counts against the workers' (evidence/router.py), where the check reads
        # them: boundaries checked since the baseline, the first miscount, what it noted.
        self.router = ""
        self.boundaries = 0
        self.miscount: Miscount | None = None
        self.router_notes: list[str] = []
        self._replicas = {
            m: [i for i, x in enumerate(self.models) if x == m] for m in self.engine.models_sent
        }

    @property
    def seconds(self) -> float:
        return self.windows * self.schedule.window_s

    def add(self, record: WindowRecord) -> None:
        if record.index != self.windows:
            raise ConfigError(f"window {record.index} came where window {self.windows} was due")
        if len(record.deltas) != len(self.models):
            raise ConfigError(
                f"window {record.index} has {len(record.deltas)} deltas for {len(self.models)} workers"
            )
        self._pending.append(record)
        self.windows += 1
        self.sent += sum(record.sent.values())
        self.late += record.late
        for m in self.engine.models_sent:
            mine = record.sent.get(m, 0)
            self.own[m] += mine
            if record.others is not None:
                self.others[m] += record.others.get(m, 0.0)
            else:
                self.others[m] += sum(record.deltas[i] for i in self._replicas[m]) - mine
        if len(self._pending) == len(self.schedule.arms):
            block = self.engine.blocks
            deltas = np.array([r.deltas for r in self._pending], dtype=float).T
            models = self.engine.models_sent
            sent = np.array([[r.sent.get(m, 0) for r in self._pending] for m in models], dtype=float)
            others = None
            if all(r.others is not None for r in self._pending):
                self.router_read = True
                others = np.array(
                    [[(r.others or {}).get(m, 0.0) for r in self._pending] for m in models], dtype=float
                )
            self.engine.add_block(deltas, sent, np.asarray(self.schedule.order_index(block)), others)
            self._pending = []

    def account(self, found: Miscount | None, router: str) -> None:
        """What the router's own counts and the workers' said together at a boundary (None: the
        baseline). Exact: one request counted where the router did not send it fails the check."""
        self.router = router
        if found is None:
            return
        self.boundaries += 1
        self.router_notes = found.notes()
        if found.failed and self.miscount is None:
            self.miscount = found

    def verdict(self, *, final: bool | None = None) -> BusyVerdict | None:
        """The verdict now: None while undecided and before `final` (default: the budget is spent)."""
        final = self.seconds >= self.budget_s - 1e-9 if final is None else final
        if self.miscount is not None:
            decision = self.engine.decide() if self.engine.blocks else None
            return self._verdict(Verdict.FAILED, tuple(self.miscount.reasons()), decision, ProvenBy.ROUTER)
        if self.engine.blocks == 0:
            return (
                self._verdict(Verdict.INCONCLUSIVE, ("no whole block of windows yet",), None)
                if final
                else None
            )
        decision = self.engine.decide()
        if self.late > LATE_TOLERANCE * (self.sent + self.late) and (
            decision.failed or decision.passed or final
        ):
            # A late request counts in the next window, which may be of another arm: no decision stands on that.
            reason = (
                f"{self.late} of the check's {self.sent + self.late} requests were still in flight at their "
                "window's end, so other windows' counts carry them"
            )
            return self._verdict(Verdict.INCONCLUSIVE, (reason,), decision)
        if decision.failed:
            return self._verdict(Verdict.FAILED, self._failures(decision), decision)
        if decision.passed:
            return self._verdict(Verdict.PASSED, (), decision)
        if not final:
            return None
        return self._verdict(
            Verdict.INCONCLUSIVE,
            (
                f"after {self.windows} windows ({self.seconds:g} s) the evidence does not yet rule out every fault",
            ),
            decision,
        )

    # -- wording --------------------------------------------------------------------------------

    def _estimates(self, decision: Decision | None) -> list[ShareEstimate]:
        nan = math.nan
        return [
            ShareEstimate(
                unit=unit.name,
                model=unit.model,
                workers=unit.workers,
                expected=unit.expected,
                estimate=float(decision.estimate[u]) if decision else nan,
                low=float(decision.low[u]) if decision else nan,
                high=float(decision.high[u]) if decision else nan,
                moved=bool(decision.moved[u]) if decision else False,
                fits=not bool(decision.misfit[u]) if decision else True,
            )
            for u, unit in enumerate(self.engine.units)
        ]

    def _failures(self, decision: Decision) -> tuple[str, ...]:
        reasons = []
        for u, unit in enumerate(self.engine.units):
            if not decision.misfit[u]:
                continue
            shown = _bounds(decision.low[u], decision.high[u])
            if unit.counted:
                x = decision.estimate[u]
                times = f"{_times(x)} ({_times_bounds(decision.low[u], decision.high[u])})"
                if x > 1:
                    reasons.append(
                        f"'{unit.model}''s replicas counted {times} the check's requests of it, not each "
                        "once: some were counted twice (a retry whose first attempt still counted, hedging)"
                    )
                else:
                    reasons.append(
                        f"'{unit.model}''s replicas counted {times} the check's requests of it: some reached "
                        "none of them (answered by a cache, dropped, or sent to another model's replicas)"
                    )
            elif unit.placement and decision.estimate[u] > 1:
                reasons.append(
                    f"{percent(decision.estimate[u])} ({shown}) of '{unit.model}' was counted on its replicas: "
                    "more than each once (counted twice: a retry whose first attempt still counted, hedging)"
                )
            elif unit.placement:
                reasons.append(
                    f"{percent(decision.estimate[u])} ({shown}) of '{unit.model}' was counted on its replicas, "
                    "not all of it: requests landed elsewhere, or the counters moved other than the requests sent"
                )
            else:
                reasons.append(
                    f"{unit.name} took {percent(decision.estimate[u])} ({shown}) of '{unit.model}', "
                    f"not its {percent(unit.expected)}"
                )
        return tuple(reasons)

    def _power(self, decision: Decision | None) -> str:
        conf = f"{percent(1 - self.engine.alpha)} confidence"
        if decision is None:
            return f"nothing ruled out yet at {conf}"
        units = self.engine.units
        parts = []
        replicas = [u for u, x in enumerate(units) if x.replica]
        if replicas:
            idle = all(decision.moved[u] for u in replicas)
            skews = all(decision.skews_ruled_out[u] for u in replicas)
            empty = [units[u].name for u in replicas if math.isnan(decision.low[u])]
            if empty:
                span = f"no share fits {', '.join(empty)}"
            else:
                low = min(decision.low[u] / units[u].expected for u in replicas)
                high = max(decision.high[u] / units[u].expected for u in replicas)
                span = f"every replica's share lies within {_times(low)} to {_times(high)} its weight's"
            skew = f"a {self.engine.skew:g}/{1 - self.engine.skew:.2g} skew between two replicas"
            parts.append(
                f"an idle replica is {'' if idle else 'not yet '}ruled out, {skew} is "
                f"{'' if skews else 'not yet '}ruled out; {span}"
            )
            stricter = self.engine.stricter
            if stricter:
                n = max(max(self.schedule.doses(m)) for m in self.engine.models_sent)
                short = [name for name, side in stricter.items() if side == "below"]
                large = [name for name, side in stricter.items() if side == "above"]
                judged = [f"a share short of its weight's for {_names(short)}"] if short else []
                judged += [f"a share above its weight's for {_names(large)}"] if large else []
                parts.append(
                    f"at {n} requests a window the router's split is too skewed for an even bet, so "
                    f"{' and '.join(judged)} is judged at a level {SKEWED_STRICTER:g}x stricter"
                )
        parts.append(self._counted_once(decision))
        sent = self.engine.models_sent
        for u, unit in enumerate(units):
            if unit.placement and self.engine.asks_leak:
                low = decision.low[u]
                bound = "no bound" if math.isnan(low) else f"at most {percent(max(0.0, 1 - low))}"
                # With two models the unit counts both ends of a leak: its bound holds for each model.
                whose = f"'{sent[0]}' or of '{sent[1]}'" if len(sent) == 2 else f"'{unit.model}'"
                parts.append(f"{bound} of {whose} landed on other models' replicas")
        return "; ".join(parts) + f" ({conf}, valid at any stopping time)"

    def _counted_once(self, decision: Decision) -> str:
        """How far from once each of a model's requests may have been counted, in words."""
        counted = [u for u, x in enumerate(self.engine.units) if x.counted]
        surplus = self.engine.surplus
        once = all(decision.counted_once[u] for u in counted)
        target = f"1 in {1 / surplus:.3g} is {'' if once else 'not yet '}ruled out"
        if any(math.isnan(decision.low[u]) for u in counted):
            return f"each request counted once: no count fits ({target})"
        twice = max(max(0.0, decision.high[u] - 1.0) for u in counted)
        short = max(max(0.0, 1.0 - decision.low[u]) for u in counted)
        return (
            f"each request counted once: at most {percent(twice)} of a model's counted twice and "
            f"{percent(short)} not counted ({target})"
        )

    def _other_traffic(self) -> str:
        """The traffic the check did not send, per model, while it ran."""
        seconds = self.seconds
        if not seconds:
            return ""
        source = "by the router's count" if self.router_read else "from the counters, less the check's"
        shown = ", ".join(
            f"'{m}' {max(0.0, n):.0f} ({max(0.0, n) / seconds:.3g}/s)" for m, n in self.others.items()
        )
        mine = ", ".join(f"'{m}' {n}" for m, n in self.own.items())
        return f"; other clients' requests {shown}, {source}, beside the check's {mine}"

    def _router_words(self) -> str:
        """What the router's own counts proved beside the workers', where they were read."""
        if not self.router:
            return ""
        if self.miscount is not None:
            return (
                f"{self.router}'s own counts and the workers' disagreed after {self.boundaries} window "
                "boundaries: exact, whoever sent the requests"
            )
        notes = "".join(f"; {n}" for n in self.router_notes)
        return (
            f"; {self.router}'s own counts agreed with the workers' at all {self.boundaries} window boundaries "
            "since the first: every request it took for a model, the other clients' too, was counted once "
            f"on that model's replicas (a single one leaked or counted twice fails the check){notes}"
        )

    def _verdict(
        self,
        verdict: Verdict,
        reasons: tuple[str, ...],
        decision: Decision | None,
        proven_by: ProvenBy = ProvenBy.SCHEDULE,
    ) -> BusyVerdict:
        estimates = self._estimates(decision)
        units: tuple[Unit, ...] = self.engine.units
        return BusyVerdict(
            verdict=verdict,
            reasons=reasons,
            placement=tuple(e for e, u in zip(estimates, units) if u.placement),
            replicas=tuple(e for e, u in zip(estimates, units) if u.replica),
            counted=tuple(e for e, u in zip(estimates, units) if u.counted),
            power=self._router_words()
            if proven_by is ProvenBy.ROUTER
            else self._power(decision) + self._router_words(),
            proven_by=proven_by,
            how=(
                f"{self.engine.blocks} randomized blocks of {len(self.schedule.arms)} windows of "
                f"{self.schedule.window_s:g} s (seed {self.schedule.seed}), {self.sent} requests of the check's"
                + self._other_traffic()
            ),
            other_traffic={m: float(n) for m, n in self.others.items()},
            windows=self.windows,
            seconds=self.seconds,
            confidence=1 - self.engine.alpha,
        )


def _names(names: list[str]) -> str:
    return ", ".join(names) if len(names) <= 3 else f"{len(names)} replicas"


def _times(x: float) -> str:
    return "any" if math.isinf(x) else f"{x:.2f}x"


def _times_bounds(low: float, high: float) -> str:
    return "no count fits" if math.isnan(low) else f"{_times(low)} to {_times(high)}"


def _bounds(low: float, high: float) -> str:
    return "no share fits" if math.isnan(low) else f"between {percent(low)} and {percent(high)}"
