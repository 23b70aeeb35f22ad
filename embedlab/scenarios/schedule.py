"""The busy pool's check: a randomized on/off schedule run through the burst path.

Where the quiet windows around a burst see traffic embedlab did not send (`needs_schedule`), or
when asked (`busy`), a placement check runs `run_schedule` instead of judging its before/after
pair; `busy_outcome` turns the schedule's sequential verdict into the scenario's. The method is
in docs/busy-method.md; the statistics are in evidence/busy/.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import httpx

from ..defaults import BUSY_BUDGET_S
from ..errors import CounterResetError, ScrapeError
from ..evidence import clients
from ..evidence.accounting import Accounting, RouterCounts
from ..evidence.busy import BusyMonitor, BusyVerdict, Schedule, WindowRecord
from ..evidence.busy.constants import SCRAPED_BLOCKS
from ..evidence.busy.driver import fitted_window, run_block
from ..evidence.metrics import Snapshot, ascrape_all
from ..evidence.router import read_router
from ..evidence.target import Target
from ..evidence.traffic import BurstResult, WindowSender, asend_burst
from ..verdicts import Verdict
from .params import knob
from .result import Burst, ScheduleRun, ScheduleWindow

__all__ = ["BusyKnobs", "busy_outcome", "needs_schedule", "run_schedule"]


@dataclass(frozen=True, kw_only=True)
class BusyKnobs:
    """The knobs of a check that judges placement, declared once: same-model, multi-model and mixed
    take them by subclassing (`--busy`, `--budget-s`; matrix and notebook keys `busy`, `budget_s`)."""

    busy: bool = knob(
        False,
        "run the randomized on/off schedule even where the quiet windows see no other traffic "
        "(it runs anyway where they do)",
    )
    budget_s: float = knob(
        BUSY_BUDGET_S,
        "the longest the busy schedule runs before it ends inconclusive (through Prometheus: its "
        f"windows' sending, at least {SCRAPED_BLOCKS} blocks; the waits for scrapes come on top)",
        min=1,
    )


def needs_schedule(bursts: Sequence[Burst]) -> bool:
    """Whether some burst saw traffic embedlab did not send that nothing per response accounted
    for: the counters' before/after pair judges nothing there, and the check runs the schedule."""
    return any(b.other_traffic and not b.proven_by and b.unread is None for b in bursts)


async def run_schedule(
    target: Target,
    schedule: Schedule,
    *,
    models: Sequence[str | None],
    weights: Sequence[float] | None,
    budget_s: float = BUSY_BUDGET_S,
    concurrency: int = 4,
    timeout: float = 60.0,
) -> ScheduleRun:
    """The check as a randomized on/off schedule: every worker read at every window boundary, each
    window's arm sent right after its opening read, a verdict after every block (BusyMonitor)
    until one stands or `budget_s` of wall time is spent. `models`: each worker's model, by index;
    None leaves a worker out: it is not read (its deltas are recorded as 0) and judges nothing
    (failover's victim, dead when its schedule starts).

    A block's boundaries are on one clock (its start + k * window_s). A window's requests go out
    at once; one still unanswered at the window's closing read (late) would count in the next
    window, perhaps of another arm, so its whole block is set aside: the check waits for every
    answer, reads again, and runs the same block (the same drawn order) anew. Whether a block is
    late does not depend on its order (each arm sends the same requests wherever it stands),
    so the blocks kept still have uniformly random orders. Measured on a 2-core machine at load
    11: p99 latency 1 s, a quarter of the blocks set aside, the rest decided."""
    windows: list[ScheduleWindow] = []
    limits = max(concurrency, max((sum(a.requests.values()) for a in schedule.arms), default=1))
    why, verdict = "", None
    async with (
        clients.scrape_client(timeout=10.0) as scrape_client,
        clients.lanes_client(limits, timeout=timeout) as http,
    ):
        sender = WindowSender(target.frontend_url, http, limits=limits, timeout=timeout)
        reader = _Reader(target, models, scrape_client)
        try:
            schedule = await _fitted(schedule, target, http, limits, timeout)
            verdict = await _blocks(schedule, sender, reader, windows, weights, budget_s)
        except CounterResetError as exc:
            why = f"counter reset on worker {exc.worker_index} during the schedule"
        except ScrapeError as exc:
            who = "the router's own counts" if exc.worker_index is None else f"worker {exc.worker_index}"
            why = f"{who} could not be read during the schedule ({exc})"
        await sender.settle()
    traffic = BurstResult(
        model="+".join(schedule.models),
        n=len(sender.records),
        concurrency=limits,
        records=sorted(sender.records, key=lambda r: r.started),
        wall_seconds=windows[-1].end_s if windows else 0.0,
    )
    rate = max(sum(a.requests.values()) for a in schedule.arms) / schedule.window_s
    return ScheduleRun(windows, verdict, traffic, schedule.seed, schedule.window_s, rate, why, tuple(models))


async def _blocks(
    schedule: Schedule,
    sender: WindowSender,
    reader: _Reader,
    windows: list[ScheduleWindow],
    weights: Sequence[float] | None,
    budget_s: float,
) -> BusyVerdict | None:
    """Block after block into `windows` (the kept and the set aside), a verdict after each kept
    one, until one stands or `budget_s` is spent."""
    # The budget is wall time, blocks set aside included: the monitor only counts what it is fed.
    monitor = reader.monitor = BusyMonitor(schedule, reader.models, weights, budget_s=math.inf)
    before = await reader.read()
    origin = reader.start()
    pieces, budget_s = reader.fill(schedule, budget_s)
    block = 0
    while True:
        found, after = await _block(schedule, block, origin, sender, reader, before, pieces)
        reader.sent_s += sum(w.end_s - w.start_s for w in found)
        kept = after is not None and not any(w.late for w in found)
        windows += [w if kept else dataclasses.replace(w, kept=False) for w in found]
        verdict = None
        if kept and after is not None:
            for w in found:
                monitor.add(WindowRecord(index=w.index, deltas=w.deltas, sent=w.sent, others=w.others))
            block += 1
            verdict = monitor.verdict(final=False)
            before = after
        else:
            # Every answer in, then a fresh read: the next block starts from nothing in flight.
            await sender.settle()
            before = await reader.read()
        if verdict is None and monitor.miscount is not None:
            verdict = monitor.verdict(final=False)  # the router's counts ruled, blocks kept or not
        if verdict is None and reader.spent() >= budget_s:
            verdict = monitor.verdict(final=True)
        if verdict is not None:
            return verdict


async def _block(
    schedule: Schedule,
    block: int,
    origin: float,
    sender: WindowSender,
    reader: _Reader,
    before: list[Snapshot],
    pieces: int = 1,
) -> tuple[list[ScheduleWindow], list[Snapshot] | None]:
    """One block's windows (evidence/busy/driver.py), and its last read (None: a read through
    Prometheus found a worker's scrape stale; the block is cut there and judges nothing)."""

    async def read() -> tuple[RouterCounts | None, list[Snapshot] | None, RouterCounts | None]:
        # The router's counts on either side of the window, where it is read.
        opened = reader.router_after
        after = await reader.read_or_stale()
        return opened, after, reader.router_after

    cuts = await run_block(
        schedule, block, window_s=schedule.window_s, origin=origin, sender=sender, read=read,
        go_on=lambda r: r[1] is not None, aligned=reader.aligned, pieces=pieces,
    )  # fmt: skip
    found: list[ScheduleWindow] = []
    last: list[Snapshot] | None = before
    for cut in cuts:
        opened, after, closed = cut.read
        # What counts in the window: the answers in hand when its closing read began.
        sent = dict(Counter(r.model for r in cut.answered if r.status))
        deltas = reader.deltas(last, after) if last is not None and after is not None else reader.unread()
        found.append(
            ScheduleWindow(
                cut.window.index,
                cut.window.arm.name,
                cut.at,
                cut.at + cut.sending_s,
                deltas,
                sent,
                cut.late,
                others=reader.others(opened, closed, sent),
                stale=after is None,
            )
        )
        last = after
    return found, last


class _Reader:
    """Every worker the schedule judges (`models` not None), read at once; where the target says
    where the router counts, its counts just before and just after (evidence/router.py), and what
    they and the workers' say together, handed to `monitor` at every read.

    Through Prometheus (`target.counters`), each read waits for a scrape of every worker after it
    was asked (evidence/prom_source.py), so a window is judged only between two scrapes of every
    worker that bracket it: its requests go out after the opening scrapes, and the closing ones
    are taken after its answers came back. The windows then run each on its own clock (`aligned`)
    and, since each costs a scrape interval anyway, send for as long as fits before the next
    scrapes, at the check's own rate, one window's requests every `window_s` (`fill`). The budget
    counts the windows' sending, as much as a direct check sends in it, and at least
    `SCRAPED_BLOCKS` blocks; the waits for scrapes come on top, stated. A read that
    finds a worker's scrape missing or stale cuts its block, which is set aside and judges nothing
    (`read_or_stale`); the read after it, from nothing in flight, must find every worker scraped,
    or the check ends inconclusive naming the worker."""

    def __init__(self, target: Target, models: Sequence[str | None], client: httpx.AsyncClient) -> None:
        self.models, self.metric, self.client = models, target.metric, client
        self.source = target.counters
        self.aligned = self.source is not None
        self.read_at = [i for i, m in enumerate(models) if m is not None]
        self.urls = [target.system_urls[i] for i in self.read_at]
        self.router = target.router_metrics
        self.router_name = self.router.name if self.router else ""
        self.accounting = Accounting(models, self.router_name) if self.router else None
        self.router_after: RouterCounts | None = None
        self.monitor: BusyMonitor | None = None
        self.origin = time.perf_counter()
        self.stale: list[str] = []  # each stale read's words, in order
        self.sent_s = 0.0  # the windows' sending time so far

    def start(self) -> float:
        """The schedule's clock starts: the budget counts from here."""
        self.origin = time.perf_counter()
        return self.origin

    def spent(self) -> float:
        """The budget spent: wall time direct; through Prometheus, the windows' sending time (the
        waits for scrapes are stated, not counted: at 5 s they are most of the time)."""
        return time.perf_counter() - self.origin if self.source is None else self.sent_s

    def fill(self, schedule: Schedule, budget_s: float) -> tuple[int, float]:
        """Right after a read: how many times each window sends its arm's requests (one `window_s`
        apart), and the budget. Direct reads: once, and `budget_s` of wall time. Through
        Prometheus: as many as fit before the workers' next scrapes, and `budget_s` of sending
        (what a direct check sends in its budget), but at least `SCRAPED_BLOCKS` blocks; both said
        in the verdict's sentence."""
        if self.source is None:
            return 1, budget_s
        fits, lasts = self.source.fits_s()
        pieces = max(1, math.floor(fits / schedule.window_s))
        floor = SCRAPED_BLOCKS * len(schedule.arms) * pieces * schedule.window_s
        raised = f", at least {SCRAPED_BLOCKS} blocks ({floor:.0f} s of sending)" if floor > budget_s else ""
        self.source.windows = (
            f"each window sent for {pieces * schedule.window_s:.2f} s of the {lasts:g} s between its "
            f"scrapes; the budget counts the sending{raised}"
        )
        return pieces, max(budget_s, floor)

    async def read_or_stale(self) -> list[Snapshot] | None:
        """A read inside a block: None where a read through Prometheus found a worker stale."""
        if self.source is None:
            return await self.read()
        try:
            return await self.read()
        except ScrapeError as exc:
            self.stale.append(str(exc))
            return None

    async def _workers(self) -> list[Snapshot]:
        if self.source is None:
            return await ascrape_all(self.urls, metric=self.metric, client=self.client, indices=self.read_at)
        return await self.source.aread(self.urls, self.read_at, self.metric, moment="at a window's boundary")

    async def read(self) -> list[Snapshot]:
        if self.router is None or self.accounting is None:
            return await self._workers()
        opening = await read_router(self.router, self.client)
        found = await self._workers()
        self.router_after = await read_router(self.router, self.client)
        counters = [0.0] * len(self.models)
        for i, snapshot in zip(self.read_at, found):
            counters[i] = snapshot.value
        miscount = self.accounting.check(opening, counters, self.router_after)
        if self.monitor is not None:
            self.monitor.account(miscount, self.router_name)
        return found

    def unread(self) -> tuple[float, ...]:
        """The deltas of a window cut by a stale read: none known (it judges nothing)."""
        return (math.nan,) * len(self.models)

    def others(
        self, opened: RouterCounts | None, closed: RouterCounts | None, sent: Mapping[str, int]
    ) -> dict[str, float] | None:
        """Per model, the other clients' requests the router took between the reads `opened` and
        `closed` (None: it is not read)."""
        if self.accounting is None or opened is None or closed is None:
            return None
        return self.accounting.others(opened, closed, sent)

    def deltas(self, before: list[Snapshot], after: list[Snapshot]) -> tuple[float, ...]:
        """Each worker's delta by index; 0 for one left out."""
        moved = {i: b.delta(a, worker_index=i) for i, b, a in zip(self.read_at, before, after)}
        return tuple(moved.get(i, 0.0) for i in range(len(self.models)))


async def _fitted(
    schedule: Schedule, target: Target, http: httpx.AsyncClient, concurrency: int, timeout: float
) -> Schedule:
    """`schedule` fitted to this sender and router, before its first window: a window's requests
    must be answered within its sending part at the rate measured (one in flight at a window's
    end counts in the next, and its block is set aside). On a loaded machine a window's nominal
    requests can take several times its sending part, hence the fit. The whole sending part is
    filled, with no margin: twice the requests a window, at the cost of a few blocks set aside,
    pass a correct pool in about half the time (docs/benchmarks.md has both figures).

    The sender's rate is measured on the busiest arm's requests, sent three times before the
    first read: the first opens the lanes' connections, which every window after it reuses, so
    the slower of the other two sets the rate. Where it falls short, each arm sends fewer
    requests, then windows grow (`evidence.busy.driver.fitted_window`): a sign-flip test needs
    blocks more than requests (14 at least at the check's level), so shorter windows come first.
    Fitted before any order is drawn, the randomization still holds."""
    busiest = max(schedule.arms, key=lambda a: sum(a.requests.values()))
    nominal = sum(busiest.requests.values())
    order = [m for m, k in busiest.requests.items() for _ in range(k)]
    took = []
    for _ in range(3):
        started = time.perf_counter()
        await asend_burst(
            target.frontend_url, busiest.name, nominal, concurrency=min(nominal, concurrency),
            client=http, models=order, timeout=timeout,
        )  # fmt: skip
        took.append(time.perf_counter() - started)
    rate = nominal / max(max(took[1:]), 1e-6)
    window, per_window = fitted_window(schedule.window_s, nominal, rate, schedule.send_fraction)
    if (window, per_window) == (schedule.window_s, nominal):
        return schedule
    arms = tuple(
        dataclasses.replace(
            a, requests={m: max(1, round(k * per_window / nominal)) for m, k in a.requests.items()}
        )
        for a in schedule.arms
    )
    return dataclasses.replace(schedule, arms=arms, window_s=window)


def busy_outcome(run: ScheduleRun) -> tuple[Verdict, list[str], str]:
    """The verdict, reasons and power sentence a scenario reports from its schedule."""
    if run.verdict is None:
        return Verdict.INCONCLUSIVE, [run.why or "the schedule reached no verdict"], "nothing ruled out"
    v = run.verdict
    failed = run.traffic.failures
    if failed:
        # As on a quiet pool: a request the check sent that failed fails the check. It is the
        # direct evidence, so it comes first; what the counters found of the same fault follows.
        named = f"{len(failed)} of the schedule's {run.traffic.n} requests failed ({failed[0].error})"
        beside = list(v.reasons) if v.verdict is Verdict.FAILED else []
        return Verdict.FAILED, [named, *beside], v.power
    return v.verdict, list(v.reasons), v.power
