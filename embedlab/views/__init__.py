"""Views of results: tables and figures, for notebooks, the CLI and the reports.

    table(result), plot(result), plot_latency(result), figures_table(result)
    table(explorer), plot(explorer), table(sweep), plot(sweep)
    table(step), plot(step)           # the one burst `explorer.burst()` returned
    table(deployment)                 # its processes: URLs, endpoints, pids, logs

Views import results, never the other way round. A scenario's main figure is chosen by
its name (`register_figure`), the per-burst delta bars where none is registered.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import singledispatch
from typing import TYPE_CHECKING, Any

from ..deployment import Deployment
from ..plugins import Registry
from ..scenarios.battery import ConformanceMatrix
from ..scenarios.explore import Explorer, Step, SweepResult
from ..scenarios.results import ScenarioResult
from .figures import plot_convergence, plot_deltas, plot_latency, plot_matrix, plot_sweep, plot_timeline
from .tables import deployment_table, figures_table, matrix_table, result_table, steps_table, sweep_table

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
    "plot_latency",
    "plot_sweep",
    "plot_timeline",
    "register_figure",
    "result_table",
    "steps_table",
    "sweep_table",
    "table",
]

# Scenario name -> its main figure.
FIGURES: Registry[Callable[[ScenarioResult], Figure]] = Registry(
    "figure",
    group="embedlab.figures",
    builtins={
        "failover": "embedlab.views.figures:plot_timeline",
        "partition": "embedlab.views.figures:plot_fault_timeline",
        "etcd-restart": "embedlab.views.figures:plot_fault_timeline",
        "lease-ttl-sweep": "embedlab.views.figures:plot_ttl_sweep",
    },
)


def register_figure(scenario: str, figure: Callable[[ScenarioResult], Figure]) -> None:
    """Make `figure(result)` the main figure of `scenario`'s results."""
    FIGURES.register(scenario, figure, replace=True)


@singledispatch
def table(thing: Any) -> pd.DataFrame:
    """The table of a result, a sweep or an explorer's bursts."""
    raise TypeError(f"no table for {type(thing).__name__}")


@table.register(ScenarioResult)
def _(result: ScenarioResult) -> pd.DataFrame:
    return result_table(result)


@table.register(SweepResult)
def _(sweep: SweepResult) -> pd.DataFrame:
    return sweep_table(sweep)


@table.register(Explorer)
def _(explorer: Explorer) -> pd.DataFrame:
    return steps_table(explorer.steps)


@table.register(ConformanceMatrix)
def _(matrix: ConformanceMatrix) -> pd.DataFrame:
    return matrix_table(matrix)


@table.register(Deployment)
def _(deployment: Deployment) -> pd.DataFrame:
    return deployment_table(deployment)


@table.register(Step)
def _(step: Step) -> pd.DataFrame:
    return steps_table([step])


@singledispatch
def plot(thing: Any) -> Figure:
    """The main figure of a result, a sweep or an explorer's bursts."""
    raise TypeError(f"no figure for {type(thing).__name__}")


@plot.register(ScenarioResult)
def _(result: ScenarioResult) -> Figure:
    return FIGURES.get(result.scenario)(result) if result.scenario in FIGURES else plot_deltas(result)


@plot.register(SweepResult)
def _(sweep: SweepResult) -> Figure:
    return plot_sweep(sweep)


@plot.register(Explorer)
def _(explorer: Explorer) -> Figure:
    return plot_convergence(explorer.steps)


@plot.register(ConformanceMatrix)
def _(matrix: ConformanceMatrix) -> Figure:
    return plot_matrix(matrix)


@plot.register(Step)
def _(step: Step) -> Figure:
    return plot_deltas(step.result)
