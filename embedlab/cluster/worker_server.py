"""Worker servers: what runs behind a stack's frontend, one replica per worker.

    embedlab scenario same-model --stack vllm-router --worker-server vllm-serve
    embedlab scenario multi-model --stack haproxy --worker-server infinity --model-path all-MiniLM-L6-v2

A worker server is the program a team runs as its embedding worker: embedlab's own
(`embedlab worker`, behind every stack), vLLM's OpenAI server (`vllm serve --runner
pooling`), Infinity (`infinity_emb v2`), or Hugging Face's text-embeddings-inference (TEI),
which no package here ships. Each class says what one replica needs (argv and environment,
given its model directory, served name and port), how it is seen ready (`/health` answering
200), the counter that counts each request it received exactly once (`metric`) and what
its other counters count instead (`miscounts`), where its OpenAI routes are (`prefix`), and
the venv it runs from where it has one of its own (built by `make routers`, like the
routers'). `WorkerSpec.server` names it. A stack runs every server that joins its frontend the
way it needs (`joins`, `BaseStack.workers_join`: registering with embedlab's frontend, with
Dynamo's runtime, or given by URL), and what a server runs is said by traits (`runs_engine`,
`runs_vllm`, `foreign`), never by its name.

The contract and the registry are the cluster's, as the stacks' are (`stack.py`,
`stack_registry.py`): the deployment checks a spec's servers and reads their counters,
the launcher their vLLM settings, the scenarios their models and start-up times, all from
here. The registry names the built-ins by "module:Class" strings: embedlab's own worker,
which every stack starts itself, is declared below; the foreign servers, launched by their
argv, are in `embedlab/stacks/foreign_servers.py`, and Dynamo's vLLM worker beside the stack
that runs it (`embedlab/stacks/dynamo.py`), imported only when one is asked for.

What the foreign servers share, and how the stacks use it: each serves its OpenAI routes,
`/health` and `/metrics` on one HTTP port, so that port is the worker's system URL as well
as its URL for the router; none registers with anything (a router is given its URL, which
is why Dynamo's frontend and the embedded one cannot run them), and none sends
`x-embedlab-worker`, so placement is proven by the counters alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from ..defaults import METRIC, STARTUP_TIMEOUT_S
from ..engines.models import model_names, resolve_model_path
from ..errors import ConfigError, UnsupportedError
from ..evidence.metrics import MetricQuery
from ..plugins import Registry
from .spec import DeploymentSpec, WorkerSpec
from .stack import BaseStack, Join, ProcessSpec, StackContext, router_venv

__all__ = [
    "WORKER_SERVERS",
    "Replica",
    "WorkerServer",
    "check_servers",
    "counter_notes",
    "is_foreign",
    "foreign_worker",
    "model_dir",
    "names_worker",
    "register_worker_server",
    "runs_vllm",
    "server_of",
    "server_venvs",
    "servers_of",
    "spec_metric",
    "startup_timeout",
    "workers_text",
]


@dataclass(frozen=True, kw_only=True)
class Replica:
    """One worker as a server starts it: its model, its name, where it listens, where it writes."""

    index: int
    worker: WorkerSpec
    host: str
    port: int  # its HTTP port: the OpenAI routes, /health and /metrics
    python: str  # the workbench's interpreter (a server without a venv of its own runs there)
    endpoint: str = ""  # its endpoint path, for a server that registers it (Dynamo's runtime)

    @property
    def model_path(self) -> str:
        """The model's directory: its path, or a known model's by name (`all-MiniLM-L6-v2`)."""
        return str(resolve_model_path(str(self.worker.model_path)))


class WorkerServer:
    """A worker server's defaults; the built-ins below override what differs."""

    name: ClassVar[str] = ""
    title: ClassVar[str] = ""  # how messages and the matrix name it
    # The counter that counts each request the worker received once, whatever its status,
    # and what it counts, as measured (the README's "counters of the worker servers").
    metric: ClassVar[str] = METRIC
    counts: ClassVar[str] = ""
    # Other counters a user may pick, and what they count instead of requests.
    miscounts: ClassVar[Mapping[str, str]] = {}
    prefix: ClassVar[str] = "/v1"  # where its OpenAI routes are, as launched here
    foreign: ClassVar[bool] = True  # serves a model directory of its own, launched by its argv
    # How it comes to a frontend's notice: a stack runs it where its `workers_join` is among these.
    joins: ClassVar[frozenset[Join]] = frozenset({Join.BY_URL})
    names_worker: ClassVar[bool] = False  # its answers carry `x-embedlab-worker`
    runs_engine: ClassVar[bool] = False  # it runs the spec's embedlab engine (`WorkerSpec.engine`)
    runs_vllm: ClassVar[bool] = False  # it is vLLM: the run's vLLM settings apply (cache, a core per worker)
    venv: ClassVar[str | None] = None  # its own venv under .routers/ (`make routers`)
    pins: ClassVar[tuple[str, ...]] = ()
    package: ClassVar[str | None] = None  # the distribution whose version the matrix shows
    launchable: ClassVar[bool] = True
    no_launch: ClassVar[str] = ""  # why not, where it is not
    # How long a deployment of it waits for its workers where the spec keeps the default:
    # what one start was seen to take on 2 busy cores, with room.
    startup_s: ClassVar[float] = STARTUP_TIMEOUT_S
    # The system port's page that answers 200 once it is up (`/health` unless that lies).
    ready_path: ClassVar[str] = "/health"
    # It can run as a prefill-only or a decode-only worker (`WorkerSpec.stage`).
    stages: ClassVar[bool] = False

    @property
    def display(self) -> str:
        return self.title or self.name

    def check(self, worker: WorkerSpec) -> None:
        """A ConfigError for a worker this server cannot start, before anything starts."""
        if worker.stage is not None and not self.stages:
            raise ConfigError(
                f"{self.display} has no {worker.stage} stage: only a worker server that disaggregates "
                "(Dynamo's mocker) runs as a prefill or a decode worker"
            )
        if self.foreign and worker.model_path is None:
            raise ConfigError(
                f"{self.display} serves a model directory: worker {worker.model!r} needs a model_path"
            )
        if self.foreign and worker.metrics_ports != 1:
            raise ConfigError(
                f"{self.display} exposes one /metrics port; metrics_ports={worker.metrics_ports} is "
                "embedlab's worker's (--api-processes with a port per process)"
            )

    def model_directory(self, worker: WorkerSpec) -> Path | None:
        """The directory whose tokenizer counts this worker's prompts (None: embedlab's words)."""
        return None if worker.model_path is None else Path(str(worker.model_path))

    def argv(self, replica: Replica) -> list[str]:
        raise ConfigError(self.no_launch or f"{self.display} is not launched by embedlab")

    def env(self, ctx: StackContext[Any], replica: Replica) -> dict[str, str]:
        """Its own environment, beyond the run's (`ctx.scratch` makes what must go with the run)."""
        return {}

    def state_env(self, state_dir: Path, env: Mapping[str, str]) -> dict[str, str]:
        """What points its files into its state folder (`<run_dir>/worker-N-state`), given
        the environment it starts with."""
        return {}

    def binary(self, relative: str) -> str:
        """A program of its own venv; a ConfigError that says how to build it where missing."""
        path = router_venv(str(self.venv)) / relative
        if not path.exists():
            raise ConfigError(f"{self.display} needs {path}: run `make routers` (see the README)")
        return str(path)

    def venv_dir(self) -> Path | None:
        return router_venv(self.venv) if self.venv else None

    @classmethod
    def capabilities(cls) -> dict[str, object]:
        return {
            "name": cls.name,
            "metric": cls.metric,
            "counts": cls.counts,
            "miscounts": dict(cls.miscounts),
            "prefix": cls.prefix,
            "names_worker": cls.names_worker,
            "joins": sorted(join.name.lower() for join in cls.joins),
            "launchable": cls.launchable,
            "venv": cls.venv,
            "pins": list(cls.pins),
            "package": cls.package,
        }


class EmbedlabServer(WorkerServer):
    """embedlab's own worker, `embedlab worker` (or `embedlab dynamo-worker` on Dynamo): each
    stack starts it with its own arguments (`cluster.stack.embedlab_worker`), its engine the spec's."""

    name = "embedlab"
    title = "embedlab's worker"
    counts = "each request the worker received, before it is decoded, every status (its system port)"
    foreign = False
    joins = frozenset(Join)  # it registers with embedlab's frontend, with Dynamo's, or listens on a port
    names_worker = True
    runs_engine = True
    package = "embedlab"


WORKER_SERVERS: Registry[type[WorkerServer]] = Registry(
    "worker server",
    group="embedlab.worker_servers",
    builtins={
        "embedlab": "embedlab.cluster.worker_server:EmbedlabServer",
        "vllm-serve": "embedlab.stacks.foreign_servers:VllmServe",
        "infinity": "embedlab.stacks.foreign_servers:Infinity",
        "tei": "embedlab.stacks.foreign_servers:Tei",
        "dynamo-vllm": "embedlab.stacks.dynamo:DynamoVllmServer",
        "mocker": "embedlab.stacks.dynamo:DynamoMocker",
    },
    check=lambda name, cls: _check_server(name, cls),
)


def _check_server(name: str, cls: type[WorkerServer]) -> None:
    if not (isinstance(cls, type) and issubclass(cls, WorkerServer)):
        raise ConfigError(f"worker server {name!r} must be a WorkerServer subclass, got {cls!r}")
    if cls.venv is not None and not cls.pins:
        raise ConfigError(f"worker server {name!r} declares venv {cls.venv!r} but no pins to build it from")


def register_worker_server(name: str, server: type[WorkerServer] | str, *, replace: bool = False) -> None:
    """Make `WorkerSpec(server=NAME)` (and `--worker-server NAME`) launchable."""
    WORKER_SERVERS.register(name, server, replace=replace)


def server_of(worker: WorkerSpec) -> WorkerServer:
    return WORKER_SERVERS.get(worker.server)()


def names_worker(spec: DeploymentSpec) -> bool:
    """Every worker's server sends `x-embedlab-worker` (a stack that passes it on names them)."""
    return all(server_of(w).names_worker for w in spec.workers)


def runs_vllm(worker: WorkerSpec) -> bool:
    """vLLM runs in the worker: a server that is vLLM, or one that runs the spec's engine, vllm."""
    server = server_of(worker)
    return server.runs_vllm or (server.runs_engine and worker.runs_vllm)


def server_venvs() -> dict[str, tuple[str, ...]]:
    """Each worker server's own venv, with its pins (`make routers` builds them with the routers')."""
    return {
        str(cls.venv): cls.pins for name in WORKER_SERVERS.names() if (cls := WORKER_SERVERS.get(name)).venv
    }


def spec_metric(metric: str, workers: tuple[WorkerSpec, ...]) -> str:
    """The counter a deployment's checks read: the spec's, unless it left embedlab's default while
    its workers run a server that counts in a counter of its own (then that one)."""
    if metric != METRIC:
        return metric
    own = {WORKER_SERVERS.get(w.server).metric for w in workers}
    return own.pop() if len(own) == 1 else metric


def counter_notes(metric: str) -> list[str]:
    """What the verdict must say of a counter that counts something other than requests."""
    notes = []
    for name in WORKER_SERVERS.names():
        cls = WORKER_SERVERS.get(name)
        for selector, counts in cls.miscounts.items():
            if _same_counter(metric, selector):
                notes.append(
                    f"{metric} counts {counts}, not requests ({cls().display}); the counter that counts "
                    f"each request once is {cls.metric}"
                )
    return notes


def _same_counter(metric: str, selector: str) -> bool:
    try:
        given, known = MetricQuery.parse(metric), MetricQuery.parse(selector)
    except ConfigError:
        return False
    names = {known.name, known.name.removesuffix("_total"), known.name + "_total"}
    return given.name in names and set(known.labels) <= set(given.labels)


# The model a server of its own serves under a name that is no known model's.
DEFAULT_MODEL = "tiny-bert"


def is_foreign(name: str) -> bool:
    """Worker server `name` serves a model directory of its own (it is not embedlab's worker)."""
    return WORKER_SERVERS.get(name).foreign


def model_dir(model: str, server: str) -> Path:
    """The directory a worker of `server` serving `model` (given no model path) gets: a known
    model's; for a server of its own, the tiny BERT under a name no model is known by."""
    if is_foreign(server) and model not in model_names():
        model = DEFAULT_MODEL
    if model not in model_names():
        raise ConfigError(
            f"model '{model}' needs a --model-path (models known by name: {', '.join(model_names())})"
        )
    return resolve_model_path(model)


def workers_text(server: str, engine: str) -> str:
    """How a plan's description names its workers."""
    return f"{WORKER_SERVERS.get(server)().display} workers" if is_foreign(server) else f"the {engine} engine"


def startup_timeout(given: float, server: str) -> float:
    """A plan's startup timeout: as given, or, left at the default, as long as its server needs."""
    return given if given != STARTUP_TIMEOUT_S else max(given, WORKER_SERVERS.get(server).startup_s)


def check_servers(stack: BaseStack, spec: DeploymentSpec) -> None:
    """UnsupportedError, when a run starts, for a worker server `stack` cannot run or that cannot
    be launched here: in a scenario, a verdict of its own with the reason."""
    counters = {WORKER_SERVERS.get(w.server).metric for w in spec.workers}
    if len(counters) > 1:
        raise ConfigError(
            f"the workers count in different counters ({', '.join(sorted(counters))}): a check reads one, "
            "so one deployment runs one worker server"
        )
    for name in dict.fromkeys(w.server for w in spec.workers):
        server = WORKER_SERVERS.get(name)()
        if stack.workers_join not in server.joins:
            why = stack.reason(
                "worker_servers", f"{stack.display} runs workers that {stack.workers_join.value}"
            )
            raise UnsupportedError(f"{why}; not {server.display}")
        if not server.launchable:
            raise UnsupportedError(server.no_launch)
    for worker in spec.workers:
        WORKER_SERVERS.get(worker.server)().check(worker)


def servers_of(stack: type[BaseStack]) -> list[str]:
    """The registered worker servers `stack` can run: those that join the way it needs."""
    return [name for name in WORKER_SERVERS.names() if stack.workers_join in WORKER_SERVERS.get(name).joins]


def foreign_worker(ctx: StackContext[Any], index: int, worker: WorkerSpec, *, port: int) -> ProcessSpec:
    """Worker `index` as its server starts it, listening on `port` of the run's host."""
    server = server_of(worker)
    replica = Replica(index=index, worker=worker, host=ctx.host, port=port, python=ctx.python)
    return ProcessSpec(
        role="worker",
        worker=index,
        argv=server.argv(replica),
        env=server.env(ctx, replica),
        state_env=server.state_env,
    )
