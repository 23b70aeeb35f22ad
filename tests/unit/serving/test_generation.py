"""The completions and chat wire format (serving/generation.py): 400s naming the field, and the answers."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from embedlab.engines.kv import BLOCK_SIZE, block_hashes, words
from embedlab.serving.generation import (
    MAX_TOKENS,
    GenerateRequest,
    generate_response,
    parse_generate_request,
    render_messages,
)
from embedlab.serving.http import error_response
from embedlab.serving.openai import ApiError

USER = [{"role": "user", "content": "hello there"}]


def body(**fields: Any) -> bytes:
    return json.dumps(fields).encode()


def refused(kind: str, raw: bytes) -> ApiError:
    with pytest.raises(ApiError) as caught:
        parse_generate_request(kind, raw)
    return caught.value


# -- parse_generate_request: what is accepted --------------------------------------------------


def test_completion_defaults() -> None:
    parsed = parse_generate_request("completions", body(model="m", prompt="hello world"))
    # 16 is OpenAI's documented default for completions' max_tokens.
    assert parsed == GenerateRequest(kind="completions", model="m", prompt="hello world", max_tokens=16)


def test_completion_prompt_may_be_a_list_of_one_string() -> None:
    parsed = parse_generate_request("completions", body(model="m", prompt=["only one"]))
    assert parsed.prompt == "only one"


@pytest.mark.parametrize("max_tokens", [1, 7, MAX_TOKENS])
def test_max_tokens_within_bounds_is_kept(max_tokens: int) -> None:
    parsed = parse_generate_request("completions", body(model="m", prompt="x", max_tokens=max_tokens))
    assert parsed.max_tokens == max_tokens


def test_null_n_and_max_tokens_take_the_defaults_as_openai_documents() -> None:
    request = parse_generate_request("completions", body(model="m", prompt="x", n=None, max_tokens=None))
    default = parse_generate_request("completions", body(model="m", prompt="x"))
    assert request.max_tokens == default.max_tokens
    later = parse_generate_request(
        "completions", body(model="m", prompt="x", max_tokens=None, max_completion_tokens=5)
    )
    assert later.max_tokens == 5


def test_max_completion_tokens_is_read_where_max_tokens_is_absent() -> None:
    chat = parse_generate_request("chat", body(model="m", messages=USER, max_completion_tokens=5))
    assert chat.max_tokens == 5
    both = parse_generate_request(
        "chat", body(model="m", messages=USER, max_tokens=3, max_completion_tokens=5)
    )
    assert both.max_tokens == 3


@pytest.mark.parametrize("fields", [{"stream": False}, {"n": 1}, {"stream": None}])
def test_explicit_supported_values_are_accepted(fields: dict[str, Any]) -> None:
    parsed = parse_generate_request("completions", body(model="m", prompt="x", **fields))
    assert parsed.prompt == "x"


def test_chat_prompt_is_the_rendered_messages() -> None:
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "what is two plus two"},
    ]
    parsed = parse_generate_request("chat", body(model="m", messages=messages, max_tokens=4))
    assert parsed.kind == "chat" and parsed.model == "m" and parsed.max_tokens == 4
    assert parsed.prompt == render_messages(messages)


def test_rendered_messages_keep_roles_and_contents_in_order() -> None:
    text = render_messages([{"role": "system", "content": "S1 S2"}, {"role": "user", "content": "U1"}])
    assert text.startswith("<|im_start|> system S1 S2 <|im_end|>")
    assert text.index("S1 S2") < text.index("user") < text.index("U1")
    assert text.endswith("<|im_start|> assistant")


def test_a_shared_system_prompt_is_a_shared_prefix() -> None:
    system = {"role": "system", "content": " ".join(f"rule{i}" for i in range(3 * BLOCK_SIZE))}
    a = render_messages([system, {"role": "user", "content": "first question"}])
    b = render_messages([system, {"role": "user", "content": "another one entirely"}])
    ha, hb = block_hashes(words(a)), block_hashes(words(b))
    # The system message alone fills 3 blocks (plus its role marker): those are shared.
    assert ha[:3] == hb[:3]
    assert words(a) != words(b)


def test_unknown_kind_is_a_programming_error_not_a_400() -> None:
    with pytest.raises(ValueError, match="not a generating request kind"):
        parse_generate_request("embeddings", body(model="m", prompt="x"))


# -- parse_generate_request: what is refused, with a 400 naming the field ----------------------

BAD: list[tuple[str, str, bytes, str | None, str]] = [
    # (case, kind, body, param, words in the message)
    ("empty body", "completions", b"", None, "empty"),
    ("not json", "completions", b"{nope", None, "not valid JSON"),
    ("json array", "chat", b"[1, 2]", None, "JSON object"),
    ("no model", "completions", body(prompt="x"), "model", "model"),
    ("model is a number", "completions", body(model=3, prompt="x"), "model", "model"),
    ("model is blank", "chat", body(model="  ", messages=USER), "model", "model"),
    ("stream", "completions", body(model="m", prompt="x", stream=True), "stream", "stream"),
    ("stream in chat", "chat", body(model="m", messages=USER, stream=True), "stream", "stream"),
    ("two choices", "completions", body(model="m", prompt="x", n=2), "n", "'n' must be 1"),
    ("no choice", "chat", body(model="m", messages=USER, n=0), "n", "'n' must be 1"),
    ("max_tokens 0", "completions", body(model="m", prompt="x", max_tokens=0), "max_tokens", "max_tokens"),
    ("max_tokens < 0", "completions", body(model="m", prompt="x", max_tokens=-3), "max_tokens", "max_tokens"),
    (
        "max_tokens too many",
        "completions",
        body(model="m", prompt="x", max_tokens=MAX_TOKENS + 1),
        "max_tokens",
        str(MAX_TOKENS),
    ),
    ("max_tokens float", "completions", body(model="m", prompt="x", max_tokens=2.5), "max_tokens", "integer"),
    (
        "max_tokens string",
        "completions",
        body(model="m", prompt="x", max_tokens="8"),
        "max_tokens",
        "integer",
    ),
    ("max_tokens true", "completions", body(model="m", prompt="x", max_tokens=True), "max_tokens", "integer"),
    (
        "max_completion_tokens 0",
        "chat",
        body(model="m", messages=USER, max_completion_tokens=0),
        "max_completion_tokens",
        "integer",
    ),
    ("n true", "completions", body(model="m", prompt="x", n=True), "n", "'n' must be 1"),
    ("no prompt", "completions", body(model="m"), "prompt", "prompt"),
    ("empty prompt", "completions", body(model="m", prompt=""), "prompt", "prompt"),
    ("prompt is a number", "completions", body(model="m", prompt=5), "prompt", "prompt"),
    ("two prompts", "completions", body(model="m", prompt=["a", "b"]), "prompt", "prompt"),
    ("token id prompt", "completions", body(model="m", prompt=[1, 2, 3]), "prompt", "prompt"),
    ("no messages", "chat", body(model="m"), "messages", "non-empty list"),
    ("empty messages", "chat", body(model="m", messages=[]), "messages", "non-empty list"),
    ("messages is a string", "chat", body(model="m", messages="hi"), "messages", "non-empty list"),
    ("message not an object", "chat", body(model="m", messages=["hi"]), "messages", "messages[0]"),
    (
        "unknown role",
        "chat",
        body(model="m", messages=[*USER, {"role": "robot", "content": "x"}]),
        "messages",
        "messages[1].role",
    ),
    ("missing role", "chat", body(model="m", messages=[{"content": "x"}]), "messages", "role"),
    (
        "content not a string",
        "chat",
        body(model="m", messages=[{"role": "user", "content": 5}]),
        "messages",
        "messages[0].content",
    ),
    ("missing content", "chat", body(model="m", messages=[{"role": "user"}]), "messages", "content"),
]


@pytest.mark.parametrize(("case", "kind", "raw", "param", "says"), BAD, ids=[b[0] for b in BAD])
def test_bad_requests_are_400s_naming_the_field(
    case: str, kind: str, raw: bytes, param: str | None, says: str
) -> None:
    error = refused(kind, raw)
    assert error.status == 400, case
    assert error.type == "invalid_request_error"
    assert error.param == param
    assert says in error.message


def test_the_error_is_openai_error_json_on_the_wire() -> None:
    error = refused("completions", body(model="m", prompt="x", stream=True))
    assert json.loads(error.body()) == {
        "error": {"message": error.message, "type": "invalid_request_error", "param": "stream", "code": None}
    }
    response = error_response(error)
    assert response.status == 400
    assert response.content_type == "application/json"
    assert isinstance(response.body, bytes)
    assert json.loads(response.body)["error"]["param"] == "stream"


# -- generate_response -------------------------------------------------------------------------


def answer(request: GenerateRequest, *, prompt_tokens: int = 12, cached_tokens: int = 0) -> dict[str, Any]:
    raw = generate_response(
        request, prompt_tokens=prompt_tokens, cached_tokens=cached_tokens, request_id="req-1"
    )
    assert isinstance(raw, bytes)
    parsed: dict[str, Any] = json.loads(raw)
    return parsed


def test_completion_response_shape_and_usage() -> None:
    request = GenerateRequest(kind="completions", model="m", prompt="a b c", max_tokens=7)
    before = int(time.time())
    out = answer(request, prompt_tokens=40, cached_tokens=32)
    after = int(time.time())
    assert out["id"] == "req-1"
    assert out["object"] == "text_completion"
    assert out["model"] == "m"
    assert before <= out["created"] <= after
    assert len(out["choices"]) == 1
    choice = out["choices"][0]
    assert choice["index"] == 0 and choice["finish_reason"] == "length"
    assert "message" not in choice
    assert len(choice["text"].split()) == 7, "as many words as max_tokens"
    assert out["usage"] == {
        "prompt_tokens": 40,
        "completion_tokens": 7,
        "total_tokens": 47,
        "prompt_tokens_details": {"cached_tokens": 32},
    }


def test_chat_response_shape() -> None:
    request = parse_generate_request("chat", body(model="chat-m", messages=USER, max_tokens=3))
    out = answer(request, prompt_tokens=9, cached_tokens=0)
    assert out["object"] == "chat.completion"
    assert out["model"] == "chat-m"
    choice = out["choices"][0]
    assert "text" not in choice
    assert choice["message"]["role"] == "assistant"
    assert len(choice["message"]["content"].split()) == 3
    assert out["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
    assert out["usage"]["total_tokens"] == 12


def test_answers_depend_on_the_prompt_only() -> None:
    a = GenerateRequest(kind="completions", model="m", prompt="same prompt", max_tokens=5)
    again = GenerateRequest(kind="completions", model="other", prompt="same prompt", max_tokens=5)
    other = GenerateRequest(kind="completions", model="m", prompt="another prompt", max_tokens=5)
    text = answer(a)["choices"][0]["text"]
    assert answer(a, cached_tokens=16)["choices"][0]["text"] == text
    assert answer(again)["choices"][0]["text"] == text
    assert answer(other)["choices"][0]["text"] != text
