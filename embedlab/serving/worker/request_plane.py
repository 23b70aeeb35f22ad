"""A worker's request plane: `/v1/embeddings` and what routers probe beside it.

One implementation for both shapes of worker: the single process (`--api-processes 1`),
where `engine` is the engine itself, and each ingest process of a multi-process worker,
where `engine` tokenizes here and computes in the engine process. The same handler code,
so the same counting, errors and headers.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from ...defaults import WORKER_HEADER
from ...engines import Embedder, InvalidInput, check_dimensions
from ..http import error_response, json_response, make_app
from ..openai import ApiError, bad_request, embedding_response, parse_embedding_request
from .config import LOAD_FORMATS, WorkerConfig

if TYPE_CHECKING:
    from .metrics import SlotMetrics, WorkerMetrics

log = logging.getLogger("embedlab.worker")


def engine_failure(exc: BaseException) -> ApiError:
    """An engine failure is the server's fault: a 500 the frontend may retry."""
    name = getattr(exc, "remote_class", None) or exc.__class__.__name__
    return ApiError(500, f"The engine failed: {name}: {exc}", type="server_error")


class RequestPlane:
    """The request-port handlers of one process; what they need of the worker, passed in."""

    def __init__(
        self,
        config: WorkerConfig,
        *,
        engine: Embedder,
        metrics: WorkerMetrics | SlotMetrics,
        state: Callable[[], str],
        url: Callable[[], str],
        load: Callable[[], int] | None = None,
        describe: Callable[[], Awaitable[dict[str, Any] | None]] | None = None,
    ) -> None:
        self.config = config
        self.engine = engine
        self.metrics = metrics
        self._state = state
        self._url = url
        self._load = load
        self._describe = describe
        self.inflight = 0
        self.label = f"{config.endpoint}/{config.instance_id}"
        self.app = make_app(client_max_size=config.max_body_bytes)
        self.app.add_routes(
            [
                web.post("/v1/embeddings", self.embeddings),
                web.get("/health", self.health),
                web.get("/v1/models", self.models),
                *(
                    web.get(path, self.server_info)
                    for path in ("/get_server_info", "/server_info", "/get_model_info", "/model_info")
                ),
                web.get("/get_load", self.load),
            ]
        )

    async def embeddings(self, request: web.Request) -> web.Response:
        metrics = self.metrics
        metrics.requests.inc()  # once per request received, before decoding, as Dynamo counts
        metrics.inflight.inc()
        self.inflight += 1
        started = time.perf_counter()
        try:
            body = await request.read()
            metrics.request_bytes.inc(len(body))
            parsed = parse_embedding_request(body)
            if parsed.model != self.config.served_model_name:
                raise ApiError(
                    404,
                    f"The model '{parsed.model}' does not exist. Served models: {self.config.served_model_name}",
                    type="not_found_error",
                    param="model",
                    code="model_not_found",
                )
            check_dimensions(self.engine, parsed.dimensions)
            result = await self.engine.embed(parsed.inputs, dimensions=parsed.dimensions)
            payload = embedding_response(
                model=self.config.served_model_name,
                vectors=result.vectors,
                prompt_tokens=result.prompt_tokens,
                encoding_format=parsed.encoding_format,
            )
            metrics.response_bytes.inc(len(payload))
            # Routers pass a worker's headers on: through them, each response names its worker.
            return web.Response(
                body=payload, content_type="application/json", headers={WORKER_HEADER: self.label}
            )
        except ApiError as exc:
            metrics.errors.inc()
            return error_response(exc)
        except InvalidInput as exc:
            metrics.errors.inc()
            return error_response(bad_request(str(exc), param=exc.param, code=exc.code))
        except web.HTTPException:
            metrics.errors.inc()
            raise
        except Exception as exc:
            metrics.errors.inc()
            log.exception("engine failed")
            return error_response(engine_failure(exc))
        finally:
            metrics.inflight.dec()
            self.inflight -= 1
            metrics.duration.observe(time.perf_counter() - started)

    async def health(self, request: web.Request) -> web.Response:
        state = self._state()
        payload: dict[str, Any] = {
            "status": "ready" if state == "ready" else "notready",
            "state": state,
            "model": self.config.served_model_name,
            "endpoint": self.config.endpoint,
            "instance_id": self.config.instance_id,
            "engine": self.config.engine,
            "url": self._url(),
        }
        if self._describe is not None and state not in ("starting", "loading"):
            info = await self._describe()
            if info is not None:  # e.g. the captured CUDA graph buckets, the batch histogram
                payload["engine_info"] = info
        return json_response(payload, status=200 if state == "ready" else 503)

    async def models(self, request: web.Request) -> web.Response:
        """OpenAI's model list: the one model this worker serves."""
        model = {"id": self.config.served_model_name, "object": "model", "owned_by": "embedlab", "created": 0}
        return json_response({"object": "list", "data": [model]})

    async def server_info(self, request: web.Request) -> web.Response:
        # served_model_name alone: with a model_path, sglang-router tries to download a tokenizer.
        return json_response(
            {"served_model_name": self.config.served_model_name, "max_model_len": self.engine.max_model_len}
        )

    async def load(self, request: web.Request) -> web.Response:
        inflight = self._load() if self._load is not None else self.inflight
        return json_response(LOAD_FORMATS[self.config.load_format](inflight))
