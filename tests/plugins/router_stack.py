"""A router stack of one's own, as a plugin module: registered when imported, with its pins.

Nothing of embedlab is edited for it: `EMBEDLAB_PLUGINS=tests.plugins.router_stack` makes
`embedlab stacks --venvs` list its venv (so `make routers` builds it) and puts it in
`embedlab conformance`'s default stacks.
"""

from __future__ import annotations

from typing import Any, ClassVar

from embedlab import BaseStack, ProcessSpec, StackContext, WorkerSpec, register_stack
from embedlab.evidence.split import Split

NAME = "toy-router"
PINS = ("six==1.17.0", "idna>=3")


class ToyRouterStack(BaseStack):
    """A router in front of standalone workers; it is never launched by the tests that load it."""

    name = NAME
    venv = NAME
    pins = PINS
    package = "six"
    policies: ClassVar[dict[str, Split]] = {"round_robin": Split.EXACT}
    default_policy = "round_robin"

    def frontend(self, ctx: StackContext) -> ProcessSpec:
        return ProcessSpec(role="frontend", argv=[str(self.venv_dir()), "--port", str(ctx.frontend_port)])

    def worker(self, ctx: StackContext, index: int, worker: WorkerSpec, system_port: int) -> ProcessSpec:
        return ProcessSpec(role="worker", worker=index, argv=["true"])

    def health_url(self, ctx: StackContext) -> str:
        return f"{ctx.frontend_url}/workers"

    def dispatchable_endpoints(self, ctx: StackContext, health: Any) -> set[str]:
        return set()


register_stack(NAME, ToyRouterStack)
