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
    "CheckResult": "evidence.counters",
    "DispatchCheck": "evidence.counters",
    "fairness_p_value": "evidence.counters",
    "Deployment": "cluster.deployment",
    "Target": "evidence.target",
    "attach": "evidence.target",
    "check_access": "evidence.target",
    "ScrapeAuth": "evidence.access",
    "AccessError": "errors",
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
    "ShardMergeError": "errors",
    "ReadinessTimeoutError": "errors",
    "ScrapeError": "errors",
    "ServerError": "errors",
    "ServerExitedError": "errors",
    "ServerStartError": "errors",
    "ServerStopError": "errors",
    "TrafficError": "errors",
    "UnsupportedError": "errors",
    "MetricQuery": "evidence.metrics",
    "Snapshot": "evidence.metrics",
    "scrape": "evidence.metrics",
    "ManagedProcess": "cluster.managed_process",
    "Event": "cluster.events",
    "LaunchProgress": "progress",
    "Matrix": "reports.matrix",
    "RegressRun": "reports.regress",
    "load_matrix": "reports.matrix",
    "regress": "reports.regress",
    "MergedRun": "reports.merge",
    "merge_runs": "reports.merge",
    "Shard": "reports.shards",
    "Explorer": "scenarios.explore",
    "ScenarioPlan": "scenarios.plan",
    "ScenarioResult": "scenarios.result",
    "Burst": "scenarios.result",
    "DataFigures": "scenarios.result",
    "BurstSpec": "scenarios.burst",
    "burst_of": "scenarios.burst",
    "judge": "scenarios.burst",
    "workers_of": "scenarios.burst",
    "target_of": "evidence.target",
    "Figures": "scenarios.result",
    "knob": "scenarios.params",
    "SweepResult": "scenarios.explore",
    "check_explore": "scenarios.explore",
    "drain": "scenarios.builtin.drain",
    "failover": "scenarios.builtin.resilience",
    "multi_model_dispatch": "scenarios.builtin.dispatch",
    "live_deployment": "notebook.live",
    "register_scenario": "scenarios.registry",
    "ConformanceTable": "scenarios.battery",
    "run_battery": "scenarios.battery",
    "run_scenario": "scenarios.plan",
    "same_model_load_balance": "scenarios.builtin.dispatch",
    "scenario_names": "scenarios.registry",
    "start_deployment": "notebook.live",
    "stop_deployment": "notebook.live",
    "DeploymentSpec": "cluster.spec",
    "WorkerSpec": "cluster.spec",
    "BaseStack": "cluster.stack",
    "CountsBackends": "cluster.stack",
    "Drains": "cluster.stack",
    "Join": "cluster.stack",
    "LiveWeights": "cluster.stack",
    "ProcessSpec": "cluster.stack",
    "SendsCanaries": "cluster.stack",
    "StackContext": "cluster.stack",
    "SwitchesRetries": "cluster.stack",
    "register_stack": "cluster.stack_registry",
    "stack_class": "cluster.stack_registry",
    "WorkerServer": "cluster.worker_server",
    "register_worker_server": "cluster.worker_server",
    "register_engine": "engines",
    "Split": "evidence.split",
    "BurstResult": "evidence.traffic",
    "RequestRecord": "evidence.traffic",
    "asend_burst": "evidence.traffic",
    "send_burst": "evidence.traffic",
    "Verdict": "verdicts",
    "figures_table": "notebook.views",
    "plot": "notebook.views",
    "plot_latency": "notebook.views",
    "register_figure": "notebook.views",
    "similarity_table": "notebook.views",
    "table": "notebook.views",
    "verdict": "notebook.views",
    "Watch": "watch.runner",
    "WatchConfig": "watch.runner",
    "watch_live": "watch.in_notebook",
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
    from .cluster.deployment import Deployment as Deployment
    from .cluster.events import Event as Event
    from .cluster.managed_process import ManagedProcess as ManagedProcess
    from .cluster.spec import DeploymentSpec as DeploymentSpec, WorkerSpec as WorkerSpec
    from .cluster.stack import (
        BaseStack as BaseStack,
        CountsBackends as CountsBackends,
        Drains as Drains,
        Join as Join,
        LiveWeights as LiveWeights,
        ProcessSpec as ProcessSpec,
        SendsCanaries as SendsCanaries,
        StackContext as StackContext,
        SwitchesRetries as SwitchesRetries,
    )
    from .cluster.stack_registry import register_stack as register_stack, stack_class as stack_class
    from .cluster.worker_server import (
        WorkerServer as WorkerServer,
        register_worker_server as register_worker_server,
    )
    from .engines import register_engine as register_engine
    from .errors import (
        AccessError as AccessError,
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
        ShardMergeError as ShardMergeError,
        TrafficError as TrafficError,
        UnsupportedError as UnsupportedError,
    )
    from .evidence.access import ScrapeAuth as ScrapeAuth
    from .evidence.counters import (
        CheckResult as CheckResult,
        DispatchCheck as DispatchCheck,
        fairness_p_value as fairness_p_value,
    )
    from .evidence.metrics import MetricQuery as MetricQuery, Snapshot as Snapshot, scrape as scrape
    from .evidence.split import Split as Split
    from .evidence.target import (
        Target as Target,
        attach as attach,
        check_access as check_access,
        target_of as target_of,
    )
    from .evidence.traffic import (
        BurstResult as BurstResult,
        RequestRecord as RequestRecord,
        asend_burst as asend_burst,
        send_burst as send_burst,
    )
    from .notebook.live import (
        live_deployment as live_deployment,
        start_deployment as start_deployment,
        stop_deployment as stop_deployment,
    )
    from .notebook.views import (
        figures_table as figures_table,
        plot as plot,
        plot_latency as plot_latency,
        register_figure as register_figure,
        similarity_table as similarity_table,
        table as table,
        verdict as verdict,
    )
    from .progress import LaunchProgress as LaunchProgress
    from .reports.matrix import Matrix as Matrix, load_matrix as load_matrix
    from .reports.merge import MergedRun as MergedRun, merge_runs as merge_runs
    from .reports.regress import RegressRun as RegressRun, regress as regress
    from .reports.shards import Shard as Shard
    from .scenarios.battery import ConformanceTable as ConformanceTable, run_battery as run_battery
    from .scenarios.builtin.dispatch import (
        multi_model_dispatch as multi_model_dispatch,
        same_model_load_balance as same_model_load_balance,
    )
    from .scenarios.builtin.drain import drain as drain
    from .scenarios.builtin.resilience import failover as failover
    from .scenarios.burst import (
        BurstSpec as BurstSpec,
        burst_of as burst_of,
        judge as judge,
        workers_of as workers_of,
    )
    from .scenarios.explore import (
        Explorer as Explorer,
        SweepResult as SweepResult,
        check_explore as check_explore,
    )
    from .scenarios.params import knob as knob
    from .scenarios.plan import ScenarioPlan as ScenarioPlan, run_scenario as run_scenario
    from .scenarios.registry import (
        register_scenario as register_scenario,
        scenario_names as scenario_names,
    )
    from .scenarios.result import (
        Burst as Burst,
        DataFigures as DataFigures,
        Figures as Figures,
        ScenarioResult as ScenarioResult,
    )
    from .verdicts import Verdict as Verdict
    from .watch.in_notebook import watch_live as watch_live
    from .watch.runner import Watch as Watch, WatchConfig as WatchConfig
