"""An embedlab engine served on the Dynamo runtime, for the real `python -m dynamo.frontend`.

The worker registers as `ModelType.Embedding` with `ModelInput.Text`, so the frontend
passes the OpenAI request through untokenised; Dynamo itself counts
`dynamo_component_requests_total` on this process's system port.

Canaries: with `DYN_HEALTH_CHECK_ENABLED`, Dynamo's runtime sends an endpoint idle for
`DYN_CANARY_WAIT_TIME` seconds a canary, straight to the handler through its local
registry (not over the request plane), but only where `serve_endpoint` was handed a
payload: the runtime itself never reads `DYN_HEALTH_CHECK_PAYLOAD`, so this worker does.
It answers a canary like any request and counts it in `embedlab_canaries_total`, which
Dynamo appends to the same system port's /metrics.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

from ...defaults import (
    CANARY_METRIC,
    DISCOVERY,
    DISCOVERY_ENV,
    HEALTH_CHECK_PAYLOAD_ENV,
    REQUEST_PLANE,
    REQUEST_PLANE_ENV,
)
from ...engines import EngineOptions, InvalidInput, check_dimensions, create_engine
from ...errors import EngineError
from ..frontend.instances import validate_endpoint
from ..openai import ApiError, parse_inputs

log = logging.getLogger("embedlab.dynamo_worker")

# After unregistering, in-flight requests get this long before the runtime shuts down.
GRACE_SECONDS = 0.3


@dataclass(frozen=True, kw_only=True)
class DynamoWorkerConfig:
    engine: str
    served_model_name: str
    endpoint: str
    engine_options: EngineOptions

    def __post_init__(self) -> None:
        validate_endpoint(self.endpoint)


def _response(model: str, vectors: Any, prompt_tokens: int) -> dict[str, Any]:
    import base64

    import numpy as np

    # base64 float32 is what Dynamo's own vLLM handler yields: the frontend then answers
    # floats or base64 as the client asked. A float list would ignore a base64 request.
    data = [
        {
            "object": "embedding",
            "index": i,
            "embedding": base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode("ascii"),
        }
        for i, v in enumerate(vectors)
    ]
    return {
        "object": "list",
        "model": model,
        "data": data,
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    }


class Canaries:
    """The canaries this worker answers: which request is one, and how many came.

    A canary is the payload itself, unchanged (Dynamo 1.6.1 adds no marker), so a request
    equal to it is one; the dynamo stack's payload has no `model`, which every request the
    frontend forwards carries. The count is a Prometheus collector of its own, exported at 0
    from start-up, canaries on or off: 0 then says none came, not "unknown".
    """

    def __init__(self, payload: dict[str, Any] | None, model: str) -> None:
        from prometheus_client import CollectorRegistry

        self.payload = payload
        self.model = model
        self.answered = 0
        self.registry = CollectorRegistry()
        self.registry.register(self)

    def is_canary(self, request: dict[str, Any]) -> bool:
        return self.payload is not None and request == self.payload

    def answered_one(self) -> None:
        self.answered += 1
        if self.answered == 1:  # one line in the worker's log for people, not one a second
            log.warning("first canary answered: %s", self.payload)

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily

        family = CounterMetricFamily(
            CANARY_METRIC.removesuffix("_total"),
            "Dynamo canary health checks this worker answered.",
            labels=["model"],
        )
        family.add_metric([self.model], self.answered)
        yield family

    def exposition(self) -> str:
        """The text Dynamo appends to this worker's /metrics at every scrape."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry).decode()


def canary_payload() -> dict[str, Any] | None:
    """The payload in DYN_HEALTH_CHECK_PAYLOAD (JSON, or @file), read as Dynamo's own workers read it."""
    from dynamo.health_check import load_health_check_from_env

    return load_health_check_from_env(HEALTH_CHECK_PAYLOAD_ENV)


async def run(config: DynamoWorkerConfig) -> int:
    from dynamo.llm import ModelInput, ModelType, WorkerType, register_model, unregister_model
    from dynamo.llm.exceptions import InvalidArgument
    from dynamo.runtime import DistributedRuntime

    engine = create_engine(config.engine, config.engine_options)
    loop = asyncio.get_running_loop()
    # Until the runtime's own handlers below, a SIGTERM cancels the engine's start: left to
    # Python's default it would kill this process and orphan a vLLM engine's processes.
    starting = asyncio.ensure_future(engine.start())
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, starting.cancel)
    try:
        await starting
    except asyncio.CancelledError:
        await engine.close()
        return 0
    except EngineError as exc:
        print(f"embedlab dynamo-worker: {exc}", file=sys.stderr, flush=True)
        await engine.close()
        return 1

    runtime = DistributedRuntime(
        loop, os.environ.get(DISCOVERY_ENV, DISCOVERY), os.environ.get(REQUEST_PLANE_ENV, REQUEST_PLANE)
    )
    endpoint = runtime.endpoint(config.endpoint)
    canaries = Canaries(canary_payload(), config.served_model_name)
    endpoint.metrics.register_prometheus_expfmt_callback(canaries.exposition)

    # The parameter must be named `context`: Dynamo passes it by that name.
    async def handler(request: dict[str, Any], context: Any = None) -> AsyncIterator[dict[str, Any]]:
        try:
            if request.get("model") not in (None, config.served_model_name):
                raise ApiError(
                    404, f"this worker serves '{config.served_model_name}', not '{request.get('model')}'"
                )
            inputs = parse_inputs(request.get("input"))
            dimensions = request.get("dimensions")
            check_dimensions(engine, dimensions)
            result = await engine.embed(inputs, dimensions=dimensions)
        except (ApiError, InvalidInput) as exc:
            raise InvalidArgument(str(exc)) from None
        if canaries.is_canary(request):  # answered: its embedding is computed
            canaries.answered_one()
        yield _response(config.served_model_name, result.vectors, result.prompt_tokens)

    stopping = asyncio.Event()

    async def graceful() -> None:
        # Dynamo installs no SIGTERM handler for a Python worker: without this the instance
        # lingers in discovery for its ~10 s TTL and blocks the endpoint for other models.
        try:
            await endpoint.unregister_endpoint_instance()
            await unregister_model(endpoint)
        except Exception as exc:  # already gone is fine
            log.debug("unregister: %s", exc)
        await asyncio.sleep(GRACE_SECONDS)
        runtime.shutdown()

    def on_signal() -> None:
        if not stopping.is_set():
            stopping.set()
            asyncio.ensure_future(graceful())

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)

    exit_code = 0

    async def register() -> None:
        nonlocal exit_code
        try:
            await register_model(
                ModelInput.Text,
                ModelType.Embedding,
                endpoint,
                config.served_model_name,
                config.served_model_name,
                worker_type=WorkerType.Aggregated,
                needs=[],
                skip_model_assets=True,
            )
        except Exception as exc:
            # The conflict message is Dynamo's own; print it and exit non-zero, as embedded workers do.
            print(str(exc), file=sys.stderr, flush=True)
            exit_code = 3
            runtime.shutdown()
            return
        # Ready means registered: /health turns 200 only now.
        runtime.set_health_status(True)
        log.warning(
            "dynamo worker ready: model %s on %s, instance %x",
            config.served_model_name,
            config.endpoint,
            endpoint.connection_id(),
        )

    try:
        await asyncio.gather(
            endpoint.serve_endpoint(
                handler,
                graceful_shutdown=True,
                metrics_labels=[("model", config.served_model_name)],
                health_check_payload=canaries.payload,
            ),
            register(),
        )
    finally:
        await engine.close()
    return exit_code
