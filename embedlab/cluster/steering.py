"""What the harness asks a running frontend to change about its dispatch: `dep.steering.drain(1)`.

A drain takes a worker out of dispatch while it keeps serving, a resume puts it back, and
live weights change each worker's share; each the stack's own way (`BaseStack.drain`,
`resume`, `set_weights`), or an `UnsupportedError` in the stack's words where it has none.
A drain or resume is done only once the frontend says so: its health page must list the
worker as out of (or back in) dispatch, else a `DrainError`. Live weights are state of the
run's `Processes` (`processes.weights`); the spec it was launched with is never replaced.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..errors import ConfigError, DrainError
from ..evidence import clients
from .stack import Drains, LiveWeights, capable

if TYPE_CHECKING:
    from .events import EventLog
    from .launcher import Launcher

__all__ = ["Steering"]

POLL_S = 0.05


class Steering:
    """Dispatch changes on the run its `launcher` started; drains and resumes are recorded in `events`."""

    def __init__(self, launcher: Launcher, events: EventLog) -> None:
        self._launcher = launcher
        self._events = events

    def drain(self, index: int, *, timeout: float = 30.0) -> None:
        """Take worker `index` out of dispatch while it keeps serving, and wait until the frontend
        says so (UnsupportedError where the stack has no way, DrainError where it does not take)."""
        self._change(index, capable(self._launcher.stack, Drains).drain, listed=False, timeout=timeout)
        self._events.record("drain", f"worker {index}")

    def resume(self, index: int, *, timeout: float = 30.0) -> None:
        """Put a drained worker back, and wait until the frontend dispatches to it again."""
        self._change(index, capable(self._launcher.stack, Drains).resume, listed=True, timeout=timeout)
        self._events.record("resume", f"worker {index}")

    def _change(self, index: int, change: Callable[..., None], *, listed: bool, timeout: float) -> None:
        launcher = self._launcher
        endpoint = launcher.context.endpoint(index)
        with clients.client(timeout=5.0) as client:
            change(client, launcher.context, index)
            deadline = time.monotonic() + timeout
            while (endpoint in launcher.dispatchable_endpoints(client)) != listed:
                if time.monotonic() > deadline:
                    state = "back in" if listed else "out of"
                    raise DrainError(
                        f"worker {index} ({endpoint}) was not {state} dispatch within {timeout:g} s",
                        worker_index=index,
                        endpoint=endpoint,
                        drained=not listed,
                        timeout=timeout,
                    )
                time.sleep(POLL_S)

    def set_weights(self, weights: Sequence[float]) -> None:
        """Change the routing weight of every worker, live (UnsupportedError where the stack cannot).

        The run's `Processes` keep them (`weights`): a worker started again gets its live weight."""
        launcher = self._launcher
        count = len(launcher.processes.spec.workers)
        if len(weights) != count:
            raise ConfigError(f"{count} workers but {len(weights)} weights")
        # A frontend's registry wants the token it was started with, where one is set.
        headers = {"Authorization": f"Bearer {launcher.token}"} if launcher.token else None
        with clients.client(timeout=5.0, headers=headers) as client:
            capable(launcher.stack, LiveWeights).set_weights(
                client, launcher.context, [float(w) for w in weights]
            )
        launcher.processes.set_weights(weights)
