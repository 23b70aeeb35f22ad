"""Views of results: tables and figures, for notebooks, the CLI and the reports.

    table(result), plot(result), plot_latency(result), figures_table(result)
    table(explorer), plot(explorer), table(sweep), plot(sweep)
    table(step), plot(step)           # the one burst `explorer.burst()` returned
    table(deployment)                 # its processes: URLs, endpoints, pids, logs
    verdict(result)                   # the last cell: the verdict's line, raising unless ok

Each of these refuses, in a notebook, what a failed cell left stale (`embedlab.notebook.cellguard`):
a result, deployment or explorer that a failed plan, run or Start cell would have replaced.

Views import results, never the other way round. A result's main figure is chosen by the
type of its `figures` (`register_figure`), or drawn by them (a `plot(result)` method),
the per-burst delta bars otherwise. A notebook shows every figure as a PNG drawn at 2x,
with alt text from its titles, axes and legends (`embedlab.notebook.views.inline`), and every table
in a box that scrolls when the table is wider than the page (`embedlab.notebook.views.frame`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import singledispatch
from typing import TYPE_CHECKING, Any

from ...cluster.deployment import Deployment
from ...errors import CheckFailedError
from ...freshness import check_fresh
from ...scenarios.battery import ConformanceTable
from ...scenarios.builtin.cluster_figures import FaultFigures, TtlSweepFigures
from ...scenarios.builtin.resilience_figures import FailoverFigures
from ...scenarios.explore import Explorer, Step, SweepResult
from ...scenarios.result import ScenarioResult
from . import figures, tables
from .fault_figures import plot_fault_timeline, plot_timeline, plot_ttl_sweep
from .figures import plot_convergence, plot_deltas, plot_matrix, plot_schedule, plot_sweep
from .tables import (
    deployment_table,
    matrix_table,
    result_table,
    similarity_table as _similarity_table,
    step_table,
    steps_table,
    sweep_table,
)

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = [
    "FIGURES",
    "deployment_table",
    "figures_table",
    "plot",
    "plot_convergence",
    "plot_deltas",
    "plot_schedule",
    "plot_latency",
    "plot_sweep",
    "plot_timeline",
    "register_figure",
    "result_table",
    "similarity_table",
    "steps_table",
    "sweep_table",
    "table",
    "verdict",
]

# A result's figures type -> its main figure; where none fits, the per-burst delta bars. A
# scenario's own figures class may instead draw itself: a `plot(result)` method.
FIGURES: dict[type, Callable[[ScenarioResult], Figure]] = {
    FailoverFigures: plot_timeline,
    FaultFigures: plot_fault_timeline,
    TtlSweepFigures: plot_ttl_sweep,
}


def register_figure(kind: type, figure: Callable[[ScenarioResult], Figure]) -> None:
    """Make `figure(result)` the main figure of results whose `figures` is a `kind`."""
    FIGURES[kind] = figure


def table(thing: Any) -> pd.DataFrame:
    """The table of a result, a sweep, an explorer's bursts, a battery or a deployment."""
    check_fresh(thing)
    return _table(thing)


def plot(thing: Any) -> Figure:
    """The main figure of a result, a sweep, an explorer's bursts or a battery."""
    check_fresh(thing)
    return _plot(thing)


def plot_latency(result: ScenarioResult) -> Figure:
    """Latency over the run, coloured by serving worker, and its distribution per burst."""
    check_fresh(result)
    return figures.plot_latency(result)


def figures_table(result: ScenarioResult) -> pd.DataFrame:
    """The run's own figures as a two-column table: what it measured beyond the counters."""
    check_fresh(result)
    return tables.figures_table(result)


def similarity_table(deployment: Any, sentences: Sequence[str], *, model: str | None = None) -> pd.DataFrame:
    """Cosine similarity of `sentences`, embedded through the deployment: do its vectors mean something?"""
    check_fresh(deployment)
    return _similarity_table(deployment, sentences, model=model)


def verdict(thing: ScenarioResult | ConformanceTable) -> None:
    """A notebook's last cell: the verdict's one line, printed where it is ok, else raised.

    Ok is a pass, figures reported but not asserted, or a check the stack cannot take (for
    a battery: every cell ran to a verdict). Otherwise the line is a `CheckFailedError`'s
    message, which a notebook shows as that line alone, so a papermill run and `embedlab
    regress` fail on it; it is not printed as well, or the cell would show it twice.
    """
    check_fresh(thing)
    summary = thing.summary()
    if not thing.ok:
        raise CheckFailedError(summary)
    print(summary)


@singledispatch
def _table(thing: Any) -> pd.DataFrame:
    raise TypeError(f"no table for {type(thing).__name__}")


@_table.register(ScenarioResult)
def _(result: ScenarioResult) -> pd.DataFrame:
    return result_table(result)


@_table.register(SweepResult)
def _(sweep: SweepResult) -> pd.DataFrame:
    return sweep_table(sweep)


@_table.register(Explorer)
def _(explorer: Explorer) -> pd.DataFrame:
    return steps_table(explorer.steps)


@_table.register(ConformanceTable)
def _(matrix: ConformanceTable) -> pd.DataFrame:
    return matrix_table(matrix)


@_table.register(Deployment)
def _(deployment: Deployment) -> pd.DataFrame:
    return deployment_table(deployment)


@_table.register(Step)
def _(step: Step) -> pd.DataFrame:
    return step_table(step)


@singledispatch
def _plot(thing: Any) -> Figure:
    raise TypeError(f"no figure for {type(thing).__name__}")


@_plot.register(ScenarioResult)
def _(result: ScenarioResult) -> Figure:
    own = getattr(result.figures, "plot", None)
    if callable(own):
        from .inline import adopt

        return adopt(own(result))
    if result.schedule is not None:  # a busy pool: the schedule's figure, its power under it
        return plot_schedule(result)
    draw = next((f for kind, f in FIGURES.items() if isinstance(result.figures, kind)), plot_deltas)
    return draw(result)


@_plot.register(SweepResult)
def _(sweep: SweepResult) -> Figure:
    return plot_sweep(sweep)


@_plot.register(Explorer)
def _(explorer: Explorer) -> Figure:
    return plot_convergence(explorer.steps)


@_plot.register(ConformanceTable)
def _(matrix: ConformanceTable) -> Figure:
    return plot_matrix(matrix)


@_plot.register(Step)
def _(step: Step) -> Figure:
    return plot_deltas(step.result)
