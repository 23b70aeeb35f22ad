"""The messages a worker's ingest processes and its engine process exchange over a `Channel`.

Fixed binary layouts, no pickling: a 24-byte head, then int32 token ids (lengths first) one
way and float32 vectors the other. Only the rare messages (a failure, `/health`'s engine
info) carry JSON. An embed request's head and a vectors reply's end with the moment it was
sent, in microseconds of the machine's monotonic clock modulo 2**32 (which every process
reads alike), so the receiver can tell how long it travelled and waited.
"""

from __future__ import annotations

import json
import struct
import time
from typing import Any

import numpy as np

# kind, request id, then per kind: (sequences, tokens, dimensions) or (rows, dim, -), and the stamp
HEAD = struct.Struct("<IIIIiI")
_WRAP_US = 1 << 32
# ingest -> engine
EMBED, DESCRIBE, READY = 1, 2, 3
# engine -> ingest
VECTORS, FAILED, INFO = 11, 12, 13


def head(view: memoryview) -> tuple[int, int, int, int, int]:
    kind, request_id, count, total, dimensions, _stamp = HEAD.unpack_from(view)
    return kind, request_id, count, total, dimensions


def stamp_now() -> int:
    return int(time.monotonic() * 1e6) % _WRAP_US


def sent_at(view: memoryview, now: float) -> float:
    """When the message was sent, in monotonic seconds: `now` less its age (at most 2**32 us)."""
    age_us = (int(now * 1e6) - HEAD.unpack_from(view)[5]) % _WRAP_US
    return now - age_us / 1e6


def embed_request(
    request_id: int, lengths: np.ndarray, ids: np.ndarray, dimensions: int | None, stamp: int = 0
) -> bytes:
    return b"".join(
        (
            HEAD.pack(
                EMBED, request_id, len(lengths), len(ids), -1 if dimensions is None else dimensions, stamp
            ),
            lengths.tobytes(),
            ids.tobytes(),
        )
    )


def embed_sequences(view: memoryview, count: int, tokens: int) -> list[np.ndarray]:
    """The request's sequences as int32 arrays, copied out of the ring (which is reused at once)."""
    lengths = np.frombuffer(view, dtype=np.int32, count=count, offset=HEAD.size).tolist()
    ids = np.frombuffer(view, dtype=np.int32, count=tokens, offset=HEAD.size + 4 * count).copy()
    if count == 1:
        return [ids]
    seqs, start = [], 0
    for n in lengths:
        seqs.append(ids[start : start + n])
        start += n
    return seqs


def vectors_reply(request_id: int, vectors: np.ndarray) -> bytes:
    rows, dim = vectors.shape
    return (
        HEAD.pack(VECTORS, request_id, rows, dim, 0, stamp_now())
        + np.ascontiguousarray(vectors, np.float32).tobytes()
    )


def read_vectors(view: memoryview, rows: int, dim: int) -> np.ndarray:
    return np.frombuffer(view, dtype=np.float32, count=rows * dim, offset=HEAD.size).reshape(rows, dim).copy()


def json_message(kind: int, request_id: int, payload: Any) -> bytes:
    return HEAD.pack(kind, request_id, 0, 0, 0, 0) + json.dumps(payload).encode()


def read_json(view: memoryview) -> Any:
    return json.loads(bytes(view[HEAD.size :]))
