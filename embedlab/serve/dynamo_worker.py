"""An embedlab engine served on the Dynamo runtime, for the real `python -m dynamo.frontend`.

The worker registers as `ModelType.Embedding` with `ModelInput.Text`, so the frontend
passes the OpenAI request through untokenised; Dynamo itself counts
`dynamo_component_requests_total` on this process's system port.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from ..defaults import DISCOVERY, DISCOVERY_ENV, REQUEST_PLANE, REQUEST_PLANE_ENV
from ..engines import EngineOptions, InvalidInput, check_dimensions, create_engine
from ..errors import EngineError
from .instances import validate_endpoint
from .openai import ApiError, parse_inputs

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
                handler, graceful_shutdown=True, metrics_labels=[("model", config.served_model_name)]
            ),
            register(),
        )
    finally:
        await engine.close()
    return exit_code
