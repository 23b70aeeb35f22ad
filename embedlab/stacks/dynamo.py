"""The dynamo stack: the real `python -m dynamo.frontend` with embedlab workers on the Dynamo runtime.

Discovery is file (a fresh folder per run, one host) or etcd (a server the run starts,
with leases of the spec's `lease_ttl`), over the TCP request plane: no NATS either way.
Every listener binds its own host's address: loopback on one host, the run's private
addresses across several (Dynamo would bind the primary NIC by default).

Its workers register with Dynamo's runtime (`Join.DYNAMO`): embedlab's worker, as
`embedlab dynamo-worker` with the spec's engine, or Dynamo's own vLLM worker, declared here
(`DynamoVllmServer`), which the worker servers' registry names.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shlex
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from ..cluster.etcd import etcd_argv
from ..cluster.hosts import Host
from ..cluster.spec import DeploymentSpec, WorkerSpec
from ..cluster.stack import BaseStack, Join, ProcessSpec, StackContext, system_port_env, worker_engine_args
from ..cluster.worker_server import Replica, WorkerServer, server_of
from ..defaults import (
    CANARY_INPUT,
    CANARY_WAIT_ENV,
    CANARY_WAIT_S,
    DISCOVERY_ENV,
    HEALTH_CHECK_ENABLED_ENV,
    HEALTH_CHECK_PAYLOAD_ENV,
    METRIC,
    REQUEST_PLANE,
    REQUEST_PLANE_ENV,
    SYSTEM_HOST_ENV,
)
from ..engines.tiny import cached_tiny_model
from ..errors import ConfigError
from ..evidence.router import RouterMetrics, known_router
from ..evidence.split import Split

# embedlab router mode -> Dynamo's. Across worker sets of one model Dynamo always picks
# at random weighted by live instances; the mode chooses inside a set.
ROUTER_MODES = {
    "weighted-random": "random",
    "round-robin": "round-robin",
    "least-inflight": "least-loaded",
    "kv": "kv",  # prefix-aware (its KV router), over the workers' KV events
}
# On file discovery the frontend opens one inotify instance of its own and four per worker
# endpoint it watches (measured on 1.6.1: 9 with 2 workers, 33 with 8). The kernel allows
# each user fs.inotify.max_user_instances of them, 128 by default, for all its processes
# together; past that the frontend logs "Too many open files" for the endpoints it could not
# watch, never routes to them, and still lists them in /health.
INOTIFY_LIMIT = Path("/proc/sys/fs/inotify/max_user_instances")


def inotify_needed(workers: int) -> int:
    """The inotify instances Dynamo's frontend holds on file discovery with `workers` endpoints."""
    return 1 + 4 * workers


def inotify_limit() -> int | None:
    try:
        return int(INOTIFY_LIMIT.read_text())
    except (OSError, ValueError):
        return None


def inotify_in_use() -> int:
    """The inotify instances this user's processes hold now (the ones this harness can see)."""
    uid, held = os.getuid(), 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
            with os.scandir(f"/proc/{entry.name}/fd") as fds:
                held += sum(1 for fd in fds if _readlink(fd.path) == "anon_inode:inotify")
        except OSError:
            continue  # it exited, or is not ours to read
    return held


def _readlink(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""


def _inotify_refusal(workers: int, limit: int, held: int | None = None) -> str:
    need = inotify_needed(workers)
    used = f", {held} of them in use now" if held is not None else ""
    return (
        f"Dynamo's frontend on file discovery needs {need} inotify instances for {workers} workers "
        f"(1 + 4 per worker); the kernel allows this user {limit} (fs.inotify.max_user_instances){used}. "
        "Past that it never routes to the workers it could not watch, though it lists them. Use "
        f"discovery='etcd', or raise the limit: sysctl -w fs.inotify.max_user_instances={max(512, 2 * need)}"
    )


def dynamo_installed() -> bool:
    return (
        importlib.util.find_spec("dynamo") is not None
        and importlib.util.find_spec("dynamo.frontend") is not None
    )


@dataclass(frozen=True, kw_only=True)
class DynamoRun:
    """One run of Dynamo: its temp folder, and its discovery's own: the file store's folder
    (file discovery) or etcd's client port (etcd)."""

    tmp: Path
    file_kv: Path | None = None
    etcd_port: int | None = None


class DynamoVllmServer(WorkerServer):
    """Dynamo's own vLLM worker (`python -m dynamo.vllm --embedding-worker`), on the dynamo stack only."""

    name = "dynamo-vllm"
    title = "Dynamo's vLLM worker"
    counts = "each request its endpoint received (Dynamo's runtime counts it, before decoding)"
    foreign = False  # it serves the models embedlab knows by name, as embedlab's worker does
    joins = frozenset({Join.DYNAMO})
    runs_vllm = True
    package = "ai-dynamo"

    def argv(self, replica: Replica) -> list[str]:
        return dynamo_vllm_argv(replica.python, replica.worker, replica.endpoint)


class DynamoMocker(WorkerServer):
    """Dynamo's mocker (`python -m dynamo.mocker`): a simulated LLM engine with a simulated KV
    cache that publishes KV events, so Dynamo's KV router runs on CPU (measured: FACTS.md)."""

    name = "mocker"
    title = "Dynamo's mocker"
    # Its router's KV queries are counted on the same name under another endpoint label.
    metric = f'{METRIC}{{dynamo_endpoint="generate"}}'
    counts = (
        "each completion or chat request its generate endpoint received (Dynamo's runtime counts it; "
        "the KV router's queries are the same name's worker_kv_query_source_<id> endpoint, left out)"
    )
    foreign = False
    joins = frozenset({Join.DYNAMO})
    package = "ai-dynamo"
    ready_path = "/metrics"  # its /health answers 503 "notready" while it serves (1.6.1, measured)
    stages = True  # --disaggregation-mode prefill|decode
    # Its simulated engine at this multiple of real speed: a 16-token completion in about 15 ms
    # where 1.0 takes about 110 (measured; 0, though documented as "no delays", is 1.0).
    speedup = 100

    def model_directory(self, worker: WorkerSpec) -> Path:
        """A tokenizer with a chat template: the worker's model, else the tiny Qwen3."""
        if worker.model_path is not None:
            return Path(str(worker.model_path))
        return cached_tiny_model("qwen3")

    def argv(self, replica: Replica) -> list[str]:
        worker = replica.worker
        return [
            replica.python,
            "-m",
            "dynamo.mocker",
            "--model-path",
            str(self.model_directory(worker)),
            "--model-name",
            worker.model,
            "--endpoint",
            f"dyn://{replica.endpoint}",
            "--speedup-ratio",
            str(self.speedup),
            *(("--disaggregation-mode", worker.stage) if worker.stage else ()),
            *(a for arg in worker.extra_args for a in shlex.split(arg)),
        ]


class DynamoStack(BaseStack):
    """The real Dynamo frontend; on etcd, across simulated hosts; canaries; no drain API, no retries of embeddings."""

    name = "dynamo"
    title = "Dynamo"
    discoveries = ("file", "etcd")
    multi_host = True  # on etcd: file discovery is one machine's shared folder
    # Each worker has an endpoint of its own, and across endpoints Dynamo always picks at
    # random, weighted by live instances: the mode only chooses inside one endpoint.
    policies: ClassVar[dict[str, Split]] = {mode: Split.WEIGHTS for mode in ROUTER_MODES}
    model_aware = True
    picks_endpoint_first = True
    # Its KV router, over KV events that embedlab's worker does not publish: its mocker does, and the
    # router compares only the instances of one endpoint (`picks_endpoint_first`).
    prefix_aware_mode = "kv"
    prefix_aware_workers = ("mocker", "model")
    # Its KV router sends each request to a prefill worker, then to a decode worker (1.6.1, measured).
    disaggregates = True
    names_worker = False  # its workers answer over Dynamo's TCP request plane: no header of theirs
    workers_join = Join.DYNAMO
    lacks: ClassVar[dict[str, str]] = {
        "drains": "Dynamo 1.6 has no API to take a worker out of dispatch while it keeps serving",
        "worker_servers": (
            "Dynamo's frontend routes only to workers that register with Dynamo's runtime (embedlab's "
            "worker, Dynamo's own vLLM worker); a server given by URL never appears in its discovery"
        ),
    }
    package = "ai-dynamo"

    def own_counts(self, ctx: StackContext[Any]) -> RouterMetrics:
        # Its frontend counts each request it accepts and each it answers, per model (1.6.1, measured).
        return known_router(ctx.frontend_url, "dynamo_frontend_requests_started_total")

    def check(self, spec: DeploymentSpec) -> None:
        super().check(spec)
        if spec.hosts > 1 and spec.discovery != "etcd":
            raise ConfigError(
                f"hosts={spec.hosts} needs discovery='etcd': file discovery is one machine's shared folder"
            )
        limit = inotify_limit()
        if spec.discovery == "file" and limit is not None and inotify_needed(len(spec.workers)) > limit:
            raise ConfigError(_inotify_refusal(len(spec.workers), limit))
        _check_stage_endpoints(spec)
        if any(w.metrics_ports != 1 for w in spec.workers):
            raise ConfigError(
                "the dynamo stack's embedlab workers have one system port: leave metrics_ports at 1"
            )
        if spec.discovery == "etcd" and spec.lease_ttl < 1:
            raise ConfigError(
                f"etcd leases last whole seconds: lease_ttl must be at least 1, got {spec.lease_ttl:g}"
            )

    def prepare(self, ctx: StackContext[Any]) -> DynamoRun:
        if not dynamo_installed():
            raise ConfigError("the dynamo stack needs ai-dynamo: run `make dynamo` (see the README)")
        # The frontend leaves a tmp*.json behind in $TMPDIR at every start: keep it in the run,
        # which deletes it when it stops.
        tmp = ctx.scratch(ctx.run_dir / "tmp")
        tmp.mkdir(parents=True, exist_ok=True)
        if ctx.spec.discovery == "file":
            # What other processes of this user hold counts against the same limit: checked
            # when the run starts, since at plan time it may still change.
            limit, workers = inotify_limit(), len(ctx.spec.workers)
            if limit is not None:
                held = inotify_in_use()  # about 10 ms for a hundred processes
                if inotify_needed(workers) > limit - held:
                    raise ConfigError(_inotify_refusal(workers, limit, held))
            kv = ctx.scratch(ctx.run_dir / "dynamo-kv")
            kv.mkdir(parents=True, exist_ok=False)  # fresh per run: stale records block other models
            return DynamoRun(tmp=tmp, file_kv=kv)
        return DynamoRun(tmp=tmp, etcd_port=ctx.reserve())

    def env(self, ctx: StackContext[DynamoRun]) -> dict[str, str]:
        env = {
            DISCOVERY_ENV: ctx.spec.discovery,
            REQUEST_PLANE_ENV: REQUEST_PLANE,
            "DYN_LOG": "warn",
            "DYN_NAMESPACE": ctx.namespace,
            "TMPDIR": str(ctx.state.tmp),
        }
        if ctx.state.file_kv is not None:
            env["DYN_FILE_KV"] = str(ctx.state.file_kv)
        return env

    def without_retries(self, spec: DeploymentSpec) -> tuple[str, ...]:
        return ()  # it does not retry embedding requests (--migration-limit did not either): its default runs

    def services(self, ctx: StackContext[DynamoRun]) -> list[ProcessSpec]:
        port = ctx.state.etcd_port
        if port is None:
            return []
        # Loopback for host 0's own processes; the hub address for the other hosts.
        listen = [ctx.host] + ([ctx.hosts[0].address] if len(ctx.hosts) > 1 else [])
        argv = etcd_argv(
            data_dir=ctx.scratch(ctx.run_dir / "etcd"),
            client_port=port,
            peer_port=ctx.reserve(),
            hosts=listen,
        )
        # etcd reads ETCD_* from its environment, and ETCD_NAME beside --name is fatal.
        return [
            ProcessSpec(
                role="etcd",
                argv=argv,
                ready_url=f"http://{ctx.host}:{port}/health",
                unset=("ETCD_",),
            )
        ]

    def etcd_url(self, ctx: StackContext[DynamoRun]) -> str | None:
        port = ctx.state.etcd_port
        return None if port is None else f"http://127.0.0.1:{port}"

    def _host_env(self, ctx: StackContext[DynamoRun], host: Host, *, reach: str) -> dict[str, str]:
        """Where a process on `host` listens, and how it reaches etcd (`reach`: host 0 as it sees it)."""
        env = {
            "DYN_TCP_RPC_HOST": host.address,
            "DYN_TCP_RESPONSE_STREAM_HOST": host.address,
            # The address its KV events' publisher advertises (1.6.1 binds that socket on 0.0.0.0
            # whatever this says, measured: no setting keeps it on loopback).
            "DYN_EVENT_PLANE_HOST": host.address,
            SYSTEM_HOST_ENV: host.address,
        }
        if ctx.state.etcd_port is not None:
            env["ETCD_ENDPOINTS"] = f"http://{reach}:{ctx.state.etcd_port}"
        return env

    def frontend(self, ctx: StackContext[DynamoRun]) -> ProcessSpec:
        argv = [
            ctx.python,
            "-m",
            "dynamo.frontend",
            "--http-host",
            ctx.host,
            "--http-port",
            str(ctx.frontend_port),
            "--namespace",
            ctx.namespace,
        ]
        if ctx.spec.router_mode is not None:
            argv += ["--router-mode", ROUTER_MODES[ctx.spec.router_mode]]
        # Its response stream listens on host 0's own address, which every host reaches.
        env = self._host_env(ctx, ctx.hosts[0], reach=ctx.host)
        return ProcessSpec(role="frontend", argv=argv + list(ctx.spec.frontend_args), env=env)

    def worker(
        self, ctx: StackContext[DynamoRun], index: int, worker: WorkerSpec, system_port: int
    ) -> ProcessSpec:
        endpoint, server, host = ctx.endpoint(index), server_of(worker), ctx.host_of(index)
        if not server.runs_engine:  # a worker of Dynamo's own: its server says how it starts
            replica = Replica(
                index=index,
                worker=worker,
                host=host.address,
                port=system_port,
                python=ctx.python,
                endpoint=endpoint,
            )
            argv = server.argv(replica)
        else:
            argv = [
                ctx.python,
                "-m",
                "embedlab",
                "dynamo-worker",
                "--served-model-name",
                worker.model,
                "--endpoint",
                endpoint,
                *worker_engine_args(worker),
            ]
        env = {
            **self._host_env(ctx, host, reach=host.hub if host.namespace else ctx.host),
            **system_port_env(system_port),
            **(self.canary_env(ctx, worker) if ctx.spec.canaries else {}),
        }
        if ctx.state.etcd_port is not None:
            # The spec's lease is the workers': how long a lost worker stays in dispatch. The
            # frontend keeps Dynamo's default (30 s), since with a short lease of its own it
            # exits at an etcd outage of about half that (measured: 10 s lease, 3 s outage).
            env["ETCD_LEASE_TTL"] = str(math.ceil(ctx.spec.lease_ttl))
        return ProcessSpec(role="worker", worker=index, argv=argv, env=env)

    def canary_env(self, ctx: StackContext[Any], worker: WorkerSpec) -> dict[str, str]:
        env = {HEALTH_CHECK_ENABLED_ENV: "true", CANARY_WAIT_ENV: str(CANARY_WAIT_S)}
        if server_of(worker).runs_engine:
            # Dynamo's own vLLM worker keeps its own payload, one its handler takes.
            env[HEALTH_CHECK_PAYLOAD_ENV] = json.dumps({"input": CANARY_INPUT})
        return env

    def health_url(self, ctx: StackContext[DynamoRun]) -> str:
        return f"{ctx.frontend_url}/health"

    def dispatchable_endpoints(self, ctx: StackContext[DynamoRun], health: Any) -> set[str]:
        return set(self.dispatchable_instances(ctx, health))

    def dispatchable_instances(self, ctx: StackContext[DynamoRun], health: Any) -> Counter[str]:
        return Counter(
            f"{i['namespace']}.{i['component']}.{i['endpoint']}" for i in health.get("instances", [])
        )


def _check_stage_endpoints(spec: DeploymentSpec) -> None:
    """Dynamo 1.6.1 serves a disaggregated model only where its prefill workers are instances of one
    endpoint and its decode workers of another: on an endpoint each, its /v1/models stays empty
    and no request is taken (measured)."""
    shared: dict[tuple[str, str], set[object]] = {}
    for index, worker in enumerate(spec.workers):
        if worker.stage is not None:
            own = worker.endpoint or (None if spec.endpoints == "model" else index)
            shared.setdefault((worker.model, worker.stage), set()).add(own)
    split = sorted(f"{model}'s {stage} workers" for (model, stage), own in shared.items() if len(own) > 1)
    if split:
        raise ConfigError(
            f"{' and '.join(split)} are on several endpoints: Dynamo 1.6.1 serves a disaggregated model "
            "only where each stage's workers share one endpoint (on an endpoint each it never lists the "
            "model); give them endpoints='model' (--endpoints model)"
        )


def dynamo_vllm_argv(python: str, worker: WorkerSpec, endpoint: str) -> list[str]:
    """Dynamo's own vLLM embedding worker, launched exactly as the seed's script does.

    Needs `dynamo.vllm` and vLLM installed (GPU machines); CI cannot run it.
    """
    pooling = (worker.pooling or "MEAN").upper()
    argv = [
        python,
        "-m",
        "dynamo.vllm",
        "--model",
        str(worker.model_path or worker.model),
        "--served-model-name",
        worker.model,
        "--endpoint",
        f"dyn://{endpoint}",
        "--embedding-worker",
        "--runner",
        "pooling",
        "--dtype",
        "float32",
        "--pooler-config",
        f'{{"pooling_type": "{pooling}"}}',
        "--max-model-len",
        str(worker.max_model_len or 2048),
    ]
    return argv + [a for arg in worker.extra_args for a in shlex.split(arg)]
