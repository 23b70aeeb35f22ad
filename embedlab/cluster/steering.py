"""What the harness asks a running frontend to change about its dispatch: `dep.steering.drain(1)`.

A drain takes a worker out of dispatch while it keeps serving, a resume puts it back, and
live weights change each worker's share; each the stack's own way (`BaseStack.drain`,
`resume`, `set_weights`), or an `UnsupportedError` in the stack's words where it has none.
A drain or resume is done only once the frontend says so: its health page must list the
worker as out of (or back in) dispatch, else a `DrainError`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

import httpx

from ..errors import ConfigError, DrainError
from ..evidence import clients

if TYPE_CHECKING:
    from .events import EventLog
    from .spec import DeploymentSpec
    from .stack_registry import BaseStack, StackContext

__all__ = ["Steering"]

POLL_S = 0.05


class Steered(Protocol):
    """What steering reaches of a running deployment (a `Deployment` is one)."""

    spec: DeploymentSpec
    stack: BaseStack
    events: EventLog

    @property
    def context(self) -> StackContext: ...

    @property
    def token(self) -> str | None: ...

    def endpoint(self, index: int) -> str: ...

    def dispatchable_endpoints(self, client: httpx.Client) -> set[str]: ...


class Steering:
    """Dispatch changes on one deployment; drains and resumes are recorded in its `events`."""

    def __init__(self, deployment: Steered) -> None:
        self._dep = deployment

    def drain(self, index: int, *, timeout: float = 30.0) -> None:
        """Take worker `index` out of dispatch while it keeps serving, and wait until the frontend
        says so (UnsupportedError where the stack has no way, DrainError where it does not take)."""
        self._change(index, self._dep.stack.drain, listed=False, timeout=timeout)
        self._dep.events.record("drain", f"worker {index}")

    def resume(self, index: int, *, timeout: float = 30.0) -> None:
        """Put a drained worker back, and wait until the frontend dispatches to it again."""
        self._change(index, self._dep.stack.resume, listed=True, timeout=timeout)
        self._dep.events.record("resume", f"worker {index}")

    def _change(self, index: int, change: Callable[..., None], *, listed: bool, timeout: float) -> None:
        endpoint = self._dep.endpoint(index)
        with clients.client(timeout=5.0) as client:
            change(client, self._dep.context, index)
            deadline = time.monotonic() + timeout
            while (endpoint in self._dep.dispatchable_endpoints(client)) != listed:
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
        """Change the routing weight of every worker, live (UnsupportedError where the stack cannot)."""
        dep = self._dep
        if len(weights) != len(dep.spec.workers):
            raise ConfigError(f"{len(dep.spec.workers)} workers but {len(weights)} weights")
        # A frontend's registry wants the token it was started with, where one is set.
        headers = {"Authorization": f"Bearer {dep.token}"} if dep.token else None
        with clients.client(timeout=5.0, headers=headers) as client:
            dep.stack.set_weights(client, dep.context, [float(w) for w in weights])
        workers = tuple(replace(w, weight=float(x)) for w, x in zip(dep.spec.workers, weights))
        dep.spec = replace(dep.spec, workers=workers)
