"""embedlab: prove, with numbers and pictures, how a frontend routes /v1/embeddings traffic.

    from embedlab import Deployment, DeploymentSpec, multi_model_dispatch

    with Deployment(DeploymentSpec.multi_model(["model-a", "model-b"])) as dep:
        result = multi_model_dispatch(dep)
    assert result.passed, result.summary()

Users import from `embedlab`, never from a submodule.
"""

from __future__ import annotations

from .checks import CheckResult, DispatchCheck, fairness_p_value
from .deployment import Deployment, Target, attach
from .errors import (
    CheckFailedError,
    ConfigError,
    CounterResetError,
    EmbedlabError,
    EngineError,
    MetricNotFoundError,
    MetricsError,
    NotebookRunError,
    ReadinessTimeoutError,
    ScrapeError,
    ServerError,
    ServerExitedError,
    ServerStartError,
    ServerStopError,
    TrafficError,
)
from .explore import Explorer, SweepResult
from .metrics import MetricQuery, Snapshot, scrape
from .plans import ScenarioPlan, run_scenario
from .process import ManagedProcess
from .regress import Matrix, RegressRun, load_matrix, regress
from .scenarios import ScenarioResult, multi_model_dispatch, same_model_load_balance
from .specs import DeploymentSpec, WorkerSpec
from .traffic import BurstResult, RequestRecord, asend_burst, send_burst

__version__ = "0.1.0"

__all__ = [
    "BurstResult",
    "CheckFailedError",
    "CheckResult",
    "ConfigError",
    "CounterResetError",
    "Deployment",
    "DeploymentSpec",
    "DispatchCheck",
    "EmbedlabError",
    "EngineError",
    "Explorer",
    "ManagedProcess",
    "Matrix",
    "MetricNotFoundError",
    "MetricQuery",
    "MetricsError",
    "NotebookRunError",
    "ReadinessTimeoutError",
    "RegressRun",
    "RequestRecord",
    "ScenarioPlan",
    "ScenarioResult",
    "ScrapeError",
    "ServerError",
    "ServerExitedError",
    "ServerStartError",
    "ServerStopError",
    "Snapshot",
    "SweepResult",
    "Target",
    "TrafficError",
    "WorkerSpec",
    "asend_burst",
    "attach",
    "fairness_p_value",
    "load_matrix",
    "multi_model_dispatch",
    "regress",
    "run_scenario",
    "same_model_load_balance",
    "scrape",
    "send_burst",
]
