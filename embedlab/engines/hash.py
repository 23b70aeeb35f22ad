"""Deterministic pseudo-embeddings from the input's bytes: instant, for routing work.

Imports no ML library, so a hash worker starts in well under a second.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from ..errors import ConfigError
from .base import Embeddings, EngineOptions, check_length
from .preprocess import IngestSpec


class HashEngine:
    name = "hash"
    needs_model = False  # `EngineTraits`: it hashes its inputs, on the CPU
    uses_gpu = False
    supports_dimensions = True

    def __init__(self, options: EngineOptions) -> None:
        if options.dim < 1:
            raise ConfigError(f"hash engine: dim must be positive, got {options.dim}")
        self.dim = options.dim
        self.max_model_len = options.max_model_len or 8192

    async def start(self) -> None:
        return None

    # No device: with --api-processes N the ingest processes compute the vectors themselves.
    owns_device = False

    def ingest_spec(self) -> IngestSpec:
        return IngestSpec(
            engine=self.name,
            dim=self.dim,
            max_model_len=self.max_model_len,
            supports_dimensions=self.supports_dimensions,
            local=True,
        )

    async def close(self) -> None:
        return None

    async def embed(
        self, inputs: Sequence[str] | Sequence[Sequence[int]], *, dimensions: int | None = None
    ) -> Embeddings:
        return self.embed_sync(inputs, dimensions=dimensions)

    def embed_sync(
        self, inputs: Sequence[str] | Sequence[Sequence[int]], *, dimensions: int | None = None
    ) -> Embeddings:
        # check_dimensions bounded 'dimensions' where the request entered (1..self.dim).
        dim = dimensions or self.dim
        vectors = np.empty((len(inputs), dim), dtype=np.float32)
        tokens = 0
        for row, item in enumerate(inputs):
            if isinstance(item, str):
                key = item.encode("utf-8", "surrogatepass")
                # Whitespace words stand in for tokens: enough for usage and length limits.
                count = max(1, len(item.split()))
            else:
                key = np.asarray(item, dtype=np.int64).tobytes()
                count = len(item)
            check_length(count, self.max_model_len, row)
            tokens += count
            raw = np.frombuffer(hashlib.shake_256(key).digest(2 * dim), dtype=np.uint16)
            vectors[row] = raw.astype(np.float32) - 32767.5
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return Embeddings(vectors=vectors, prompt_tokens=tokens)
