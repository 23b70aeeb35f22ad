"""Values in words for people: `counted(1, "notebook run")` is "1 notebook run", never "1 runs";
`as_source` writes a value as a parameters cell does."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["as_source", "counted"]


def counted(n: int, singular: str, plural: str | None = None) -> str:
    """`n` and the noun in the number it takes; `plural` where adding "s" is wrong."""
    return f"{n} {singular if n == 1 else plural or singular + 's'}"


def as_source(value: Any) -> str:
    """Python source for a plain value, as a parameters cell (and papermill) writes one: strings
    in double quotes, a tuple as a list."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(as_source(v) for v in value) + "]"
    return repr(value)
