from __future__ import annotations

import asyncio
import re
from pathlib import Path

import numpy as np
import pytest

from embedlab.engines import EngineOptions, InvalidInput, check_dimensions, create_engine
from embedlab.engines.base import model_dir
from embedlab.errors import EngineError


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


def test_check_dimensions_bounds_by_the_engine() -> None:
    engine = create_engine("hash", EngineOptions(dim=32))
    for ok in (None, 1, 32):
        check_dimensions(engine, ok)
    with pytest.raises(InvalidInput, match="'dimensions' is 33, more than this model's 32") as above:
        check_dimensions(engine, 33)
    assert (above.value.param, above.value.code) == ("dimensions", "unsupported_parameter")
    # The Dynamo worker passes the request's value as it came.
    for bad in (0, -1, "8", 2.0, True):
        with pytest.raises(InvalidInput, match="positive integer") as refused:
            check_dimensions(engine, bad)
        assert refused.value.param == "dimensions"


def test_check_dimensions_refuses_any_value_without_support() -> None:
    class Fixed:
        name, dim, supports_dimensions = "fixed", 64, False

    check_dimensions(Fixed(), None)  # type: ignore[arg-type]
    for value in (8, 0, 64):
        with pytest.raises(InvalidInput, match="The fixed engine does not support 'dimensions'") as refused:
            check_dimensions(Fixed(), value)  # type: ignore[arg-type]
        assert (refused.value.param, refused.value.code) == ("dimensions", "unsupported_parameter")


def test_model_dir_needs_a_config(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match=re.escape(f"{tmp_path} is not a model directory (no config.json)")):
        model_dir(tmp_path)
    with pytest.raises(EngineError, match="is not a model directory"):
        model_dir(tmp_path / "missing")
    (tmp_path / "config.json").write_text("{}")
    assert model_dir(str(tmp_path)) == tmp_path
