"""The watch's loop: blocks of the busy schedule, under a rate cap, through whatever a live pool does.

    watch = Watch(target, WatchConfig(max_rate=16))
    await watch.run(stop)            # until `stop` is set (or `duration_s` has passed)

Each block is one window per arm, in the schedule's random order (checks.py). At every window
boundary every worker is read; the window's requests go out right after its opening read and
count where they were answered before its closing read. Between blocks the watch waits as
long as the rate cap asks, at random (a block of 16 requests at 16 req/s: 0.5-1.5 s from start
to start, 1 s on average), then reads again to open the next block. A block is kept only where nothing disturbed it, and set
aside otherwise, never judged:
    late          a request still unanswered at its window's closing read (it counts in the next)
    unreadable    a worker's read failed or timed out (it is down, restarting, or cut off)
    reset         a worker's counter went down (it restarted)
    refused       some of the check's requests reached no worker: the frontend is down or
                  restarting (no HTTP answer), or answered for itself (a 5xx; where it retried,
                  two counters moved; or a 404 for every request of a model, while its workers
                  register again)
After a worker was unreadable or restarted, blocks wait `settle_s` before they run again (it may
serve its counter before its router sends it anything). Whether a block is set aside does not
depend on its order (each arm sends the same requests wherever it stands), so the orders of
the blocks kept stay uniformly random. Each of these is an event (events_total{kind}) when it
begins and when it ends, never a verdict.

A response that names its worker (the `x-embedlab-worker` header the embedded frontend sets)
and was refused by it with a 404 (that worker serves another model), or, where the target
knows each worker's endpoint, names a worker of another model, is a misplaced request: the
multi-model check fails at once, proven by attribution, with no statistics needed. It is how a
leak of one request in 100 is found within minutes at a few requests a second, where the
counters alone need thousands of blocks (docs/verification.md, "A continuous watch").

Where the target reads its counters through Prometheus (`target.counters`, evidence/prom_source.py),
every read of the workers is one `aread` of them all, which waits for a scrape of every worker
after it was asked (three scrape intervals at most), and each window runs on its own clock from
its opening read (`run_block(aligned=True)`): its requests go out after the opening scrapes, and
count where they were answered before the closing ones. A read that finds a worker's scrape
stale is `unreadable`, naming the worker (the block set aside, never judged), as a failed read
of its /metrics is. The waits are wall time in which the watch sends nothing: the rate cap
counts the check's requests per wall second, so they only lower its rate, and the next block
starts once its spacing from this one's start has passed, waits included (at a scrape interval
of a second or more, at once from the closing read): no period is added on top of them, and no
block sends faster to make up for them. A stop never waits for a scrape.
"""

from __future__ import annotations

import asyncio
import math
import random
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import httpx
import numpy as np

from ..errors import ConfigError, CounterResetError, MetricsError
from ..evidence import clients
from ..evidence.accounting import Accounting, RouterCounts
from ..evidence.busy.constants import WINDOW_S
from ..evidence.busy.driver import longer_window, run_block
from ..evidence.metrics import Snapshot, ascrape
from ..evidence.prom_source import PrometheusCounters
from ..evidence.router import read_router
from ..evidence.target import Target
from ..evidence.traffic import Probes, RequestRecord, WindowSender
from .checks import WatchPool
from .judge import Judge, KeyState, ShareState, Transition
from .names import (
    HORIZON_S,
    MAX_RATE,
    RATE_SPAN_S,
    RETRY_S,
    SCRAPE_TIMEOUT_S,
    SETTLE_S,
    STAGGER_S,
    WATCH_TEST_ALPHA,
    WINDOW_REQUESTS,
)

__all__ = ["Watch", "WatchConfig", "WatchEvent", "masked"]

T = TypeVar("T")

# Windows grow (evidence.busy.driver.longer_window) where most of this many recent blocks came
# late: the sender and the router could not answer a window's requests within its sending part.
_LATE_SPAN = 20


@dataclass(frozen=True, kw_only=True)
class WatchConfig:
    """How the watch runs; every field has the command line's default."""

    max_rate: float = MAX_RATE  # the check's own requests per second, on average
    window_requests: int = WINDOW_REQUESTS  # per model, in a window of its arm
    window_s: float = WINDOW_S
    horizon_s: float = HORIZON_S
    stagger_s: float = STAGGER_S
    alpha: float = WATCH_TEST_ALPHA
    scrape_timeout_s: float = SCRAPE_TIMEOUT_S
    settle_s: float = SETTLE_S
    retry_s: float = RETRY_S  # after a failed read or a disturbed block, the wait before the next try
    request_timeout_s: float = 30.0
    seed: int | None = None
    duration_s: float | None = None  # stop by itself after this long (tests, the notebook)


# A URL's `user:password@`: a credential in the URL itself (httpx sends it as basic auth).
_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]+@")


def masked(text: str, secrets: Sequence[str] = ()) -> str:
    """`text` as the watch shows it (events, /metrics, the page): each of `secrets` as `***`, and
    every URL's `user:password@` as `***@`."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return _USERINFO.sub(r"\g<scheme>***@", text)


class _Stopped(Exception):
    """The watch was stopped while a read waited for a scrape."""


@dataclass(frozen=True)
class WatchEvent:
    at: float  # seconds since the watch started
    wall: float  # epoch seconds
    kind: str
    detail: str


@dataclass
class _Rate:
    """A count's rate over the last RATE_SPAN_S."""

    total: float = 0.0
    samples: deque[tuple[float, float]] = field(default_factory=deque)

    def add(self, count: float, now: float) -> None:
        self.total += count
        self.samples.append((now, self.total))
        while len(self.samples) > 2 and now - self.samples[1][0] >= RATE_SPAN_S:
            self.samples.popleft()

    def per_s(self) -> float:
        if len(self.samples) < 2 or self.samples[-1][0] <= self.samples[0][0]:
            return math.nan
        (t0, c0), (t1, c1) = self.samples[0], self.samples[-1]
        return (c1 - c0) / (t1 - t0)


class Watch:
    """One pool watched: the judge, the counts and the events; `run` drives it."""

    def __init__(
        self,
        target: Target,
        config: WatchConfig | None = None,
        *,
        on_update: Callable[[Watch], object] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """`on_update` is called on the loop after every block; `transport` (for unit tests:
        httpx.MockTransport) carries both the reads and the requests."""
        self.target = target
        self._transport = transport
        self._secrets = target.access.secrets() if target.access is not None else []
        self._stop = asyncio.Event()  # `run`'s: a read through Prometheus ends at it
        self.config = config or WatchConfig()
        if self.config.max_rate <= 0 or self.config.window_requests < 1:
            raise ConfigError(
                f"--max-rate must be positive and --window-requests at least 1, got "
                f"{self.config.max_rate:g} and {self.config.window_requests}"
            )
        self.pool = WatchPool.of(target.models, target.weights)
        self.schedule = self.pool.schedule(requests=self.config.window_requests, seed=self.config.seed)
        self.judge = Judge(
            self.pool,
            self.schedule,
            horizon_s=self.config.horizon_s,
            stagger_s=self.config.stagger_s,
            alpha=self.config.alpha,
        )
        self.window_s = self.config.window_s
        self.on_update = on_update
        self.events: deque[WatchEvent] = deque(maxlen=2000)
        self.transitions: list[Transition] = []
        self.event_counts: dict[str, int] = {}
        self.blocks: dict[str, int] = {}
        self.scrape_failures = [0] * len(target.system_urls)
        self.requests = {m: 0 for m in self.pool.served}
        self.misplaced = {m: 0 for m in self.pool.served}
        self.own = {m: _Rate() for m in self.pool.served}
        self.pool_rate = _Rate()
        self._clock0 = time.perf_counter()
        self._stopped_at: float | None = None  # the watch's clock stops here
        self._late: deque[bool] = deque(maxlen=_LATE_SPAN)
        self._down: set[str] = set()  # conditions now on: "worker 3 unreadable", "frontend unreachable"
        # Every body the watch sends is new: a router that caches responses answers none of them.
        self.probes = Probes(seed=self.schedule.seed % 1000)
        self._answers: list[RequestRecord] = []  # the block's, late ones included
        self._last_read: list[Snapshot] | None = None
        self._since_last: np.ndarray | None = (
            None  # counts between the last two reads (None: a reset, or one read)
        )
        self._sender: WindowSender | None = None  # while it runs
        self._settle_until = 0.0
        self._per_block = sum(sum(a.requests.values()) for a in self.schedule.arms)
        # Block starts at a random spacing, uniform on 0.5-1.5x the cap's period: the cap holds on
        # average, and no periodic behaviour of a pool (a fault that strikes every n-th request, a
        # batcher's cycle) can lock in phase with the blocks (sampling at random times, as RFC 2330
        # asks of active measurement). At a fixed 1 s period, the embedded frontend's `leak:0.05`
        # (every 20th request of a model) falls on the other client's request in every 2 s cycle
        # of 16 of the watch's and 4 of theirs, and no request of the watch's ever leaks.
        self._spacing = random.Random(self.schedule.seed)
        # The router's own per-model counts, where the target says where they are: read just before
        # and just after the workers' at every read, the accounting that binds them checked each
        # time (a request counted beyond what the router admitted alarms at once), and the other
        # clients' traffic per model taken from them as the units' covariate.
        self.router = target.router_metrics
        self.accounting = Accounting(self.pool.models, self.router.name) if self.router else None
        self._router_last: RouterCounts | None = None  # the latest closing read of the router
        self.miscounts = 0

    # -- what the exporter and the page read ----------------------------------------------------

    @property
    def now(self) -> float:
        """Seconds on the watch's clock; it stops with the watch, so every line said after the
        stop gives the same length of watch."""
        end = self._stopped_at if self._stopped_at is not None else time.perf_counter()
        return end - self._clock0

    def states(self) -> list[KeyState]:
        return self.judge.states()

    def shares(self) -> list[ShareState]:
        return self.judge.shares()

    def request_rate(self, model: str) -> float:
        return self.own[model].per_s()

    @property
    def frontend(self) -> str:
        """The frontend's URL as the watch shows it."""
        return self.masked(self.target.frontend_url)

    def masked(self, text: str) -> str:
        """`text` without the target's secrets, nor any URL's password (`masked`)."""
        return masked(text, self._secrets)

    def counters_source(self) -> tuple[str, str]:
        """Where the workers' counters are read: ("prometheus", its URL) or ("metrics", "")."""
        counters = self.target.counters
        if counters is None:
            return "metrics", ""
        url = counters.url if isinstance(counters, PrometheusCounters) else ""
        return "prometheus", self.masked(url)

    def counters_said(self) -> str:
        """How the workers' counters are read, and what reading them cost, in words."""
        counters = self.target.counters
        if counters is None:
            return "counters read from each worker's /metrics"
        return self.masked(counters.sentence())

    def scrape_wait_s(self) -> float:
        """Seconds the reads waited for Prometheus to scrape every worker (0: read directly)."""
        counters = self.target.counters
        return counters.waited_s if isinstance(counters, PrometheusCounters) else 0.0

    # -- events ---------------------------------------------------------------------------------

    def _event(self, kind: str, detail: str) -> None:
        detail = self.masked(detail)  # what a server or an error said may hold a secret
        self.events.append(WatchEvent(self.now, time.time(), kind, detail))
        self.event_counts[kind] = self.event_counts.get(kind, 0) + 1

    def _begins(self, condition: str, kind: str, detail: str) -> None:
        if condition not in self._down:
            self._down.add(condition)
            self._event(kind, detail)

    def _ends(self, condition: str, kind: str, detail: str) -> None:
        if condition in self._down:
            self._down.discard(condition)
            self._event(kind, detail)

    def _judged(self, changes: list[Transition]) -> None:
        for change in changes:
            self.transitions.append(change)
            self._event(
                "alarm" if change.alarm else "verdict",
                f"{change.key}: {change.old} -> {change.new} ({change.why})",
            )

    # -- the loop -------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Watch until `stop` is set, or `duration_s` has passed."""
        stop = self._stop = stop or asyncio.Event()
        self._clock0, self._stopped_at = time.perf_counter(), None
        self._event(
            "started",
            f"watching {len(self.pool.models)} workers: {', '.join(map(str, self.pool.keys))}; "
            f"{self.counters_said()}",
        )
        most = max(sum(a.requests.values()) for a in self.schedule.arms)
        limits = httpx.Limits(max_connections=most, max_keepalive_connections=most)
        sender = self._transport or httpx.AsyncHTTPTransport(retries=0, limits=limits, verify=clients.tls())
        async with (
            clients.async_client(
                timeout=self.config.scrape_timeout_s,
                transport=self._transport or clients.PerOriginTransport(),
            ) as scraper,
            clients.async_client(timeout=self.config.request_timeout_s, transport=sender) as http,
        ):
            self._sender = WindowSender(
                self.target.frontend_url,
                http,
                limits=most,
                timeout=self.config.request_timeout_s,
                inputs=self.probes.take,
                on_response=self._answered,
                on_error=self._send_failed,
                keep=False,
            )
            block = 0
            before: list[Snapshot] | None = None
            stopping = asyncio.create_task(self._cancel_on(stop))
            try:
                while not self._over(stop):
                    if self.now < self._settle_until:
                        await self._sleep(stop, self._settle_until - self.now)
                        before = None
                        continue
                    if before is None:
                        before = await self._read(scraper)
                        if before is None:
                            self._update()  # the failures counted while no block can run
                            await self._sleep(stop, self.config.retry_s)
                            continue
                    started = time.perf_counter()
                    before = await self._block(block, before, scraper)
                    block += 1
                    self._update()
                    # The rate cap, on average: the next block starts a random spacing after this
                    # one's start (a read's wait for a scrape is part of it: see the docstring).
                    period = self._per_block / self.config.max_rate * self._spacing.uniform(0.5, 1.5)
                    wait = started + period - time.perf_counter()
                    if before is None or wait > 0.05:
                        await self._sleep(stop, max(wait, self.config.retry_s if before is None else 0.0))
                        before = None  # other clients' traffic of the gap: the next block reads afresh
            except _Stopped:  # a stop while a read waited for a scrape: the block is left unjudged
                await self._sender.settle()  # its requests, cancelled at the stop
            stopping.cancel()
        self._stopped_at = time.perf_counter()
        self._event("stopped", f"after {self.now:.0f} s")
        self._update()

    async def _cancel_on(self, stop: asyncio.Event) -> None:
        """At a stop, the requests in flight are cancelled: a hung frontend never holds the exit."""
        await stop.wait()
        if self._sender is not None:
            self._sender.cancel()

    def _over(self, stop: asyncio.Event) -> bool:
        limit = self.config.duration_s
        return stop.is_set() or (limit is not None and self.now >= limit)

    async def _sleep(self, stop: asyncio.Event, seconds: float) -> None:
        try:
            await asyncio.wait_for(stop.wait(), timeout=max(0.0, seconds))
        except TimeoutError:
            pass
        self._judged(self.judge.tick(self.now))

    def _update(self) -> None:
        if self.on_update is not None:
            self.on_update(self)

    async def _read(self, scraper: httpx.AsyncClient) -> list[Snapshot] | None:
        """Every worker's counter, or None (each failure counted, its worker named in an event);
        the router's own counts on either side of them, where it is read."""
        opening = await self._read_router(scraper)
        snapshots = await self._read_workers(scraper)
        closing = await self._read_router(scraper) if opening is not None else None
        if self.accounting is not None:
            if snapshots is None or opening is None or closing is None:
                self.accounting.restart()  # a read missing: the identity starts again from the next
                self._router_last = None
            else:
                self._router_last = closing
                self._account_router(opening, snapshots, closing)
        return snapshots

    async def _read_router(self, scraper: httpx.AsyncClient) -> RouterCounts | None:
        if self.router is None:
            return None
        try:
            counts = await read_router(self.router, scraper)
        except MetricsError as exc:
            self._begins("router", "unreadable", f"{self.router.name}'s own counts could not be read: {exc}")
            return None
        self._ends("router", "readable", f"{self.router.name}'s own counts can be read again")
        return counts

    def _account_router(
        self, opening: RouterCounts, snapshots: list[Snapshot], closing: RouterCounts
    ) -> None:
        assert self.accounting is not None
        found = self.accounting.check(opening, [s.value for s in snapshots], closing)
        if found is None:
            return
        notes = found.notes()
        if notes:
            self._begins("unseen", "unseen", "; ".join(notes))
        else:
            self._ends("unseen", "seen", "every answer of the router's was counted by a worker again")
        if found.failed:
            self.miscounts += 1
            self._event("miscount", "; ".join(found.reasons()))
            self._judged(self.judge.miscounted(found, now=self.now))
            self.accounting.restart()  # counted once: the next read is the new baseline

    async def _read_workers(self, scraper: httpx.AsyncClient) -> list[Snapshot] | None:
        urls = self.target.system_urls
        found = await self._counters(scraper)
        ok = True
        for i, item in enumerate(found):
            if isinstance(item, MetricsError):
                ok = False
                self.scrape_failures[i] += 1
                self._settle_until = self.now + self.config.settle_s
                self._begins(f"worker {i}", "unreadable", f"worker {i} ({urls[i]}) could not be read: {item}")
            elif isinstance(item, BaseException):
                raise item
            elif item is not None:
                self._ends(f"worker {i}", "readable", f"worker {i} can be read again")
        if not ok:
            return None
        snapshots = [s for s in found if isinstance(s, Snapshot)]
        self._count_pool(snapshots)
        return snapshots

    async def _counters(self, scraper: httpx.AsyncClient) -> list[Snapshot | BaseException | None]:
        """Each worker's counter, or why it could not be read (None: not known, neither).

        From each worker's /metrics, every read on its own. Through Prometheus, one read of
        them all, from a scrape of every worker after it was asked: a worker it finds stale
        fails the read (a ScrapeError naming it), the others' counts unknown; a failure that
        names no worker (Prometheus itself unreachable) is every worker's."""
        urls = self.target.system_urls
        counters = self.target.counters
        if counters is None:
            return await asyncio.gather(
                *(
                    ascrape(
                        url,
                        metric=self.target.metric,
                        client=scraper,
                        timeout=self.config.scrape_timeout_s,
                        worker_index=i,
                    )
                    for i, url in enumerate(urls)
                ),
                return_exceptions=True,
            )
        indices = list(range(len(urls)))
        reading = counters.aread(
            urls, indices, self.target.metric, moment="at a window's boundary", client=scraper
        )
        try:
            return list(await self._unless_stopped(reading))
        except MetricsError as exc:
            named = exc.worker_index
            return [exc if named is None or i == named else None for i in indices]

    async def _unless_stopped(self, reading: Awaitable[T]) -> T:
        """`reading`, unless the watch stops first (then `_Stopped`): a read through Prometheus
        may wait three scrape intervals, and a stop never waits for it."""
        read = asyncio.ensure_future(reading)
        stopped = asyncio.ensure_future(self._stop.wait())
        try:
            done, _ = await asyncio.wait({read, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            if not read.done():
                read.cancel()
        if read not in done:
            raise _Stopped
        return read.result()

    def _count_pool(self, snapshots: list[Snapshot]) -> None:
        """The pool's total rate, and its resets, from every pair of reads in a row (the gaps
        between blocks too: a worker that restarts while no block runs is named all the same)."""
        last, self._last_read = self._last_read, snapshots
        self._since_last = None if last is None else self._deltas(last, snapshots)
        if self._since_last is not None:  # else a worker restarted: this interval's count is unknown
            self.pool_rate.add(float(self._since_last.sum()), self.now)

    def _deltas(self, before: list[Snapshot], after: list[Snapshot]) -> np.ndarray | None:
        """Each worker's count between two reads; None where one reset (an event)."""
        deltas = np.zeros(len(before))
        reset = False
        for i, (b, a) in enumerate(zip(before, after)):
            try:
                deltas[i] = b.delta(a, worker_index=i)
            except CounterResetError:
                reset = True
                self._settle_until = self.now + self.config.settle_s
                if self.accounting is not None:
                    self.accounting.restart()  # its counts begin again from 0: so does the identity
                self._event("reset", f"worker {i}'s counter went down: it restarted")
        return None if reset else deltas

    async def _block(
        self, block: int, before: list[Snapshot], scraper: httpx.AsyncClient
    ) -> list[Snapshot] | None:
        """Run one block from its opening read `before` (evidence/busy/driver.py); judge it if
        nothing disturbed it. Returns the closing read (None where a read failed)."""
        assert self._sender is not None
        arms = len(self.schedule.arms)
        models = self.judge.models_sent
        deltas = np.zeros((len(self.pool.models), arms))
        sent = np.zeros((len(models), arms))
        others: np.ndarray | None = np.zeros((len(models), arms)) if self.accounting is not None else None
        disturbed = ""
        snapshots: list[Snapshot] | None = before

        async def read() -> tuple[
            RouterCounts | None, list[Snapshot] | None, np.ndarray | None, RouterCounts | None
        ]:
            # `_read` counts the window (the reads on either side), and the router's counts
            # closing it, where it is read.
            opened = self._router_last
            after = await self._read(scraper)
            return opened, after, self._since_last, self._router_last

        cuts = await run_block(
            self.schedule,
            block,
            window_s=self.window_s,
            origin=self._clock0,
            sender=self._sender,
            read=read,
            go_on=lambda r: r[1] is not None and r[2] is not None,
            aligned=self.target.counters is not None,  # each window from its opening scrapes
        )
        for position, cut in enumerate(cuts):
            opened, after, window_deltas, closed = cut.read
            if after is None:
                disturbed, snapshots = "unreadable", None
                break
            snapshots = after
            if window_deltas is None:
                disturbed = "reset"
                break
            deltas[:, position] = window_deltas
            if cut.late:
                disturbed = disturbed or "late"
            for answer in cut.answered:
                sent[models.index(answer.model), position] += 1
            if others is not None and self.accounting is not None:
                if opened is None or closed is None:
                    others = None  # the router unread at one end: this block is read without it
                else:
                    mine = {m: int(sent[k, position]) for k, m in enumerate(models)}
                    theirs = self.accounting.others(opened, closed, mine)
                    others[:, position] = [theirs.get(m, 0.0) for m in models]
        if not disturbed and self._refused():
            disturbed = "refused"
            statuses = sorted({a.status for a in self._answers if a.status and a.status != 200})
            if statuses:  # no HTTP answer at all is the frontend unreachable (_account)
                shown = ", ".join(map(str, statuses))
                self._begins(
                    "refused", "refused", f"the frontend answered for itself (HTTP {shown}), not a worker"
                )
        elif not disturbed:
            self._ends("refused", "answered", "every request reaches a worker again")
        await self._sender.settle()
        self._account()
        self._late.append(disturbed == "late")
        if disturbed:
            self.blocks[disturbed] = self.blocks.get(disturbed, 0) + 1
            self._lengthen()
            return None  # what was in flight has been answered since: the next block reads afresh
        self.blocks["kept"] = self.blocks.get("kept", 0) + 1
        self._judged(
            self.judge.add_block(deltas, sent, self.schedule.order_index(block), now=self.now, others=others)
        )
        return snapshots

    def _lengthen(self) -> None:
        longer = longer_window(self.window_s)
        if len(self._late) == _LATE_SPAN and sum(self._late) > _LATE_SPAN / 2 and longer is not None:
            self.window_s = longer
            self._late.clear()
            self._event("window", f"most blocks came late: windows are now {self.window_s:g} s")

    def _answered(self, answer: RequestRecord) -> None:
        self._answers.append(answer)  # `_account` takes the list whole: never hand it out

    def _send_failed(self, exc: BaseException) -> None:
        # A request must never take the watch down; say what broke it.
        self._event("error", f"a window's requests raised {exc.__class__.__name__}: {exc}")

    def _refused(self) -> bool:
        """Whether some of the block's requests reached no worker: no HTTP answer, a 5xx (the
        frontend's own, or a retry that may have moved two counters), or a model all of whose
        requests were refused (4xx) without naming a worker: the router does not know it (a
        router that restarted, its workers not yet registered again). A 4xx among a model's 200s
        is a worker's refusal, counted where it landed: a leaked request the wrong worker refused
        (its counter moved), which the counters must see through a router that names no worker."""
        answers = self._answers
        if any(a.status == 0 or a.status >= 500 for a in answers):
            return True
        for model in {a.model for a in answers}:
            own = [a for a in answers if a.model == model]
            if all(400 <= a.status < 500 and a.worker is None for a in own):
                return True
        return False

    def _account(self) -> None:
        """Every answer of the block (late ones too): the check's counts, the frontend's health,
        and misplaced requests."""
        answers, self._answers = self._answers, []
        now = self.now
        for answer in answers:
            if answer.status:
                self.requests[answer.model] += 1
                self.own[answer.model].add(1, now)
            where = self._misplaced(answer)
            if where:
                self.misplaced[answer.model] += 1
                self._event("misplaced", where)
                self._judged(self.judge.misplaced(answer.model, now=now, why=where))
        if any(a.status == 0 for a in answers):
            self._begins("frontend", "unreachable", f"the frontend {self.target.frontend_url} did not answer")
        elif answers:
            self._ends("frontend", "reachable", "the frontend answers again")

    def _misplaced(self, answer: RequestRecord) -> str:
        if answer.worker is None:
            return ""
        index = self.target.index_of(answer.worker)
        if index is not None and self.pool.models[index] != answer.model:
            return f"a request for '{answer.model}' was answered by worker {index}, which serves '{self.pool.models[index]}'"
        if answer.status == 404:
            return f"a request for '{answer.model}' was refused (404) by worker {answer.worker}, which does not serve it"
        return ""
