"""embedlab: prove, with numbers and pictures, how a frontend routes /v1/embeddings traffic.

    from embedlab import ScenarioPlan, plot, run_scenario, table

    result = run_scenario(ScenarioPlan(scenario="multi-model", stack="dynamo"))
    table(result), plot(result)
    assert result.ok, result.summary()

Users import from `embedlab`, never from a submodule.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# Public name -> the module that defines it. Imported on first use, so a server process
# (`python -m embedlab worker`) never pays for the harness's imports.
_EXPORTS: dict[str, str] = {
    "CheckResult": "checks",
    "DispatchCheck": "checks",
    "fairness_p_value": "checks",
    "Deployment": "deployment",
    "Target": "targets",
    "attach": "targets",
    "CheckFailedError": "errors",
    "ConfigError": "errors",
    "CounterResetError": "errors",
    "DeploymentStoppedError": "errors",
    "DiscoveryError": "errors",
    "DrainError": "errors",
    "EarlierCellFailedError": "errors",
    "EmbedlabError": "errors",
    "EngineError": "errors",
    "MetricNotFoundError": "errors",
    "MetricsError": "errors",
    "NetworkError": "errors",
    "NotebookRunError": "errors",
    "ReadinessTimeoutError": "errors",
    "ScrapeError": "errors",
    "ServerError": "errors",
    "ServerExitedError": "errors",
    "ServerStartError": "errors",
    "ServerStopError": "errors",
    "TrafficError": "errors",
    "UnsupportedError": "errors",
    "MetricQuery": "metrics",
    "Snapshot": "metrics",
    "scrape": "metrics",
    "ManagedProcess": "process",
    "LaunchProgress": "progress",
    "Matrix": "regression",
    "RegressRun": "regression",
    "load_matrix": "regression",
    "regress": "regression",
    "Explorer": "scenarios.explore",
    "ScenarioPlan": "scenarios.plans",
    "ScenarioResult": "scenarios.results",
    "Figures": "scenarios.results",
    "knob": "scenarios.params",
    "SweepResult": "scenarios.explore",
    "check_explore": "scenarios.explore",
    "drain": "scenarios.drain",
    "failover": "scenarios.resilience",
    "multi_model_dispatch": "scenarios.dispatch",
    "live_deployment": "scenarios.live",
    "register_scenario": "scenarios.registry",
    "ConformanceMatrix": "scenarios.battery",
    "run_battery": "scenarios.battery",
    "run_scenario": "scenarios.plans",
    "same_model_load_balance": "scenarios.dispatch",
    "scenario_names": "scenarios.registry",
    "start_deployment": "scenarios.live",
    "stop_deployment": "scenarios.live",
    "DeploymentSpec": "specs",
    "WorkerSpec": "specs",
    "BaseStack": "stacks",
    "ProcessSpec": "stacks",
    "StackContext": "stacks",
    "register_stack": "stacks",
    "WorkerServer": "stacks",
    "register_worker_server": "stacks",
    "register_engine": "engines",
    "BurstResult": "traffic",
    "RequestRecord": "traffic",
    "asend_burst": "traffic",
    "send_burst": "traffic",
    "Verdict": "verdicts",
    "figures_table": "views",
    "plot": "views",
    "plot_latency": "views",
    "register_figure": "views",
    "similarity_table": "views",
    "table": "views",
    "verdict": "views",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'embedlab' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


if TYPE_CHECKING:
    # `X as X`: an explicit re-export, for type checkers (the names load lazily above).
    from .checks import (
        CheckResult as CheckResult,
        DispatchCheck as DispatchCheck,
        fairness_p_value as fairness_p_value,
    )
    from .deployment import Deployment as Deployment
    from .engines import register_engine as register_engine
    from .errors import (
        CheckFailedError as CheckFailedError,
        ConfigError as ConfigError,
        CounterResetError as CounterResetError,
        DeploymentStoppedError as DeploymentStoppedError,
        DiscoveryError as DiscoveryError,
        DrainError as DrainError,
        EarlierCellFailedError as EarlierCellFailedError,
        EmbedlabError as EmbedlabError,
        EngineError as EngineError,
        MetricNotFoundError as MetricNotFoundError,
        MetricsError as MetricsError,
        NetworkError as NetworkError,
        NotebookRunError as NotebookRunError,
        ReadinessTimeoutError as ReadinessTimeoutError,
        ScrapeError as ScrapeError,
        ServerError as ServerError,
        ServerExitedError as ServerExitedError,
        ServerStartError as ServerStartError,
        ServerStopError as ServerStopError,
        TrafficError as TrafficError,
        UnsupportedError as UnsupportedError,
    )
    from .metrics import (
        MetricQuery as MetricQuery,
        Snapshot as Snapshot,
        scrape as scrape,
    )
    from .process import ManagedProcess as ManagedProcess
    from .progress import LaunchProgress as LaunchProgress
    from .regression import (
        Matrix as Matrix,
        RegressRun as RegressRun,
        load_matrix as load_matrix,
        regress as regress,
    )
    from .scenarios.battery import ConformanceMatrix as ConformanceMatrix, run_battery as run_battery
    from .scenarios.dispatch import (
        multi_model_dispatch as multi_model_dispatch,
        same_model_load_balance as same_model_load_balance,
    )
    from .scenarios.drain import drain as drain
    from .scenarios.explore import (
        Explorer as Explorer,
        SweepResult as SweepResult,
        check_explore as check_explore,
    )
    from .scenarios.live import (
        live_deployment as live_deployment,
        start_deployment as start_deployment,
        stop_deployment as stop_deployment,
    )
    from .scenarios.params import knob as knob
    from .scenarios.plans import (
        ScenarioPlan as ScenarioPlan,
        run_scenario as run_scenario,
    )
    from .scenarios.registry import (
        register_scenario as register_scenario,
        scenario_names as scenario_names,
    )
    from .scenarios.resilience import failover as failover
    from .scenarios.results import Figures as Figures, ScenarioResult as ScenarioResult
    from .specs import (
        DeploymentSpec as DeploymentSpec,
        WorkerSpec as WorkerSpec,
    )
    from .stacks import (
        BaseStack as BaseStack,
        ProcessSpec as ProcessSpec,
        StackContext as StackContext,
        WorkerServer as WorkerServer,
        register_stack as register_stack,
        register_worker_server as register_worker_server,
    )
    from .targets import Target as Target, attach as attach
    from .traffic import (
        BurstResult as BurstResult,
        RequestRecord as RequestRecord,
        asend_burst as asend_burst,
        send_burst as send_burst,
    )
    from .verdicts import Verdict as Verdict
    from .views import (
        figures_table as figures_table,
        plot as plot,
        plot_latency as plot_latency,
        register_figure as register_figure,
        similarity_table as similarity_table,
        table as table,
        verdict as verdict,
    )
