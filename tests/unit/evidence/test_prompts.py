"""Prompts built to a shared-prefix structure (evidence/prompts.py), counted in words or a model's tokens."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

import pytest

from embedlab.engines.kv import BLOCK_SIZE, block_hashes, words
from embedlab.evidence.prompts import distinct_prompts, flatten, prefix_groups, token_counter

NONCE = "a1b2c3d4"  # the scenarios' nonce is secrets.token_hex(4): 8 hex digits


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model directory with the tiny Qwen3's tokenizer.json (what cached_tiny_model ships), built
    without torch or the model's weights: the tokenizer is all that counts prompts."""
    from embedlab.engines.tiny_tokenizers import write_qwen_tokenizer

    path = tmp_path_factory.mktemp("tiny-qwen3")
    write_qwen_tokenizer(path, model_max_length=32768)
    return path


def common_prefix(a: Sequence[object], b: Sequence[object]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


# -- token_counter -----------------------------------------------------------------------------


def test_without_a_model_prompts_are_counted_in_whitespace_words(tmp_path: Path) -> None:
    for where in (None, tmp_path):  # no directory, or one without tokenizer.json
        count, counted_by = token_counter(where)
        assert count("the quick  brown\nfox") == 4
        assert count("") == 0
        assert "whitespace" in counted_by


def test_with_a_tokenizer_prompts_are_counted_in_its_tokens(model_dir: Path) -> None:
    from tokenizers import Tokenizer

    count, counted_by = token_counter(model_dir)
    assert model_dir.name in counted_by and "tokenizer" in counted_by
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    for text in ("the quick brown fox", "zzqxjvwk", "numbers 2024 and 42", "a1b2c3d4 group 7:"):
        plain = tokenizer.encode(text, add_special_tokens=False).ids
        assert count(text) == len(plain)
        # The tiny Qwen3 appends <|endoftext|> as a special token: that one is not the prompt's.
        assert len(tokenizer.encode(text).ids) == len(plain) + 1
    # A word outside a 1024-token vocabulary takes several tokens: these are not words.
    assert count("zzqxjvwk") > 1 == len(words("zzqxjvwk"))
    assert count(str(model_dir)) != 0  # accepts str as well as Path
    assert token_counter(str(model_dir))[0]("zzqxjvwk") == count("zzqxjvwk")


# -- prefix_groups in whitespace words (embedlab's worker) ---------------------------------------


def test_group_structure_in_words() -> None:
    groups = prefix_groups(3, 4, prefix_tokens=40, suffix_tokens=10, nonce=NONCE)
    assert len(groups.prompts) == 3
    assert all(len(group) == 4 for group in groups.prompts)
    assert len(set(flatten(groups.prompts))) == 12, "every prompt is its own"
    # Each word is one token here, so the prefix is exactly as long as asked, and so is each prompt.
    assert groups.prefix_tokens == 40
    assert groups.prompt_tokens == 50
    assert all(len(words(p)) == 50 for p in flatten(groups.prompts))
    assert "whitespace" in groups.counted_by
    for group in groups.prompts:
        for a, b in itertools.combinations(group, 2):
            shared = common_prefix(words(a), words(b))
            assert groups.prefix_tokens <= shared < len(words(a)), "share the prefix, then differ"
        # and the shared prefix is a string prefix, whole words.
        head = " ".join(words(group[0])[:40])
        assert all(p.startswith(head + " ") for p in group)


def test_groups_share_no_leading_block_and_their_prompts_share_whole_blocks() -> None:
    groups = prefix_groups(5, 3, prefix_tokens=3 * BLOCK_SIZE, suffix_tokens=BLOCK_SIZE, nonce=NONCE)
    first_blocks = []
    for group in groups.prompts:
        hashes = [block_hashes(words(p)) for p in group]
        assert all(len(h) == 4 for h in hashes)
        # The prompts of a group: their 3 prefix blocks are one (a KV cache hit of 3 blocks).
        assert all(h[:3] == hashes[0][:3] for h in hashes)
        assert len({h[3] for h in hashes}) == len(group)
        first_blocks.append(hashes[0][0])
    assert len(set(first_blocks)) == len(groups.prompts), "no two groups share even their first block"


def test_the_nonce_makes_two_runs_differ_and_the_same_nonce_repeats() -> None:
    one = prefix_groups(2, 2, prefix_tokens=BLOCK_SIZE, suffix_tokens=4, nonce="00000001")
    again = prefix_groups(2, 2, prefix_tokens=BLOCK_SIZE, suffix_tokens=4, nonce="00000001")
    other = prefix_groups(2, 2, prefix_tokens=BLOCK_SIZE, suffix_tokens=4, nonce="00000002")
    assert one.prompts == again.prompts
    firsts = {block_hashes(words(p))[0] for p in flatten(one.prompts)}
    others = {block_hashes(words(p))[0] for p in flatten(other.prompts)}
    assert not firsts & others, "a second run shares no block with the first"
    assert all(p.startswith("00000001 ") for p in flatten(one.prompts))


def test_describe_states_the_counts() -> None:
    groups = prefix_groups(2, 3, prefix_tokens=20, suffix_tokens=5, nonce=NONCE)
    text = groups.describe()
    assert text.startswith("2 groups of 3 prompts")
    assert "at least 20 tokens" in text and "at most 25" in text and groups.counted_by in text


def test_no_groups() -> None:
    groups = prefix_groups(0, 3, prefix_tokens=20, suffix_tokens=5, nonce=NONCE)
    assert groups.prompts == () and groups.prefix_tokens == 0 and groups.prompt_tokens == 0
    assert groups.describe().startswith("0 groups of 0 prompts")


# -- prefix_groups counted in a real tokenizer --------------------------------------------------


def test_counts_hold_in_the_models_tokens(model_dir: Path) -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))

    def ids(text: str) -> list[int]:
        return list(tokenizer.encode(text, add_special_tokens=False).ids)

    groups = prefix_groups(3, 3, prefix_tokens=64, suffix_tokens=8, nonce=NONCE, model_path=model_dir)
    assert model_dir.name in groups.counted_by
    assert groups.prefix_tokens >= 64
    assert groups.prompt_tokens == max(len(ids(p)) for p in flatten(groups.prompts))
    assert groups.prompt_tokens >= 64 + 8
    leading = []
    for group in groups.prompts:
        tokenized = [ids(p) for p in group]
        for a, b in itertools.combinations(tokenized, 2):
            shared = common_prefix(a, b)
            assert groups.prefix_tokens <= shared < min(len(a), len(b)), "share the prefix, then differ"
        leading.append(tuple(tokenized[0][:BLOCK_SIZE]))
    # In the model's tokens too, no two groups share their first block.
    assert len(set(leading)) == len(groups.prompts)


def test_distinct_prompts_share_no_first_block() -> None:
    prompts = distinct_prompts(6, tokens=2 * BLOCK_SIZE, nonce=NONCE)
    assert len(prompts) == 6
    assert all(len(words(p)) >= 2 * BLOCK_SIZE for p in prompts)
    assert len({block_hashes(words(p))[0] for p in prompts}) == 6
    assert all(p.startswith(NONCE + " ") for p in prompts)


def test_distinct_prompts_in_the_models_tokens(model_dir: Path) -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    prompts = distinct_prompts(6, tokens=2 * BLOCK_SIZE, nonce=NONCE, model_path=model_dir)
    tokenized = [tokenizer.encode(p, add_special_tokens=False).ids for p in prompts]
    assert all(len(ids) >= 2 * BLOCK_SIZE for ids in tokenized)
    assert len({tuple(ids[:BLOCK_SIZE]) for ids in tokenized}) == 6
