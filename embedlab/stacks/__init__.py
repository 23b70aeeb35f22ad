"""The concrete stacks: how each one starts its frontend and workers, and what it can do.

    embedded  embedlab's own frontend and workers     dynamo   Dynamo's frontend, etcd; Dynamo's vLLM worker
    routers   vllm-router, sglang-router, litellm     smg      SGLang's model gateway
    haproxy, nginx  the load balancers (their shared part: balancers.Balancer)
    standalone  the workers a router or balancer is given by URL (StandaloneWorkers)
    foreign_servers  the worker servers stacks launch by argv: vllm serve, Infinity, TEI

Each stack derives from `BaseStack` alone (the contract is `embedlab.cluster.stack`) and is
composed of parts: the workers it fronts (`standalone.StandaloneWorkers`) and its frontend's
family (`routers.RustRouter`, `balancers.Balancer`). Each is named in the registry
(`embedlab.cluster.stack_registry`), which imports it only when it is asked for; each
foreign server is a `WorkerServer` (`embedlab.cluster.worker_server`, its registry too).
A stack may import the cluster, the evidence and the base modules; nothing but the
registry's "module:Class" strings and the CLI reaches a stack, and no stack knows a
scenario. Nothing is imported here.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

# The registry's names, once re-exported here: deprecated, they now live in the cluster.
_MOVED = {
    "BaseStack": "embedlab.cluster.stack",
    "ProcessSpec": "embedlab.cluster.stack",
    "StackContext": "embedlab.cluster.stack",
    "Stack": "embedlab.cluster.stack",
    "STACKS": "embedlab.cluster.stack_registry",
    "battery_stacks": "embedlab.cluster.stack_registry",
    "get_stack": "embedlab.cluster.stack_registry",
    "register_stack": "embedlab.cluster.stack_registry",
    "router_venvs": "embedlab.cluster.stack_registry",
    "stack_class": "embedlab.cluster.stack_registry",
    "stacks_with": "embedlab.cluster.stack_registry",
    "WORKER_SERVERS": "embedlab.cluster.worker_server",
    "WorkerServer": "embedlab.cluster.worker_server",
    "register_worker_server": "embedlab.cluster.worker_server",
    "check_servers": "embedlab.cluster.worker_server",
    "counter_notes": "embedlab.cluster.worker_server",
    "is_foreign": "embedlab.cluster.worker_server",
    "model_dir": "embedlab.cluster.worker_server",
    "names_worker": "embedlab.cluster.worker_server",
    "runs_vllm": "embedlab.cluster.worker_server",
    "server_of": "embedlab.cluster.worker_server",
    "spec_metric": "embedlab.cluster.worker_server",
    "startup_timeout": "embedlab.cluster.worker_server",
    "workers_text": "embedlab.cluster.worker_server",
}


_PUBLIC = {
    "BaseStack",
    "ProcessSpec",
    "StackContext",
    "register_stack",
    "WorkerServer",
    "register_worker_server",
}  # also `from embedlab import ...`


def __getattr__(name: str) -> Any:
    module = _MOVED.get(name)
    if module is None:
        raise AttributeError(f"module 'embedlab.stacks' has no attribute {name!r}")
    new = "BaseStack" if name == "Stack" else name
    use = f"embedlab.{new}" if new in _PUBLIC else f"{module}.{new}"
    warnings.warn(f"embedlab.stacks.{name} is deprecated: use {use}", DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(module), new)
