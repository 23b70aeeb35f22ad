"""An engine of one's own, as a plugin module: `embedlab worker --engine constant` serves it.

The worker process imports this module because `EMBEDLAB_PLUGINS` names it; its vectors
say which engine answered: every component is the input's length in characters.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from embedlab import register_engine
from embedlab.engines import Embeddings, EngineOptions

NAME = "constant"
DIM = 4


class ConstantEngine:
    name = NAME
    dim = DIM
    max_model_len = 512
    supports_dimensions = False

    def __init__(self, options: EngineOptions) -> None:
        self.options = options

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def embed(
        self, inputs: Sequence[str] | Sequence[Sequence[int]], *, dimensions: int | None = None
    ) -> Embeddings:
        vectors = np.array([[float(len(item))] * DIM for item in inputs], dtype=np.float32)
        return Embeddings(vectors=vectors, prompt_tokens=len(inputs))


register_engine(NAME, ConstantEngine)
