"""Scenarios by name: the one list that the CLI, plans, the regression matrix and notebooks read.

    def my_check(target, plan):               # target: a Deployment or an attached Target
        return same_model_load_balance(target, requests=plan.requests)

    register_scenario("my-check", my_check, defaults={"requests": 30}, help="what it proves")
    run_scenario(ScenarioPlan(scenario="my-check"))

Installed packages add theirs through the `embedlab.scenarios` entry-point group: the
entry point's name is the scenario's, and it points at a `Scenario` or at a `run`
function (whose docstring's first line becomes its help).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError
from ..plugins import Registry, resolve
from ..stacks import stack_class, stacks_with

__all__ = ["LAYOUTS", "SCENARIOS", "Scenario", "get_scenario", "register_scenario", "scenario_names"]

# How a plan's models become workers: `pool` launches `workers` workers of the first
# model; `per-model` one worker per model, worker i serving models[i].
LAYOUTS = ("pool", "per-model")

Run = Callable[[Any, Any], Any]  # (Deployment | Target, ScenarioPlan) -> ScenarioResult


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """A registered scenario: how to run it, and what a plan needs to know before it launches."""

    name: str
    run: Run | str  # or "module:function", imported on first use
    help: str = ""
    defaults: Mapping[str, Any] = field(default_factory=dict)  # fill the plan's fields left unset (None)
    layout: str = "pool"
    launches: bool = False  # it kills or drains workers: it needs a deployment embedlab launched
    stacks: tuple[str, ...] | None = None  # the stacks it can run on; None: any
    deploys: bool = False  # it launches its own deployments (one per setting): run(None, plan)
    check: Callable[[Any], None] | None = None  # check(plan) raises ConfigError before anything launches

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ConfigError(
                f"scenario {self.name!r}: layout must be one of {', '.join(LAYOUTS)}, got {self.layout!r}"
            )
        if not isinstance(self.run, str) and not callable(self.run):
            raise ConfigError(f"scenario {self.name!r}: run must be a function run(target, plan)")

    def runner(self) -> Run:
        return resolve(self.run) if isinstance(self.run, str) else self.run  # type: ignore[return-value]


def _adapt(name: str, loaded: object) -> Scenario:
    """What an entry point loads: a Scenario, or a bare run function."""
    if isinstance(loaded, Scenario):
        return loaded
    if callable(loaded):
        doc = (inspect.getdoc(loaded) or "").strip().splitlines()
        return Scenario(name=name, run=loaded, help=doc[0] if doc else "")  # type: ignore[arg-type]
    raise ConfigError(f"the entry point for scenario {name!r} is neither a Scenario nor a function")


def _needs_etcd(plan: Any) -> None:
    if plan.attached:
        return
    if "etcd" not in stack_class(plan.stack).discoveries:
        having = ", ".join(stacks_with(lambda s: "etcd" in s.discoveries)) or "none registered"
        raise ConfigError(
            f"{plan.scenario} needs etcd discovery, which the {plan.stack} stack does not have (stacks with it: {having})"
        )
    if plan.discovery != "etcd":
        raise ConfigError(f"{plan.scenario} needs discovery='etcd' (--discovery etcd)")


def _needs_cluster(plan: Any) -> None:
    _needs_etcd(plan)
    if plan.hosts < 2:
        raise ConfigError(f"{plan.scenario} cuts a host off the network: it needs hosts >= 2 (--hosts 3)")


SCENARIOS: Registry[Scenario] = Registry(
    "scenario",
    group="embedlab.scenarios",
    adapt=_adapt,
    builtins={
        "same-model": Scenario(
            name="same-model",
            run="embedlab.scenarios.dispatch:run_same_model",
            help="several workers of one model: every one moves, the counters account for every request, "
            "and the split fits the weights",
            defaults={"requests": 40, "concurrency": 4},
        ),
        "multi-model": Scenario(
            name="multi-model",
            run="embedlab.scenarios.dispatch:run_multi_model",
            layout="per-model",
            help="one burst per model: only that model's workers move",
            defaults={"requests": 10, "concurrency": 4},
        ),
        "failover": Scenario(
            name="failover",
            run="embedlab.scenarios.resilience:run_failover",
            launches=True,
            help="a worker is SIGKILLed mid-burst: lost requests and time out of dispatch "
            "(asserted on embedded, reported on dynamo)",
            defaults={"requests": 200, "concurrency": 8},
        ),
        "failover-no-retries": Scenario(
            name="failover-no-retries",
            run="embedlab.scenarios.resilience:run_failover_without_retries",
            deploys=True,
            help="failover with the frontend's retries switched off (where it has a switch): what clients see",
            defaults={"requests": 200, "concurrency": 8},
        ),
        "drain": Scenario(
            name="drain",
            run="embedlab.scenarios.resilience:run_drain",
            launches=True,
            help="a worker is taken out of dispatch while it keeps serving (the stack's own way): it must get "
            "nothing, and come back after",
            defaults={"requests": 20, "concurrency": 4},
        ),
        "client-mistakes": Scenario(
            name="client-mistakes",
            run="embedlab.scenarios.probes:run_client_mistakes",
            help="unknown model, malformed body, missing field: each a 4xx with OpenAI error JSON, and valid "
            "traffic still flows right after a run of mistakes",
            defaults={"requests": 20, "concurrency": 4},
        ),
        "overhead": Scenario(
            name="overhead",
            run="embedlab.scenarios.probes:run_overhead",
            launches=True,
            help="latency and throughput through the frontend against straight to a worker, at c=1 and c=32 (reported)",
            defaults={"requests": 400},
        ),
        "partition": Scenario(
            name="partition",
            run="embedlab.scenarios.cluster:run_partition",
            launches=True,
            check=_needs_cluster,
            help="a worker's host drops off the network mid-traffic, then comes back: failures, the longest hang "
            "and the times to leave and rejoin dispatch are reported; recovery is asserted",
            # 128 in flight: at 20 requests/s, requests that hang 5 s must not stall the traffic.
            defaults={"concurrency": 128, "restart": "on-exit", "lease_ttl": 5.0},
        ),
        "etcd-restart": Scenario(
            name="etcd-restart",
            run="embedlab.scenarios.cluster:run_etcd_restart",
            launches=True,
            check=_needs_etcd,
            help="etcd stops for 3 s mid-traffic and starts again: failures and whether dispatch went on are "
            "reported; recovery is asserted",
            # The workers' 5 s leases lapse in the outage: they exit (Dynamo #3493), and the
            # restart policy brings them back. The frontend keeps Dynamo's 30 s lease.
            defaults={"concurrency": 128, "restart": "on-exit", "lease_ttl": 5.0},
        ),
        "lease-ttl-sweep": Scenario(
            name="lease-ttl-sweep",
            run="embedlab.scenarios.cluster:run_ttl_sweep",
            deploys=True,
            check=_needs_etcd,
            help="a worker is SIGKILLed at lease TTLs of 3, 5 and 10 s: time to leave dispatch and failed "
            "requests against the TTL (reported)",
            defaults={"concurrency": 128},
        ),
    },
)


def register_scenario(
    name: str,
    run: Run,
    *,
    defaults: Mapping[str, Any] | None = None,
    help: str = "",
    layout: str = "pool",
    launches: bool = False,
    stacks: tuple[str, ...] | None = None,
    deploys: bool = False,
    replace: bool = False,
) -> Scenario:
    """Make `name` runnable by `run_scenario`, `embedlab scenario NAME` and `embedlab regress`.

    `run(target, plan)` returns a `ScenarioResult`; `target` is the running `Deployment` (or
    an attached `Target`) and `plan` the `ScenarioPlan`, with `defaults` filled into the
    fields the caller left unset.
    """
    scenario = Scenario(
        name=name,
        run=run,
        help=help or ((inspect.getdoc(run) or "").splitlines() or [""])[0],
        defaults=dict(defaults or {}),
        layout=layout,
        launches=launches,
        stacks=stacks,
        deploys=deploys,
    )
    SCENARIOS.register(name, scenario, replace=replace)
    return scenario


def get_scenario(name: str) -> Scenario:
    return SCENARIOS.get(name)


def scenario_names() -> list[str]:
    return SCENARIOS.names()
