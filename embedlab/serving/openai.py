"""The OpenAI embeddings wire format: request validation, responses and error bodies.

Shared by the frontend and the workers, so that both reject the same bad requests with
the same 4xx error JSON, and neither can answer a client mistake with a 500.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ..defaults import WORKER_HEADER

__all__ = [
    "WORKER_HEADER",
    "ApiError",
    "bad_request",
    "decode_embedding",
    "embedding_response",
    "loads",
    "parse_embedding_request",
]

if TYPE_CHECKING:  # numpy is imported where vectors are encoded: the frontend never needs it
    import numpy as np

# orjson is a required dependency (pyproject.toml), about 5x faster on the float-heavy
# response bodies. The fallback stays on purpose: the GPU machines' image has no orjson,
# and the serving stack runs there from a source checkout.
_orjson: ModuleType | None
try:
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None

# OpenAI's own limit on inputs per request.
MAX_INPUTS = 2048
# No vocabulary comes near 2**31 ids; larger ids (JSON allows up to 2**64 - 1) overflowed
# the engines' int64 arrays into a 500.
MAX_TOKEN_ID = 2**31 - 1

Inputs = list[str] | list[list[int]]


class ApiError(Exception):
    """An error answered to the client as OpenAI error JSON."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code

    def body(self) -> bytes:
        return error_body(self.message, type=self.type, param=self.param, code=self.code)


def error_body(message: str, *, type: str, param: str | None = None, code: str | None = None) -> bytes:
    return json.dumps({"error": {"message": message, "type": type, "param": param, "code": code}}).encode()


def bad_request(message: str, *, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)


@dataclass(frozen=True, slots=True)
class EmbeddingRequest:
    model: str
    inputs: Inputs
    encoding_format: str = "float"
    dimensions: int | None = None


def _is_int(value: object) -> bool:
    # bool is a subclass of int; `[true, false]` is not a list of token ids.
    return isinstance(value, int) and not isinstance(value, bool)


def _token_list(value: list[Any], where: str) -> list[int]:
    if not value:
        raise bad_request(f"'{where}' must not be an empty list of token ids", param="input")
    for token in value:
        if not _is_int(token) or token < 0:
            raise bad_request(
                f"'{where}' must be a list of non-negative integer token ids, got {type(token).__name__}",
                param="input",
            )
        if token > MAX_TOKEN_ID:
            raise bad_request(
                f"'{where}' has token id {token}, above the largest allowed, {MAX_TOKEN_ID}", param="input"
            )
    return value


def parse_inputs(raw: object) -> Inputs:
    """Normalise `input` to a list of strings or a list of token-id lists."""
    if isinstance(raw, str):
        if not raw:
            raise bad_request("'input' must not be an empty string", param="input")
        return [raw]
    if not isinstance(raw, list):
        raise bad_request(
            "'input' must be a string, a list of strings, a list of token ids, or a list of lists of token ids,"
            f" got {type(raw).__name__}",
            param="input",
        )
    if not raw:
        raise bad_request("'input' must not be an empty list", param="input")
    if len(raw) > MAX_INPUTS:
        raise bad_request(f"'input' has {len(raw)} items; at most {MAX_INPUTS} are allowed", param="input")
    first = raw[0]
    if isinstance(first, str):
        for i, item in enumerate(raw):
            if not isinstance(item, str):
                raise bad_request(
                    f"'input[{i}]' must be a string like input[0], got {type(item).__name__}", param="input"
                )
            if not item:
                raise bad_request(f"'input[{i}]' must not be an empty string", param="input")
        return raw
    if _is_int(first):
        return [_token_list(raw, "input")]
    if isinstance(first, list):
        for i, item in enumerate(raw):
            if not isinstance(item, list):
                raise bad_request(f"'input[{i}]' must be a list of token ids like input[0]", param="input")
            _token_list(item, f"input[{i}]")
        return raw
    raise bad_request(f"'input[0]' has unsupported type {type(first).__name__}", param="input")


def loads(body: bytes) -> Any:
    """Parse a JSON body, turning every way it can be broken into a 400."""
    if not body:
        raise bad_request("The request body is empty; expected a JSON object")
    try:
        return _orjson.loads(body) if _orjson is not None else json.loads(body)
    except RecursionError:
        raise bad_request("The JSON body is nested too deeply") from None
    except (ValueError, UnicodeDecodeError, TypeError) as exc:
        # ValueError also covers ints longer than Python's digit limit.
        raise bad_request(f"The request body is not valid JSON: {str(exc)[:200]}") from None


def parse_embedding_request(body: bytes) -> EmbeddingRequest:
    """Validate an embeddings request body, or raise `ApiError` naming the bad field."""
    payload = loads(body)
    if not isinstance(payload, dict):
        raise bad_request(f"The request body must be a JSON object, got {type(payload).__name__}")
    model = payload.get("model")
    if model is None:
        raise bad_request("Missing required field 'model'", param="model")
    if not isinstance(model, str):
        raise bad_request(f"'model' must be a string, got {type(model).__name__}", param="model")
    if not model.strip():
        raise bad_request("'model' must not be empty", param="model")
    if "input" not in payload:
        raise bad_request("Missing required field 'input'", param="input")
    inputs = parse_inputs(payload["input"])
    encoding_format = payload.get("encoding_format")
    if encoding_format is None:
        encoding_format = "float"
    elif encoding_format not in ("float", "base64"):
        raise bad_request(
            f"'encoding_format' must be 'float' or 'base64', got {str(encoding_format)[:50]!r}",
            param="encoding_format",
        )
    dimensions = payload.get("dimensions")
    if dimensions is not None and (not _is_int(dimensions) or dimensions < 1):
        raise bad_request("'dimensions' must be a positive integer", param="dimensions")
    user = payload.get("user")
    if user is not None and not isinstance(user, str):
        raise bad_request(f"'user' must be a string, got {type(user).__name__}", param="user")
    return EmbeddingRequest(
        model=model, inputs=inputs, encoding_format=encoding_format, dimensions=dimensions
    )


def embedding_response(
    *,
    model: str,
    vectors: Sequence[np.ndarray] | np.ndarray,
    prompt_tokens: int,
    encoding_format: str = "float",
) -> bytes:
    """Serialise an OpenAI embeddings response body."""
    import numpy as np  # once per response, not per vector; never at import: the frontend uses this module too

    def encode(vector: np.ndarray) -> list[float] | str:
        if encoding_format == "base64":
            # OpenAI's base64 format: little-endian float32 bytes.
            return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")
        return np.asarray(vector, dtype=np.float32).tolist()

    payload = {
        "object": "list",
        "data": [
            {"object": "embedding", "index": i, "embedding": encode(vector)}
            for i, vector in enumerate(vectors)
        ],
        "model": model,
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    }
    return dumps(payload)


def dumps(payload: Any) -> bytes:
    if _orjson is not None:
        return _orjson.dumps(payload)
    return json.dumps(payload, separators=(",", ":")).encode()


def decode_embedding(value: list[float] | str) -> np.ndarray:
    """Turn one `data[i].embedding` (float list or base64) back into float32."""
    import numpy as np

    if isinstance(value, str):
        return np.frombuffer(base64.b64decode(value), dtype="<f4")
    return np.asarray(value, dtype=np.float32)
