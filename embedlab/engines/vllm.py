"""vLLM in pooling mode, in the worker's own process, through its async engine API.

    engine = VllmEngine(EngineOptions(model_path=DIR, pooling="mean", state_dir=RUN/worker-0-state))
    await engine.start()          # ~40 s on 2 CPU cores: spawns vLLM's EngineCore and Worker
    await engine.embed(["text"])  # each input is one `AsyncLLM.encode`, all in flight at once
    await engine.close()          # shuts the engine processes down, removes the socket files

No second HTTP server: the embedlab worker (or the Dynamo worker) is the server, and
`AsyncLLM` is the engine behind it, as in the seed's `--runner pooling` workers.

Everything vLLM writes goes under the state directory (Deployment gives each worker
`<run_dir>/<worker>-state`): its temp files, the ZMQ socket files, its config and caches.
Those variables are set before vLLM is imported: the processes it spawns inherit them,
and vLLM and torch read some of them only once. The model-class cache
(`VLLM_CACHE_ROOT`) may be shared: `EMBEDLAB_VLLM_CACHE` names a directory for it, which
Deployment sets to `<run_dir>/vllm-cache`; without it the cache stays in the state dir.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import difflib
import itertools
import json
import logging
import os
import secrets
import shutil
import signal
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..defaults import VLLM_CACHE_ENV
from ..errors import EngineError
from .base import POOLINGS, Embeddings, EngineOptions, InvalidInput, model_dir
from .tiny import default_pooling

if TYPE_CHECKING:
    from vllm.v1.engine.async_llm import AsyncLLM

log = logging.getLogger("embedlab.engines.vllm")

VLLM_POOLINGS = tuple(p.upper() for p in POOLINGS)  # vLLM's PoolingType names
# The CPU KV cache, unless a model's max_model_len needs more: small enough for two engines
# side by side on a small machine. Embeddings keep nothing in it between requests.
CPU_KV_CACHE_BYTES = 64 << 20
# VLLM_RPC_BASE_PATH (ZMQ ipc:// socket files, never unlinked by vLLM) is <state>/rpc, set
# apart below: a socket path has at most 107 bytes, and vLLM appends "/<uuid4>" (37).
MAX_RPC_BASE = 107 - 37

# Variable -> directory under the state dir: where vLLM, torch or Hugging Face would
# otherwise write, in /tmp or the user's home.
STATE_ENV = {
    "TMPDIR": "tmp",  # vllm_dist_* (torch.distributed file store), registry scratch, weight locks
    "VLLM_CONFIG_ROOT": "config/vllm",  # usage_stats.json
    "XDG_CACHE_HOME": "cache",  # the fallback of every cache below
    "TORCHINDUCTOR_CACHE_DIR": "cache/inductor",
    "TRITON_CACHE_DIR": "cache/triton",
    "HF_HOME": "cache/hf",
}
FIXED_ENV = {
    "VLLM_NO_USAGE_STATS": "1",  # else a usage report goes to stats.vllm.ai, off loopback
    "VLLM_DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",  # a model path is a local directory; never reach for the hub
}
# Set through their own flags; an --engine-arg for them would be ambiguous.
OWN_ARGS = {"model": "--model-path", "runner": "--runner"}


def _text_config(model_path: Path) -> dict[str, Any]:
    try:
        config = json.loads((model_path / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(config, dict):
        return {}
    text = config.get("text_config") or config  # multimodal configs nest the language model's
    return text if isinstance(text, dict) else {}


def position_limit(model_path: Path) -> int | None:
    """The model's own maximum length, where config.json states it plainly (no RoPE scaling)."""
    text = _text_config(model_path)
    scaling = [text.get("rope_scaling"), text.get("rope_parameters")]
    if any(isinstance(s, dict) and "factor" in s for s in scaling):
        return None  # vLLM derives a longer limit from the scaling; leave it to vLLM
    try:
        return int(text["max_position_embeddings"]) or None
    except (KeyError, TypeError, ValueError):
        return None


def cpu_kv_cache_bytes(model_path: Path, max_model_len: int | None, dtype: str) -> int:
    """A small KV cache that still holds one sequence of `max_model_len` tokens.

    vLLM refuses to start with less. 64 MiB holds the tiny models' 512 positions many
    times over, but not 2048 tokens of a Qwen3-Embedding-0.6B (229 KiB a token in fp32).
    """
    text = _text_config(model_path)
    try:
        heads = int(text["num_attention_heads"])
        kv_heads = int(text.get("num_key_value_heads") or heads)
        head_dim = int(text.get("head_dim") or int(text["hidden_size"]) // heads)
        length = int(max_model_len or text.get("max_position_embeddings") or 0)
        per_token = (
            2 * int(text["num_hidden_layers"]) * kv_heads * head_dim * (4 if dtype == "float32" else 2)
        )
    except (ValueError, KeyError, TypeError, ZeroDivisionError):
        return CPU_KV_CACHE_BYTES  # vLLM's own error will say what it needs
    # A quarter more: the cache is handed out in whole blocks of tokens.
    return max(CPU_KV_CACHE_BYTES, per_token * length * 5 // 4)


class _Environment:
    """The variables the engine sets, and what they were before, to put back at close."""

    def __init__(self) -> None:
        self._saved: dict[str, str | None] = {}

    def set(self, name: str, value: str) -> None:
        self._saved.setdefault(name, os.environ.get(name))
        os.environ[name] = value

    def unset(self, name: str) -> None:
        self._saved.setdefault(name, os.environ.get(name))
        os.environ.pop(name, None)

    def restore(self) -> None:
        for name, value in self._saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved.clear()
        tempfile.tempdir = None  # gettempdir() caches TMPDIR: make it read the variable again


class VllmEngine:
    name = "vllm"
    supports_dimensions = False

    def __init__(self, options: EngineOptions) -> None:
        # Checks wait for start(): there an EngineError makes the worker exit 1 with its
        # message, on both stacks, rather than escape from a constructor.
        self.options = options
        self.pooling = ""
        self.dim = 0
        self.max_model_len = 0
        self._engine: AsyncLLM | None = None
        self._params: Any = None
        # Bound by _build, with PoolingParams: a from-import in _encode_one would run the
        # import machinery once per input on the request path.
        self._tokens_prompt: Any = None
        self._validation_error: Any = None
        self._env = _Environment()
        self._state_dir: Path | None = None
        self._own_state_dir = False
        self._rpc_link: Path | None = None
        self._ids = itertools.count()

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        model_path = self._check_model_path()
        self.pooling = self._check_pooling(model_path)
        try:
            self._prepare_state()
            build = asyncio.get_running_loop().run_in_executor(None, self._build, model_path)
            try:
                # A worker thread: the system port keeps answering /health (503) meanwhile.
                await asyncio.shield(build)
            except asyncio.CancelledError:
                # Stopped mid-start. The thread cannot be interrupted, but the processes it
                # waits on can: without them from_engine_args fails within seconds.
                _stop_child_processes()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(asyncio.shield(build), timeout=60)
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
            "vLLM engine ready: %s, dim %d, pooling %s, %s, max_model_len %d, state in %s",
            model_path,
            self.dim,
            self.pooling,
            self.options.dtype,
            self.max_model_len,
            self._state_dir,
        )

    def _check_model_path(self) -> Path:
        path = self.options.model_path
        if path is None:
            raise EngineError("the vllm engine needs --model-path DIR (a local model directory)")
        return model_dir(Path(path).expanduser().resolve())

    def _check_pooling(self, model_path: Path) -> str:
        pooling = (self.options.pooling or default_pooling(model_path)).upper()
        if pooling not in VLLM_POOLINGS:
            raise EngineError(
                f"unsupported pooling type {self.options.pooling!r} for the vllm engine; choose from {', '.join(VLLM_POOLINGS)}"
            )
        return pooling

    def _prepare_state(self) -> None:
        if self.options.state_dir is not None:
            state = Path(self.options.state_dir).resolve()
        else:
            # No run directory (a worker started by hand): a private one, removed at close.
            state = Path(tempfile.mkdtemp(prefix="embedlab-vllm-"))
            self._own_state_dir = True
        self._state_dir = state
        system_tmp = tempfile.gettempdir()  # read before TMPDIR moves into the state dir
        for name, sub in STATE_ENV.items():
            (state / sub).mkdir(parents=True, exist_ok=True)
            self._env.set(name, str(state / sub))
        (state / "rpc").mkdir(exist_ok=True)
        self._env.set("VLLM_RPC_BASE_PATH", self._rpc_base(state / "rpc", system_tmp))
        # The model-class cache: a cold one costs a subprocess that imports vLLM (15-30 s
        # on 2 cores), so Deployment shares one per run, and a user may keep one on purpose.
        cache = Path(os.environ.get(VLLM_CACHE_ENV) or state / "cache" / "vllm").expanduser().resolve()
        cache.mkdir(parents=True, exist_ok=True)
        self._env.set("VLLM_CACHE_ROOT", str(cache))
        for name, value in FIXED_ENV.items():
            self._env.set(name, value)
        tempfile.tempdir = None  # this process may have read TMPDIR already
        # vLLM reads this as a whole number of GiB; an empty value crashes its worker
        # process after a full start, a set one overrides kv_cache_memory_bytes.
        kv_space = os.environ.get("VLLM_CPU_KVCACHE_SPACE")
        if kv_space is not None and not kv_space.strip():
            self._env.unset("VLLM_CPU_KVCACHE_SPACE")
        elif kv_space is not None and not kv_space.strip().isdigit():
            raise EngineError(
                f"VLLM_CPU_KVCACHE_SPACE must be a whole number of GiB or unset, not {kv_space!r}"
            )

    def _rpc_base(self, rpc_dir: Path, system_tmp: str) -> str:
        """Where vLLM puts its ZMQ socket files: `<base>/<uuid4>`.

        A socket path holds at most 107 bytes, and a run directory can be deeper than that
        allows (pytest's are). Then a short symlink in the system temp dir leads to the
        state dir: the sockets still live in the run directory, and the link goes at close.
        """
        if len(os.fsencode(rpc_dir)) <= MAX_RPC_BASE:
            return str(rpc_dir)
        for root in (system_tmp, "/tmp"):
            link = Path(root) / f"embedlab-vllm-rpc-{secrets.token_hex(4)}"
            if len(os.fsencode(link)) <= MAX_RPC_BASE:
                link.symlink_to(rpc_dir, target_is_directory=True)
                self._rpc_link = link
                return str(link)
        raise EngineError(
            f"no socket path short enough for vLLM: {rpc_dir} is {len(str(rpc_dir))} characters long"
        )

    def _engine_args(self, model_path: Path) -> Any:
        from vllm import AsyncEngineArgs
        from vllm.config import PoolerConfig
        from vllm.platforms import current_platform

        extra = dict(self.options.extra_args)
        known = {f.name for f in dataclasses.fields(AsyncEngineArgs)}
        for key in extra:
            if key in OWN_ARGS:
                raise EngineError(f"--engine-arg {key}=... is not allowed: use {OWN_ARGS[key]}")
            if key not in known:
                close = difflib.get_close_matches(key, sorted(known), n=3)
                hint = (
                    f"; did you mean {', '.join(close)}?"
                    if close
                    else " (see vllm.AsyncEngineArgs for the fields)"
                )
                raise EngineError(f"unknown vLLM engine argument {key!r}{hint}")
        pooler = extra.pop("pooler_config", None) or {}
        if not isinstance(pooler, dict):
            raise EngineError(f"pooler_config must be a JSON object, got {pooler!r}")
        try:
            pooler_config = PoolerConfig(**{**pooler, "pooling_type": self.pooling})
        except (TypeError, ValueError) as exc:
            raise EngineError(f"invalid pooler config {pooler}: {exc}") from exc
        length = extra.pop("max_model_len", self.options.max_model_len)
        if length is not None and not isinstance(length, int):
            raise EngineError(f"max_model_len must be a whole number, got {length!r}")
        limit = position_limit(model_path)
        if length and limit and length > limit and not os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN"):
            # As the transformers engine does: the seed passes 2048 to every model, and vLLM
            # would refuse to start a model of 512 positions (the tiny ones) with it.
            log.warning(
                "--max-model-len %d is more than %s has positions for: serving %d", length, model_path, limit
            )
            length = limit
        args: dict[str, Any] = {
            "model": str(model_path),
            "runner": "pooling",
            "pooler_config": pooler_config,
            "dtype": self.options.dtype,
            "max_model_len": length,
            "disable_log_stats": True,
            "seed": 0,
        }
        if current_platform.is_cpu():
            # Eager: vLLM's compile cache fails to reload in this version, so every start
            # would compile again. The KV cache default would take GiBs per engine.
            dtype = str(extra.get("dtype", self.options.dtype))
            args.update(
                enforce_eager=True, kv_cache_memory_bytes=cpu_kv_cache_bytes(model_path, length, dtype)
            )  # type: ignore[arg-type]
        args.update(extra)
        try:
            return AsyncEngineArgs(**args)
        except (TypeError, ValueError) as exc:
            raise EngineError(f"invalid vLLM engine arguments: {exc}") from exc

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
        engine_args = self._engine_args(model_path)
        # task="embed": left unset, vLLM picks "token_embed" (a vector per token).
        # use_activation=None means L2-normalise for embed; False gives the raw pooled vector.
        self._params = PoolingParams(task="embed", use_activation=None if self.options.normalize else False)
        self._tokens_prompt = TokensPrompt
        self._validation_error = VLLMValidationError
        try:
            self._engine = AsyncLLM.from_engine_args(engine_args)
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
        if self._rpc_link is not None:
            self._rpc_link.unlink(missing_ok=True)
            self._rpc_link = None
        if self._state_dir is not None:
            # vLLM leaves its socket files behind, even after a clean shutdown.
            for sub in ("rpc", "tmp"):
                shutil.rmtree(self._state_dir / sub, ignore_errors=True)
            if self._own_state_dir:
                shutil.rmtree(self._state_dir, ignore_errors=True)
            self._state_dir = None
        self._env.restore()

    # -- requests -------------------------------------------------------------------------

    async def embed(
        self, inputs: Sequence[str] | Sequence[Sequence[int]], *, dimensions: int | None = None
    ) -> Embeddings:
        if self._engine is None:
            raise EngineError("the vllm engine is not running")
        vectors, tokens = await self._encode_all(inputs)
        return Embeddings(vectors=vectors, prompt_tokens=tokens)

    async def _encode_all(self, inputs: Sequence[str] | Sequence[Sequence[int]]) -> tuple[np.ndarray, int]:
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


def _stop_child_processes() -> None:
    """SIGTERM this process's children: vLLM's EngineCore (which stops its own Worker) and
    its model-inspection subprocess. Not multiprocessing's resource tracker, which must
    outlive them to remove their shared memory. A worker process starts no other children.
    """
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        # The command may hold spaces and parentheses: the fields start after the last ')'.
        if int(stat[stat.rindex(")") + 2 :].split()[1]) != me or b"resource_tracker" in cmdline:
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(entry.name), signal.SIGTERM)
