"""A notebook cell never shows what an earlier run left, and refuses nothing else.

Run All in JupyterLab sends every cell at once. ipykernel aborts the requests already
queued when one fails, but executes those that arrive after its queue drained, so under
load the cells below a failed plan cell ran and showed the verdict, tables and figures
of the *previous* Run All (`plan` and `result` were still bound to it). Papermill runs
cells one at a time and stops at the first error, so only people were misled.

So each plan, result, deployment, explorer, burst, sweep and battery a notebook makes is
recorded with the cell execution that made it, the objects it was made from, and the
names that cell read. It is **stale** once a cell that would have replaced it failed:

- a failed cell that assigns (or would have assigned) a name bound to it, before or after
  the cell ran: the plan cell `plan = ScenarioPlan.from_params(...)`, the run cell
  `result = run_scenario(plan)`, the Start cell `dep = start_deployment(plan)`;
- a failed parameters cell (every statement a plain `name = value`) that sets a name the
  cell making it read, until a cell that succeeds sets that name again;
- or it was made from a stale object (a result from a stale plan, an explorer from a
  stale deployment).

Every notebook-facing call (`embedlab.freshness`: `guarded`, `check_fresh`) refuses a stale
argument with `EarlierCellFailedError`, and so does a call in a cell that reads a name a
failed parameters cell left behind. A failure anywhere else (a typo, one's own code, a figure
that broke) makes nothing stale. A refused cell passes on the failure it was refused for,
so every refusal down a Run All names the same cell: by its role and its latest failed
execution ("the plan cell (In [3]) failed (ConfigError: ...)"), the one furthest up the
notebook where several failed, and with what to do: fix that cell and run it again; run
a refused cell again once what it was refused for is put right; or, once every failure
is put right, run again the cell that makes the stale object. A failed verdict
(`CheckFailedError`) is a verdict on this run, not a broken run. Once a cell that
succeeds makes the object again, the new one is fresh.

This is an IPython extension, and the only part of embedlab that follows a shell. The
`embedlab` kernel loads it (its kernelspec passes `--ext embedlab.notebook.cellguard`, as
`python -m embedlab.notebook.kernelspec` writes it), so papermill, JupyterLab and VS Code
get it with the kernel; in another kernel, `%load_ext embedlab.notebook.cellguard`.
`load_ipython_extension` registers the shell's `pre_run_cell` and `post_run_cell` events
and installs the guard that the library's calls ask (`freshness.install_guard`); the
library itself never looks for a shell. Without the extension nothing is recorded and
nothing refuses.

The rule is all in `Ledger` (`cellguard.ledger`, no IPython in it), which reads each
cell's code with `CellCode` (`cellguard.cells`).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any

from ... import freshness
from .cells import CellCode
from .ledger import Ledger

__all__ = ["CellCode", "CellGuard", "Ledger", "load_ipython_extension", "unload_ipython_extension"]

# shell -> its ledger and the two hooks that feed it (weak: a cleared shell goes with its ledger).
_FOLLOWED: weakref.WeakKeyDictionary[Any, tuple[Ledger, Callable[[Any], None], Callable[[Any], None]]] = (
    weakref.WeakKeyDictionary()
)


class CellGuard:
    """The guard the library's calls ask (`freshness.Guard`): the running shell's ledger answers,
    in a shell the extension follows; elsewhere nothing refuses."""

    def check(self, things: Sequence[Any]) -> None:
        found = _active()
        if found is None:
            return
        shell, ledger = found
        stale = ledger.stale(things, shell.user_ns)
        if stale is not None:
            raise stale.error()

    def made(self, thing: Any, kind: str, parents: Sequence[Any]) -> None:
        found = _active()
        if found is not None:
            found[1].made(thing, kind, parents)


_GUARD = CellGuard()


def load_ipython_extension(shell: Any) -> None:
    """`%load_ext embedlab.notebook.cellguard` (or the kernel's `--ext`): follow this shell's cells.
    Loading it twice is harmless."""
    freshness.install_guard(_GUARD)
    if shell in _FOLLOWED:
        return
    ledger = Ledger()
    following = weakref.ref(shell)  # the hooks must not keep the shell alive through _FOLLOWED

    def pre_run_cell(info: Any) -> None:
        live = following()
        if live is not None:
            ledger.begin(_source(info), live.user_ns)

    def post_run_cell(result: Any) -> None:
        live = following()
        if live is None or result is None:  # result None: the kernel's own coroutine failed, no cell ran
            ledger.running = None
            return
        if ledger.running is None:
            ledger.begin(_source(result.info), live.user_ns)
        error = result.error_before_exec or result.error_in_exec
        ledger.end(cell=f"In [{result.execution_count}]", error=error, namespace=live.user_ns)

    shell.events.register("pre_run_cell", pre_run_cell)
    shell.events.register("post_run_cell", post_run_cell)
    _FOLLOWED[shell] = (ledger, pre_run_cell, post_run_cell)


def unload_ipython_extension(shell: Any) -> None:
    """Stop following this shell's cells, and forget what was recorded."""
    followed = _FOLLOWED.pop(shell, None)
    if followed is not None:
        shell.events.unregister("pre_run_cell", followed[1])
        shell.events.unregister("post_run_cell", followed[2])
    if not _FOLLOWED:
        freshness.install_guard(None)


def _active() -> tuple[Any, Ledger] | None:
    """The shell and its ledger while a cell of a followed shell runs; None otherwise."""
    from IPython import get_ipython

    shell = get_ipython()
    followed = _FOLLOWED.get(shell) if shell is not None else None
    if followed is None:
        return None
    ledger = followed[0]
    if ledger.running is None:
        # The cell that loaded it (its start was before the hooks), or one the shell runs silently.
        current = getattr(getattr(shell, "displayhook", None), "exec_result", None)
        if current is None:
            return None
        ledger.begin(_source(current.info), shell.user_ns)
    return shell, ledger


def _source(info: Any) -> str:
    return getattr(info, "transformed_cell", None) or getattr(info, "raw_cell", None) or ""
