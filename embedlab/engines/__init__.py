"""Engines behind a worker, registered by name and imported only when asked for.

The lazy import keeps a hash worker free of torch, and a transformers worker free of vLLM.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from ..errors import ConfigError
from .base import Embeddings, Engine, EngineOptions, InvalidInput, check_dimensions

__all__ = [
    "ENGINES",
    "Embeddings",
    "Engine",
    "EngineOptions",
    "InvalidInput",
    "check_dimensions",
    "create_engine",
    "register_engine",
]

# name -> "module:attribute" of a factory taking EngineOptions
ENGINES: dict[str, str] = {
    "hash": "embedlab.engines.hash:HashEngine",
    "transformers": "embedlab.engines.transformers:TransformersEngine",
    "vllm": "embedlab.engines.vllm:VllmEngine",
}


def register_engine(name: str, target: str | Callable[[EngineOptions], Engine]) -> None:
    """Make `--engine NAME` available; `target` is a factory or its "module:attribute" path."""
    ENGINES[name] = target  # type: ignore[assignment]


def create_engine(name: str, options: EngineOptions) -> Engine:
    try:
        target: object = ENGINES[name]
    except KeyError:
        raise ConfigError(f"unknown engine {name!r}; choose from {', '.join(ENGINES)}") from None
    if isinstance(target, str):
        module, _, attribute = target.partition(":")
        target = getattr(importlib.import_module(module), attribute)
    return target(options)  # type: ignore[operator,no-any-return]
