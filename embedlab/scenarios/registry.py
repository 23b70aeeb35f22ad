"""Scenarios by name: the one list that the CLI, plans, the regression matrix and notebooks read.

    @dataclass(frozen=True, kw_only=True)
    class MyParams:
        rounds: int = knob(3, "bursts to send", min=1)

    def my_check(target, plan):               # target: a Deployment or an attached Target
        return same_model_load_balance(target, requests=10 * plan.params.rounds)

    register_scenario("my-check", my_check, params=MyParams, help="what it proves")
    run_scenario(ScenarioPlan(scenario="my-check", params={"rounds": 5}))

A scenario is checked when it registers, as pluggy checks a plugin against its spec: its
`run` must take `(target, plan)`, its params class must be a frozen dataclass of knobs the
CLI can read, and the plan fields it sets must exist. Installed packages add theirs
through the `embedlab.scenarios` entry-point group, modules named in `EMBEDLAB_PLUGINS`
by registering on import: an entry point names a `Scenario` or a `run` function (whose
docstring's first line becomes its help).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError
from ..plugins import Registry
from .params import NoParams, check_params_class

__all__ = ["LAYOUTS", "SCENARIOS", "Scenario", "get_scenario", "register_scenario", "scenario_names"]

# How a plan's models become workers: `pool` launches `workers` workers of the one model;
# `per-model` one worker per model, worker i serving models[i].
LAYOUTS = ("pool", "per-model")
# The plan fields a scenario may set for its deployment, unless the caller does.
DEPLOYMENT_FIELDS = ("workers", "lease_ttl", "restart", "router_mode", "prefill_workers", "endpoints")

Run = Callable[[Any, Any], Any]  # (Deployment | Target | None, ScenarioPlan) -> ScenarioResult


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """A registered scenario: how to run it, its knobs, and what a plan must know before it launches."""

    name: str
    run: Run
    help: str = ""
    params: type = NoParams  # its knobs: a frozen dataclass
    deployment: Mapping[str, Any] = field(default_factory=dict)  # plan fields it sets: restart="on-exit"
    layout: str = "pool"
    launches: bool = False  # it kills or drains workers: it needs a deployment embedlab launched
    deploys: bool = False  # it launches its own deployments (one per setting): run(None, plan)
    check: Callable[[Any], None] | None = None  # check(plan) raises ConfigError before anything launches

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ConfigError(
                f"scenario {self.name!r}: layout must be one of {', '.join(LAYOUTS)}, got {self.layout!r}"
            )
        _check_run(self.name, self.run)
        unknown = sorted(set(self.deployment) - set(DEPLOYMENT_FIELDS))
        if unknown:
            raise ConfigError(
                f"scenario {self.name!r} sets {unknown}; a scenario may set {', '.join(DEPLOYMENT_FIELDS)}"
            )
        check_params_class(self.params, scenario=self.name)


def _check_run(name: str, run: Any) -> None:
    if not callable(run):
        raise ConfigError(f"scenario {name!r}: run must be a function run(target, plan), got {run!r}")
    try:
        signature = inspect.signature(run)
    except (TypeError, ValueError):
        return  # a builtin or C callable: nothing to read, trust it
    positional = [
        p for p in signature.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    takes_any = any(p.kind is p.VAR_POSITIONAL for p in signature.parameters.values())
    if not takes_any and len(positional) < 2:
        raise ConfigError(f"scenario {name!r}: run must take (target, plan), it takes {signature}")


def _adapt(name: str, loaded: object) -> Scenario:
    """What an entry point loads: a Scenario, or a bare run function."""
    if isinstance(loaded, Scenario):
        return loaded
    if callable(loaded):
        doc = (inspect.getdoc(loaded) or "").strip().splitlines()
        return Scenario(name=name, run=loaded, help=doc[0] if doc else "")
    raise ConfigError(f"the entry point for scenario {name!r} is neither a Scenario nor a function")


# The built-ins: each declared beside its function and its knobs, as `Scenario(...)`, and
# imported when its name is first asked for.
_BUILTIN = "embedlab.scenarios.builtin"

SCENARIOS: Registry[Scenario] = Registry(
    "scenario",
    group="embedlab.scenarios",
    adapt=_adapt,
    builtins={
        "same-model": f"{_BUILTIN}.dispatch:SAME_MODEL",
        "multi-model": f"{_BUILTIN}.dispatch:MULTI_MODEL",
        "mixed": f"{_BUILTIN}.mixed:MIXED",
        "failover": f"{_BUILTIN}.resilience:FAILOVER",
        "failover-no-retries": f"{_BUILTIN}.resilience:FAILOVER_NO_RETRIES",
        "drain": f"{_BUILTIN}.drain:DRAIN",
        "client-mistakes": f"{_BUILTIN}.probes:CLIENT_MISTAKES",
        "overhead": f"{_BUILTIN}.probes:OVERHEAD",
        "partition": f"{_BUILTIN}.cluster:PARTITION",
        "etcd-restart": f"{_BUILTIN}.cluster:ETCD_RESTART",
        "lease-ttl-sweep": f"{_BUILTIN}.cluster:TTL_SWEEP",
        "prefix-affinity": f"{_BUILTIN}.kv:PREFIX_AFFINITY",
        "kv-participation": f"{_BUILTIN}.kv:KV_PARTICIPATION",
        "prefill-decode": f"{_BUILTIN}.disagg:PREFILL_DECODE",
    },
)


def register_scenario(
    name: str,
    run: Run,
    *,
    params: type = NoParams,
    help: str = "",
    deployment: Mapping[str, Any] | None = None,
    layout: str = "pool",
    launches: bool = False,
    deploys: bool = False,
    check: Callable[[Any], None] | None = None,
    replace: bool = False,
) -> Scenario:
    """Make `name` runnable by `run_scenario`, `embedlab scenario NAME` and `embedlab regress`.

    `run(target, plan)` returns a `ScenarioResult`; `target` is the running `Deployment` (or
    an attached `Target`), `plan` the `ScenarioPlan`, whose `params` is an instance of
    `params` (a frozen dataclass of knobs, see `embedlab.scenarios.params.knob`).
    `deployment` sets plan fields for the deployment it runs on (`restart`, `lease_ttl`,
    `workers`) unless the caller does. Everything is checked here, not when it first runs.
    """
    scenario = Scenario(
        name=name,
        run=run,
        help=help or ((inspect.getdoc(run) or "").splitlines() or [""])[0],
        params=params,
        deployment=dict(deployment or {}),
        layout=layout,
        launches=launches,
        deploys=deploys,
        check=check,
    )
    SCENARIOS.register(name, scenario, replace=replace)
    return scenario


def get_scenario(name: str) -> Scenario:
    return SCENARIOS.get(name)


def scenario_names() -> list[str]:
    return SCENARIOS.names()
