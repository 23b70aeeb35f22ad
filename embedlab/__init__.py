"""embedlab: prove, with numbers and pictures, how a frontend routes /v1/embeddings traffic.

    from embedlab import Deployment, DeploymentSpec, multi_model_dispatch

    with Deployment(DeploymentSpec.multi_model(["model-a", "model-b"])) as dep:
        result = multi_model_dispatch(dep)
    assert result.passed, result.summary()

Users import from `embedlab`, never from a submodule.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# Public name -> the private module that defines it. Imported on first use, so a
# server process (`python -m embedlab worker`) never pays for the harness's imports.
_EXPORTS: dict[str, str] = {
    "CheckResult": "checks",
    "DispatchCheck": "checks",
    "fairness_p_value": "checks",
    "Deployment": "deployment",
    "Target": "deployment",
    "attach": "deployment",
    "CheckFailedError": "errors",
    "ConfigError": "errors",
    "CounterResetError": "errors",
    "EmbedlabError": "errors",
    "EngineError": "errors",
    "MetricNotFoundError": "errors",
    "MetricsError": "errors",
    "NotebookRunError": "errors",
    "ReadinessTimeoutError": "errors",
    "ScrapeError": "errors",
    "ServerError": "errors",
    "ServerExitedError": "errors",
    "ServerStartError": "errors",
    "ServerStopError": "errors",
    "TrafficError": "errors",
    "Explorer": "explore",
    "SweepResult": "explore",
    "drain": "resilience",
    "failover": "resilience",
    "MetricQuery": "metrics",
    "Snapshot": "metrics",
    "scrape": "metrics",
    "ScenarioPlan": "plans",
    "run_scenario": "plans",
    "ManagedProcess": "process",
    "Matrix": "regression",
    "RegressRun": "regression",
    "load_matrix": "regression",
    "regress": "regression",
    "ScenarioResult": "scenarios",
    "multi_model_dispatch": "scenarios",
    "same_model_load_balance": "scenarios",
    "DeploymentSpec": "specs",
    "WorkerSpec": "specs",
    "BurstResult": "traffic",
    "RequestRecord": "traffic",
    "asend_burst": "traffic",
    "send_burst": "traffic",
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
    from .deployment import Deployment as Deployment, Target as Target, attach as attach
    from .errors import (
        CheckFailedError as CheckFailedError,
        ConfigError as ConfigError,
        CounterResetError as CounterResetError,
        EmbedlabError as EmbedlabError,
        EngineError as EngineError,
        MetricNotFoundError as MetricNotFoundError,
        MetricsError as MetricsError,
        NotebookRunError as NotebookRunError,
        ReadinessTimeoutError as ReadinessTimeoutError,
        ScrapeError as ScrapeError,
        ServerError as ServerError,
        ServerExitedError as ServerExitedError,
        ServerStartError as ServerStartError,
        ServerStopError as ServerStopError,
        TrafficError as TrafficError,
    )
    from .explore import Explorer as Explorer, SweepResult as SweepResult
    from .resilience import drain as drain, failover as failover
    from .metrics import MetricQuery as MetricQuery, Snapshot as Snapshot, scrape as scrape
    from .plans import ScenarioPlan as ScenarioPlan, run_scenario as run_scenario
    from .process import ManagedProcess as ManagedProcess
    from .regression import (
        Matrix as Matrix,
        RegressRun as RegressRun,
        load_matrix as load_matrix,
        regress as regress,
    )
    from .scenarios import (
        ScenarioResult as ScenarioResult,
        multi_model_dispatch as multi_model_dispatch,
        same_model_load_balance as same_model_load_balance,
    )
    from .specs import DeploymentSpec as DeploymentSpec, WorkerSpec as WorkerSpec
    from .traffic import (
        BurstResult as BurstResult,
        RequestRecord as RequestRecord,
        asend_burst as asend_burst,
        send_burst as send_burst,
    )
