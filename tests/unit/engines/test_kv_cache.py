"""The simulated prefix cache (engines/kv.py): chained block hashes, an LRU of blocks, its KV events."""

from __future__ import annotations

import json
import random
from typing import Literal

import pytest

from embedlab.engines.kv import BLOCK_SIZE, CACHE_BLOCKS, KvEvent, PrefixCache, block_hashes, words


def tokens(n: int, tag: str = "t") -> list[str]:
    return [f"{tag}{i}" for i in range(n)]


# -- block_hashes ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "blocks"),
    [
        (0, 0),
        (BLOCK_SIZE - 1, 0),
        (BLOCK_SIZE, 1),
        (BLOCK_SIZE + 1, 1),
        (3 * BLOCK_SIZE - 1, 2),
        (3 * BLOCK_SIZE, 3),
        (3 * BLOCK_SIZE + 5, 3),
    ],
)
def test_only_full_blocks_are_hashed(n: int, blocks: int) -> None:
    assert len(block_hashes(tokens(n))) == blocks


def test_block_size_is_a_parameter() -> None:
    assert len(block_hashes(tokens(10), block_size=4)) == 2
    assert len(block_hashes(tokens(12), block_size=4)) == 3
    # Blocks of 4 and blocks of 8 name different blocks, even where they start alike.
    assert block_hashes(tokens(8), block_size=4)[0] != block_hashes(tokens(8), block_size=8)[0]


def test_a_partial_last_block_changes_nothing() -> None:
    full = tokens(2 * BLOCK_SIZE)
    assert block_hashes(full + ["x", "y", "z"]) == block_hashes(full)
    assert block_hashes(full + ["other"]) == block_hashes(full)


def test_equal_prefixes_give_equal_leading_hashes() -> None:
    shared = tokens(2 * BLOCK_SIZE, "shared")
    a = block_hashes(shared + tokens(2 * BLOCK_SIZE, "a"))
    b = block_hashes(shared + tokens(2 * BLOCK_SIZE, "b"))
    assert len(a) == len(b) == 4
    assert a[:2] == b[:2]
    assert a[2] != b[2] and a[3] != b[3]


@pytest.mark.parametrize("k", range(4))
def test_a_change_in_block_k_changes_hashes_k_onward_only(k: int) -> None:
    original = tokens(4 * BLOCK_SIZE)
    changed = list(original)
    changed[k * BLOCK_SIZE + BLOCK_SIZE // 2] = "changed"
    before, after = block_hashes(original), block_hashes(changed)
    assert before[:k] == after[:k]
    for j in range(k, 4):
        assert before[j] != after[j], f"block {j} must change with block {k} (hashes are chained)"


def test_hashes_are_chained_not_per_block() -> None:
    block = tokens(BLOCK_SIZE, "same")
    # The same tokens twice: the second block's name includes the first's.
    twice = block_hashes(block + block)
    assert twice[0] != twice[1]
    # The same second block behind different first blocks: different names.
    a = block_hashes(tokens(BLOCK_SIZE, "x") + block)
    b = block_hashes(tokens(BLOCK_SIZE, "y") + block)
    assert a[1] != b[1]


def test_token_boundaries_matter() -> None:
    assert block_hashes(["ab", "c"], block_size=2) != block_hashes(["a", "bc"], block_size=2)
    assert block_hashes(["a", "b"], block_size=2) != block_hashes(["b", "a"], block_size=2)


def test_hashes_are_deterministic_positive_int64() -> None:
    seq = tokens(5 * BLOCK_SIZE)
    first = block_hashes(seq)
    assert first == block_hashes(list(seq))
    assert len(set(first)) == 5
    for h in first:
        assert isinstance(h, int) and 0 <= h < 2**63
    # Token ids hash too (a real tokenizer's ids).
    ids = block_hashes(list(range(2 * BLOCK_SIZE)))
    assert len(ids) == 2 and all(0 <= h < 2**63 for h in ids)


def test_words_are_whitespace_separated() -> None:
    assert words("  the quick\tbrown\n\nfox ") == ["the", "quick", "brown", "fox"]
    assert words("") == []


# -- KvEvent -----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["stored", "removed"])
def test_event_round_trips_through_json(kind: Literal["stored", "removed"]) -> None:
    event = KvEvent(seq=3, kind=kind, blocks=(2**62, 1, 7))
    wire = json.loads(json.dumps(event.to_json()))
    assert wire == {"seq": 3, "kind": kind, "blocks": [2**62, 1, 7]}
    assert KvEvent.from_json(wire) == event


def test_event_from_json_coerces_seq_and_blocks() -> None:
    event = KvEvent.from_json({"seq": "5", "kind": "stored", "blocks": ["11", 12]})
    assert event == KvEvent(seq=5, kind="stored", blocks=(11, 12))


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ({"seq": 1, "kind": "cleared", "blocks": []}, "unknown KV event kind"),
        ({"seq": 1, "kind": "stored", "blocks": "1,2"}, "must be a list"),
        ({"seq": 1, "kind": "stored", "blocks": {"a": 1}}, "must be a list"),
    ],
)
def test_event_from_json_refuses_malformed(raw: dict[str, object], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        KvEvent.from_json(raw)


def test_event_from_json_refuses_missing_fields() -> None:
    with pytest.raises(KeyError):
        KvEvent.from_json({"kind": "stored", "blocks": [1]})


# -- PrefixCache -------------------------------------------------------------------------------


def test_default_capacity() -> None:
    assert PrefixCache().capacity == CACHE_BLOCKS


def test_cache_reports_the_overlap_of_a_stored_prefix() -> None:
    cache = PrefixCache()
    shared = tokens(3 * BLOCK_SIZE, "p")
    first = block_hashes(shared + tokens(BLOCK_SIZE, "a"))
    hit, events = cache.serve(first)
    assert hit == 0
    assert events == [KvEvent(1, "stored", tuple(first))]
    assert len(cache) == 4

    second = block_hashes(shared + tokens(2 * BLOCK_SIZE, "b"))
    assert cache.overlap(second) == 3
    hit, events = cache.serve(second)
    assert hit == 3
    assert events == [KvEvent(2, "stored", tuple(second[3:]))]
    assert len(cache) == 6
    # Served again: all cached, nothing stored, no event (and no sequence number spent).
    assert cache.serve(second) == (5, [])
    assert cache.serve(block_hashes(tokens(BLOCK_SIZE, "new")))[1][0].seq == 3


def test_overlap_counts_the_leading_run_only() -> None:
    cache = PrefixCache()
    cache.serve([10, 30])
    assert cache.overlap([10, 20, 30]) == 1
    assert cache.overlap([20, 10, 30]) == 0
    assert cache.overlap([]) == 0
    assert cache.overlap([10, 30, 40]) == 2


def test_lru_eviction_emits_removed_events() -> None:
    cache = PrefixCache(capacity=4)
    cache.serve([1, 2])
    cache.serve([3, 4])
    assert cache.serve([1, 2]) == (2, [])  # a hit, no event: 1 and 2 become the most recently used
    hit, events = cache.serve([5])
    assert hit == 0
    assert events == [KvEvent(3, "stored", (5,)), KvEvent(4, "removed", (3,))]
    assert len(cache) == 4
    assert cache.overlap([3]) == 0 and cache.overlap([4]) == 1
    assert cache.overlap([1, 2]) == 2
    hit, events = cache.serve([1, 6])
    assert hit == 1
    assert events == [KvEvent(5, "stored", (6,)), KvEvent(6, "removed", (4,))]


def test_a_prompt_longer_than_the_cache_keeps_its_tail() -> None:
    cache = PrefixCache(capacity=4)
    hit, events = cache.serve(list(range(6)))
    assert hit == 0
    assert events == [KvEvent(1, "stored", tuple(range(6))), KvEvent(2, "removed", (0, 1))]
    assert len(cache) == 4
    assert cache.overlap([2, 3, 4, 5]) == 4
    assert cache.overlap(list(range(6))) == 0


def test_capacity_holds_and_events_replay_to_the_cache() -> None:
    """A router applying a worker's events in order knows exactly what the worker holds."""
    rng = random.Random(7)
    cache = PrefixCache(capacity=20)
    replayed: set[int] = set()
    seen: set[int] = set()
    last_seq = 0
    prefixes = [tokens(BLOCK_SIZE * rng.randint(1, 4), f"g{g}-") for g in range(8)]
    for _ in range(300):
        prompt = rng.choice(prefixes) + tokens(BLOCK_SIZE * rng.randint(0, 3), f"s{rng.randint(0, 5)}-")
        hashes = block_hashes(prompt)
        expected_hit = cache.overlap(hashes)
        hit, events = cache.serve(hashes)
        assert hit == expected_hit
        assert len(cache) <= 20
        for event in events:
            assert event.seq == last_seq + 1, "one worker's events are numbered 1, 2, 3, ... without gaps"
            last_seq = event.seq
            assert event.blocks, "an event names at least one block"
            if event.kind == "stored":
                replayed.update(event.blocks)
            else:
                replayed.difference_update(event.blocks)
        seen.update(hashes)
        assert len(replayed) == len(cache)
    assert last_seq > 0
    for h in seen:
        assert (cache.overlap([h]) == 1) == (h in replayed)


def test_every_block_a_prompt_used_becomes_the_most_recent() -> None:
    """A block used again after a miss earlier in the prompt is kept over an older one."""
    cache = PrefixCache(capacity=3)
    cache.serve([1, 2, 3])
    cache.serve([9])  # evicts 1
    _, events = cache.serve([1, 2, 3])  # 1 is stored again; 9, the least recently used, goes
    assert [(e.kind, e.blocks) for e in events] == [("stored", (1,)), ("removed", (9,))]
    assert cache.overlap([1, 2, 3]) == 3
