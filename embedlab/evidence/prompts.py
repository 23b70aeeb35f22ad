"""Prompts built to a stated shared-prefix structure, counted in the model's own tokens.

    groups = prefix_groups(4, 8, prefix_tokens=256, suffix_tokens=16, nonce="a1b2", model_path=None)
    groups.prompts[0]   # the 8 prompts of group 0: one prefix of >= 256 tokens, then a suffix each

A KV-aware router's promise is about prefixes: requests that share one go where it is
cached. Each group's prompts share a prefix that begins with the run's nonce and the group's
number, so no two groups (and no two runs) share even their first block; each prompt then
ends in a suffix of its own. Lengths are counted with the model directory's tokenizer
(`tokenizer.json`, the tokenizers library), or in whitespace words where there is none, which
is how embedlab's own worker counts (engines/kv.py). The counts are stated beside the verdict.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..engines.kv import words

__all__ = ["PromptGroups", "prefix_groups", "token_counter"]

# Common words: one token each in most vocabularies, so a count in words is near one in tokens.
_VOCABULARY = (
    "the of and to in is was for on that with as by at from his her they this which are be had it not "
    "have one all their were there been has more when time who will also some into other its two after "
    "first new can only may about over most such then these would many them made used city world year "
    "state part under known later people between during both three being while well since where each "
    "school before area through well family found war early work year group small name life long house "
    "water river north south east west music game team play film book field line power land place town"
).split()


def token_counter(model_path: str | Path | None) -> tuple[Callable[[str], int], str]:
    """How to count a prompt's tokens for this model, and what counts them (for the verdict's words)."""
    tokenizer_file = Path(model_path) / "tokenizer.json" if model_path is not None else None
    if tokenizer_file is not None and tokenizer_file.is_file():
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(tokenizer_file))
        return (lambda text: len(tokenizer.encode(text, add_special_tokens=False).ids)), (
            f"{Path(model_path or '').name}'s tokenizer"
        )
    return (lambda text: len(words(text))), "whitespace words (embedlab's worker)"


@dataclass(frozen=True)
class PromptGroups:
    prompts: tuple[tuple[str, ...], ...]  # group -> its prompts
    prefix_tokens: int  # the shortest group prefix, in tokens
    prompt_tokens: int  # the longest prompt, in tokens
    counted_by: str

    def describe(self) -> str:
        per = len(self.prompts[0]) if self.prompts else 0
        return (
            f"{len(self.prompts)} groups of {per} prompts; each group shares a prefix of at least "
            f"{self.prefix_tokens} tokens, each prompt at most {self.prompt_tokens} ({self.counted_by})"
        )


def _text(rng: random.Random, count: Callable[[str], int], head: str, tokens: int) -> str:
    """`head` then common words until the text holds at least `tokens` tokens."""
    parts = [head]
    while count(" ".join(parts)) < tokens:
        parts.extend(rng.choice(_VOCABULARY) for _ in range(max(1, (tokens - count(" ".join(parts))) // 2)))
    return " ".join(parts)


def prefix_groups(
    groups: int,
    per_group: int,
    *,
    prefix_tokens: int,
    suffix_tokens: int,
    nonce: str,
    model_path: str | Path | None = None,
    seed: int = 0,
) -> PromptGroups:
    """`groups` groups of `per_group` prompts each (see the module's docstring)."""
    count, counted_by = token_counter(model_path)
    rng = random.Random(f"{nonce}-{seed}")
    prompts: list[tuple[str, ...]] = []
    prefixes: list[int] = []
    longest = 0
    for g in range(groups):
        prefix = _text(rng, count, f"{nonce} group {g}:", prefix_tokens)
        prefixes.append(count(prefix))
        group = []
        for r in range(per_group):
            prompt = prefix + " " + _text(rng, count, f"question {r}:", suffix_tokens)
            longest = max(longest, count(prompt))
            group.append(prompt)
        prompts.append(tuple(group))
    return PromptGroups(
        prompts=tuple(prompts),
        prefix_tokens=min(prefixes, default=0),
        prompt_tokens=longest,
        counted_by=counted_by,
    )


def distinct_prompts(n: int, *, tokens: int, nonce: str, model_path: str | Path | None = None) -> list[str]:
    """`n` prompts that share nothing past their nonce (each its own first block): new prefixes."""
    groups = prefix_groups(n, 1, prefix_tokens=tokens, suffix_tokens=1, nonce=nonce, model_path=model_path)
    return [group[0] for group in groups.prompts]


def flatten(groups: Sequence[Sequence[str]]) -> list[str]:
    return [prompt for group in groups for prompt in group]
