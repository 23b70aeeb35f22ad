"""What every engine behind a worker provides, and the options that build one."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..defaults import DEVICE, HASH_DIM
from ..errors import EngineError

if TYPE_CHECKING:  # numpy stays out of the frontend, which parses these flags too
    import numpy as np
    from typing_extensions import TypeIs

# In the order the vllm engine's error message has always listed them (upper-cased there).
POOLINGS = ("mean", "last", "cls")


class InvalidInput(ValueError):
    """A request the engine cannot serve as asked: the worker answers 400 with `param`."""

    def __init__(self, message: str, *, param: str = "input", code: str | None = None) -> None:
        super().__init__(message)
        self.param = param
        self.code = code


@dataclass(frozen=True, slots=True)
class Embeddings:
    """One request's vectors (rows, float32) and the tokens it used."""

    vectors: np.ndarray
    prompt_tokens: int


@dataclass(frozen=True, kw_only=True)
class EngineOptions:
    """Everything a worker's flags say about its engine. Unused fields are ignored."""

    model_path: Path | None = None
    dim: int = HASH_DIM
    pooling: str | None = None  # None: the model's own default (MEAN, or LAST for decoder models)
    normalize: bool | None = None  # None: as the model's own files say (see models.serving_defaults)
    dtype: str = "float32"
    device: str = DEVICE  # cpu, cuda[:N], or auto: CUDA where torch sees it
    max_model_len: int | None = None
    max_batch_size: int = 64
    max_batch_tokens: int = 16384
    batch_wait_ms: float = 2.0
    extra_args: dict[str, object] = field(default_factory=dict)
    state_dir: Path | None = None


class Embedder(Protocol):
    """What a request handler needs of an engine: the engine itself, or an ingest process's
    stand-in for it. `embed()` may be called concurrently, and trusts its `dimensions`:
    callers pass it through `check_dimensions` first."""

    name: str
    dim: int
    max_model_len: int
    supports_dimensions: bool

    async def embed(
        self, inputs: Sequence[str] | Sequence[Sequence[int]], *, dimensions: int | None = None
    ) -> Embeddings: ...


class Engine(Embedder, Protocol):
    """An embedding engine. `start()` loads the model."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...


def check_length(tokens: int, max_model_len: int, index: int) -> None:
    if tokens > max_model_len:
        raise InvalidInput(
            f"input[{index}] has {tokens} tokens, more than this model's maximum of {max_model_len}",
            code="context_length_exceeded",
        )


def are_texts(inputs: Sequence[str] | Sequence[Sequence[int]]) -> TypeIs[Sequence[str]]:
    """Whether a request's inputs are texts, not token ids: a request is all one or the other."""
    return isinstance(inputs[0], str)


def check_dimensions(engine: Embedder, dimensions: object) -> None:
    """Refuse a `dimensions` the engine cannot honour, before the request reaches it.

    Called where requests enter an engine, not in each engine: the Dynamo worker passes
    the request's raw value, unchecked by the OpenAI parser.
    """
    if dimensions is None:
        return
    if not engine.supports_dimensions:
        raise InvalidInput(
            f"The {engine.name} engine does not support 'dimensions'",
            param="dimensions",
            code="unsupported_parameter",
        )
    if isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1:
        raise InvalidInput("'dimensions' must be a positive integer", param="dimensions")
    # 'dimensions' shortens a vector, as OpenAI's does. Unbounded, {"dimensions": 2**62}
    # asked numpy for an impossible array (a 500), and 10**7 for a 40 MB response.
    if dimensions > engine.dim:
        raise InvalidInput(
            f"'dimensions' is {dimensions}, more than this model's {engine.dim}",
            param="dimensions",
            code="unsupported_parameter",
        )


def model_dir(path: str | os.PathLike[str]) -> Path:
    """`path` as a Path, if it is a model directory; else the EngineError a worker exits with."""
    path = Path(path)
    if not path.is_dir() or not (path / "config.json").is_file():
        raise EngineError(f"{path} is not a model directory (no config.json)")
    return path
