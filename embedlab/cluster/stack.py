"""What a stack is: how it starts its frontend and workers, and what it can do, declared.

A stack subclasses `BaseStack`, says how to start its processes (`frontend`, `worker`)
and how to see them registered (`health_url`, `dispatchable_endpoints`), and overrides
the defaults where it differs. What it can do is data on the class (`discoveries`,
`multi_host`, `live_weights`, `drains`, `asserts_failover`, ...): the harness and the
scenarios read that, never the stack's name. A stack object is stateless; what one run
needs (ports it reserved, worker URLs) lives in that run's `StackContext.state`.
"""

from __future__ import annotations

import abc
import os
import secrets
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import httpx

from ..defaults import DISCOVERY, FAILOVER_WATCH_S, ROUTERS_ENV, SYSTEM_PORT_ENV, worker_endpoint
from ..errors import ConfigError, UnsupportedError
from ..evidence.split import Split
from .hosts import Host, can_make_namespaces
from .spec import DeploymentSpec, WorkerSpec

# The key of the workers' per-process metrics ports (index -> ports) in `StackContext.state`.
METRICS_PORTS = "metrics_ports"

__all__ = [
    "BaseStack",
    "embedlab_worker",
    "ProcessSpec",
    "StackContext",
    "openai_models",
    "router_venv",
    "system_port_env",
    "worker_engine_args",
]


@dataclass(frozen=True, kw_only=True)
class ProcessSpec:
    """One process of a deployment: what it is, how to start it."""

    role: str  # "frontend", "worker", or a stack's own service ("etcd")
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    worker: int | None = None  # the worker's index, for role "worker"
    ready_url: str | None = None  # a service is ready when this answers 200
    unset: tuple[str, ...] = ()  # prefixes of inherited variables it must not see (etcd reads ETCD_*)
    # What points its files into its state folder, given that folder and the environment it
    # starts with (a worker server that is not embedlab's: `worker_server.WorkerServer.state_env`).
    state_env: Callable[[Path, Mapping[str, str]], Mapping[str, str]] | None = None

    @property
    def name(self) -> str:
        """The process's name in progress, tables and errors: `frontend`, `worker 0`, ..."""
        return self.role if self.worker is None else f"{self.role} {self.worker}"

    @property
    def file_stem(self) -> str:
        """Its files' name in the run dir: `frontend.log`, `worker-0.log`, `worker-0-state/`."""
        return self.name.replace(" ", "-")


@dataclass(frozen=True, kw_only=True)
class StackContext:
    """One run of a stack: its directory, hosts, ports and names, and the state its stack keeps.

    `state` is the stack's own per-run state, filled by its `prepare()` (the ports it
    reserved, its workers' URLs) and read by its other methods: the stack object itself
    keeps nothing between runs, so one object serves any number of runs.
    """

    spec: DeploymentSpec
    run_dir: Path
    host: str  # where the frontend listens for the harness's traffic
    frontend_port: int
    namespace: str
    hosts: tuple[Host, ...]
    reserve: Callable[[], int]  # a free port, released when the run stops
    system_ports: tuple[int, ...] = ()
    python: str = sys.executable
    state: dict[str, Any] = field(default_factory=dict)
    scratch_paths: list[Path] = field(default_factory=list)
    on_scratch: Callable[[Path], None] = lambda path: None  # the deployment's: delete it if the harness dies

    def scratch(self, path: Path) -> Path:
        """`path`, a file or folder the run's processes use (a config file, etcd's data), which
        the deployment deletes once they have stopped: of a run, only its logs stay behind."""
        if path not in self.scratch_paths:
            self.on_scratch(path)
            self.scratch_paths.append(path)
        return path

    def host_of(self, index: int) -> Host:
        """The host worker `index` runs on."""
        return self.hosts[self.spec.host_of(index)]

    def system_url(self, index: int) -> str:
        """Worker `index`'s system server: /metrics, /health, and embedlab's /drain and /resume."""
        return f"http://{self.host_of(index).address}:{self.system_ports[index]}"

    def metrics_url(self, index: int) -> str:
        """Where worker `index`'s counters are read: its system server, or, for a worker with a
        metrics port per process (`WorkerSpec.metrics_ports`), those ports as `URL+URL`."""
        ports = self.state.get(METRICS_PORTS, {}).get(index)
        if not ports:
            return self.system_url(index)
        return "+".join(f"http://{self.host_of(index).address}:{port}" for port in ports)

    @property
    def frontend_url(self) -> str:
        return f"http://{self.host}:{self.frontend_port}"

    def endpoint(self, index: int) -> str:
        return self.spec.workers[index].endpoint or worker_endpoint(self.namespace, index)


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
    live_weights: ClassVar[bool] = False  # weights changed while it runs: `set_weights`
    model_aware: ClassVar[bool] = True  # routes by the body's `model`: multi-model is a real check
    # The worker servers it can put behind its frontend (`WorkerSpec.server`), and why not others.
    worker_servers: ClassVar[tuple[str, ...]] = ("embedlab",)
    no_worker_servers: ClassVar[str] = ""
    names_worker: ClassVar[bool] = False  # the `x-embedlab-worker` header reaches the client
    counts_backends: ClassVar[bool] = False  # keeps per-worker counters of its own: `backend_counts`

    # -- what it lets the harness do --------------------------------------------------------
    drains: ClassVar[bool] = False  # a worker out of dispatch while it serves: `drain`, `resume`
    no_drain: ClassVar[str] = ""  # why not, in the stack's own words (default: "<name> has no API ...")
    retries_switch: ClassVar[bool] = False  # `without_retries` gives the arguments that turn them off
    no_retries_switch: ClassVar[str] = ""  # why not, in the stack's own words
    asserts_failover: ClassVar[bool] = False  # failover's loss and exclusion are asserted, not reported
    canaries: ClassVar[bool] = False  # health-check canaries on idle workers: `canary_env`
    no_canaries: ClassVar[str] = ""  # why not, in the stack's own words

    # -- where it comes from (routers) ------------------------------------------------------
    venv: ClassVar[str | None] = None  # its own venv under .routers/ (`make routers`); None: the workbench's
    pins: ClassVar[tuple[str, ...]] = ()  # the pip requirements that venv is built from
    package: ClassVar[str | None] = None  # the distribution whose version the conformance matrix shows
    in_battery: ClassVar[bool] = True  # in `embedlab conformance`'s default stack list

    # -- what every stack must say ----------------------------------------------------------

    @abc.abstractmethod
    def frontend(self, ctx: StackContext) -> ProcessSpec:
        """The frontend's process; `ready_url` where readiness is not `<frontend>/health` answering 200."""

    @abc.abstractmethod
    def worker(self, ctx: StackContext, index: int, worker: WorkerSpec, system_port: int) -> ProcessSpec:
        """Worker `index`'s process; its system server listens on `system_port` (see `system_port_env`)."""

    @abc.abstractmethod
    def health_url(self, ctx: StackContext) -> str:
        """The frontend's page that lists the instances it dispatches to."""

    @abc.abstractmethod
    def dispatchable_endpoints(self, ctx: StackContext, health: Any) -> set[str]:
        """Endpoint paths (`ns.comp.ep`) the frontend would dispatch to now, read from `health_url`'s JSON."""

    # -- defaults ---------------------------------------------------------------------------

    @property
    def display(self) -> str:
        return self.title or f"the {self.name} stack"

    def check(self, spec: DeploymentSpec) -> None:
        """Raise ConfigError for a spec this stack cannot run, before anything starts.

        The default refuses what the class declares it cannot do; a stack adds its own rules.
        """
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
        if not self.worker_weights and any(w.weight != 1.0 for w in spec.workers):
            raise ConfigError(f"{self.display} has no per-worker weights; leave every weight at 1")
        if spec.canaries and not self.canaries:
            raise ConfigError(
                (self.no_canaries or f"{self.display} sends its workers no health-check canaries")
                + "; leave canaries off, or pick a stack that has them (`embedlab stacks` lists them)"
            )

    def namespace(self, spec: DeploymentSpec) -> str:
        """The run's namespace: the spec's, else a unique one, so that two runs never share one."""
        return spec.namespace or f"embedlab{secrets.token_hex(4)}"

    def prepare(self, ctx: StackContext) -> dict[str, str]:
        """Fill `ctx.state` (ports, URLs) and make per-run files; returns environment for every process."""
        return {}

    def services(self, ctx: StackContext) -> list[ProcessSpec]:
        """Processes the frontend and workers need up first (etcd), each with its `ready_url`."""
        return []

    def join(self, client: httpx.Client, ctx: StackContext, index: int) -> None:
        """Tell the frontend of worker `index`, which answers now (started or started again), where
        workers join through the frontend's own API rather than registering themselves."""
        return None

    def listed_models(self, client: httpx.Client, ctx: StackContext) -> set[str] | None:
        """The models the frontend lists (/v1/models), or None where it lists none of its own."""
        return openai_models(client, ctx)

    def policy(self, router_mode: str | None) -> str | None:
        """The policy a router mode names, in this stack's spelling (None: the default)."""
        return router_mode or self.default_policy

    def split_for(self, router_mode: str | None) -> Split:
        """How a same-model split is judged under this mode (a stack without policies: by weights)."""
        policy = self.policy(router_mode)
        return self.policies[policy] if policy is not None else Split.WEIGHTS

    def drain(self, client: httpx.Client, ctx: StackContext, index: int) -> None:
        """Take worker `index` out of dispatch while it keeps serving; UnsupportedError where impossible."""
        raise UnsupportedError(self.no_drain or f"{self.name} has no API to take a worker out of dispatch")

    def resume(self, client: httpx.Client, ctx: StackContext, index: int) -> None:
        """Put a drained worker back."""
        raise UnsupportedError(self.no_drain or f"{self.name} has no API to take a worker back")

    def without_retries(self, spec: DeploymentSpec) -> tuple[str, ...]:
        """Frontend arguments that switch the frontend's retries off; UnsupportedError where it has no switch."""
        raise UnsupportedError(self.no_retries_switch or f"{self.name} has no switch for its retries")

    def direct_url(self, client: httpx.Client, ctx: StackContext, index: int) -> str | None:
        """Worker `index`'s own HTTP /v1/embeddings base URL, bypassing the frontend; None where it has none."""
        return None

    def set_weights(self, client: httpx.Client, ctx: StackContext, weights: Sequence[float]) -> None:
        """Give worker i routing weight `weights[i]`, live; UnsupportedError where the frontend cannot."""
        raise UnsupportedError(f"{self.name} has no live weights: its workers' weights are fixed at launch")

    def canary_env(self, ctx: StackContext, worker: WorkerSpec) -> dict[str, str]:
        """The environment that gives `worker` canaries while it idles; UnsupportedError where none."""
        raise UnsupportedError(self.no_canaries or f"{self.name} has no health-check canaries")

    def failover_watch_s(self, spec: DeploymentSpec) -> float:
        """How long failover watches for the dead instance to leave dispatch."""
        return FAILOVER_WATCH_S

    def frontend_version(self) -> str | None:
        """The frontend's own version where no Python `package` names it (None: ask the package)."""
        return None

    def backend_counts(self, client: httpx.Client, ctx: StackContext) -> dict[int, float] | None:
        """Requests the router says it sent to each worker (by index) since it started, from its own
        per-backend counters; None where it keeps none. The second source of truth beside the
        workers' own counters."""
        return None

    def lease_ttl_s(self, spec: DeploymentSpec) -> float | None:
        """The lease a dead instance outlives in dispatch, where failover judges against it (else None)."""
        return None

    def etcd_url(self, ctx: StackContext) -> str | None:
        """The run's etcd client URL on loopback, where it runs one (what `etcd.discovered` lists)."""
        return None

    def venv_dir(self) -> Path | None:
        """The venv `make routers` builds for this stack, where it has one of its own."""
        return router_venv(self.venv) if self.venv else None

    @classmethod
    def capabilities(cls) -> dict[str, Any]:
        """What the class declares, as plain data: `embedlab stacks` prints it."""
        return {
            "name": cls.name,
            "discoveries": list(cls.discoveries),
            "multi_host": cls.multi_host,
            "policies": {policy: str(split) for policy, split in cls.policies.items()},
            "default_policy": cls.default_policy,
            "worker_weights": cls.worker_weights,
            "live_weights": cls.live_weights,
            "model_aware": cls.model_aware,
            "names_worker": cls.names_worker,
            "worker_servers": list(cls.worker_servers),
            "counts_backends": cls.counts_backends,
            "drains": cls.drains,
            "retries_switch": cls.retries_switch,
            "asserts_failover": cls.asserts_failover,
            "canaries": cls.canaries,
            "venv": cls.venv,
            "pins": list(cls.pins),
            "package": cls.package,
            "in_battery": cls.in_battery,
        }


def router_venv(name: str) -> Path:
    """The venv `make routers` builds for router venv `name` (under $EMBEDLAB_ROUTERS, else .routers/)."""
    root = os.environ.get(ROUTERS_ENV) or Path(__file__).resolve().parents[2] / ".routers"
    return Path(root) / name


def openai_models(client: httpx.Client, ctx: StackContext) -> set[str]:
    return {m["id"] for m in client.get(f"{ctx.frontend_url}/v1/models").json().get("data", [])}


def embedlab_worker(
    ctx: StackContext,
    index: int,
    worker: WorkerSpec,
    system_port: int,
    *,
    frontend_url: str,
    args: Sequence[str],
) -> ProcessSpec:
    """Worker `index` as `embedlab worker`: registering with `frontend_url` ("": with nothing,
    for a router given its URL), with the stack's own `args`, then the engine's."""
    argv = [ctx.python, "-m", "embedlab", "worker", "--served-model-name", worker.model]
    argv += [
        "--endpoint",
        ctx.endpoint(index),
        "--frontend-url",
        frontend_url,
        *args,
        *process_metrics_args(ctx, index, worker),
        *worker_engine_args(worker),
    ]
    return ProcessSpec(role="worker", worker=index, argv=argv, env=system_port_env(system_port))


def process_metrics_args(ctx: StackContext, index: int, worker: WorkerSpec) -> list[str]:
    """`--api-processes N --process-metrics-ports P,...` for a worker with a metrics port per
    ingest process; the ports are reserved once per run, so a restarted worker binds them again."""
    if worker.metrics_ports == 1:
        return []
    ports = ctx.state.setdefault(METRICS_PORTS, {})
    if index not in ports:
        ports[index] = [ctx.reserve() for _ in range(worker.metrics_ports)]
    listed = ",".join(map(str, ports[index]))
    return ["--api-processes", str(worker.metrics_ports), "--process-metrics-ports", listed]


def worker_engine_args(worker: WorkerSpec) -> list[str]:
    """The engine flags shared by embedlab workers on every stack."""
    argv = ["--engine", worker.engine]
    if worker.model_path is not None:
        argv += ["--model-path", str(worker.model_path)]
    if worker.pooling:
        argv += ["--pooling", worker.pooling]
    if worker.max_model_len:
        argv += ["--max-model-len", str(worker.max_model_len)]
    return argv + list(worker.extra_args)


def system_port_env(system_port: int) -> dict[str, str]:
    """How every stack hands a worker its system port: Dynamo's own variable, the one channel."""
    return {SYSTEM_PORT_ENV: str(system_port)}
