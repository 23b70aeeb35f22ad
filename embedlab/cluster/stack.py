"""What a stack is: how it starts its frontend and workers, and what it can do, each said once.

A stack subclasses `BaseStack`, says how to start its processes (`frontend`, `worker`) and
how to see them registered (`health_url`, `dispatchable_endpoints`), and overrides the
defaults where it differs. What it can do beyond that it says by defining the hook, as a
pluggy plugin implements a hook: a stack that defines `drain` and `resume` drains (it is
a `Drains`), one that defines `set_weights` has live weights (`LiveWeights`), and so on for
`without_retries` (`SwitchesRetries`), `canary_env` (`SendsCanaries`) and `backend_counts`
(`CountsBackends`). No flag repeats a method: the harness asks `isinstance(stack, Drains)`,
or `capable(stack, Drains)`, which raises UnsupportedError with the stack's own reason
(`lacks`). What is no method (where it runs, how it routes, how its workers join) is data
on the class, read by the harness and the scenarios, never the stack's name.

A stack object is stateless: what one run needs (ports it reserved, worker URLs) is the
typed dataclass its `prepare()` returns, which the run's context carries as `ctx.state`.
The stacks share code by holding parts (`embedlab.stacks.standalone`, `.balancers`), not by
deriving from each other: each built-in stack derives from `BaseStack` alone. What a run
gives a stack (`StackContext`, `ProcessSpec`, `Join`, the helpers that start embedlab's
worker) is `stack_context.py`, re-exported here.
"""

from __future__ import annotations

import abc
import secrets
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar, cast, runtime_checkable

import httpx

from ..defaults import DISCOVERY, FAILOVER_WATCH_S, WORKER_SERVER
from ..errors import ConfigError, UnsupportedError
from ..evidence.router import RouterMetrics
from ..evidence.split import Split
from .hosts import can_make_namespaces
from .spec import DeploymentSpec, WorkerSpec
from .stack_context import (
    Join,
    ProcessSpec,
    StackContext,
    embedlab_worker,
    openai_models,
    router_venv,
    system_port_env,
    worker_engine_args,
)

__all__ = [
    "CAPABILITIES",
    "PREFIX_AWARE",
    "BaseStack",
    "CountsBackends",
    "Drains",
    "Join",
    "LiveWeights",
    "ProcessSpec",
    "SendsCanaries",
    "StackContext",
    "SwitchesRetries",
    "capable",
    "prefix_aware",
    "embedlab_worker",
    "openai_models",
    "prepare_run",
    "router_venv",
    "system_port_env",
    "worker_engine_args",
]

CapabilityT = TypeVar("CapabilityT")


# -- what a stack may be able to do: defining the methods is saying so ---------------------


@runtime_checkable
class Drains(Protocol):
    """Takes a worker out of dispatch while it keeps serving, and puts it back."""

    def drain(self, client: httpx.Client, ctx: StackContext[Any], index: int) -> None: ...

    def resume(self, client: httpx.Client, ctx: StackContext[Any], index: int) -> None: ...


@runtime_checkable
class LiveWeights(Protocol):
    """Changes its workers' routing weights while it runs."""

    def set_weights(self, client: httpx.Client, ctx: StackContext[Any], weights: Sequence[float]) -> None: ...


@runtime_checkable
class SwitchesRetries(Protocol):
    """Has frontend arguments that switch its retries off."""

    def without_retries(self, spec: DeploymentSpec) -> tuple[str, ...]: ...


@runtime_checkable
class SendsCanaries(Protocol):
    """Sends health-check canaries to its idle workers, given this environment."""

    def canary_env(self, ctx: StackContext[Any], worker: WorkerSpec) -> dict[str, str]: ...


@runtime_checkable
class CountsBackends(Protocol):
    """Keeps per-worker counters of its own: what the router says it sent each worker (by index)
    since it started, the second source of truth beside the workers' own counters."""

    def backend_counts(self, client: httpx.Client, ctx: StackContext[Any]) -> dict[int, float]: ...


# Each capability by the name `embedlab stacks` shows (and `lacks` keys its reason by), with
# what is said when a stack lacks it and gives no reason of its own.
CAPABILITIES: dict[str, tuple[type, str]] = {
    "drains": (Drains, "{name} has no API to take a worker out of dispatch"),
    "live_weights": (LiveWeights, "{name} has no live weights: its workers' weights are fixed at launch"),
    "retries_switch": (SwitchesRetries, "{name} has no switch for its retries"),
    "canaries": (SendsCanaries, "{name} has no health-check canaries"),
    "counts_backends": (CountsBackends, "{name} keeps no per-worker counts"),
}


class BaseStack(abc.ABC):
    """A stack's defaults. Subclasses define the four abstract methods and override the rest
    where they differ; `register_stack` checks both when the class joins the registry."""

    name: ClassVar[str] = ""
    title: ClassVar[str] = ""  # how messages name it; default "the <name> stack"

    # -- where it runs ------------------------------------------------------------------
    discoveries: ClassVar[tuple[str, ...]] = (DISCOVERY,)  # the `DeploymentSpec.discovery` values it runs on
    multi_host: ClassVar[bool] = False  # workers across simulated hosts (`hosts > 1`)

    # -- how it routes --------------------------------------------------------------------
    policies: ClassVar[Mapping[str, Split]] = {}  # router mode -> how a same-model split is judged
    default_policy: ClassVar[str | None] = None  # the mode when the spec names none
    worker_weights: ClassVar[bool] = False  # per-worker weights at launch (`WorkerSpec.weight`)
    model_aware: ClassVar[bool] = True  # routes by the body's `model`: multi-model is a real check
    # How its workers come to the frontend's notice: it runs every worker server that joins so.
    workers_join: ClassVar[Join] = Join.REGISTERS
    disaggregates: ClassVar[bool] = False  # it sends each request to a prefill and a decode worker
    # It picks one of a model's endpoints first (by live instances, never by cache) and lets its router
    # choose only among that endpoint's instances: a KV router there never compares workers of
    # different endpoints (Dynamo's frontend, measured).
    picks_endpoint_first: ClassVar[bool] = False
    names_worker: ClassVar[bool] = False  # the `x-embedlab-worker` header reaches the client
    # The variable that, set in the run's environment, holds the key its frontend then requires
    # (LiteLLM's LITELLM_MASTER_KEY): the run's clients send it to the frontend. None: it takes none.
    frontend_key_env: ClassVar[str | None] = None
    asserts_failover: ClassVar[bool] = False  # failover's loss and exclusion are asserted, not reported
    # Its own prefix-aware policy (the router mode that routes by the prompt's cached prefix), which
    # a plan's router mode `PREFIX_AWARE` names (the KV checks' default); None: it has none.
    prefix_aware_mode: ClassVar[str | None] = None
    # What that policy routes over where embedlab's worker on an endpoint each is not it: a worker
    # server and an endpoint layout (`DeploymentSpec.endpoints`), read by the conformance matrix's KV rows.
    prefix_aware_workers: ClassVar[tuple[str, str]] = (WORKER_SERVER, "worker")
    # Why it lacks a capability, in its own words, by the capability's name (`CAPABILITIES`,
    # and "worker_servers" for the servers it cannot run).
    lacks: ClassVar[Mapping[str, str]] = {}

    # -- where it comes from (routers) ------------------------------------------------------
    venv: ClassVar[str | None] = None  # its own venv under .routers/ (`make routers`); None: the workbench's
    pins: ClassVar[tuple[str, ...]] = ()  # the pip requirements that venv is built from
    package: ClassVar[str | None] = None  # the distribution whose version the conformance matrix shows
    in_battery: ClassVar[bool] = True  # in `embedlab conformance`'s default stack list

    # -- what every stack must say ----------------------------------------------------------

    @abc.abstractmethod
    def frontend(self, ctx: StackContext[Any]) -> ProcessSpec:
        """The frontend's process; `ready_url` where readiness is not `<frontend>/health` answering 200."""

    @abc.abstractmethod
    def worker(self, ctx: StackContext[Any], index: int, worker: WorkerSpec, system_port: int) -> ProcessSpec:
        """Worker `index`'s process; its system server listens on `system_port` (see `system_port_env`)."""

    @abc.abstractmethod
    def health_url(self, ctx: StackContext[Any]) -> str:
        """The frontend's page that lists the instances it dispatches to."""

    @abc.abstractmethod
    def dispatchable_endpoints(self, ctx: StackContext[Any], health: Any) -> set[str]:
        """Endpoint paths (`ns.comp.ep`) the frontend would dispatch to now, read from `health_url`'s JSON."""

    # -- defaults ---------------------------------------------------------------------------

    def dispatchable_instances(self, ctx: StackContext[Any], health: Any) -> Counter[str]:
        """Instances per endpoint path the frontend would dispatch to now (a stack whose health
        page lists instances counts them; the default, one per endpoint listed)."""
        return Counter(self.dispatchable_endpoints(ctx, health))

    @property
    def display(self) -> str:
        return self.title or f"the {self.name} stack"

    def check(self, spec: DeploymentSpec) -> None:
        """Raise ConfigError for a spec this stack cannot run, before anything starts.

        The default refuses what the class declares it cannot do; a stack adds its own rules.
        """
        if spec.endpoints == "model" and self.workers_join is Join.BY_URL:
            raise ConfigError(
                f"{self.display} is given its workers by URL: they have no endpoints to share (endpoints='model')"
            )
        if spec.hosts > 1 and not self.multi_host:
            raise ConfigError(
                f"{self.display} runs on one host; hosts={spec.hosts} needs a stack that runs across "
                "hosts (`embedlab stacks` lists them)"
            )
        if spec.discovery not in self.discoveries:
            raise ConfigError(
                f"{self.display} has no {spec.discovery!r} discovery (it has {', '.join(self.discoveries)}); "
                "`embedlab stacks` lists the stacks that have it"
            )
        if spec.hosts > 1 and not can_make_namespaces():
            raise ConfigError(
                f"hosts={spec.hosts} needs network namespaces: run as root (or with CAP_NET_ADMIN and CAP_SYS_ADMIN), or use hosts=1"
            )
        if spec.router_mode is not None and self.policy(spec.router_mode) not in self.policies:
            raise ConfigError(
                f"{self.display} has no router mode {spec.router_mode!r}; choose from {', '.join(self.policies) or 'none'}"
            )
        if any(w.stage is not None for w in spec.workers) and not self.disaggregates:
            raise ConfigError(
                f"{self.display} does not route prefill and decode separately: give its workers no stage (no --prefill-workers)"
            )
        if not self.worker_weights and any(w.weight != 1.0 for w in spec.workers):
            raise ConfigError(f"{self.display} has no per-worker weights; leave every weight at 1")
        if spec.canaries and not isinstance(self, SendsCanaries):
            raise ConfigError(
                self.reason("canaries", f"{self.display} sends its workers no health-check canaries")
                + "; leave canaries off, or pick a stack that has them (`embedlab stacks` lists them)"
            )

    def reason(self, capability: str, default: str = "") -> str:
        """Why this stack lacks `capability`, in its own words (`lacks`), else `default` or the
        general sentence of `CAPABILITIES`."""
        if capability in self.lacks:
            return self.lacks[capability]
        general = CAPABILITIES[capability][1].format(name=self.name) if capability in CAPABILITIES else ""
        return default or general

    def namespace(self, spec: DeploymentSpec) -> str:
        """The run's namespace: the spec's, else a unique one, so that two runs never share one."""
        return spec.namespace or f"embedlab{secrets.token_hex(4)}"

    def prepare(self, ctx: StackContext[Any]) -> Any:
        """Reserve what one run needs (ports, URLs) and make its files; returns the run's state,
        a dataclass of the stack's own, which its other methods read as `ctx.state` (None: none)."""
        return None

    def env(self, ctx: StackContext[Any]) -> dict[str, str]:
        """The environment every process of the prepared run gets."""
        return {}

    def services(self, ctx: StackContext[Any]) -> list[ProcessSpec]:
        """Processes the frontend and workers need up first (etcd), each with its `ready_url`."""
        return []

    def join(self, client: httpx.Client, ctx: StackContext[Any], index: int) -> None:
        """Tell the frontend of worker `index`, which answers now (started or started again), where
        workers join through the frontend's own API rather than registering themselves."""
        return None

    def listed_models(self, client: httpx.Client, ctx: StackContext[Any]) -> set[str] | None:
        """The models the frontend lists (/v1/models), or None where it lists none of its own."""
        return openai_models(client, ctx)

    def policy(self, router_mode: str | None) -> str | None:
        """The policy a router mode names, in this stack's spelling (None: the default)."""
        return router_mode or self.default_policy

    def split_for(self, router_mode: str | None) -> Split:
        """How a same-model split is judged under this mode (a stack without policies: by weights)."""
        policy = self.policy(router_mode)
        return self.policies[policy] if policy is not None else Split.WEIGHTS

    def direct_url(self, client: httpx.Client, ctx: StackContext[Any], index: int) -> str | None:
        """Worker `index`'s own HTTP /v1/embeddings base URL, bypassing the frontend; None where it has none."""
        return None

    def failover_watch_s(self, spec: DeploymentSpec) -> float:
        """How long failover watches for the dead instance to leave dispatch."""
        return FAILOVER_WATCH_S

    def own_counts(self, ctx: StackContext[Any]) -> RouterMetrics | None:
        """Where the frontend counts, per model, the requests it takes and answers (read beside the
        workers' counters at every window of a busy check); None where it counts none."""
        return None

    def frontend_version(self) -> str | None:
        """The frontend's own version where no Python `package` names it (None: ask the package)."""
        return None

    def lease_ttl_s(self, spec: DeploymentSpec) -> float | None:
        """The lease a dead instance outlives in dispatch, where failover judges against it (else None)."""
        return None

    def etcd_url(self, ctx: StackContext[Any]) -> str | None:
        """The run's etcd client URL on loopback, where it runs one (what `etcd.discovered` lists)."""
        return None

    def venv_dir(self) -> Path | None:
        """The venv `make routers` builds for this stack, where it has one of its own."""
        return router_venv(self.venv) if self.venv else None

    @classmethod
    def capabilities(cls) -> dict[str, Any]:
        """What the class says of itself, as plain data: `embedlab stacks` prints it (with the
        worker servers it runs, which the registry adds: `stack_registry.describe_stack`)."""
        return {
            "name": cls.name,
            "discoveries": list(cls.discoveries),
            "multi_host": cls.multi_host,
            "policies": {policy: str(split) for policy, split in cls.policies.items()},
            "default_policy": cls.default_policy,
            "worker_weights": cls.worker_weights,
            "model_aware": cls.model_aware,
            "names_worker": cls.names_worker,
            "workers_join": cls.workers_join.name.lower(),
            "asserts_failover": cls.asserts_failover,
            "prefix_aware_mode": cls.prefix_aware_mode,
            **{name: issubclass(cls, protocol) for name, (protocol, _) in CAPABILITIES.items()},
            "venv": cls.venv,
            "pins": list(cls.pins),
            "package": cls.package,
            "in_battery": cls.in_battery,
        }


def capable(stack: BaseStack, capability: Callable[..., CapabilityT]) -> CapabilityT:
    """`stack` as one that has `capability` (`Drains`, ...), else UnsupportedError with its reason.

    (`capability` is typed as a callable: mypy takes no protocol class where `type[T]` is asked.)
    """
    if isinstance(stack, cast(type, capability)):
        return cast(CapabilityT, stack)
    name = next((n for n, (protocol, _) in CAPABILITIES.items() if protocol is capability), "")
    raise UnsupportedError(
        stack.reason(name) if name else f"{stack.name} is no {getattr(capability, '__name__', '')}"
    )


# The router mode that names each stack's own prefix-aware policy, whatever the stack calls it.
PREFIX_AWARE = "prefix-aware"


def prefix_aware(stack: BaseStack) -> str:
    """The stack's own prefix-aware policy, in its names, else UnsupportedError with its reason."""
    if stack.prefix_aware_mode is not None:
        return stack.prefix_aware_mode
    modes = ", ".join(stack.policies) or "none"
    raise UnsupportedError(
        stack.reason(
            "prefix_aware",
            f"{stack.display} has no prefix-aware policy: none of its router modes ({modes}) routes by "
            "the prompt's cached prefix",
        )
    )


def prepare_run(stack: BaseStack, ctx: StackContext[Any]) -> tuple[StackContext[Any], dict[str, str]]:
    """The run prepared: its context, carrying the state `stack.prepare` returned, and the
    environment of its every process."""
    ready = replace(ctx, state=stack.prepare(ctx))
    return ready, stack.env(ready)
