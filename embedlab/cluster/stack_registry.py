"""Stacks by name: how each one starts its frontend and workers, and what each can do.

The one list of stacks. Installed packages add theirs through the `embedlab.stacks`
entry-point group; `register_stack` adds one at run time (a module named in
`EMBEDLAB_PLUGINS` may call it). Every class is checked against `BaseStack` when it
joins (`checking.py`). What the rest of embedlab knows of the stacks it reads from here:
the stacks that have a capability (`stacks_with`), conformance's default list
(`battery_stacks`), the routers' venvs and pins (`router_venvs`).
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import ConfigError
from ..plugins import Registry
from ..stacks.worker_servers import (
    WORKER_SERVERS,
    WorkerServer,
    check_servers,
    counter_notes,
    is_foreign,
    model_dir,
    register_worker_server,
    server_of,
    server_venvs,
    spec_metric,
    startup_timeout,
    workers_text,
)
from .spec import DeploymentSpec, WorkerSpec
from .stack import BaseStack, ProcessSpec, StackContext
from .stack_check import check_stack_class

__all__ = [
    "STACKS",
    "WORKER_SERVERS",
    "BaseStack",
    "ProcessSpec",
    "Stack",
    "StackContext",
    "battery_stacks",
    "get_stack",
    "register_stack",
    "router_venvs",
    "stack_class",
    "stacks_with",
    "WorkerServer",
    "check_servers",
    "counter_notes",
    "is_foreign",
    "names_worker",
    "register_worker_server",
    "runs_vllm",
    "model_dir",
    "server_of",
    "spec_metric",
    "startup_timeout",
    "workers_text",
]

Stack = BaseStack  # the type of a stack object

STACKS: Registry[type[BaseStack]] = Registry(
    "stack",
    group="embedlab.stacks",
    builtins={
        "embedded": "embedlab.stacks.embedded:EmbeddedStack",
        "dynamo": "embedlab.stacks.dynamo:DynamoStack",
        "litellm": "embedlab.stacks.routers:LiteLLMStack",
        "vllm-router": "embedlab.stacks.routers:VllmRouterStack",
        "sglang-router": "embedlab.stacks.routers:SglangRouterStack",
        "smg": "embedlab.stacks.smg:SmgStack",
        "haproxy": "embedlab.stacks.haproxy:HAProxyStack",
        "nginx": "embedlab.stacks.nginx:NginxStack",
    },
    check=check_stack_class,
)


def register_stack(name: str, stack: type[BaseStack] | str, *, replace: bool = False) -> None:
    """Make `stack=NAME` launchable: `stack` is a BaseStack subclass or its "module:Class" path.

    A class is checked now, a path when it is first loaded: a wrong one is a ConfigError
    that names it.
    """
    STACKS.register(name, stack, replace=replace)


def stack_class(name: str) -> type[BaseStack]:
    return STACKS.get(name)


def get_stack(name: str) -> BaseStack:
    return STACKS.get(name)()


def stacks_with(has: Callable[[type[BaseStack]], bool]) -> list[str]:
    """The registered stacks whose class `has` what is asked (`lambda s: s.multi_host`), in order."""
    return [name for name in STACKS.names() if has(STACKS.get(name))]


def battery_stacks() -> list[str]:
    """Conformance's default stacks: every registered stack that is `in_battery`."""
    return stacks_with(lambda s: s.in_battery)


def names_worker(spec: DeploymentSpec) -> bool:
    """Every worker's server sends `x-embedlab-worker` (a stack that passes it on names them)."""
    return all(server_of(w).names_worker for w in spec.workers)


def runs_vllm(worker: WorkerSpec) -> bool:
    """vLLM runs in the worker: embedlab's vllm engine, or a server that is vLLM."""
    return worker.runs_vllm or server_of(worker).runs_vllm


def router_venvs() -> dict[str, tuple[str, ...]]:
    """Each venv `make routers` builds, with its pins: one per `venv` the stacks declare, and one
    per worker server's own (Infinity's)."""
    venvs: dict[str, tuple[str, ...]] = {}
    for name in STACKS.names():
        cls = STACKS.get(name)
        if cls.venv is None:
            continue
        if venvs.setdefault(cls.venv, cls.pins) != cls.pins:
            raise ConfigError(
                f"stack {name!r} pins venv {cls.venv!r} to {list(cls.pins)}, another stack to {list(venvs[cls.venv])}"
            )
    for venv, pins in server_venvs().items():
        if venvs.setdefault(venv, pins) != pins:
            raise ConfigError(
                f"a worker server pins venv {venv!r} to {list(pins)}, a stack to {list(venvs[venv])}"
            )
    return venvs
