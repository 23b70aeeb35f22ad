"""The settings of `embedlab worker`, apart from the worker so that every part of it can read them."""

from __future__ import annotations

import json
import secrets
from dataclasses import asdict, dataclass, field
from typing import Any

from ...defaults import MAX_BODY_BYTES
from ...engines import EngineOptions
from ...errors import ConfigError
from ..registration import validate_endpoint

# GET /get_load, as each router reads it (power-of-two): the two want incompatible shapes on
# one path, so the stack that launches the worker says which.
LOAD_FORMATS = {
    "vllm": lambda inflight: {"load": inflight},
    "sglang": lambda inflight: [
        {"dp_rank": 0, "num_reqs": inflight, "num_waiting_reqs": 0, "num_tokens": inflight}
    ],
}


@dataclass(frozen=True, kw_only=True)
class WorkerConfig:
    """Settings of `embedlab worker`."""

    engine: str
    served_model_name: str
    endpoint: str
    frontend_url: str
    engine_options: EngineOptions = field(default_factory=EngineOptions)
    system_port: int = 0
    system_host: str = "127.0.0.1"
    host: str = "127.0.0.1"
    port: int = 0
    weight: float = 1.0
    instance_id: str = field(default_factory=lambda: secrets.token_hex(8))
    token: str | None = field(default=None, repr=False)
    register_timeout: float = 60.0
    max_body_bytes: int = MAX_BODY_BYTES
    load_format: str = "vllm"  # the shape of GET /get_load: vllm-router's or sglang-router's
    # Processes that take requests (parse, tokenize, answer) beside the one that runs the
    # engine; None: chosen from the cores where the engine feeds a device, else 1.
    api_processes: int | None = None
    # One metrics port per ingest process (Dynamo's multi-process workers bind a system port
    # each): each counts only the requests its process took, and the system port none.
    process_metrics_ports: tuple[int, ...] = ()

    @property
    def standalone(self) -> bool:
        """No embedlab frontend to register with: a router in front was given this worker's URL."""
        return not self.frontend_url

    def __post_init__(self) -> None:
        validate_endpoint(self.endpoint)
        if self.weight <= 0:
            raise ConfigError(f"--weight must be positive, got {self.weight}")
        if self.api_processes is not None and self.api_processes < 1:
            raise ConfigError(f"--api-processes must be at least 1, got {self.api_processes}")
        ports = self.process_metrics_ports
        if ports and (
            self.api_processes is None or len(ports) != self.api_processes or self.api_processes < 2
        ):
            raise ConfigError(
                f"--process-metrics-ports needs one port per ingest process: --api-processes {len(ports)} "
                f"(at least 2), got {self.api_processes} for {len(ports)} ports"
            )
        if self.load_format not in LOAD_FORMATS:
            raise ConfigError(
                f"--load-format must be one of {', '.join(LOAD_FORMATS)}, got {self.load_format!r}"
            )

    @property
    def labels(self) -> dict[str, str]:
        namespace, component, endpoint = self.endpoint.split(".")
        return {
            "dynamo_namespace": namespace,
            "dynamo_component": component,
            "dynamo_endpoint": endpoint,
            "model": self.served_model_name,
            "worker_id": self.instance_id,
        }


# The request-plane settings an ingest process needs of its worker's (the rest stay behind).
INGEST_FIELDS = ("engine", "served_model_name", "endpoint", "instance_id", "max_body_bytes", "load_format")


@dataclass(frozen=True, kw_only=True)
class IngestSettings:
    """What a worker hands each of its ingest processes (`python -m embedlab.serving.worker.multiprocess.ingest JSON`):
    its slot, the port to share, and the descriptors of the shared memory and its doorbell."""

    index: int
    parent: int  # the engine process's pid: the ingest process dies with it
    host: str
    port: int
    url: str
    board_fd: int
    spec_fd: int
    memory_fd: int
    doorbell_fd: int
    log_level: str
    worker: dict[str, Any]
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = None  # its own /metrics (its slot's counts alone), where it has one

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> IngestSettings:
        return cls(**json.loads(text))

    def worker_config(self) -> WorkerConfig:
        return WorkerConfig(**self.worker, frontend_url="")

    @staticmethod
    def worker_fields(config: WorkerConfig) -> dict[str, Any]:
        return {name: getattr(config, name) for name in INGEST_FIELDS}
