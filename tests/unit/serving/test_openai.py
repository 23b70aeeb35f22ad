from __future__ import annotations

import json

import numpy as np
import pytest

from embedlab.serving.openai import ApiError, decode_embedding, embedding_response, parse_embedding_request


def parse(payload: object):  # type: ignore[no-untyped-def]
    return parse_embedding_request(json.dumps(payload).encode())


@pytest.mark.parametrize(
    "raw,expected",
    [
        ("hello", ["hello"]),
        (["a", "b"], ["a", "b"]),
        ([1, 2, 3], [[1, 2, 3]]),
        ([[1, 2], [3]], [[1, 2], [3]]),
    ],
)
def test_every_input_form_normalises(raw: object, expected: object) -> None:
    request = parse({"model": "m", "input": raw})
    assert request.inputs == expected
    assert request.encoding_format == "float" and request.dimensions is None


def test_options_are_read() -> None:
    request = parse(
        {"model": "m", "input": "x", "encoding_format": "base64", "dimensions": 8, "user": "u", "extra": 1}
    )
    assert (request.encoding_format, request.dimensions) == ("base64", 8)


def test_error_names_the_field() -> None:
    with pytest.raises(ApiError) as err:
        parse({"model": "m", "input": ["a", None]})
    assert err.value.status == 400 and err.value.param == "input" and "input[1]" in err.value.message


def test_response_shape_and_base64_round_trip() -> None:
    vectors = np.array([[0.5, -0.25, 1.0], [0.0, 1.0, 0.0]], dtype=np.float32)
    for fmt in ("float", "base64"):
        body = json.loads(
            embedding_response(model="m", vectors=vectors, prompt_tokens=7, encoding_format=fmt)
        )
        assert body["object"] == "list" and body["model"] == "m"
        assert body["usage"] == {"prompt_tokens": 7, "total_tokens": 7}
        assert [d["index"] for d in body["data"]] == [0, 1]
        assert all(d["object"] == "embedding" for d in body["data"])
        decoded = np.stack([decode_embedding(d["embedding"]) for d in body["data"]])
        np.testing.assert_array_equal(decoded, vectors)
