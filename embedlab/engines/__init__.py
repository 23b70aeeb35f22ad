"""Engines behind a worker, registered by name and imported only when asked for.

The lazy import keeps a hash worker free of torch, and a transformers worker free of vLLM.
The registry is `plugins.Registry`, like stacks and scenarios: installed packages add
engines through the `embedlab.engines` entry-point group, a module named in
`EMBEDLAB_PLUGINS` through `register_engine` when the worker's command line imports it.

    base        Engine, EngineOptions, Embeddings: what an engine is
    hash, transformers (+ transformers_tuning, batching, cuda_graphs), vllm (+ vllm_config,
                vllm_state): the engines; models, tiny, tiny_tokenizers: local models
    preprocess  what a worker's ingest processes need of its engine: the id rules, the tokenizer

What the harness must know of an engine before a worker runs it (`EngineTraits`: does it
load a model, does it want a GPU, does it run vLLM) the engine declares itself, as class
attributes of those names; nothing outside this registry switches on an engine's name.

Imports only the base modules: engines run in worker processes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace

from ..errors import ConfigError
from ..plugins import Registry
from .base import Embedder, Embeddings, Engine, EngineOptions, InvalidInput, check_dimensions

__all__ = [
    "ENGINES",
    "Embeddings",
    "Embedder",
    "Engine",
    "EngineOptions",
    "EngineTraits",
    "InvalidInput",
    "check_dimensions",
    "create_engine",
    "engine_traits",
    "register_engine",
]

EngineFactory = Callable[[EngineOptions], Engine]  # an Engine class, or a function that makes one


def _check_engine(name: str, factory: EngineFactory) -> None:
    if not callable(factory):
        raise ConfigError(
            f"engine {name!r}: {factory!r} is not an engine class or factory taking EngineOptions"
        )


ENGINES: Registry[EngineFactory] = Registry(
    "engine",
    group="embedlab.engines",
    builtins={
        "hash": "embedlab.engines.hash:HashEngine",
        "transformers": "embedlab.engines.transformers:TransformersEngine",
        "vllm": "embedlab.engines.vllm:VllmEngine",
    },
    check=_check_engine,
)


def register_engine(name: str, target: str | EngineFactory, *, replace: bool = False) -> None:
    """Make `--engine NAME` available; `target` is a factory (an Engine class) or its "module:attribute" path."""
    ENGINES.register(name, target, replace=replace)


def create_engine(name: str, options: EngineOptions) -> Engine:
    return ENGINES.get(name)(options)


@dataclass(frozen=True)
class EngineTraits:
    """What an engine asks of the worker that runs it, declared as class attributes of its
    factory (absent ones take these defaults: an engine that loads a model on a GPU)."""

    needs_model: bool = True  # it loads `model_path`: a worker spec without one is refused
    uses_gpu: bool = True  # its worker is pinned to a GPU, where there are any
    runs_vllm: bool = False  # the run's vLLM settings apply (its cache, a core per worker, a long stop)


def engine_traits(name: str) -> EngineTraits:
    """`name`'s traits. An engine this process has not registered (a plugin only the worker
    imports, from the run's EMBEDLAB_PLUGINS) has the defaults."""
    if name not in ENGINES:
        return EngineTraits()
    factory = ENGINES.get(name)
    return replace(
        EngineTraits(),
        **{f.name: getattr(factory, f.name) for f in fields(EngineTraits) if hasattr(factory, f.name)},
    )
