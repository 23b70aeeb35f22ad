"""What the vllm engine hands vLLM: its engine arguments, from a worker's flags and the model's config.

Apart from the engine itself (`engines/vllm.py`) so that the arguments can be checked
(and unit-tested) without starting vLLM; vLLM is imported only inside `engine_args`.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import logging
import os
from pathlib import Path
from typing import Any

from ..errors import EngineError
from .base import EngineOptions

__all__ = ["CPU_KV_CACHE_BYTES", "cpu_kv_cache_bytes", "engine_args", "position_limit"]

log = logging.getLogger("embedlab.engines.vllm")

# The CPU KV cache, unless a model's max_model_len needs more: small enough for two engines
# side by side on a small machine. Embeddings keep nothing in it between requests.
CPU_KV_CACHE_BYTES = 64 << 20
# Set through their own flags; an --engine-arg for them would be ambiguous.
OWN_ARGS = {"model": "--model-path", "runner": "--runner"}


def _text_config(model_path: Path) -> dict[str, Any]:
    try:
        config = json.loads((model_path / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(config, dict):
        return {}
    text = config.get("text_config") or config  # multimodal configs nest the language model's
    return text if isinstance(text, dict) else {}


def position_limit(model_path: Path) -> int | None:
    """The model's own maximum length, where config.json states it plainly (no RoPE scaling)."""
    text = _text_config(model_path)
    scaling = [text.get("rope_scaling"), text.get("rope_parameters")]
    if any(isinstance(s, dict) and "factor" in s for s in scaling):
        return None  # vLLM derives a longer limit from the scaling; leave it to vLLM
    try:
        return int(text["max_position_embeddings"]) or None
    except (KeyError, TypeError, ValueError):
        return None


def cpu_kv_cache_bytes(model_path: Path, max_model_len: int | None, dtype: str) -> int:
    """A small KV cache that still holds one sequence of `max_model_len` tokens.

    vLLM refuses to start with less. 64 MiB holds the tiny models' 512 positions many
    times over, but not 2048 tokens of a Qwen3-Embedding-0.6B (229 KiB a token in fp32).
    """
    text = _text_config(model_path)
    try:
        heads = int(text["num_attention_heads"])
        kv_heads = int(text.get("num_key_value_heads") or heads)
        head_dim = int(text.get("head_dim") or int(text["hidden_size"]) // heads)
        length = int(max_model_len or text.get("max_position_embeddings") or 0)
        per_token = (
            2 * int(text["num_hidden_layers"]) * kv_heads * head_dim * (4 if dtype == "float32" else 2)
        )
    except (ValueError, KeyError, TypeError, ZeroDivisionError):
        return CPU_KV_CACHE_BYTES  # vLLM's own error will say what it needs
    # A quarter more: the cache is handed out in whole blocks of tokens.
    return max(CPU_KV_CACHE_BYTES, per_token * length * 5 // 4)


def engine_args(options: EngineOptions, model_path: Path, pooling: str) -> Any:
    from vllm import AsyncEngineArgs
    from vllm.config import PoolerConfig
    from vllm.platforms import current_platform

    extra = dict(options.extra_args)
    known = {f.name for f in dataclasses.fields(AsyncEngineArgs)}
    for key in extra:
        if key in OWN_ARGS:
            raise EngineError(f"--engine-arg {key}=... is not allowed: use {OWN_ARGS[key]}")
        if key not in known:
            close = difflib.get_close_matches(key, sorted(known), n=3)
            hint = (
                f"; did you mean {', '.join(close)}?"
                if close
                else " (see vllm.AsyncEngineArgs for the fields)"
            )
            raise EngineError(f"unknown vLLM engine argument {key!r}{hint}")
    pooler = extra.pop("pooler_config", None) or {}
    if not isinstance(pooler, dict):
        raise EngineError(f"pooler_config must be a JSON object, got {pooler!r}")
    try:
        pooler_config = PoolerConfig(**{**pooler, "pooling_type": pooling})
    except (TypeError, ValueError) as exc:
        raise EngineError(f"invalid pooler config {pooler}: {exc}") from exc
    length = extra.pop("max_model_len", options.max_model_len)
    if length is not None and not isinstance(length, int):
        raise EngineError(f"max_model_len must be a whole number, got {length!r}")
    limit = position_limit(model_path)
    if length and limit and length > limit and not os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN"):
        # As the transformers engine does: the seed passes 2048 to every model, and vLLM
        # would refuse to start a model of 512 positions (the tiny ones) with it.
        log.warning(
            "--max-model-len %d is more than %s has positions for: serving %d", length, model_path, limit
        )
        length = limit
    args: dict[str, Any] = {
        "model": str(model_path),
        "runner": "pooling",
        "pooler_config": pooler_config,
        "dtype": options.dtype,
        "max_model_len": length,
        "disable_log_stats": True,
        "seed": 0,
    }
    if current_platform.is_cpu():
        # Eager: vLLM's compile cache fails to reload in this version, so every start
        # would compile again. The KV cache default would take GiBs per engine.
        dtype = str(extra.get("dtype", options.dtype))
        args.update(enforce_eager=True, kv_cache_memory_bytes=cpu_kv_cache_bytes(model_path, length, dtype))
    args.update(extra)
    try:
        return AsyncEngineArgs(**args)
    except (TypeError, ValueError) as exc:
        raise EngineError(f"invalid vLLM engine arguments: {exc}") from exc
