"""The processes of one run: its services, frontend and workers, the lock that guards them, and its live weights.

The launcher builds one `Processes` and fills it; the faults (`outages.py`), the restart
policy (`supervisor.py`) and steering (`steering.py`) act on it, and the deployment reads
it. A fault or a restart swaps a worker's process under `lock`; `stopping` is set once the
run begins to stop, so waits and restarts end early. The spec is the one the run was
launched with and is never replaced: what changes while it runs (the routing weights,
`set_weights`) is state of its own here, and `worker_spec` is a worker as it runs now.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import replace

from ..defaults import STOP_TIMEOUT_S
from ..errors import DeploymentStoppedError
from .managed_process import ManagedProcess, stop_together
from .spec import DeploymentSpec, WorkerSpec

__all__ = ["Processes"]


class Processes:
    """What runs of one deployment, by role; its lists change only under `lock`."""

    def __init__(self, spec: DeploymentSpec) -> None:
        self.spec = spec
        self.services: dict[str, ManagedProcess] = {}
        self.frontend: ManagedProcess | None = None
        self.workers: list[ManagedProcess] = []
        self.lock = threading.RLock()  # guards the lists while a fault or a restart swaps one
        self.stopping = threading.Event()  # set when the run begins to stop
        self.startup_seconds: dict[str, float] = {}  # each process's start, by name, and "total"
        self.weights: tuple[float, ...] = tuple(w.weight for w in spec.workers)

    @property
    def all(self) -> list[ManagedProcess]:
        """Services, the frontend, the workers: in the order they start."""
        with self.lock:
            return [*self.services.values(), *([self.frontend] if self.frontend else []), *self.workers]

    def worker_spec(self, index: int) -> WorkerSpec:
        """Worker `index` as it runs now: its launch spec with its live weight (what a restart gets)."""
        launched = self.spec.workers[index]
        weight = self.weights[index]
        return launched if weight == launched.weight else replace(launched, weight=weight)

    def set_weights(self, weights: Sequence[float]) -> None:
        """Record the routing weights the frontend now has, one per worker (steering set them there)."""
        with self.lock:
            self.weights = tuple(float(w) for w in weights)

    def check_frontend(self) -> None:
        """Raise `DeploymentStoppedError` once the frontend has exited, with its code and log."""
        f = self.frontend
        if f is None or not (f.killed or not f.alive()):
            return
        # A frontend this run SIGKILLed (`kill_host(0)`) has stopped from that moment, though
        # the kernel reports the exit only once its last thread is gone: wait for that
        # (bounded: SIGKILL cannot be refused), so the error carries the code.
        code = f.wait_exit(STOP_TIMEOUT_S) if f.killed else f.returncode
        why = f"its frontend (pid {f.pid}) exited with code {code}"
        raise DeploymentStoppedError(why, log_path=f.log_path, tail=f.log_tail(10), returncode=code)

    def stop_all(self) -> list[BaseException]:
        """Stop the workers (together, in reverse order of start), then the frontend, then the services.

        Sets `stopping` first. Returns what failed to stop; a failure never keeps the rest running.
        """
        self.stopping.set()
        with self.lock:
            groups = [
                list(reversed(self.workers)),
                [self.frontend] if self.frontend else [],
                list(self.services.values()),
            ]
        errors: list[BaseException] = []
        for group in groups:
            try:
                stop_together(group)
            except Exception as exc:  # keep stopping the rest
                errors.append(exc)
        return errors
