"""What happened to a deployment, and when: faults, restarts, drains (`Event`); and its launch, step by step.

Scenarios put the events on their timelines (`ScenarioResult.events`, each `after` the
scenario's start), so the order and the time of each matter: every part of a deployment
that acts on it (its outages, its restart supervisor, its drains) records through one
`EventLog`, under one lock. A launch reports `LaunchStep`s (`embedlab.progress`) through
its `LaunchReport`: notifications for a display, not events of the deployment.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..progress import LaunchObserver, LaunchStep, StepKind

if TYPE_CHECKING:
    from .managed_process import ManagedProcess

__all__ = ["Event", "EventLog", "LaunchReport"]


@dataclass(frozen=True)
class Event:
    """Something the harness did or saw: a fault it caused, a restart it made, a drain.

    `at` is `time.perf_counter()` time in a deployment's `EventLog`, and seconds since the
    scenario's start on a result's timeline (`event.after(origin)`).
    """

    at: float
    # "partition", "heal", "kill host", "kill worker", "etcd stopped", "etcd ready", and the
    # restart policy's "exit", "restarting", "restart", "restart failed", "gave up"; the
    # scenarios' "kill", "out of dispatch", "drain", "resume"; ...
    kind: str
    detail: str = ""

    def after(self, origin: float) -> Event:
        """This event with `at` counted from `origin` (a scenario's start, in perf_counter time)."""
        return replace(self, at=self.at - origin)


class EventLog(list[Event]):
    """The events in the order they happened: a list (`events[since:]`), appended to only by `record`."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()

    def record(self, kind: str, detail: str = "") -> Event:
        event = Event(time.perf_counter(), kind, detail)
        with self._lock:
            self.append(event)
        return event


class LaunchReport:
    """A deployment's side of its launch progress: `LaunchStep`s to `observer` while `active()`.

    `active` is the deployment's "still starting": a worker restarted later (a fault, the
    restart policy) waits silently, long after the launch's bar has closed.
    """

    def __init__(self, observer: LaunchObserver | None, *, active: Callable[[], bool]) -> None:
        self.observer = observer
        self.active = active

    def emit(self, kind: StepKind, process: str = "", detail: str = "", seconds: float = 0.0) -> None:
        if self.observer is not None and self.active():
            self.observer(LaunchStep(kind, process, detail, seconds))

    def started(self, proc: ManagedProcess) -> ManagedProcess:
        """`proc` was launched (its log is the event's detail); returns it."""
        self.emit("starting", proc.name, str(proc.log_path))
        return proc

    def failed(self, exc: BaseException) -> None:
        """The start failed with `exc`: its first line, for the process the report waited on."""
        self.emit("failed", detail=(str(exc).strip().splitlines() or [type(exc).__name__])[0])

    def wait(self, proc: ManagedProcess, probe: Callable[[], bool], *, timeout: float, what: str) -> float:
        """`proc.wait_ready(probe, ...)`, reported in seconds since `proc` was launched."""
        launched = proc.started_at or time.monotonic()
        self.emit("waiting", proc.name, what, time.monotonic() - launched)
        seconds = proc.wait_ready(
            probe,
            timeout=timeout,
            what=what,
            on_poll=lambda: self.emit("poll", proc.name, what, time.monotonic() - launched),
        )
        self.emit("ready", proc.name, what, time.monotonic() - launched)
        return seconds
