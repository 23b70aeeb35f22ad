"""JSON for people and browsers: NaN and infinities become null, paths become strings."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["load_json", "write_json"]


def write_json(path: str | Path, data: Any) -> Path:
    """Write `data` to `path`, parents created."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(_finite(data), indent=2, default=str) + "\n")
    return target


def load_json(path: str | Path) -> Any:
    return json.loads(Path(path).read_text())


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_finite(v) for v in value]
    return value
