"""What a deployment decides for each process before it starts: its run folder, GPU and vLLM settings."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from ..defaults import CUDA_VISIBLE_ENV, RUN_ROOT_ENV, VLLM_CACHE_ENV
from ..engines import engine_traits
from .spec import WorkerSpec

__all__ = ["default_run_dir", "gpu_for", "visible_gpus", "vllm_worker_env"]


def default_run_dir(prefix: str = "run") -> Path:
    base = Path(os.environ.get(RUN_ROOT_ENV) or Path(tempfile.gettempdir()) / "embedlab-runs")
    path = base / f"{time.strftime('%Y%m%d-%H%M%S')}-{prefix}-{secrets.token_hex(3)}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def visible_gpus() -> list[str]:
    """GPU ids a worker may be pinned to: CUDA_VISIBLE_DEVICES, else what nvidia-smi lists."""
    env = os.environ.get(CUDA_VISIBLE_ENV)
    if env is not None:
        return [d for d in env.split(",") if d.strip() and d.strip() != "-1"]
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]


def gpu_for(index: int, worker: WorkerSpec, gpus: Sequence[str]) -> str | None:
    """The CUDA_VISIBLE_DEVICES of worker `index`: "" to hide GPUs, None to leave it unset."""
    if worker.device == "cpu":
        return ""
    if worker.device is not None and worker.device != "auto":
        return worker.device.removeprefix("cuda:")
    if not gpus or not engine_traits(worker.engine).uses_gpu:
        return None
    return gpus[index % len(gpus)]


def vllm_worker_env(index: int, *, run_dir: Path, env: dict[str, str], on_gpu: bool) -> dict[str, str]:
    """What a vLLM worker needs beyond the run's environment; the user's own settings win.

    - One model-class cache per run (`EMBEDLAB_VLLM_CACHE`): vLLM fills a cold one by
      importing itself once more in a subprocess, 15-30 s of a start on 2 cores. A run
      that restarts a worker finds it warm; an exported EMBEDLAB_VLLM_CACHE keeps one
      across runs, outside the run directory, by the user's choice.
    - On CPU, one core per worker, round robin: vLLM's default (`auto`) binds every
      engine to the first core, so two workers would share one core and leave the other idle.
    """
    extra = {VLLM_CACHE_ENV: env.get(VLLM_CACHE_ENV) or str(run_dir / "vllm-cache")}
    if not on_gpu and not env.get("VLLM_CPU_OMP_THREADS_BIND"):
        cores = sorted(os.sched_getaffinity(0))
        extra["VLLM_CPU_OMP_THREADS_BIND"] = str(cores[index % len(cores)])
    return extra
