"""vLLM start-up errors: each one a clear message, an exit, and a fast readiness failure."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from embedlab import Deployment, DeploymentSpec, WorkerSpec
from embedlab.errors import ReadinessTimeoutError, ServerExitedError

from ..conftest import REPO
from ..proctools import assert_groups_gone, deployment_pids, descendants_of, group_members, wait_gone
from .conftest import HostSnapshot

# One vLLM engine at a time: these may run beside a two-engine pool (tests/xdist_groups.py).
pytestmark = pytest.mark.vllm(engines=1)

# Long enough for vLLM to fail on a loaded 2-core machine; a hang would still end here.
BROKEN_TIMEOUT = 300.0


def worker(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`embedlab worker` as the seed runs it; it must fail before it needs a frontend."""
    argv = [
        sys.executable,
        "-m",
        "embedlab",
        "worker",
        "--served-model-name",
        "m",
        "--endpoint",
        "dynamo.w.generate",
        "--frontend-url",
        "http://127.0.0.1:9",
        "--runner",
        "pooling",
        "--dtype",
        "float32",
        *args,
    ]
    return subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=timeout)


def test_unsupported_pooling_type_exits_1_with_a_clear_message(tiny_models: dict[str, Path]) -> None:
    proc = worker(
        "--engine",
        "vllm",
        "--model-path",
        str(tiny_models["bert"]),
        "--pooler-config",
        '{"pooling_type": "FOO"}',
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "unsupported pooling type 'foo'" in proc.stderr and "MEAN, LAST, CLS" in proc.stderr


def test_directory_without_a_model_exits_1_with_a_clear_message(tmp_path: Path) -> None:
    proc = worker("--engine", "vllm", "--model-path", str(tmp_path))
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert f"{tmp_path} is not a model directory (no config.json)" in proc.stderr


def test_unknown_engine_argument_exits_1_naming_it(tiny_models: dict[str, Path]) -> None:
    proc = worker(
        "--engine", "vllm", "--model-path", str(tiny_models["bert"]), "--engine-arg", "max_num_seq=8"
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "unknown vLLM engine argument 'max_num_seq'; did you mean max_num_seqs" in proc.stderr


def test_broken_model_fails_readiness_with_the_log_tail(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    # A real model directory whose weights are cut short: vLLM gets as far as loading them.
    broken = tmp_path / "broken-bert"
    shutil.copytree(tiny_models["bert"], broken)
    weights = broken / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    spec = DeploymentSpec(
        workers=(WorkerSpec(model="broken", engine="vllm", model_path=broken, max_model_len=128),),
        startup_timeout=BROKEN_TIMEOUT,
    )
    before = HostSnapshot.take()
    dep = Deployment(spec, run_dir=tmp_path / "run")
    started = time.monotonic()
    with pytest.raises((ServerExitedError, ReadinessTimeoutError)) as info:
        dep.start()
    elapsed = time.monotonic() - started
    # It exits: a hang would have been a ReadinessTimeoutError at the full timeout.
    assert isinstance(info.value, ServerExitedError), info.value
    assert elapsed < BROKEN_TIMEOUT
    message = str(info.value)
    assert "worker 0 exited with code 1" in message and str(tmp_path / "run" / "worker-0.log") in message
    assert (
        f"embedlab worker: vLLM could not start with {broken.resolve()}" in message
    )  # the tail holds the reason
    assert_groups_gone(deployment_pids(dep))
    assert before.new_files() == []


def test_sigterm_during_start_stops_the_worker_and_its_engine_processes(
    tiny_models: dict[str, Path], tmp_path: Path
) -> None:
    """A stop must not wait for vLLM's minute-long start, nor orphan what it spawned so far."""
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "embedlab",
                "worker",
                "--engine",
                "vllm",
                "--model-path",
                str(tiny_models["bert"]),
                "--served-model-name",
                "m",
                "--endpoint",
                "dynamo.w.generate",
                "--frontend-url",
                "http://127.0.0.1:9",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            start_new_session=True,
            env={**os.environ, "EMBEDLAB_STATE_DIR": str(tmp_path / "state")},
        )
    try:
        # vLLM's first process other than multiprocessing's resource tracker: the start is under way.
        deadline = time.monotonic() + 240
        while not [p for p in descendants_of(proc.pid) if b"resource_tracker" not in _cmdline(p)]:
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "vLLM spawned nothing in 240 s"
            time.sleep(0.1)
        started_stopping = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=90) == 0, log.read_text()[-3000:]
        assert wait_gone(group_members(proc.pid), timeout=30) == []
        assert group_members(proc.pid) == []
        print(f"stopped {time.monotonic() - started_stopping:.1f} s after SIGTERM")
    finally:
        if proc.poll() is None or group_members(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert not (tmp_path / "state" / "rpc").exists()


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
