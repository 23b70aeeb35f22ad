"""launch/agg_embed_multiworker.sh serves both cases and leaves nothing behind after SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx
import pytest

from embedlab import attach, multi_model_dispatch, same_model_load_balance
from embedlab.cluster.ports import release_port, reserve_port

from ..conftest import REPO
from ..proctools import descendants_of, kill_all, wait_gone

SCRIPT = REPO / "launch" / "agg_embed_multiworker.sh"


def wait_models(url: str, want: set[str], proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the launch script exited early"
        try:
            health = httpx.get(f"{url}/health", timeout=1).json()["models"]
            if set(health) == want and sum(len(v) for v in health.values()) == 2:
                return
        except (httpx.HTTPError, ValueError, KeyError):
            pass
        time.sleep(0.05)
    raise AssertionError(f"{want} not registered within {timeout}s")


@dataclass
class Launch:
    """The launch script, running, its models registered: the script's process, the frontend's
    URL, the workers' system URLs, and every process under the script."""

    proc: subprocess.Popen[bytes]
    url: str
    system_urls: list[str]
    started: list[int] = field(default_factory=list)


@contextmanager
def launched(models: list[str], log: IO[bytes] | int = subprocess.DEVNULL) -> Iterator[Launch]:
    """Start the script on free ports for `models` and wait until both workers registered; kills
    whatever is left, by PID, and releases the ports, also when the test failed."""
    ports = [reserve_port() for _ in range(3)]
    env = {
        **os.environ,
        "DYN_HTTP_PORT": str(ports[0]),
        "DYN_SYSTEM_PORT1": str(ports[1]),
        "DYN_SYSTEM_PORT2": str(ports[2]),
    }
    env.pop("CUDA_VISIBLE_DEVICES", None)
    proc = subprocess.Popen([str(SCRIPT), *models], env=env, stdout=log, stderr=subprocess.STDOUT)
    launch = Launch(proc, f"http://127.0.0.1:{ports[0]}", [f"http://127.0.0.1:{p}" for p in ports[1:]])
    try:
        wait_models(launch.url, set(models), proc)
        launch.started = descendants_of(proc.pid)
        yield launch
    finally:
        if proc.poll() is None:
            proc.kill()
        kill_all(launch.started)
        for p in ports:
            release_port(p)


@pytest.mark.parametrize("models", [["same"], ["one", "two"]], ids=["same-model", "multi-model"])
def test_launch_script_serves_and_cleans_up(models: list[str], tmp_path: Path) -> None:
    with open(tmp_path / "script.log", "wb") as log, launched(models, log) as launch:
        assert len(launch.started) >= 3, launch.started
        target = attach(launch.url, launch.system_urls, models=models * (2 // len(models)))
        result = same_model_load_balance(target) if len(models) == 1 else multi_model_dispatch(target)
        assert result.passed, result.summary()
        launch.proc.send_signal(signal.SIGTERM)
        assert launch.proc.wait(timeout=20) != 0
        assert wait_gone(launch.started) == [], "processes survived the launch script"


def test_launch_script_exits_when_a_worker_exits() -> None:
    with launched(["x", "y"]) as launch:
        worker = next(
            p
            for p in launch.started
            if b"--served-model-name\x00y" in Path(f"/proc/{p}/cmdline").read_bytes()
        )
        os.kill(worker, signal.SIGKILL)
        assert launch.proc.wait(timeout=20) != 0
        assert wait_gone(launch.started) == []
