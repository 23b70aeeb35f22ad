"""The serving subcommands: `embedlab frontend`, `worker`, `dynamo-worker`, `make-tiny-model`.

Kept apart from the harness's commands: `entry.py` adds them to the one parser, and parses
them alone when one of them runs.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from .. import defaults
from ..errors import ConfigError

if TYPE_CHECKING:
    from ..engines.base import EngineOptions

__all__ = ["SERVING", "engine_options_from_args", "positive_float", "positive_int"]


def positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def _add_frontend(sub: argparse._SubParsersAction) -> None:
    from ..serving.frontend.dispatch import POLICIES
    from ..serving.frontend.faults import CATALOGUE

    p = sub.add_parser(
        "frontend", help="run the embedded frontend (OpenAI /v1/embeddings, routed by model name)"
    )
    p.add_argument("--host", default=defaults.HOST)
    p.add_argument(
        "--port", type=int, default=int(os.environ.get(defaults.HTTP_PORT_ENV, defaults.FRONTEND_PORT))
    )
    p.add_argument("--router-mode", choices=sorted(POLICIES), default="weighted-random")
    p.add_argument(
        "--seed", type=int, default=None, help="seed the routing choices, for reproducible experiments"
    )
    p.add_argument(
        "--lease-ttl",
        type=positive_float,
        default=defaults.LEASE_TTL_S,
        help="seconds a worker's lease lives without heartbeat",
    )
    p.add_argument("--max-body-bytes", type=int, default=defaults.MAX_BODY_BYTES)
    p.add_argument("--request-timeout", type=positive_float, default=defaults.REQUEST_TIMEOUT_S)
    p.add_argument(
        "--allow-remote-workers",
        action="store_true",
        help="accept workers whose request plane is not on loopback",
    )
    p.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="NAME[:PARAM][@START[-STOP]]",
        help=f"inject a routing fault, for proving checks ({', '.join(CATALOGUE)}); off by default; "
        "@60s starts it 60 s after the frontend started, @30s-90s also stops it",
    )
    p.add_argument(
        "--no-worker-header",
        dest="names_worker",
        action="store_false",
        help=f"name no instance on responses (no {defaults.WORKER_HEADER}), as most routers do",
    )
    p.add_argument(
        "--processes",
        type=positive_int,
        default=defaults.FRONTEND_PROCESSES,
        metavar="N",
        help="routing processes on the port (SO_REUSEPORT); the first owns the instance table",
    )
    p.add_argument("--log-level", default="INFO")
    p.set_defaults(run=_run_frontend)


def _run_frontend(args: argparse.Namespace) -> int:
    from ..serving.frontend.app import FrontendConfig, serve_frontend
    from ..serving.frontend.faults import parse_fault
    from ..serving.http import configure_logging, run_service
    from ..serving.registration import token_from_env

    configure_logging(args.log_level)
    config = FrontendConfig(
        host=args.host,
        port=args.port,
        router_mode=args.router_mode,
        seed=args.seed,
        lease_ttl=args.lease_ttl,
        max_body_bytes=args.max_body_bytes,
        request_timeout=args.request_timeout,
        token=token_from_env(),
        allow_remote_workers=args.allow_remote_workers,
        faults=tuple(parse_fault(f) for f in args.fault),
        names_worker=args.names_worker,
        processes=args.processes,
    )
    if config.processes > 1:
        from ..serving.frontend.multiprocess.owner import serve_routing

        return run_service(lambda stop: serve_routing(config, stop))
    return run_service(lambda stop: serve_frontend(config, stop))


def _add_engine_flags(p: argparse.ArgumentParser) -> None:
    from ..engines import ENGINES

    p.add_argument("--engine", choices=sorted(ENGINES), default="hash")
    p.add_argument(
        "--model-path",
        type=Path,
        default=None,
        help="local model directory, or a known model's name: all-MiniLM-L6-v2, tiny-bert, tiny-qwen3 (transformers, vllm)",
    )
    p.add_argument("--dim", type=int, default=defaults.HASH_DIM, help="vector size of the hash engine")
    p.add_argument("--pooling", choices=["mean", "cls", "last", "MEAN", "CLS", "LAST"], default=None)
    p.add_argument(
        "--normalize",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="unit vectors (default: as the model's sentence-transformers files say, else yes)",
    )
    p.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32")
    p.add_argument("--device", default=defaults.DEVICE, help="cpu, cuda or auto (CUDA when present)")
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("--max-batch-size", type=int, default=64, help="sequences per forward (dynamic batching)")
    p.add_argument("--max-batch-tokens", type=int, default=16384, help="padded tokens per forward")
    p.add_argument("--batch-wait-ms", type=float, default=2.0)
    p.add_argument(
        "--engine-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra engine argument passed through (vllm: any AsyncEngineArgs field; value parsed as JSON when it can be)",
    )
    # vLLM's own spelling of the above, so the seed's worker command lines run unchanged.
    p.add_argument(
        "--runner",
        choices=["pooling"],
        default=None,
        help="vLLM's runner; embedding workers are always 'pooling'",
    )
    p.add_argument(
        "--pooler-config",
        default=None,
        metavar="JSON",
        help='vLLM pooler config, e.g. \'{"pooling_type": "MEAN"}\': pooling_type sets --pooling, other keys go to vllm',
    )


def engine_options_from_args(args: argparse.Namespace) -> EngineOptions:
    import json

    from ..engines import EngineOptions

    extra: dict[str, object] = {}
    for item in args.engine_arg:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--engine-arg must be KEY=VALUE, got {item!r}")
        try:
            extra[key.replace("-", "_")] = json.loads(value)
        except ValueError:
            extra[key.replace("-", "_")] = value
    pooling = args.pooling
    if args.pooler_config is not None:
        try:
            pooler = json.loads(args.pooler_config)
        except ValueError as exc:
            raise ConfigError(
                f"--pooler-config must be a JSON object, got {args.pooler_config!r}: {exc}"
            ) from None
        if not isinstance(pooler, dict):
            raise ConfigError(f"--pooler-config must be a JSON object, got {args.pooler_config!r}")
        pooler = {str(k).replace("-", "_"): v for k, v in pooler.items()}
        # Not checked here: the engine says which pooling types it supports (exit 1, clearly).
        pooling = pooler.pop("pooling_type", None) or pooling
        if pooler:
            given = (
                extra.get("pooler_config") or {}
            )  # --engine-arg pooler_config=... wins over --pooler-config
            if not isinstance(given, dict):
                raise ConfigError(f"--engine-arg pooler_config must be a JSON object, got {given!r}")
            extra["pooler_config"] = {**pooler, **given}
    return EngineOptions(
        model_path=args.model_path,
        dim=args.dim,
        pooling=str(pooling).lower() if pooling else None,
        normalize=args.normalize,
        dtype=args.dtype,
        device=args.device,
        max_model_len=args.max_model_len,
        max_batch_size=args.max_batch_size,
        max_batch_tokens=args.max_batch_tokens,
        batch_wait_ms=args.batch_wait_ms,
        extra_args=extra,
        state_dir=Path(os.environ[defaults.STATE_DIR_ENV])
        if os.environ.get(defaults.STATE_DIR_ENV)
        else None,
    )


def _add_worker(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("worker", help="run an embedded worker that registers with the embedded frontend")
    _add_engine_flags(p)
    p.add_argument("--served-model-name", required=True)
    p.add_argument("--endpoint", required=True, help="namespace.component.endpoint, unique per model")
    p.add_argument(
        "--frontend-url",
        default=os.environ.get(defaults.FRONTEND_URL_ENV, f"http://{defaults.HOST}:{defaults.FRONTEND_PORT}"),
        help='the embedded frontend to register with; "" for none (a router in front is given this worker\'s URL)',
    )
    p.add_argument("--system-port", type=int, default=int(os.environ.get(defaults.SYSTEM_PORT_ENV, 0)))
    p.add_argument("--system-host", default=os.environ.get(defaults.SYSTEM_HOST_ENV, defaults.HOST))
    p.add_argument("--host", default=defaults.HOST, help="request-plane address")
    p.add_argument("--port", type=int, default=0, help="request-plane port (0: any free one)")
    p.add_argument(
        "--load-format",
        choices=["vllm", "sglang"],
        default="vllm",
        help="the shape of GET /get_load, per router",
    )
    p.add_argument("--weight", type=positive_float, default=1.0)
    p.add_argument(
        "--api-processes",
        type=positive_int,
        default=None,
        metavar="N",
        help="processes that parse, tokenize and answer requests on the request port (SO_REUSEPORT), "
        "beside the one that runs the engine; default: one per 4 cores (at most 4) for an engine on a GPU, "
        "else 1",
    )
    p.add_argument(
        "--process-metrics-ports",
        type=_ports,
        default=(),
        metavar="P,P",
        help="one /metrics port per ingest process (as many as --api-processes), each counting only the "
        "requests its process took; the system port then counts none (Dynamo's multi-process workers)",
    )
    p.add_argument("--instance-id", default=None)
    p.add_argument("--register-timeout", type=positive_float, default=60.0)
    p.add_argument("--log-level", default="INFO")
    p.set_defaults(run=_run_worker)


def _run_worker(args: argparse.Namespace) -> int:
    from ..serving.http import configure_logging, run_service
    from ..serving.registration import token_from_env
    from ..serving.worker.app import WorkerConfig, serve_worker

    configure_logging(args.log_level)
    extra = {"instance_id": args.instance_id} if args.instance_id else {}
    config = WorkerConfig(
        engine=args.engine,
        served_model_name=args.served_model_name,
        endpoint=args.endpoint,
        frontend_url=args.frontend_url,
        engine_options=engine_options_from_args(args),
        system_port=args.system_port,
        system_host=args.system_host,
        host=args.host,
        port=args.port,
        weight=args.weight,
        token=token_from_env(),
        load_format=args.load_format,
        register_timeout=args.register_timeout,
        api_processes=args.api_processes,
        process_metrics_ports=args.process_metrics_ports,
        **extra,
    )
    return run_service(lambda stop: serve_worker(config, stop))


def _ports(text: str) -> tuple[int, ...]:
    try:
        ports = tuple(int(p) for p in text.split(",") if p.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"comma-separated port numbers, got {text!r}") from None
    if not ports or any(not 0 < p < 65536 for p in ports):
        raise argparse.ArgumentTypeError(f"comma-separated port numbers, got {text!r}")
    return ports


def _add_dynamo_worker(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "dynamo-worker", help="serve an embedlab engine on the Dynamo runtime (for python -m dynamo.frontend)"
    )
    _add_engine_flags(p)
    p.add_argument("--served-model-name", required=True)
    p.add_argument("--endpoint", required=True, help="namespace.component.endpoint, unique per model")
    p.add_argument("--log-level", default="WARNING")
    p.set_defaults(run=_run_dynamo_worker)


def _run_dynamo_worker(args: argparse.Namespace) -> int:
    import asyncio

    from ..serving.http import configure_logging, install_event_loop_policy
    from ..serving.worker.dynamo import DynamoWorkerConfig, run

    configure_logging(args.log_level)
    config = DynamoWorkerConfig(
        engine=args.engine,
        served_model_name=args.served_model_name,
        endpoint=args.endpoint,
        engine_options=engine_options_from_args(args),
    )
    install_event_loop_policy()
    return asyncio.run(run(config))


def _add_tiny(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("make-tiny-model", help="build a seeded tiny model and tokenizer into a directory")
    p.add_argument("outdir", type=Path)
    p.add_argument("--arch", choices=["bert", "qwen3"], default="bert")
    p.add_argument(
        "--shape",
        choices=["qwen3-embedding-0.6b"],
        default=None,
        help="real shapes, random weights (timing work)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--overwrite", action="store_true")
    p.set_defaults(run=_run_tiny)


def _run_tiny(args: argparse.Namespace) -> int:
    from ..engines.tiny import build_tiny_model

    path = build_tiny_model(
        args.arch, args.outdir, shape=args.shape, seed=args.seed, overwrite=args.overwrite
    )
    print(path)
    return 0


SERVING = [_add_frontend, _add_worker, _add_dynamo_worker, _add_tiny]
