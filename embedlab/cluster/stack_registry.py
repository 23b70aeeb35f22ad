"""Stacks by name: the one list of stacks, and what the rest of embedlab asks of it.

The built-in stacks are named by "module:Class" paths into `embedlab.stacks`, imported on
first use: the cluster never imports a concrete stack (the stacks import the cluster's
contract, `stack.py`, as pluggy's plugins import their host's hook specs). Installed packages add theirs through the `embedlab.stacks`
entry-point group; `register_stack` adds one at run time (a module named in
`EMBEDLAB_PLUGINS` may call it). Every class is checked against `BaseStack` when it
joins (`stack_check.py`). What the rest of embedlab knows of the stacks it reads from here:
the stacks that have a capability (`stacks_with(lambda s: issubclass(s, Drains))`),
what `embedlab stacks` shows of each (`describe_stack`: the class's capabilities and the
worker servers it runs), conformance's default list (`battery_stacks`), the venvs
`make routers` builds and their pins (`router_venvs`: the stacks' and the worker servers',
`worker_server.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import ConfigError
from ..plugins import Registry
from .stack import BaseStack
from .stack_check import check_stack_class
from .worker_server import server_venvs, servers_of

__all__ = [
    "STACKS",
    "battery_stacks",
    "describe_stack",
    "get_stack",
    "register_stack",
    "router_venvs",
    "stack_class",
    "stacks_with",
]

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
    """The registered stacks whose class `has` what is asked (`lambda s: s.multi_host`,
    `lambda s: issubclass(s, LiveWeights)`), in order."""
    return [name for name in STACKS.names() if has(STACKS.get(name))]


def describe_stack(name: str) -> dict[str, Any]:
    """What `embedlab stacks` shows of stack `name`: its class's capabilities, under the name it
    is registered by, and the registered worker servers it runs (those that join its way)."""
    cls = STACKS.get(name)
    return cls.capabilities() | {"name": name, "worker_servers": servers_of(cls)}


def battery_stacks() -> list[str]:
    """Conformance's default stacks: every registered stack that is `in_battery`."""
    return stacks_with(lambda s: s.in_battery)


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
