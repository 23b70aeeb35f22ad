from __future__ import annotations

import asyncio
import sys

import numpy as np
import pytest

from embedlab.engines import EngineOptions, InvalidInput, create_engine


def embed(engine, inputs, **kw):  # type: ignore[no-untyped-def]
    return asyncio.run(engine.embed(inputs, **kw))


def test_hash_engine_is_deterministic_and_normalised() -> None:
    a = create_engine("hash", EngineOptions(dim=32))
    b = create_engine("hash", EngineOptions(dim=32))
    first = embed(a, ["hello world", "other text"])
    second = embed(b, ["hello world", "other text"])
    np.testing.assert_array_equal(first.vectors, second.vectors)
    assert first.vectors.shape == (2, 32)
    np.testing.assert_allclose(np.linalg.norm(first.vectors, axis=1), 1.0, rtol=1e-6)
    assert not np.allclose(first.vectors[0], first.vectors[1])
    assert first.prompt_tokens == 4


def test_hash_engine_dimensions_and_length_limit() -> None:
    engine = create_engine("hash", EngineOptions(dim=32, max_model_len=3))
    assert embed(engine, [[1, 2, 3]], dimensions=8).vectors.shape == (1, 8)
    with pytest.raises(InvalidInput, match="more than this model's maximum"):
        embed(engine, ["one two three four"])


def test_hash_engine_imports_no_ml_library() -> None:
    import subprocess

    code = (
        "import sys, asyncio\n"
        "from embedlab.engines import create_engine, EngineOptions\n"
        "from embedlab.serve import worker, frontend\n"
        "asyncio.run(create_engine('hash', EngineOptions()).embed(['x']))\n"
        "print(sorted(m for m in ('torch', 'transformers', 'vllm', 'tokenizers') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
