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


def test_a_renamed_name_still_resolves_with_a_deprecation_warning() -> None:
    import warnings

    from embedlab.scenarios.battery import ConformanceTable

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = embedlab.ConformanceMatrix
    assert old is ConformanceTable
    assert [w.category for w in caught] == [DeprecationWarning]
    assert "embedlab.ConformanceTable" in str(caught[0].message)


# move.py: keep (the old names, on purpose)
def test_the_registrys_names_once_in_embedlab_stacks_still_resolve_with_a_warning() -> None:
    import warnings

    import embedlab.stacks

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        base, stack_class = embedlab.stacks.BaseStack, embedlab.stacks.stack_class
    assert base is embedlab.BaseStack and stack_class is embedlab.stack_class
    assert [w.category for w in caught] == [DeprecationWarning, DeprecationWarning]
    assert "use embedlab.BaseStack" in str(caught[0].message)
    # /move.py
