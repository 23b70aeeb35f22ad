"""vLLM in pooling mode, in the worker's own process, through its async engine API.

    engine = VllmEngine(EngineOptions(model_path=DIR, pooling="mean", state_dir=RUN/worker-0-state))
    await engine.start()          # ~40 s on 2 CPU cores: spawns vLLM's EngineCore and Worker
    await engine.embed(["text"])  # each input is one `AsyncLLM.encode`, all in flight at once
    await engine.close()          # shuts the engine processes down, removes the socket files

No second HTTP server: the embedlab worker (or the Dynamo worker) is the server, and
`AsyncLLM` is the engine behind it, as in the seed's `--runner pooling` workers.

Everything vLLM writes goes under the worker's state directory (`vllm_state.py`), and
what vLLM is given is worked out in `vllm_config.py`; this module starts the engine,
serves requests through it and closes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import EngineError
from .base import POOLINGS, Embeddings, EngineOptions, InvalidInput, model_dir
from .models import resolve_model_path, serving_defaults
from .vllm_config import engine_args
from .vllm_state import EngineState, stop_child_processes

if TYPE_CHECKING:
    from vllm.v1.engine.async_llm import AsyncLLM

log = logging.getLogger("embedlab.engines.vllm")

VLLM_POOLINGS = tuple(p.upper() for p in POOLINGS)  # vLLM's PoolingType names


class VllmEngine:
    name = "vllm"
    runs_vllm = True  # `EngineTraits`: the run's vLLM settings apply to its worker
    supports_dimensions = False

    def __init__(self, options: EngineOptions) -> None:
        # Checks wait for start(): there an EngineError makes the worker exit 1 with its
        # message, on both stacks, rather than escape from a constructor.
        self.options = options
        self.pooling = ""
        self.normalize = True
        self.dim = 0
        self.max_model_len = 0
        self._engine: AsyncLLM | None = None
        self._params: Any = None
        # Bound by _build, with PoolingParams: a from-import in _encode_one would run the
        # import machinery once per input on the request path.
        self._tokens_prompt: Any = None
        self._validation_error: Any = None
        self._state = EngineState()
        self._ids = itertools.count()

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        model_path = self._check_model_path()
        self.pooling = self._check_pooling(model_path)
        try:
            self._state.prepare(self.options.state_dir)
            build = asyncio.get_running_loop().run_in_executor(None, self._build, model_path)
            try:
                # A worker thread: the system port keeps answering /health (503) meanwhile.
                await asyncio.shield(build)
            except asyncio.CancelledError:
                # Stopped mid-start. The thread cannot be interrupted, but the processes it
                # waits on can: without them from_engine_args fails within seconds. Each is
                # stopped as it comes: a stop during the model's inspection (a subprocess of
                # its own) would otherwise leave the EngineCore spawned after it to start in full.
                loop = asyncio.get_running_loop()
                deadline = loop.time() + 60
                while not build.done() and loop.time() < deadline:
                    stop_child_processes()
                    await asyncio.wait({build}, timeout=0.5)
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(asyncio.shield(build), timeout=max(0.0, deadline - loop.time()))
                # Should it finish after all, its engine goes as soon as it is built.
                build.add_done_callback(
                    lambda _: self._engine.shutdown() if self._engine is not None else None
                )
                raise
            assert self._engine is not None
            # One real request before the worker calls itself ready: some faults (a head
            # size vLLM's CPU attention lacks) start fine and kill the engine at the first
            # forward. It also gives the vector size, which a projection head may change.
            try:
                vectors, _ = await self._encode_all(["embedlab warm-up"])
            except Exception as exc:
                raise EngineError(
                    f"vLLM started but could not embed a test input with {model_path}: "
                    f"{exc.__class__.__name__}: {exc} (the root cause is in the log above)"
                ) from exc
            self.dim = int(vectors.shape[1])
            self.max_model_len = int(self._engine.model_config.max_model_len)
        except BaseException:
            await self.close()
            raise
        log.info(
            "vLLM engine ready: %s, dim %d, pooling %s%s, %s, max_model_len %d, state in %s",
            model_path,
            self.dim,
            self.pooling,
            "" if self.normalize else " (not normalised)",
            self.options.dtype,
            self.max_model_len,
            self._state.directory,
        )

    def _check_model_path(self) -> Path:
        path = self.options.model_path
        if path is None:
            raise EngineError("the vllm engine needs --model-path DIR (a local model directory)")
        return model_dir(resolve_model_path(path).expanduser().resolve())

    def _check_pooling(self, model_path: Path) -> str:
        own = serving_defaults(model_path)
        self.normalize = own.normalize if self.options.normalize is None else self.options.normalize
        pooling = (self.options.pooling or own.pooling).upper()
        if pooling not in VLLM_POOLINGS:
            raise EngineError(
                f"unsupported pooling type {self.options.pooling!r} for the vllm engine; choose from {', '.join(VLLM_POOLINGS)}"
            )
        return pooling

    def _build(self, model_path: Path) -> None:
        """Import vLLM and start its engine (blocking: its processes spawn and load the model).

        The engine goes to `self._engine`, never through the executor's futures: those stay
        referenced after they finish, and would keep the engine alive past close().
        """
        try:
            from vllm import PoolingParams, TokensPrompt
            from vllm.exceptions import VLLMValidationError
            from vllm.v1.engine.async_llm import AsyncLLM
        except ImportError as exc:
            raise EngineError(f"the vllm engine needs vLLM: run `make vllm` ({exc})") from exc
        args = engine_args(self.options, model_path, self.pooling)
        # task="embed": left unset, vLLM picks "token_embed" (a vector per token).
        # use_activation=None means L2-normalise for embed; False gives the raw pooled vector.
        self._params = PoolingParams(task="embed", use_activation=None if self.normalize else False)
        self._tokens_prompt = TokensPrompt
        self._validation_error = VLLMValidationError
        try:
            self._engine = AsyncLLM.from_engine_args(args)
        except Exception as exc:  # bad config, missing weights, a core process that died
            message = " ".join(str(exc).split())
            raise EngineError(
                f"vLLM could not start with {model_path}: {exc.__class__.__name__}: {message}"
            ) from exc

    async def close(self) -> None:
        engine, self._engine = self._engine, None
        if engine is not None:
            # Blocking: it stops EngineCore (SIGTERM, then SIGKILL of its tree after 5 s).
            await asyncio.get_running_loop().run_in_executor(None, engine.shutdown)
            # The last reference goes now, not at interpreter exit, where AsyncLLM.__del__
            # would shut down a second time against half-torn-down modules.
            del engine
        self._state.close()

    # -- requests -------------------------------------------------------------------------

    async def embed(
        self, inputs: Sequence[str] | Sequence[Sequence[int]], *, dimensions: int | None = None
    ) -> Embeddings:
        if self._engine is None:
            raise EngineError("the vllm engine is not running")
        vectors, tokens = await self._encode_all(inputs)
        return Embeddings(vectors=vectors, prompt_tokens=tokens)

    async def _encode_all(self, inputs: Sequence[str | Sequence[int]]) -> tuple[np.ndarray, int]:
        # One engine request per input, all in flight together: vLLM batches them (and
        # those of other HTTP requests) in its own scheduler.
        tasks = [asyncio.ensure_future(self._encode_one(item, index)) for index, item in enumerate(inputs)]
        try:
            outputs = await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()  # vLLM aborts a request whose generator is cancelled
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        vectors = np.stack([out.outputs.data.detach().float().cpu().numpy() for out in outputs]).astype(
            np.float32, copy=False
        )
        return vectors, sum(len(out.prompt_token_ids or ()) for out in outputs)

    async def _encode_one(self, item: str | Sequence[int], index: int) -> Any:
        assert self._engine is not None
        # parse_inputs has already checked every id is a plain, non-negative int.
        prompt: Any = item if isinstance(item, str) else self._tokens_prompt(prompt_token_ids=list(item))
        final = None
        try:
            async for out in self._engine.encode(
                prompt, self._params, request_id=f"embedlab-{next(self._ids)}"
            ):
                final = out  # a pooling request yields exactly one, finished, output
        except self._validation_error as exc:
            # Not a ValueError: vLLM's own tree, for the request's fault. The engine stays up.
            message = " ".join(str(exc).split())
            code = "context_length_exceeded" if "maximum context length" in message else None
            raise InvalidInput(f"input[{index}]: {message}", code=code) from None
        if final is None:
            raise EngineError(f"vLLM returned nothing for input[{index}]")
        return final
