"""The restart policy: a worker with `restart="on-exit"` that exits comes back on its host.

Dynamo's worker exits once it finds its lease gone (Dynamo issue #3493), so a healed host
rejoins only if something starts its workers again. The supervisor is that something: a
thread that polls the watched workers, records each exit and each restart in the
deployment's `events`, and relaunches through the deployment's one relaunch
(`respawn_worker`). It stops when the deployment does.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Protocol

from .errors import DeploymentStoppedError, ServerError, ServerStartError

if TYPE_CHECKING:
    from .events import EventLog
    from .process import ManagedProcess
    from .specs import DeploymentSpec

__all__ = ["RESTART_POLL_S", "Supervisor"]

RESTART_POLL_S = 0.1


class Supervised(Protocol):
    """What the supervisor reaches of a running deployment (a `Deployment` is one)."""

    spec: DeploymentSpec
    workers: list[ManagedProcess]
    events: EventLog
    lock: threading.RLock
    stopping: threading.Event

    def respawn_worker(self, index: int) -> ManagedProcess: ...

    def wait_worker(self, index: int, *, cancelled: threading.Event | None = None) -> None: ...

    def host_of(self, index: int) -> int: ...


class Supervisor:
    """Watches the workers with restart="on-exit" of one deployment, from `start()` until it stops."""

    def __init__(self, deployment: Supervised, *, poll_s: float = RESTART_POLL_S) -> None:
        self._dep = deployment
        self._poll_s = poll_s
        self.watched = [i for i, w in enumerate(deployment.spec.workers) if w.restart == "on-exit"]
        self._thread = threading.Thread(target=self._run, name="embedlab-restarts", daemon=True)

    def start(self) -> Supervisor:
        self._thread.start()
        return self

    def join(self, timeout: float | None = None) -> None:
        """Wait for the thread to end (it ends once the deployment's `stopping` is set)."""
        if self._thread.is_alive():
            self._thread.join(timeout=timeout)

    def _run(self) -> None:
        while not self._dep.stopping.wait(self._poll_s):
            for index in self.watched:
                self._check(index)

    def _check(self, index: int) -> None:
        dep = self._dep
        try:
            with dep.lock:  # the exit and the relaunch in one step: no fault swaps the process between
                proc = dep.workers[index]
                if dep.stopping.is_set() or proc.alive():
                    return
                dep.events.record("exit", f"worker {index} (code {proc.returncode})")
                dep.respawn_worker(index)
            dep.wait_worker(index, cancelled=dep.stopping)
        except (ServerStartError, DeploymentStoppedError) as exc:  # a stop, or a dead frontend
            dep.events.record(
                "restart failed", f"worker {index}: {_why(exc, stopping=dep.stopping.is_set())}"
            )
            return
        dep.events.record("restart", f"worker {index} serving again on host {dep.host_of(index)}")


def _why(exc: ServerStartError | DeploymentStoppedError, *, stopping: bool) -> str:
    """Why a restart failed, from the error's fields (never from its message)."""
    if stopping:
        return "the deployment is stopping"
    if isinstance(exc, DeploymentStoppedError):
        return exc.why
    detail = f" (see {exc.log_path})" if isinstance(exc, ServerError) and exc.log_path else ""
    return f"{type(exc).__name__}{detail}"
