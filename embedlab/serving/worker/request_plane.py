"""A worker's request plane: `/v1/embeddings`, completions and chat, and what routers probe beside it.

Completions and chat are answered by the hash engine's stand-in for generation (`serving/
generation.py`) over a simulated prefix cache (`engines/kv.py`): what a KV-aware router
routes by. Each request stores its prompt's blocks; the events that makes are posted to
the frontend before the answer leaves (`publish`, set by a worker that registered), so a
client that sends its next request after this answer is routed on them.

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

from ...defaults import KIND_PATHS, WORKER_HEADER
from ...engines import Embedder, InvalidInput, check_dimensions
from ...engines.kv import BLOCK_SIZE, KvEvent, PrefixCache, block_hashes, words
from ..generation import generate_response, parse_generate_request
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
        self.kv = PrefixCache()
        # Where the prefix cache's events go (the frontend's KV index); None: nowhere.
        self.publish: Callable[[list[KvEvent]], Awaitable[None]] | None = None
        self._served = 0
        self.app = make_app(client_max_size=config.max_body_bytes)
        self.app.add_routes(
            [
                web.post(KIND_PATHS["embeddings"], self.embeddings),
                web.post(KIND_PATHS["completions"], self.completions),
                web.post(KIND_PATHS["chat"], self.chat),
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
            self._check_model(parsed.model)
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

    async def completions(self, request: web.Request) -> web.Response:
        return await self._generate("completions", request)

    async def chat(self, request: web.Request) -> web.Response:
        return await self._generate("chat", request)

    async def _generate(self, kind: str, request: web.Request) -> web.Response:
        metrics = self.metrics
        metrics.requests.inc()  # the same counter as embeddings: once per request received
        metrics.inflight.inc()
        self.inflight += 1
        started = time.perf_counter()
        try:
            body = await request.read()
            metrics.request_bytes.inc(len(body))
            parsed = parse_generate_request(kind, body)
            self._check_model(parsed.model)
            tokens = words(parsed.prompt)
            if len(tokens) > self.engine.max_model_len:
                raise bad_request(
                    f"The prompt has {len(tokens)} tokens, more than this model's {self.engine.max_model_len}",
                    param="messages" if kind == "chat" else "prompt",
                    code="context_length_exceeded",
                )
            hashes = block_hashes(tokens)
            hit, events = self.kv.serve(hashes)
            self._record(events)
            if events and self.publish is not None:
                await self.publish(events)
            self._served += 1
            payload = generate_response(
                parsed,
                prompt_tokens=len(tokens),
                cached_tokens=hit * BLOCK_SIZE,
                request_id=f"cmpl-{self.config.instance_id}-{self._served}",
            )
            metrics.response_bytes.inc(len(payload))
            return web.Response(
                body=payload, content_type="application/json", headers={WORKER_HEADER: self.label}
            )
        except ApiError as exc:
            metrics.errors.inc()
            return error_response(exc)
        except web.HTTPException:
            metrics.errors.inc()
            raise
        except Exception as exc:
            metrics.errors.inc()
            log.exception("generation failed")
            return error_response(engine_failure(exc))
        finally:
            metrics.inflight.dec()
            self.inflight -= 1
            metrics.duration.observe(time.perf_counter() - started)

    def _record(self, events: list[KvEvent]) -> None:
        stored, removed = getattr(self.metrics, "kv_stored", None), getattr(self.metrics, "kv_removed", None)
        for event in events:
            counter = stored if event.kind == "stored" else removed
            if counter is not None:
                counter.inc()
        blocks = getattr(self.metrics, "kv_blocks", None)
        if blocks is not None:
            blocks.set(len(self.kv))

    def _check_model(self, model: str) -> None:
        if model != self.config.served_model_name:
            raise ApiError(
                404,
                f"The model '{model}' does not exist. Served models: {self.config.served_model_name}",
                type="not_found_error",
                param="model",
                code="model_not_found",
            )

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
