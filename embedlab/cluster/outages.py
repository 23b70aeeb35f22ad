"""The faults of a real cluster, caused on purpose: `dep.outages.partition(2)`, `dep.outages.kill_host(0)`.

Each fault acts on the processes and the network of a running deployment and records
itself in the deployment's `events`, with its time, so a scenario's timeline shows it
beside the traffic. Bringing a worker back goes through the deployment's one relaunch
(`respawn_worker`), as the restart supervisor's does.

(`serving/frontend/faults.py` is something else: faults the embedded frontend injects into its own
dispatch, on request.)
"""

from __future__ import annotations

import signal
import threading
from typing import TYPE_CHECKING, Protocol

from ..errors import ConfigError

if TYPE_CHECKING:
    from .events import EventLog
    from .hosts import Network
    from .process import ManagedProcess
    from .spec import DeploymentSpec

__all__ = ["Outages"]


class Launched(Protocol):
    """What the faults reach of a running deployment (a `Deployment` is one)."""

    spec: DeploymentSpec
    network: Network
    workers: list[ManagedProcess]
    frontend: ManagedProcess | None
    services: dict[str, ManagedProcess]
    events: EventLog
    lock: threading.RLock
    stopping: threading.Event

    def respawn_worker(self, index: int) -> ManagedProcess: ...

    def wait_worker(self, index: int, *, cancelled: threading.Event | None = None) -> None: ...

    def relaunch_service(self, role: str) -> ManagedProcess: ...


class Outages:
    """The faults of one deployment; each is recorded in its `events`."""

    def __init__(self, deployment: Launched) -> None:
        self._dep = deployment

    def kill_worker(self, index: int, sig: int = signal.SIGKILL) -> None:
        """Send `sig` to worker `index`'s process group."""
        self._dep.workers[index].signal(sig)
        self._dep.events.record("kill worker", f"worker {index} {signal.Signals(sig).name}")

    def kill_host(self, host: int) -> None:
        """SIGKILL every process on `host`, as a machine that lost power.

        That is its workers and, on host 0 (the harness's own), the frontend and the run's
        services (etcd) too: a deployment whose host 0 died has stopped.
        """
        dep = self._dep
        dep.network.host(host)  # a host the run does not have is a ConfigError
        with dep.lock:
            on_host = [i for i in range(len(dep.workers)) if dep.spec.host_of(i) == host]
            others = [*([dep.frontend] if dep.frontend else []), *dep.services.values()] if host == 0 else []
            for index in on_host:
                dep.workers[index].signal(signal.SIGKILL)
            for proc in others:
                proc.signal(signal.SIGKILL)
        detail = f"host {host}: workers {on_host}" + "".join(f", {p.name}" for p in others)
        dep.events.record("kill host", detail)

    def partition(self, host: int) -> None:
        """Cut `host` off the network: its link goes down."""
        self._dep.network.partition(host)
        self._dep.events.record("partition", f"host {host}")

    def heal(self, host: int) -> None:
        """Bring `host`'s link back up."""
        self._dep.network.heal(host)
        self._dep.events.record("heal", f"host {host}")

    def restart_etcd(self, *, down_for: float = 0.0) -> None:
        """Stop etcd, keep it down `down_for` seconds, then start it again on the same data dir and ports."""
        dep = self._dep
        old = dep.services.get("etcd")
        if old is None:
            raise ConfigError("this deployment runs no etcd (a stack with discovery='etcd' does)")
        old.stop()
        dep.events.record("etcd stopped")
        dep.stopping.wait(down_for)  # the outage itself, cut short by a stop
        dep.relaunch_service("etcd")
        dep.events.record("etcd ready")

    def restart_worker(self, index: int) -> None:
        """Stop worker `index` and start it again on its host and system port, then wait until it serves."""
        self._dep.respawn_worker(index)
        self._dep.wait_worker(index)
        self._dep.events.record("restart", f"worker {index}")
