"""The transformers engine's own settings (`--engine-arg KEY=VALUE`) and its pooling.

Kept apart from the engine so that reading them needs neither torch nor a model.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import EngineError
from .cuda_graphs import GRAPH_WIDTHS

if TYPE_CHECKING:
    import torch

log = logging.getLogger("embedlab.engines.transformers")


@dataclass(frozen=True, kw_only=True)
class TransformersTuning:
    """The transformers engine's own settings, from `--engine-arg KEY=VALUE`.

    cuda_graphs: capture the graph buckets on CUDA (ignored on CPU).
    compile: torch.compile the model's repeated blocks before capture.
    graph_widths: the length buckets to capture.
    graph_memory_mb: stop capturing once graphs hold this much device memory; larger
        shapes then run eagerly.
    max_inflight: forwards queued on the device at once.
    last_token_only: with LAST pooling on a causal model, compute the last decoder layer only
        at each row's last token (`last_token.py`), once a probe forward agrees with the
        full one.
    pipeline_min: launch a partial batch behind one in flight once it holds this many
        sequences (off by default: a partial batch waits for an idle device). With graph
        replays a forward's fixed cost is small, and under heavy load the device then
        never idles between forwards (see batching.py).
    """

    cuda_graphs: bool = True
    compile: bool = False
    graph_widths: tuple[int, ...] = GRAPH_WIDTHS
    graph_memory_mb: int = 16384
    max_inflight: int = 2
    pipeline_min: int | None = None
    last_token_only: bool = True

    @classmethod
    def parse(cls, extra: Mapping[str, object]) -> TransformersTuning:
        known = {
            "cuda_graphs",
            "compile",
            "graph_widths",
            "graph_memory_mb",
            "max_inflight",
            "pipeline_min",
            "last_token_only",
        }
        unknown = sorted(set(extra) - known)
        if unknown:
            raise EngineError(
                f"unknown --engine-arg for the transformers engine: {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        values: dict[str, Any] = {}
        for key in ("cuda_graphs", "compile", "last_token_only"):
            if key in extra:
                value = extra[key]
                if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
                    value = value.lower() in ("true", "1")
                if not isinstance(value, bool):
                    raise EngineError(f"--engine-arg {key} must be true or false, got {value!r}")
                values[key] = value
        for key in ("graph_memory_mb", "max_inflight", "pipeline_min"):
            if key in extra:
                value = extra[key]
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise EngineError(f"--engine-arg {key} must be a positive integer, got {value!r}")
                values[key] = value
        if "graph_widths" in extra:
            widths = extra["graph_widths"]
            if (
                not isinstance(widths, list)
                or not widths
                or not all(isinstance(w, int) and not isinstance(w, bool) and w > 0 for w in widths)
            ):
                raise EngineError(
                    f"--engine-arg graph_widths must be a JSON list of positive integers, got {widths!r}"
                )
            values["graph_widths"] = tuple(sorted(set(widths)))
        return cls(**values)


def pool(
    hidden: torch.Tensor, lengths: torch.Tensor, valid: torch.Tensor | None, pooling: str
) -> torch.Tensor:
    """Pool right-padded hidden states [batch, seq, dim]; `valid` marks real tokens (MEAN only)."""
    import torch

    if pooling == "cls":
        return hidden[:, 0]
    if pooling == "last":
        return hidden[torch.arange(hidden.shape[0], device=hidden.device), lengths - 1]
    assert valid is not None
    weights = valid.unsqueeze(-1).to(hidden.dtype)
    return (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)


def compile_repeated_blocks(model: Any) -> None:
    """torch.compile the model's repeated blocks, once for all of them (regional compilation)."""
    import torch

    names = set(getattr(model, "_no_split_modules", None) or [])
    blocks = [m for m in model.modules() if type(m).__name__ in names]
    # Every block and bucket shares one compiled artifact; never fall back to eager
    # silently because the default recompile limit ran out.
    for attribute in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, attribute):
            setattr(torch._dynamo.config, attribute, max(64, getattr(torch._dynamo.config, attribute)))
    for block in blocks or [model]:
        block.compile(dynamic=True)
    log.info("torch.compile: %d %s blocks", len(blocks) or 1, "/".join(sorted(names)) or "whole-model")
