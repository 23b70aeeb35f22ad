"""Stacks by name: how each one starts its frontend and workers.

The one list of stacks. Installed packages add theirs through the `embedlab.stacks`
entry-point group; `register_stack` adds one at run time.
"""

from __future__ import annotations

from ..plugins import Registry
from .base import ProcessSpec, Stack, StackContext

__all__ = ["STACKS", "ProcessSpec", "Stack", "StackContext", "get_stack", "register_stack"]

STACKS: Registry[type] = Registry(
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
)


def register_stack(name: str, stack: type | str) -> None:
    """Make `stack=NAME` launchable: `stack` is a Stack class or its "module:Class" path."""
    STACKS.register(name, stack)


def get_stack(name: str) -> Stack:
    return STACKS.get(name)()  # type: ignore[no-any-return]
