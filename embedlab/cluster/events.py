"""What the harness did to a deployment while it ran, and when: faults, restarts, drains.

Scenarios put these on their timelines (`ScenarioResult.events`), so the order and the
time of each matter: every part of a deployment that acts on it (its outages, its restart
supervisor, its drains) records through one `EventLog`, under one lock.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

__all__ = ["DeploymentEvent", "EventLog"]


@dataclass(frozen=True)
class DeploymentEvent:
    """A fault the harness caused or a restart it made, at `time.perf_counter()` time `at`."""

    at: float
    # "partition", "heal", "kill host", "kill worker", "etcd stopped", "etcd ready", and the
    # restart policy's "exit", "restarting", "restart", "restart failed", "gave up"; ...
    kind: str
    detail: str = ""


class EventLog(list[DeploymentEvent]):
    """The events in the order they happened: a list (`events[since:]`), appended to only by `record`."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()

    def record(self, kind: str, detail: str = "") -> DeploymentEvent:
        event = DeploymentEvent(time.perf_counter(), kind, detail)
        with self._lock:
            self.append(event)
        return event
