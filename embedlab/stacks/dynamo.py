"""The dynamo stack: the real `python -m dynamo.frontend` with embedlab workers on the Dynamo runtime.

Runs on CPU with no etcd or NATS: file discovery in a fresh directory per run, the TCP
request plane, and every listener forced onto loopback (Dynamo binds the primary NIC
by default).
"""

from __future__ import annotations

import importlib.util
import shlex
from typing import Any

from ..defaults import DISCOVERY, DISCOVERY_ENV, REQUEST_PLANE, REQUEST_PLANE_ENV, SYSTEM_HOST_ENV
from ..errors import ConfigError
from ..specs import WorkerSpec
from .base import ProcessSpec, StackContext, system_port_env, worker_engine_args

# embedlab router mode -> Dynamo's. Across worker sets of one model Dynamo always picks
# at random weighted by live instances; the mode chooses inside a set.
ROUTER_MODES = {"weighted-random": "random", "round-robin": "round-robin", "least-inflight": "least-loaded"}


def dynamo_installed() -> bool:
    return importlib.util.find_spec("dynamo") is not None and importlib.util.find_spec("dynamo.frontend") is not None


class DynamoStack:
    name = "dynamo"

    def prepare(self, ctx: StackContext) -> dict[str, str]:
        if not dynamo_installed():
            raise ConfigError("the dynamo stack needs ai-dynamo: run `make dynamo` (see the README)")
        if any(w.weight != 1.0 for w in ctx.spec.workers):
            raise ConfigError("the dynamo stack has no per-worker weights; leave every weight at 1")
        kv = ctx.run_dir / "dynamo-kv"
        kv.mkdir(parents=True, exist_ok=False)  # fresh per run: stale records block other models
        return {
            DISCOVERY_ENV: DISCOVERY,
            "DYN_FILE_KV": str(kv),
            REQUEST_PLANE_ENV: REQUEST_PLANE,
            "DYN_LOG": "warn",
            "DYN_TCP_RPC_HOST": ctx.host,
            "DYN_TCP_RESPONSE_STREAM_HOST": ctx.host,
            SYSTEM_HOST_ENV: ctx.host,
            "DYN_NAMESPACE": ctx.namespace,
        }

    def frontend(self, ctx: StackContext) -> ProcessSpec:
        if ctx.spec.router_mode not in ROUTER_MODES:
            raise ConfigError(f"router mode {ctx.spec.router_mode!r} has no Dynamo counterpart")
        argv = [
            ctx.python, "-m", "dynamo.frontend", "--http-host", ctx.host, "--http-port", str(ctx.frontend_port),
            "--namespace", ctx.namespace, "--router-mode", ROUTER_MODES[ctx.spec.router_mode],
        ]
        return ProcessSpec(role="frontend", argv=argv + list(ctx.spec.frontend_args))

    def worker(self, ctx: StackContext, index: int, worker: WorkerSpec, system_port: int) -> ProcessSpec:
        endpoint = ctx.endpoint(index)
        if worker.kind == "dynamo-vllm":
            argv = dynamo_vllm_argv(ctx, worker, endpoint)
        else:
            argv = [
                ctx.python, "-m", "embedlab", "dynamo-worker", "--served-model-name", worker.model, "--endpoint", endpoint,
                *worker_engine_args(worker),
            ]
        return ProcessSpec(role="worker", worker=index, argv=argv, env=system_port_env(system_port))

    def health_url(self, ctx: StackContext) -> str:
        return f"{ctx.frontend_url}/health"

    def dispatchable_endpoints(self, health: Any) -> set[str]:
        return {f"{i['namespace']}.{i['component']}.{i['endpoint']}" for i in health.get("instances", [])}


def dynamo_vllm_argv(ctx: StackContext, worker: WorkerSpec, endpoint: str) -> list[str]:
    """Dynamo's own vLLM embedding worker, launched exactly as the seed's script does.

    Needs `dynamo.vllm` and vLLM installed (GPU machines); CI cannot run it.
    """
    pooling = (worker.pooling or "MEAN").upper()
    argv = [
        ctx.python, "-m", "dynamo.vllm", "--model", str(worker.model_path or worker.model),
        "--served-model-name", worker.model, "--endpoint", f"dyn://{endpoint}", "--embedding-worker",
        "--runner", "pooling", "--dtype", "float32", "--pooler-config", f'{{"pooling_type": "{pooling}"}}',
        "--max-model-len", str(worker.max_model_len or 2048),
    ]
    return argv + [a for arg in worker.extra_args for a in shlex.split(arg)]
