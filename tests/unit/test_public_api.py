"""The curated public API: every exported name resolves, and type checkers see the same list."""

from __future__ import annotations

import ast
from pathlib import Path

import embedlab


def test_every_exported_name_resolves_from_its_module() -> None:
    missing = [name for name in embedlab.__all__ if getattr(embedlab, name, None) is None]
    assert not missing, missing


def test_type_checking_block_reexports_exactly_the_exports() -> None:
    tree = ast.parse(Path(embedlab.__file__).read_text())
    block = next(
        n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING"
    )
    seen = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom)
        for alias in node.names:
            assert alias.asname == alias.name, (
                f"{alias.name}: write `{alias.name} as {alias.name}` (explicit re-export)"
            )
            seen[alias.name] = node.module
    assert seen == embedlab._EXPORTS
