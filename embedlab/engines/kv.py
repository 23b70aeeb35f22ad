"""A simulated prefix (KV) cache: what a generating worker keeps of the prompts it served.

embedlab's worker answers completions and chat with the hash engine's stand-in for tokens
(whitespace words) and keeps, per worker, the blocks of `block_size` tokens it has seen,
as vLLM's prefix cache keeps KV blocks: a block is named by a hash chained over every
token before it, so two prompts share a block only where they share the whole prefix up
to its end. The cache evicts the least recently used block past its capacity and tells
what it stored and removed as events, which a KV-aware router applies to its own index of
what each worker holds (Dynamo's KV events, `serving/frontend/kv_router.py`).

Both sides hash with this module, so the router's index and the worker's cache name the
same blocks the same way.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["BLOCK_SIZE", "CACHE_BLOCKS", "KvEvent", "PrefixCache", "block_hashes", "words"]

BLOCK_SIZE = 16  # tokens per block (vLLM's default for CUDA is 16; its mocker's 64)
CACHE_BLOCKS = 4096  # blocks a worker keeps before it evicts


def words(text: str) -> list[str]:
    """The hash engine's tokens: whitespace-separated words (its usage counts them too)."""
    return text.split()


def block_hashes(tokens: Sequence[str] | Sequence[int], block_size: int = BLOCK_SIZE) -> list[int]:
    """The chained hash of each full block of `tokens`; a partial last block has none (as vLLM's)."""
    hashes: list[int] = []
    parent = b""
    for start in range(0, len(tokens) - block_size + 1, block_size):
        chunk = "\x1f".join(map(str, tokens[start : start + block_size])).encode()
        digest = hashlib.blake2b(parent + b"\x1e" + chunk, digest_size=8).digest()
        hashes.append(int.from_bytes(digest, "big") >> 1)  # a positive int64, as JSON carries it
        parent = digest
    return hashes


@dataclass(frozen=True, slots=True)
class KvEvent:
    """Blocks a worker stored or removed; `seq` orders one worker's events from 1."""

    seq: int
    kind: Literal["stored", "removed"]
    blocks: tuple[int, ...]

    def to_json(self) -> dict[str, object]:
        return {"seq": self.seq, "kind": self.kind, "blocks": list(self.blocks)}

    @classmethod
    def from_json(cls, raw: dict[str, object]) -> KvEvent:
        kind = raw["kind"]
        if kind not in ("stored", "removed"):
            raise ValueError(f"unknown KV event kind {kind!r}")
        blocks = raw["blocks"]
        if not isinstance(blocks, list):
            raise ValueError("a KV event's blocks must be a list")
        return cls(seq=int(str(raw["seq"])), kind=kind, blocks=tuple(int(b) for b in blocks))


@dataclass
class PrefixCache:
    """One worker's blocks, least recently used first, and the events its changes made."""

    capacity: int = CACHE_BLOCKS
    _blocks: OrderedDict[int, None] = field(default_factory=OrderedDict)
    _seq: int = 0

    def overlap(self, hashes: Sequence[int]) -> int:
        """How many leading blocks of a prompt are cached: its prefix hit, in blocks."""
        hit = 0
        for h in hashes:
            if h not in self._blocks:
                break
            hit += 1
        return hit

    def serve(self, hashes: Sequence[int]) -> tuple[int, list[KvEvent]]:
        """Serve a prompt: its prefix hit in blocks, and the events that storing it made."""
        hit = self.overlap(hashes)
        new = [h for h in hashes if h not in self._blocks]
        for h in hashes:  # every block this prompt used is now the most recently used
            self._blocks[h] = None
            self._blocks.move_to_end(h)
        events: list[KvEvent] = []
        if new:
            events.append(self._event("stored", new))
        evicted = []
        while len(self._blocks) > self.capacity:
            evicted.append(self._blocks.popitem(last=False)[0])
        if evicted:
            events.append(self._event("removed", evicted))
        return hit, events

    def _event(self, kind: Literal["stored", "removed"], blocks: Iterable[int]) -> KvEvent:
        self._seq += 1
        return KvEvent(seq=self._seq, kind=kind, blocks=tuple(blocks))

    def __len__(self) -> int:
        return len(self._blocks)
