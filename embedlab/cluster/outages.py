"""The faults of a real cluster, caused on purpose: `dep.outages.partition(2)`, `dep.outages.kill_host(0)`.

Each fault acts on the processes and the network of a running deployment and records
itself in the deployment's `events`, with its time, so a scenario's timeline shows it
beside the traffic. A fault acts on the run's `Processes`, under their lock; bringing a
worker back goes through the launcher's one relaunch (`respawn_worker`), as the restart
supervisor's does.

(`serving/frontend/faults.py` is something else: faults the embedded frontend injects into its own
dispatch, on request.)
"""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING

from ..errors import ConfigError

if TYPE_CHECKING:
    from .events import EventLog
    from .hosts import Network
    from .launcher import Launcher

__all__ = ["Outages"]


class Outages:
    """The faults of one run: on the processes its `launcher` started (and starts again), on its
    `network`; each is recorded in `events`."""

    def __init__(self, launcher: Launcher, network: Network, events: EventLog) -> None:
        self._launcher = launcher
        self._procs = launcher.processes
        self._network = network
        self._events = events

    def kill_worker(self, index: int, sig: int = signal.SIGKILL) -> None:
        """Send `sig` to worker `index`'s process group."""
        self._procs.workers[index].signal(sig)
        self._events.record("kill worker", f"worker {index} {signal.Signals(sig).name}")

    def kill_host(self, host: int) -> None:
        """SIGKILL every process on `host`, as a machine that lost power.

        That is its workers and, on host 0 (the harness's own), the frontend and the run's
        services (etcd) too: a deployment whose host 0 died has stopped.
        """
        procs = self._procs
        self._network.host(host)  # a host the run does not have is a ConfigError
        with procs.lock:
            on_host = [i for i in range(len(procs.workers)) if procs.spec.host_of(i) == host]
            others = (
                [*([procs.frontend] if procs.frontend else []), *procs.services.values()] if host == 0 else []
            )
            for index in on_host:
                procs.workers[index].signal(signal.SIGKILL)
            for proc in others:
                proc.signal(signal.SIGKILL)
        detail = f"host {host}: workers {on_host}" + "".join(f", {p.name}" for p in others)
        self._events.record("kill host", detail)

    def partition(self, host: int) -> None:
        """Cut `host` off the network: its link goes down."""
        self._network.partition(host)
        self._events.record("partition", f"host {host}")

    def heal(self, host: int) -> None:
        """Bring `host`'s link back up."""
        self._network.heal(host)
        self._events.record("heal", f"host {host}")

    def restart_etcd(self, *, down_for: float = 0.0) -> None:
        """Stop etcd, keep it down `down_for` seconds, then start it again on the same data dir and ports."""
        old = self._procs.services.get("etcd")
        if old is None:
            raise ConfigError("this deployment runs no etcd (a stack with discovery='etcd' does)")
        old.stop()
        self._events.record("etcd stopped")
        self._procs.stopping.wait(down_for)  # the outage itself, cut short by a stop
        self._launcher.relaunch_service("etcd")
        self._events.record("etcd ready")

    def restart_worker(self, index: int) -> None:
        """Stop worker `index` and start it again on its host and system port, then wait until it serves."""
        self._launcher.respawn_worker(index)
        self._launcher.wait_worker(index)
        self._events.record("restart", f"worker {index}")
