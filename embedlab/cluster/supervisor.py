"""The restart policy: a worker with `restart="on-exit"` that exits comes back on its host.

Dynamo's worker exits once it finds its lease gone (Dynamo issue #3493), so a healed host
rejoins only if something starts its workers again. The supervisor is that something: a
thread that polls the watched workers, records each exit and each restart in the
deployment's `events`, and relaunches through the launcher's one relaunch
(`respawn_worker`), under the lock of the run's `Processes`. It stops when the run does.

A worker that cannot start (a bad model path, a port taken) must not be relaunched without
end, filling its log: each restart waits first (`RestartBudget`: `restart_backoff`, doubled
for each restart still in the window), and once `restart_limit` restarts fall within
`restart_window` seconds, the next exit is the last. The deployment records "gave up" with
the last lines of the worker's log, and leaves it down. The waits are the poll's own
`stopping.wait`, so a deployment that stops cuts them short.

Each worker's events, in order: "exit" (with the wait before its restart), "restarting"
when it is started again, then "restart" once it serves, or "restart failed" when it
exits before that (then "exit" again); "gave up" instead of a wait when the budget is spent.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..defaults import RESTART_BACKOFF_MAX_S
from ..errors import DeploymentStoppedError, ServerError, ServerStartError

if TYPE_CHECKING:
    from .events import EventLog
    from .launcher import Launcher
    from .managed_process import ManagedProcess
    from .spec import WorkerSpec

__all__ = ["GAVE_UP", "RESTART_POLL_S", "RestartBudget", "Supervisor"]

RESTART_POLL_S = 0.1
GAVE_UP = "gave up"  # the event kind of a worker the restart policy left down
TAIL_LINES = 10  # of the worker's log, in the "gave up" event


@dataclass
class RestartBudget:
    """One worker's restarts: how long to wait before the next, or None once the budget is spent.

    Pure: the caller passes the time (`time.monotonic()`). The wait is `backoff` doubled for
    each restart within the last `window` seconds (capped at `max_backoff`), so a crash loop
    backs off and a worker that ran well for a window starts again after `backoff` alone.
    """

    backoff: float
    limit: int
    window: float
    max_backoff: float = RESTART_BACKOFF_MAX_S
    restarts: list[float] = field(default_factory=list)  # when each restart began, in the window

    @classmethod
    def of(cls, worker: WorkerSpec) -> RestartBudget:
        return cls(backoff=worker.restart_backoff, limit=worker.restart_limit, window=worker.restart_window)

    def next_wait(self, now: float) -> float | None:
        """The seconds to wait before restarting a worker that exited at `now`; None: give up."""
        self.restarts = [at for at in self.restarts if now - at < self.window]
        if len(self.restarts) >= self.limit:
            return None
        return min(self.backoff * 2 ** len(self.restarts), self.max_backoff)

    def spend(self, now: float) -> int:
        """A restart begins at `now`; returns how many are in the window, this one included."""
        self.restarts.append(now)
        return len(self.restarts)


class Supervisor:
    """Watches the workers with restart="on-exit" of the run its `launcher` started, from `start()`
    until the run stops; records in `events`."""

    def __init__(self, launcher: Launcher, events: EventLog, *, poll_s: float = RESTART_POLL_S) -> None:
        self._launcher = launcher
        self._procs = launcher.processes
        self._events = events
        self._poll_s = poll_s
        workers = self._procs.spec.workers
        self.watched = [i for i, w in enumerate(workers) if w.restart == "on-exit"]
        self.budgets = {i: RestartBudget.of(workers[i]) for i in self.watched}
        self._due: dict[int, float] = {}  # an exited worker -> when its restart may begin
        self._thread = threading.Thread(target=self._run, name="embedlab-restarts", daemon=True)

    def start(self) -> Supervisor:
        self._thread.start()
        return self

    def join(self, timeout: float | None = None) -> None:
        """Wait for the thread to end (it ends once the run's `stopping` is set)."""
        if self._thread.is_alive():
            self._thread.join(timeout=timeout)

    def _run(self) -> None:
        while not self._procs.stopping.wait(self._poll_s):
            for index in list(self.watched):
                self._check(index)

    def _check(self, index: int) -> None:
        procs, events = self._procs, self._events
        try:
            with procs.lock:  # the exit and the relaunch in one step: no fault swaps the process between
                proc = procs.workers[index]
                if procs.stopping.is_set():
                    return
                if proc.alive():
                    self._due.pop(index, None)  # back another way while it waited (a fault's own restart)
                    return
                now = time.monotonic()
                if index not in self._due and not self._exited(index, proc, now):
                    return
                if now < self._due[index]:
                    return
                del self._due[index]
                budget = self.budgets[index]
                count = budget.spend(now)
                events.record("restarting", f"worker {index} (restart {count} of {budget.limit})")
                self._launcher.respawn_worker(index)
            self._launcher.wait_worker(index, cancelled=procs.stopping)
        except (ServerStartError, DeploymentStoppedError) as exc:  # a stop, an exit, or a dead frontend
            events.record("restart failed", f"worker {index}: {_why(exc, stopping=procs.stopping.is_set())}")
            return
        events.record("restart", f"worker {index} serving again on host {procs.spec.host_of(index)}")

    def _exited(self, index: int, proc: ManagedProcess, now: float) -> bool:
        """Record the exit of worker `index`; True: its restart is due after the budget's wait."""
        budget = self.budgets[index]
        wait = budget.next_wait(now)
        exited = f"worker {index} (code {proc.returncode})"
        if wait is None:
            self._events.record("exit", exited)
            self.watched.remove(index)
            self._events.record(
                GAVE_UP,
                f"worker {index}: {budget.limit} restarts within {budget.window:g} s and it exited "
                f"again (code {proc.returncode}); the last lines of {proc.log_path}:\n"
                f"{proc.log_tail(TAIL_LINES).rstrip()}",
            )
            return False
        self._events.record("exit", f"{exited}; restarting in {wait:g} s")
        self._due[index] = now + wait
        return True


def _why(exc: ServerStartError | DeploymentStoppedError, *, stopping: bool) -> str:
    """Why a restart failed, from the error's fields (never from its message)."""
    if stopping:
        return "the deployment is stopping"
    if isinstance(exc, DeploymentStoppedError):
        return exc.why
    detail = f" (see {exc.log_path})" if isinstance(exc, ServerError) and exc.log_path else ""
    return f"{type(exc).__name__}{detail}"
