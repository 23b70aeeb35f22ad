"""Counts in words for people: `counted(1, "notebook run")` is "1 notebook run", never "1 runs"."""

from __future__ import annotations

__all__ = ["counted"]


def counted(n: int, singular: str, plural: str | None = None) -> str:
    """`n` and the noun in the number it takes; `plural` where adding "s" is wrong."""
    return f"{n} {singular if n == 1 else plural or singular + 's'}"
