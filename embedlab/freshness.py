"""What a notebook-facing call takes and makes, said for a guard to check; nothing here knows IPython.

The calls a notebook makes on its plans, results, deployments, explorers, bursts, sweeps
and batteries declare it: `guarded("plan")` marks a call that makes a plan from what it
is given, `check_fresh(thing)` a call that uses `thing`, `made(thing, "explorer")` an
object made in a constructor. With no guard installed (a script, the CLI, the tests, a
kernel without the extension) they only call through.

The guard is the notebook's cell guard (`embedlab.notebook.cellguard`), an IPython
extension that the `embedlab` kernel loads: it follows the shell's cells, installs itself
here (`install_guard`), and refuses an object a failed cell left stale with
`EarlierCellFailedError`. As a pluggy host declares the hooks its plugins implement, the
library says what it takes and makes, and never asks whether it runs in a notebook.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, ParamSpec, Protocol, TypeVar

__all__ = ["Guard", "check_fresh", "guarded", "install_guard", "made"]

P = ParamSpec("P")
R = TypeVar("R")


class Guard(Protocol):
    """What checks a notebook-facing call: the cell guard, while a shell follows its cells."""

    def check(self, things: Sequence[Any]) -> None:
        """Raise `EarlierCellFailedError` if a call on `things`, now, would show what a failed cell left."""

    def made(self, thing: Any, kind: str, parents: Sequence[Any]) -> None:
        """`thing`, a `kind` (plan, result, ...), was just made from `parents` (any objects)."""


_guard: Guard | None = None


def install_guard(guard: Guard | None) -> Guard | None:
    """Make `guard` the one that checks (None: none does); returns the one it replaces."""
    global _guard
    previous, _guard = _guard, guard
    return previous


def check_fresh(*things: Any) -> None:
    """A call uses `things` (None is skipped): the guard, if one is installed, may refuse them."""
    guard = _guard
    if guard is not None:
        guard.check([t for t in things if t is not None])


def made(thing: R, kind: str, *, parents: Sequence[Any] = ()) -> R:
    """This call made `thing`, a `kind`, from `parents`; returns `thing`."""
    guard = _guard
    if guard is not None:
        guard.made(thing, kind, parents)
    return thing


def guarded(makes: str | None = None) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """A notebook-facing call: what it is given is checked (`check_fresh`), and what it returns
    is recorded as a `makes`, made from what it was given."""

    def wrap(function: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(function)
        def call(*args: P.args, **kwargs: P.kwargs) -> R:
            guard = _guard
            if guard is None:
                return function(*args, **kwargs)
            given = [*args, *kwargs.values()]
            guard.check(given)
            result = function(*args, **kwargs)
            if makes is not None and result is not None:
                guard.made(result, makes, given)
            return result

        return call

    return wrap
