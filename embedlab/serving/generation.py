"""The OpenAI completions and chat wire format, as embedlab's frontend and worker speak it.

Enough of both APIs to route and count them: a model, a prompt (or chat messages, rendered
to the one text a prefix cache sees), `max_tokens`, and answers whose `usage` says how many
prompt tokens the worker found cached (`prompt_tokens_details.cached_tokens`, OpenAI's own
field). Streaming and several choices are refused with a 400 naming the field, never a 500.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Any

from ..defaults import GENERATE_KINDS
from .openai import bad_request, dumps, loads

__all__ = ["GenerateRequest", "MAX_TOKENS", "generate_response", "parse_generate_request", "render_messages"]

MAX_TOKENS = 4096  # the most tokens a request may ask for
DEFAULT_MAX_TOKENS = 16  # OpenAI's completions default
ROLES = ("system", "user", "assistant", "developer", "tool")


@dataclass(frozen=True, slots=True)
class GenerateRequest:
    kind: str  # "completions" or "chat" (defaults.GENERATE_KINDS)
    model: str
    prompt: str  # the text the worker's prefix cache sees: the prompt, or the messages rendered
    max_tokens: int = DEFAULT_MAX_TOKENS


def render_messages(messages: list[dict[str, str]]) -> str:
    """Chat messages as one prompt, role by role (ChatML's shape): a shared system prompt is a shared prefix."""
    return "".join(f"<|im_start|> {m['role']} {m['content']} <|im_end|> " for m in messages) + (
        "<|im_start|> assistant"
    )


def _messages(raw: object) -> list[dict[str, str]]:
    if not isinstance(raw, list) or not raw:
        raise bad_request("'messages' must be a non-empty list of {role, content} objects", param="messages")
    out = []
    for i, message in enumerate(raw):
        if not isinstance(message, dict):
            raise bad_request(f"'messages[{i}]' must be an object", param="messages")
        role, content = message.get("role"), message.get("content")
        if role not in ROLES:
            raise bad_request(f"'messages[{i}].role' must be one of {', '.join(ROLES)}", param="messages")
        if not isinstance(content, str):
            raise bad_request(f"'messages[{i}].content' must be a string", param="messages")
        out.append({"role": role, "content": content})
    return out


def parse_generate_request(kind: str, body: bytes) -> GenerateRequest:
    """Validate a completions (`kind` "completions") or chat ("chat") body, or raise `ApiError`."""
    if kind not in GENERATE_KINDS:
        raise ValueError(f"not a generating request kind: {kind!r}")
    payload = loads(body)
    if not isinstance(payload, dict):
        raise bad_request(f"The request body must be a JSON object, got {type(payload).__name__}")
    model = payload.get("model")
    if not isinstance(model, str) or not model.strip():
        raise bad_request("'model' must be a non-empty string", param="model")
    if payload.get("stream"):
        raise bad_request("'stream' is not supported here: send stream=false", param="stream")
    n = payload.get("n")  # null, as OpenAI documents, is the default
    if n is not None and (isinstance(n, bool) or n != 1):
        raise bad_request("'n' must be 1: one choice per request", param="n")
    name = "max_tokens" if payload.get("max_tokens") is not None else "max_completion_tokens"
    max_tokens = payload.get(name)
    if max_tokens is None:
        max_tokens = DEFAULT_MAX_TOKENS
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or not 1 <= max_tokens <= MAX_TOKENS:
        raise bad_request(f"'{name}' must be an integer from 1 to {MAX_TOKENS}", param=name)
    if kind == "chat":
        prompt = render_messages(_messages(payload.get("messages")))
    else:
        raw = payload.get("prompt")
        if isinstance(raw, list) and len(raw) == 1:
            raw = raw[0]
        if not isinstance(raw, str) or not raw:
            raise bad_request("'prompt' must be a non-empty string", param="prompt")
        prompt = raw
    return GenerateRequest(kind=kind, model=model, prompt=prompt, max_tokens=max_tokens)


def _text(prompt: str, tokens: int) -> str:
    """Deterministic words for a prompt: the same request gets the same answer from any worker."""
    digest = hashlib.shake_256(prompt.encode("utf-8", "surrogatepass")).hexdigest(2 * tokens)
    return " ".join(digest[i : i + 4] for i in range(0, 4 * tokens, 4))


def generate_response(
    request: GenerateRequest, *, prompt_tokens: int, cached_tokens: int, request_id: str
) -> bytes:
    """The OpenAI completion or chat completion body for `request`."""
    text = _text(request.prompt, request.max_tokens)
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": request.max_tokens,
        "total_tokens": prompt_tokens + request.max_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }
    choice: dict[str, Any] = {"index": 0, "finish_reason": "length", "logprobs": None}
    if request.kind == "chat":
        choice["message"] = {"role": "assistant", "content": text}
        obj = "chat.completion"
    else:
        choice["text"] = text
        obj = "text_completion"
    payload = {
        "id": request_id,
        "object": obj,
        "created": int(time.time()),
        "model": request.model,
        "choices": [choice],
        "usage": usage,
    }
    return dumps(payload)
