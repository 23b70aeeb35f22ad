"""What a worker's ingest processes need of its engine: the request rules and the tokenizer.

With `--api-processes N` above 1 a worker parses, validates and tokenizes requests in N
processes and sends only token ids to the one process that owns the engine. Those
processes must refuse exactly what the engine refuses, with the same messages, and hand
it exactly the ids it would have computed itself, so:

- the id checks live here once (`check_token_ids`), and the engine's own path calls them;
- the tokenizer an ingest process runs is the engine's own, serialised (the `tokenizers`
  backend that transformers' fast tokenizer wraps), and the engine proves on probe texts
  that the copy gives the ids its own tokenizer gives before it hands the copy out;
- an engine without a device (hash) computes its vectors in the ingest process itself:
  there is nothing to feed, so nothing crosses a process boundary.

Ingest processes import neither torch nor transformers: only `tokenizers` and numpy.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..errors import EngineError
from .base import EngineOptions, InvalidInput, are_texts, check_length

if TYPE_CHECKING:
    import numpy as np

    from .base import Embeddings

# Texts whose ids the serialised tokenizer must reproduce before ingest processes may use it:
# spaces at both ends, digits, punctuation, accents, CJK, an emoji, a newline and a tab.
PROBES = (
    "hello world",
    "  The quick brown fox jumps over the lazy dog.  ",
    "Numbers 3.14159 and 2,718 and -42",
    "naïve café résumé",
    "嵌入模型 测试",
    "emoji 😀 and symbols <>{}[]|\\",
    "line one\nline two\ttabbed",
    "x",
)


@dataclass(frozen=True, kw_only=True)
class IngestSpec:
    """Everything an ingest process needs to build its side of an engine; plain JSON data."""

    engine: str  # the engine's name, as `--engine` spells it
    dim: int
    max_model_len: int
    supports_dimensions: bool
    local: bool  # True: the ingest process computes the vectors itself (no device to feed)
    vocab_size: int = 0
    tokenizer_json: str = ""  # the engine's backend tokenizer, `tokenizers.Tokenizer.to_str()`

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> IngestSpec:
        return cls(**json.loads(text))


def check_token_ids(seqs: Sequence[Sequence[int]], vocab_size: int) -> None:
    """Refuse a token id the model has no embedding for (the engine's rule, shared by both paths)."""
    for i, ids in enumerate(seqs):
        if max(ids) >= vocab_size:
            raise InvalidInput(f"input[{i}] has a token id outside the vocabulary (size {vocab_size})")


def check_lengths(seqs: Sequence[Sequence[int]], max_model_len: int) -> None:
    for i, ids in enumerate(seqs):
        check_length(len(ids), max_model_len, i)


def backend_copy(tokenizer: Any) -> str:
    """The serialised backend of a transformers fast tokenizer, once it is proven to give the same ids.

    EngineError where it cannot be: a slow tokenizer, or one whose Python side changes the ids.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise EngineError(
            "this model's tokenizer has no fast (tokenizers) backend, which ingest processes need; "
            "run the worker with --api-processes 1"
        )
    from tokenizers import Tokenizer

    text = backend.to_str()
    copy = Tokenizer.from_str(text)
    theirs = [list(ids) for ids in tokenizer(list(PROBES), add_special_tokens=True)["input_ids"]]
    ours = [e.ids for e in copy.encode_batch(list(PROBES), add_special_tokens=True)]
    single = [copy.encode(text, add_special_tokens=True).ids for text in PROBES]
    if not ours == single == theirs:
        raise EngineError(
            "this model's tokenizer gives other ids than its serialised backend; "
            "run the worker with --api-processes 1"
        )
    return text


def token_ingest_spec(engine: Any, *, tokenizer: Any, vocab_size: int) -> IngestSpec:
    """The spec of an engine that feeds a device: ingest processes tokenize, the engine computes."""
    return IngestSpec(
        engine=engine.name,
        dim=engine.dim,
        max_model_len=engine.max_model_len,
        supports_dimensions=engine.supports_dimensions,
        local=False,
        vocab_size=vocab_size,
        tokenizer_json=backend_copy(tokenizer),
    )


class TokenIngest:
    """An ingest process's side of a device engine: inputs in, validated token ids out."""

    def __init__(self, spec: IngestSpec) -> None:
        from tokenizers import Tokenizer

        if not spec.tokenizer_json:
            raise EngineError(f"the {spec.engine} engine handed its ingest processes no tokenizer")
        self.spec = spec
        self._tokenizer = Tokenizer.from_str(spec.tokenizer_json)

    def tokenize(self, inputs: Sequence[str] | Sequence[Sequence[int]]) -> list[list[int]]:
        """The engine's `tokenize`, outside the engine: the same ids, the same refusals."""
        if are_texts(inputs):
            # One input: `encode`, which skips the batch path's hand-off to the thread pool.
            if len(inputs) == 1:
                seqs = [self._tokenizer.encode(inputs[0], add_special_tokens=True).ids]
            else:
                seqs = [e.ids for e in self._tokenizer.encode_batch(list(inputs), add_special_tokens=True)]
        else:
            seqs = [list(ids) for ids in inputs]
            check_token_ids(seqs, self.spec.vocab_size)
        check_lengths(seqs, self.spec.max_model_len)
        return seqs


@runtime_checkable
class EmbedsInline(Protocol):
    """An engine that computes on the calling thread, with no device to wait for."""

    def embed_sync(
        self, inputs: Sequence[str] | Sequence[Sequence[int]], *, dimensions: int | None = None
    ) -> Embeddings: ...


class LocalIngest:
    """An engine with no device, run whole in the ingest process (the hash engine)."""

    def __init__(self, spec: IngestSpec) -> None:
        from . import create_engine

        self.spec = spec
        engine = create_engine(spec.engine, EngineOptions(dim=spec.dim, max_model_len=spec.max_model_len))
        # Only an engine with `runs_in_ingest` (the hash engine) gets here, and it has embed_sync.
        if not isinstance(engine, EmbedsInline):
            raise EngineError(f"the {spec.engine} engine cannot embed inside an ingest process")
        self.engine: EmbedsInline = engine

    def embed(self, inputs: Sequence[str] | Sequence[Sequence[int]], *, dimensions: int | None) -> Embeddings:
        return self.engine.embed_sync(inputs, dimensions=dimensions)


def pack_ids(seqs: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(lengths, ids) as int32: what crosses to the engine process for one request."""
    import numpy as np

    lengths = np.fromiter((len(s) for s in seqs), dtype=np.int32, count=len(seqs))
    if len(seqs) == 1:
        return lengths, np.asarray(seqs[0], dtype=np.int32)
    return lengths, np.fromiter((t for s in seqs for t in s), dtype=np.int32, count=int(lengths.sum()))
