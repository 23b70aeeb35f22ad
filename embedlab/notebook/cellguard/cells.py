"""What a notebook cell's code reads and sets, and whether it only sets values (a parameters cell).

Read from the cell's source as the shell runs it (magics already turned into calls), by
`ast`; a cell Python cannot parse failed before it ran, and is read line by line.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

__all__ = ["CellCode"]

# `name =` or `name: type =` at the start of a line, for a cell that does not parse.
_ASSIGNED_LINE = re.compile(r"([A-Za-z_]\w*)\s*(?::[^=]*)?=(?!=)")


@dataclass(frozen=True)
class CellCode:
    """The names a cell's code reads before setting them, the names it sets, and whether it
    only sets values (`sets_values_only`: the shape of a parameters cell)."""

    reads: frozenset[str] = frozenset()
    writes: frozenset[str] = frozenset()
    sets_values_only: bool = False

    @classmethod
    def of(cls, source: str) -> CellCode:
        """Read `source` (Python, magics already transformed); one that does not parse is read by line."""
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return cls._by_line(source)
        writes = frozenset(_bound_names(tree.body))
        loads = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        updated = {
            n.target.id
            for n in ast.walk(tree)
            if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name)
        }
        return cls(
            reads=frozenset((loads - writes) | updated),
            writes=writes,
            sets_values_only=bool(tree.body) and all(_sets_a_value(s) for s in tree.body) and bool(writes),
        )

    @classmethod
    def _by_line(cls, source: str) -> CellCode:
        """A cell Python cannot parse (it failed before running): the names its lines start assigning."""
        writes: set[str] = set()
        only_values = True
        for line in source.splitlines():
            if not line.strip() or line.lstrip().startswith("#") or line[0].isspace() or line[0] in ")]}":
                continue  # blank, a comment, or a continuation of the statement above
            match = _ASSIGNED_LINE.match(line)
            if match:
                writes.add(match.group(1))
            else:
                only_values = False
        return cls(writes=frozenset(writes), sets_values_only=only_values and bool(writes))


def _bound_names(body: Iterable[ast.stmt]) -> Iterator[str]:
    """The names a module-level block binds (not those bound inside its functions or classes)."""
    for node in _module_scope(body):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            yield node.id
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node.name
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name != "*":
                    yield alias.asname or alias.name.split(".")[0]
        elif isinstance(node, ast.ExceptHandler) and node.name:
            yield node.name
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            yield node.name
        elif isinstance(node, ast.MatchMapping) and node.rest:
            yield node.rest


def _module_scope(body: Iterable[ast.stmt]) -> Iterator[ast.AST]:
    """Every node of `body` that runs in the module's scope: the bodies of defs, classes,
    lambdas and comprehensions are left out (their defs and classes themselves are not)."""
    stack: list[ast.AST] = list(body)
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            stack.extend(node.decorator_list)
            continue
        if isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            continue
        stack.extend(ast.iter_child_nodes(node))


def _sets_a_value(statement: ast.stmt) -> bool:
    if isinstance(statement, ast.Assign):
        return all(_plain_target(t) for t in statement.targets)
    if isinstance(statement, ast.AnnAssign):
        return isinstance(statement.target, ast.Name) and statement.value is not None
    # A docstring or a bare `...` sets nothing but does nothing either.
    return isinstance(statement, ast.Pass) or (
        isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
    )


def _plain_target(target: ast.expr) -> bool:
    if isinstance(target, (ast.Tuple, ast.List)):
        return all(_plain_target(t) for t in target.elts)
    return isinstance(target, ast.Name)
