"""Stacks by name: how each one starts its frontend and workers."""

from __future__ import annotations

import importlib

from .base import ProcessSpec, Stack, StackContext

__all__ = ["STACKS", "ProcessSpec", "Stack", "StackContext", "get_stack"]

STACKS: dict[str, str] = {
    "embedded": "embedlab.stacks.embedded:EmbeddedStack",
    "dynamo": "embedlab.stacks.dynamo:DynamoStack",
}


def get_stack(name: str) -> Stack:
    try:
        target = STACKS[name]
    except KeyError:
        raise ValueError(f"unknown stack {name!r}; choose from {', '.join(STACKS)}") from None
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)()  # type: ignore[no-any-return]
