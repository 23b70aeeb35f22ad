"""The sliding horizon: staggered anytime-valid tests, a verdict per check and model, one alarm per fault.

A test is one `BlockEngine` (evidence/busy/engine.py) fed every block from its first. A new
test starts every `stagger_s` and each lives `horizon_s`, so a fault that starts after an hour
meets a test at most `stagger_s` old (an old test's bets have settled near zero on the hours
of correct routing before, and would take far longer to turn), and a verdict rests on the
last `horizon_s` alone. Each test's false-alarm probability is at most `alpha` over its whole
life, whenever it is read (Ville's inequality; docs/busy-method.md), so a correct router is
accused at most `alpha` times per test started: `alpha * 3600 / stagger_s` alarms an hour at
most (0.006 at the defaults: names.WATCH_TEST_ALPHA), before the restarts below, which only lower it.

Per (check, model), from its own units of each live test (checks.py):
    failing       some test ruled out a correct router on its units (a leak; an idle or skewed
                  replica), or a worker of another model refused one of the check's requests
                  (`misplaced`: the response names its worker); every test then restarts, so
                  the evidence that convicted one fault is not counted again
    ok            a test started after the last failure passed within the last `horizon_s`:
                  every unit moved, a 0.9/0.1 skew and a leak of one in ten ruled out, and one
                  request in ten counted twice or not at all
    inconclusive  neither (the first minute, or a pool too busy to decide within the horizon)

One fault is one alarm: the alarm counter rises when a check turns failing, and a check
stays failing while failures keep coming. It turns ok once `hold_s` have passed since the last
failure and a test started after it has passed (a fault that stops is seen to stop); and
inconclusive once a whole horizon has passed with neither (a test started after the failure
lived its life without convicting the fault again, nor clearing it).

Pure: time is passed in (seconds on the watch's clock), nothing is read or sent here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..evidence.accounting import Miscount
from ..evidence.busy import Schedule
from ..evidence.busy.engine import BlockEngine, Decision
from .checks import CheckKey, WatchPool
from .names import (
    COUNTED_ONCE,
    FAILING,
    HORIZON_S,
    INCONCLUSIVE,
    MULTI_MODEL,
    OK,
    STAGGER_S,
    WATCH_TEST_ALPHA,
)

__all__ = ["Judge", "KeyState", "ShareState", "Transition"]


@dataclass(frozen=True)
class Transition:
    """A check's verdict changed; `alarm`: it turned failing (the alarm counter rose)."""

    at: float
    key: CheckKey
    old: str
    new: str
    why: str
    alarm: bool = False


@dataclass(frozen=True)
class KeyState:
    key: CheckKey
    state: str
    since: float
    evidence_log10: float  # the largest e-value against a correct router among the live tests
    threshold_log10: float  # where it becomes an alarm
    ruled_out: float  # multi-model: the smallest leak share ruled out; same-model: the smallest
    # relative deviation of a replica's share from its weight's ruled out; counted-once: the
    # smallest share of requests counted twice or not at all ruled out (NaN: none yet)
    alarms: int
    checks: int
    why: str


@dataclass(frozen=True)
class ShareState:
    worker: int
    model: str
    estimate: float
    low: float
    high: float
    expected: float


@dataclass
class _Test:
    engine: BlockEngine
    started_at: float
    done: set[CheckKey] = field(default_factory=set)  # keys it passed (a test counts once per key)
    last: Decision | None = None  # after its latest block


@dataclass
class _Track:
    state: str = INCONCLUSIVE
    since: float = 0.0
    fail_at: float | None = None
    pass_at: float | None = None
    alarms: int = 0
    checks: int = 0
    why: str = "no test has decided yet"


class Judge:
    def __init__(
        self,
        pool: WatchPool,
        schedule: Schedule,
        *,
        horizon_s: float = HORIZON_S,
        stagger_s: float = STAGGER_S,
        hold_s: float | None = None,
        alpha: float = WATCH_TEST_ALPHA,
    ) -> None:
        self.pool, self.schedule = pool, schedule
        self.horizon_s, self.stagger_s = horizon_s, min(stagger_s, horizon_s)
        self.hold_s = horizon_s if hold_s is None else hold_s
        self.alpha = alpha
        self.tests: list[_Test] = []
        self.tracks = {key: _Track() for key in pool.keys}
        probe = self._engine()
        self.units = probe.units
        self.models_sent = probe.models_sent
        self._of = {key: pool.units_of(key, probe.units) for key in pool.keys}
        self._expected_at = np.array(
            [int(np.searchsorted(probe.grid[u], unit.expected)) for u, unit in enumerate(probe.units)]
        )
        # Each one-sided test runs at alpha / (2 x units): a unit's alarm is at that level's e-value.
        self.threshold_log10 = math.log10(2 * len(probe.units) / alpha)

    def _engine(self) -> BlockEngine:
        return BlockEngine.of(self.schedule, self.pool.models, self.pool.weights, alpha=self.alpha)

    # -- what comes in ------------------------------------------------------------------------

    def add_block(
        self,
        deltas: np.ndarray,
        sent: np.ndarray,
        observed: int,
        *,
        now: float,
        others: np.ndarray | None = None,
    ) -> list[Transition]:
        """One kept block: `deltas` (workers, arms) each worker's counter delta per window, in
        window order; `sent` (models sent, arms) the check's requests counted per window;
        `observed` the index of the block's order in `sequential.orders(arms)`; `others` (models
        sent, arms), where the router's own counts are read, the other clients' requests of each
        model it admitted per window."""
        if not self.tests or now - self.tests[-1].started_at >= self.stagger_s:
            self.tests.append(_Test(self._engine(), now))
        changes: list[Transition] = []
        for test in list(self.tests):
            test.engine.add_block(deltas, sent, np.asarray(observed), others)
        for test in list(self.tests):
            if test not in self.tests:
                break  # a failure restarted every test
            decision = test.last = test.engine.decide()
            failed = [key for key, units in self._of.items() if decision.misfit[list(units)].any()]
            for key in self._of:
                if key not in failed and key not in test.done and self._passes(key, decision):
                    test.done.add(key)
                    changes += self._pass(key, now)
            # Every key the decision convicts, before the restart wipes the evidence: a router
            # stuck on every model's first replica convicts them all at the same block, with the
            # same evidence where nothing else sends, and one at a time would only name the first.
            for key in failed:
                changes += self._fail(key, now, self._failure_words(key, decision))
        for test in [t for t in self.tests if now - t.started_at >= self.horizon_s]:
            self.tests.remove(test)
            for key in self.tracks:
                if key not in test.done:
                    self.tracks[key].checks += 1  # ran to its end undecided
        return changes + self.tick(now)

    def misplaced(self, model: str, *, now: float, why: str) -> list[Transition]:
        """A worker that does not serve `model` answered one of the check's requests for it."""
        key = CheckKey(MULTI_MODEL, model)
        if key not in self.tracks:
            # One model's replicas only: a worker that refuses the one model is still a fault of placement.
            key = next(k for k in self.tracks if k.model == model)
        return self._fail(key, now, why)

    def miscounted(self, found: Miscount, *, now: float) -> list[Transition]:
        """The router's own counts and the workers' disagree (evidence/accounting.py): each model
        whose replicas counted more than the router admitted fails counted-once, and where another
        model's requests went missing beside it, that model's multi-model check fails too."""
        changes = []
        for model, why in found.misplaced().items():
            key = CheckKey(MULTI_MODEL, model)
            changes += self._fail(key if key in self.tracks else CheckKey(COUNTED_ONCE, model), now, why)
        for model, why in found.by_model().items():
            if model not in self.pool.served:
                continue
            changes += self._fail(CheckKey(COUNTED_ONCE, model), now, why)
            for source in found.leaked.get(model, []):
                if CheckKey(MULTI_MODEL, source) in self.tracks:
                    changes += self._fail(CheckKey(MULTI_MODEL, source), now, why)
        return changes

    def tick(self, now: float) -> list[Transition]:
        """Verdicts that change with time alone: a failure held long enough, a pass grown old."""
        changes = []
        for key, track in self.tracks.items():
            if track.state == FAILING and track.fail_at is not None:
                quiet = now - track.fail_at
                if track.pass_at is not None and track.pass_at > track.fail_at and quiet >= self.hold_s:
                    why = f"no failure for {quiet:.0f} s, and a test started since has passed"
                    changes += self._set(key, OK, now, why)
                elif quiet >= self.horizon_s:
                    why = f"no failure for {quiet:.0f} s, but no test has passed since"
                    changes += self._set(key, INCONCLUSIVE, now, why)
            elif track.state == OK and track.pass_at is not None and now - track.pass_at > self.horizon_s:
                why = f"no test has passed in the last {self.horizon_s:g} s"
                changes += self._set(key, INCONCLUSIVE, now, why)
        return changes

    # -- the state machine -------------------------------------------------------------------

    def _fail(self, key: CheckKey, now: float, why: str) -> list[Transition]:
        track = self.tracks[key]
        track.fail_at = now
        for test in self.tests:
            for other, kept in self.tracks.items():
                if other not in test.done:
                    kept.checks += 1  # ended by the restart
        # Restart: the blocks that convicted this fault must not convict it again.
        self.tests = []
        if track.state == FAILING:
            track.why = why
            return []
        track.alarms += 1
        return self._set(key, FAILING, now, why, alarm=True)

    def _pass(self, key: CheckKey, now: float) -> list[Transition]:
        track = self.tracks[key]
        track.pass_at = now
        track.checks += 1
        if track.state == FAILING:
            return []  # tick() lets it go once the hold has passed
        if track.state == OK:
            track.why = "a newer test passed"
            return []
        return self._set(key, OK, now, self._pass_words(key))

    def _set(
        self, key: CheckKey, state: str, now: float, why: str, *, alarm: bool = False
    ) -> list[Transition]:
        track = self.tracks[key]
        old = track.state
        track.state, track.since, track.why = state, now, why
        return [Transition(now, key, old, state, why, alarm)] if old != state else []

    # -- reading a decision --------------------------------------------------------------------

    def _passes(self, key: CheckKey, d: Decision) -> bool:
        u = list(self._of[key])
        return bool(
            d.moved[u].all()
            and d.leak_ruled_out[u].all()
            and d.skews_ruled_out[u].all()
            and d.counted_once[u].all()
            and not d.misfit[u].any()
        )

    def _pass_words(self, key: CheckKey) -> str:
        if key.check == COUNTED_ONCE:
            return "one request in ten counted twice or not at all is ruled out"
        if key.check == MULTI_MODEL:
            return (
                "a leak of one request in ten between models is ruled out, and every model's requests moved"
            )
        return "an idle replica and a 0.9/0.1 skew between replicas are ruled out"

    def _failure_words(self, key: CheckKey, d: Decision) -> str:
        parts = []
        for u in self._of[key]:
            if d.misfit[u]:
                unit = self.units[u]
                shown = "no share fits" if math.isnan(d.low[u]) else f"{d.low[u]:.3g} to {d.high[u]:.3g}"
                parts.append(
                    f"{unit.name}: {d.estimate[u]:.3g} of '{unit.model}' ({shown}; expected {unit.expected:.3g})"
                )
        return "the counters rule out a correct router: " + "; ".join(parts)

    # -- what goes out ---------------------------------------------------------------------------

    def states(self) -> list[KeyState]:
        decisions = [(t, t.last) for t in self.tests if t.last is not None]
        out = []
        for key, track in self.tracks.items():
            units = list(self._of[key])
            evidence = -math.inf
            ruled = math.inf
            for test, d in decisions:
                cs = test.engine.cs
                at = self._expected_at[units]
                capital = np.maximum(cs.log_up[units, at], cs.log_down[units, at]).max()
                evidence = max(evidence, float(capital) / math.log(10))
                ruled = min(ruled, self._ruled_out(key, d))
            out.append(
                KeyState(
                    key=key,
                    state=track.state,
                    since=track.since,
                    evidence_log10=evidence if decisions else math.nan,
                    threshold_log10=self.threshold_log10,
                    ruled_out=ruled if decisions and not math.isinf(ruled) else math.nan,
                    alarms=track.alarms,
                    checks=track.checks,
                    why=track.why,
                )
            )
        return out

    def _ruled_out(self, key: CheckKey, d: Decision) -> float:
        values = []
        for u in self._of[key]:
            low, high, expected = float(d.low[u]), float(d.high[u]), self.units[u].expected
            if math.isnan(low):
                continue
            if key.check == MULTI_MODEL:
                values.append(max(0.0, 1.0 - low))
            elif key.check == COUNTED_ONCE:
                values.append(max(0.0, high - 1.0, 1.0 - low))
            else:
                values.append(max(high / expected - 1.0, 1.0 - low / expected))
        return max(values) if values else math.inf

    def shares(self) -> list[ShareState]:
        """Each worker's share of the check's requests for its model, from the longest-running test."""
        live = [t.last for t in self.tests if t.last is not None]
        if not live:
            return []
        d = live[0]
        out = []
        for i, model in enumerate(self.pool.models):
            u = self._unit_of_worker(i, model)
            if u is None:
                continue
            unit = self.units[u]
            out.append(
                ShareState(i, model, float(d.estimate[u]), float(d.low[u]), float(d.high[u]), unit.expected)
            )
        return out

    def _unit_of_worker(self, worker: int, model: str) -> int | None:
        for u, unit in enumerate(self.units):
            if unit.replica and unit.workers == (worker,):
                return u
        for u, unit in enumerate(self.units):
            if unit.placement and (unit.model == model or len(self.pool.served) == 2):
                return u
        return None

    @property
    def blocks(self) -> Sequence[int]:
        return [t.engine.blocks for t in self.tests]
