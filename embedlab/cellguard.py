"""A notebook cell never shows what an earlier run left: after a failed cell, the next refuses.

Run All in JupyterLab sends every cell at once. ipykernel aborts the requests already
queued when one fails, but executes those that arrive after its queue drained, so under
load the cells below a failed plan cell ran and showed the verdict, tables and figures
of the *previous* Run All (`plan` and `result` were still bound to it). Papermill runs
cells one at a time and stops at the first error, so only people were misled.

`check_previous_cell()` is called by every call a notebook cell makes to build a plan,
run it, or show its outcome (`ScenarioPlan.from_params`, `run_scenario`,
`start_deployment`, the explorer, `table`, `plot`, `verdict`, ...). Inside IPython it
raises `EarlierCellFailedError` when the cell executed just before this one failed,
unless it is this same cell being run again, or the failure was a verdict (`verdict()`
raising `CheckFailedError` on this run's own figures): the refusal is itself a failure, so the
chain reaches the last cell, and each message names the cell that failed first. It reads
IPython's own record of the previous execution, so it needs no hook registered in
advance and holds whatever the timing; outside IPython it does nothing. A cell that calls
no embedlab function (plain Python) cannot refuse, and passes nothing on: below their plan
cell, the notebooks have none.
"""

from __future__ import annotations

import sys
from typing import Any

from .errors import CheckFailedError, EarlierCellFailedError

__all__ = ["check_previous_cell"]


def check_previous_cell() -> None:
    """Raise `EarlierCellFailedError` if the previous cell failed and this is another cell."""
    shell = _shell()
    if shell is None or getattr(shell, "last_execution_succeeded", True):
        return
    previous = getattr(shell, "last_execution_result", None)
    current = getattr(getattr(shell, "displayhook", None), "exec_result", None)
    if previous is None or current is None or _same_cell(previous.info, current.info):
        return  # re-running the cell that failed is how it gets fixed
    error = previous.error_in_exec or previous.error_before_exec
    if isinstance(error, CheckFailedError):
        return  # a verdict reached on this run's figures, not a broken run: they are still this run's
    if isinstance(error, EarlierCellFailedError):
        # The chain: name the cell that failed first, not the one that refused after it.
        raise EarlierCellFailedError(cell=error.cell, error=error.error)
    summary = f"{type(error).__name__}: {_first_line(error)}" if error is not None else "an error"
    raise EarlierCellFailedError(cell=f"In [{previous.execution_count}]", error=summary)


def _shell() -> Any:
    """The running IPython shell, if this process is one; never imports IPython itself."""
    module = sys.modules.get("IPython")
    get = getattr(module, "get_ipython", None)
    return get() if get is not None else None


def _same_cell(previous: Any, current: Any) -> bool:
    previous_id, current_id = getattr(previous, "cell_id", None), getattr(current, "cell_id", None)
    if previous_id is not None or current_id is not None:
        return previous_id == current_id
    return getattr(previous, "raw_cell", None) == getattr(current, "raw_cell", None)


def _first_line(error: BaseException) -> str:
    lines = [line for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else ""
