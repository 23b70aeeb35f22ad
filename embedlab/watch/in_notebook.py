"""The watch in a notebook: run it beside the kernel for a bounded time, its figure redrawn as it goes.

    live = watch_live(dep, seconds=90, other_rate=2)   # blocks for 90 s, the figure updating
    live.plot()                                        # the verdicts' timeline and each worker's share
    verdict(live)                                      # no alarm on a correct router (one, with a fault)

The watch runs on an event loop of its own in a daemon thread, so the kernel's loop (and
JupyterLab's) is never blocked by it; `watch_live` waits in the kernel, redrawing one display.
An interrupt (the kernel's stop button) or the end of `seconds` stops it: its requests, its
other client, its /metrics server, and the thread. So does the kernel's exit (atexit).
"""

from __future__ import annotations

import asyncio
import atexit
import math
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from ..evidence import clients
from ..evidence.access import granted
from ..evidence.stats import percent
from ..evidence.target import Target, target_of
from ..evidence.traffic import default_inputs
from ..jsonio import write_json
from ..verdicts import Verdict
from .exporter import Exporter, WatchSnapshot
from .judge import KeyState
from .names import COUNTED_ONCE, FAILING, INCONCLUSIVE, MULTI_MODEL, OK
from .page import Page
from .runner import Watch, WatchConfig

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["LiveWatch", "watch_live"]

_COLOURS = {OK: "#2e7d32", FAILING: "#c62828", INCONCLUSIVE: "#bdbdbd"}


@dataclass
class LiveWatch:
    """A watch that ran (or runs) beside the kernel, and what it found."""

    watch: Watch
    exporter: Exporter
    expect_fault: bool
    port: int | None = None
    _thread: threading.Thread | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    _stop: asyncio.Event | None = None

    # -- running ----------------------------------------------------------------------------

    def start(self, *, other_rate: float = 0.0, port: int | None = None) -> LiveWatch:
        ready = threading.Event()

        def main() -> None:
            async def run() -> None:
                self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
                ready.set()
                other = asyncio.create_task(_other_client(self.watch.target, other_rate, self._stop))
                try:
                    with granted(self.watch.target.access):  # an attached target's key and scrape config
                        await self.watch.run(self._stop)
                finally:
                    self._stop.set()
                    await other

            asyncio.run(run())

        if port is not None:
            self.port = self.exporter.serve(port)
        self._thread = threading.Thread(target=main, name="embedlab-watch", daemon=True)
        self._thread.start()
        ready.wait(timeout=30)
        atexit.register(self.stop)
        return self

    def stop(self) -> None:
        """Stop the watch, its other client and its server; safe to call more than once."""
        if (
            self._loop is not None
            and self._stop is not None
            and self._thread is not None
            and self._thread.is_alive()
        ):
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(timeout=30)
        self.exporter.close()
        self.exporter.update(self.watch)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- what it found --------------------------------------------------------------------------

    @property
    def alarms(self) -> int:
        return sum(s.alarms for s in self.watch.states())

    @property
    def as_expected(self) -> bool:
        """A correct router reached ok on every check with no alarm; a faulty one raised one."""
        if self.expect_fault:
            return self.alarms >= 1
        return self.alarms == 0 and all(s.state == OK for s in self.watch.states())

    @property
    def verdict(self) -> Verdict:
        """What the watch showed: passed as expected; failed where a correct router raised an alarm;
        inconclusive where no alarm came in time for a fault, or a correct router's checks were
        not all ok yet."""
        if self.as_expected:
            return Verdict.PASSED
        if not self.expect_fault and self.alarms:
            return Verdict.FAILED
        return Verdict.INCONCLUSIVE

    @property
    def ok(self) -> bool:
        """Nothing went against the expectation: as expected, or undecided in its time (inconclusive,
        which says what to change); `verdict(live)` raises only where it is not."""
        return self.verdict is not Verdict.FAILED

    def save_json(self, path: str | Path) -> Path:
        """The run as `embedlab regress` reads a result (its `result_json` parameter)."""
        states = self.watch.states()
        return write_json(
            path,
            {
                "scenario": "watch",
                "stack": self.watch.target.stack,
                "verdict": str(self.verdict),
                "reasons": [] if self.as_expected else [self.summary()],
                "summary": self.summary(),
                "expect_fault": self.expect_fault,
                "key_figures": {
                    "alarms": self.alarms,
                    "seconds": round(self.watch.now, 1),
                    "blocks": self.watch.blocks,
                    **{str(s.key): s.state for s in states},
                },
            },
        )

    def summary(self) -> str:
        """The verdict first, what was expected, what the watch saw, and what to change where it
        could not decide; then the checks and the blocks, in words."""
        states = self.watch.states()
        seconds = f"{self.watch.now:.0f} s"
        expected = (
            "expected: an alarm, a fault was injected"
            if self.expect_fault
            else "expected: no alarm on a correct router"
        )
        verdict = self.verdict
        failing = [s for s in states if s.state == FAILING]
        undecided = [s for s in states if s.state != OK and s not in failing]
        alarms = f"{self.alarms} alarm{'' if self.alarms == 1 else 's'}" if self.alarms else "no alarm"
        if verdict is Verdict.PASSED:
            said = f"{alarms} in {seconds}" + (
                f": {_names(failing)} failing" if failing else ", every check ok"
            )
        elif verdict is Verdict.FAILED:
            said = f"{alarms} in {seconds}: {'; '.join(f'{s.key} failing ({s.why})' for s in failing)}"
        elif self.expect_fault:
            said = f"no alarm in {seconds}. To find it, watch longer (seconds = {2 * self.watch.now:.0f})"
        else:
            said = (
                f"no alarm in {seconds}, but {_names(undecided)} had not decided yet (so far: "
                f"{'; '.join(_ruled_out(s) for s in undecided)}). To decide, watch longer "
                f"(seconds = {2 * self.watch.now:.0f}) or send faster (max_rate = "
                f"{2 * self.watch.config.max_rate:g})"
            )
        kept = self.watch.blocks.get("kept", 0)
        aside = {k: v for k, v in self.watch.blocks.items() if k != "kept"}
        blocks = f"{kept} block{'' if kept == 1 else 's'} kept" + (
            ", set aside: " + ", ".join(f"{v} {k}" for k, v in sorted(aside.items())) if aside else ""
        )
        checks = ", ".join(f"{s.key} {s.state}" for s in states)
        return f"watch {verdict.upper()} ({expected}): {said}. Checks: {checks}; {blocks}."

    def plot(self, snap: WatchSnapshot | None = None) -> Figure:
        """The verdicts' timeline (one bar per check, an alarm marked) and each worker's share now."""
        from matplotlib.figure import Figure

        snap = snap or self.exporter.update(self.watch)
        fig = Figure(figsize=(10, 3.2 + 0.35 * len(snap.states)), layout="constrained")
        timeline, shares = fig.subplots(1, 2, width_ratios=[3, 2])
        end = max(snap.uptime_s, 1.0)
        for row, state in enumerate(snap.states):
            at, current = 0.0, INCONCLUSIVE
            for t in [t for t in self.watch.transitions if t.key == state.key]:
                timeline.barh(row, t.at - at, left=at, color=_COLOURS[current], height=0.6)
                if t.alarm:
                    timeline.plot([t.at], [row], marker="v", color="black", markersize=9)
                at, current = t.at, t.new
            timeline.barh(row, end - at, left=at, color=_COLOURS[current], height=0.6)
        timeline.set_yticks(range(len(snap.states)), [str(s.key) for s in snap.states])
        timeline.set_xlim(0, end)
        timeline.set_xlabel("seconds since the watch started")
        timeline.set_title(
            "each check's verdict\ngreen ok, grey inconclusive, red failing; v an alarm", fontsize="medium"
        )
        for w in snap.shares:
            low = w.estimate - w.low if not math.isnan(w.low) else 0
            high = w.high - w.estimate if not (math.isnan(w.high) or math.isinf(w.high)) else 0
            shares.errorbar(
                [w.worker], [w.estimate], yerr=[[max(0, low)], [max(0, high)]], fmt="o", capsize=4
            )
            shares.plot([w.worker - 0.3, w.worker + 0.3], [w.expected] * 2, color="grey", linestyle="--")
        shares.set_xticks(
            range(len(self.watch.pool.models)), [f"{i}\n{m}" for i, m in enumerate(self.watch.pool.models)]
        )
        shares.set_ylim(0, 1.5)
        shares.set_ylabel("share of its model's requests")
        rates = ", ".join(f"{r:.1f}" for r in snap.request_rates.values() if not math.isnan(r))
        shares.set_title(
            f"each worker's share (dashed: its weight's)\nown {rates}, pool {snap.pool_rate:.1f} req/s",
            fontsize="medium",
        )
        return fig


def _ruled_out(state: KeyState) -> str:
    """What an undecided check has ruled out so far, in words (judge.KeyState.ruled_out)."""
    x = state.ruled_out
    if math.isnan(x):
        return f"{state.key} rules out nothing yet"
    fault = {
        MULTI_MODEL: f"a leak of {percent(x)} of its requests",
        COUNTED_ONCE: f"{percent(x)} of its requests counted twice or not at all",
    }.get(state.key.check, f"a replica's share {percent(x)} off its weight's")
    return f"{state.key} rules out {fault}"


def _names(states: list[Any]) -> str:
    keys = [str(s.key) for s in states]
    return keys[0] if len(keys) == 1 else ", ".join(keys[:-1]) + " and " + keys[-1]


async def _other_client(target: Target, rate: float, stop: asyncio.Event) -> None:
    """Another client of the pool for the demo: `rate` requests a second per model, until `stop`."""
    if rate <= 0:
        return
    models = sorted({m for m in target.models if m})
    inputs = default_inputs(32, seed=99)
    async with clients.async_client(timeout=30) as http:
        sent = 0
        started = time.perf_counter()
        while not stop.is_set():
            model = models[sent % len(models)]
            try:
                await http.post(
                    target.frontend_url + "/v1/embeddings", json={"model": model, "input": inputs[sent % 32]}
                )
            except httpx.HTTPError:
                pass
            sent += 1
            wait = started + sent / (rate * len(models)) - time.perf_counter()
            try:
                await asyncio.wait_for(stop.wait(), timeout=max(0.0, wait))
            except TimeoutError:
                pass


def watch_live(
    deployment: Any,
    *,
    seconds: float,
    max_rate: float | None = None,
    other_rate: float = 0.0,
    refresh_s: float = 3.0,
    html: str | Path | None = None,
    port: int | None = None,
    expect_fault: bool = False,
) -> LiveWatch:
    """Watch `deployment` (a running Deployment or a Target) for `seconds`, redrawing one figure
    every `refresh_s` in the notebook; then stop it and return what it found. `other_rate`:
    another client's requests per second per model, for a demo pool nobody else uses. `port`:
    also serve /metrics there; `html`: keep the self-updating page in that folder."""
    from IPython.display import display

    config = WatchConfig(max_rate=max_rate) if max_rate else WatchConfig()
    exporter = Exporter()
    page = Page(html) if html else None
    # Snapshots are taken on the watch's own thread, after each block: the kernel reads the latest.
    watch = Watch(target_of(deployment), config, on_update=exporter.update)
    live = LiveWatch(watch, exporter, expect_fault)
    shown = display(live.plot(), display_id=True)
    live.start(other_rate=other_rate, port=port)
    try:
        end = time.monotonic() + seconds
        while time.monotonic() < end and live.running:
            time.sleep(min(refresh_s, max(0.0, end - time.monotonic())))
            snap = exporter.latest or exporter.update(watch)
            if page is not None:
                page.write(watch, snap)
            if shown is not None:
                shown.update(live.plot(snap))
    finally:
        live.stop()
        if page is not None:
            page.write(watch, exporter.update(watch), force=True)
    return live
