"""launch/agg_embed_multiworker.sh serves both cases and leaves nothing behind after SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import time

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


@pytest.mark.parametrize("models", [["same"], ["one", "two"]], ids=["same-model", "multi-model"])
def test_launch_script_serves_and_cleans_up(models: list[str], tmp_path) -> None:  # type: ignore[no-untyped-def]
    ports = [reserve_port() for _ in range(3)]
    env = {
        **os.environ,
        "DYN_HTTP_PORT": str(ports[0]),
        "DYN_SYSTEM_PORT1": str(ports[1]),
        "DYN_SYSTEM_PORT2": str(ports[2]),
    }
    env.pop("CUDA_VISIBLE_DEVICES", None)
    log = open(tmp_path / "script.log", "wb")
    proc = subprocess.Popen([str(SCRIPT), *models], env=env, stdout=log, stderr=subprocess.STDOUT)
    started: list[int] = []
    try:
        url = f"http://127.0.0.1:{ports[0]}"
        wait_models(url, set(models), proc)
        started = descendants_of(proc.pid)
        assert len(started) >= 3, started
        target = attach(url, [f"http://127.0.0.1:{p}" for p in ports[1:]], models=models * (2 // len(models)))
        result = same_model_load_balance(target) if len(models) == 1 else multi_model_dispatch(target)
        assert result.passed, result.summary()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) != 0
        assert wait_gone(started) == [], "processes survived the launch script"
    finally:
        if proc.poll() is None:
            proc.kill()
        kill_all(started)
        for p in ports:
            release_port(p)
        log.close()


def test_launch_script_exits_when_a_worker_exits(tmp_path) -> None:  # type: ignore[no-untyped-def]
    ports = [reserve_port() for _ in range(3)]
    env = {
        **os.environ,
        "DYN_HTTP_PORT": str(ports[0]),
        "DYN_SYSTEM_PORT1": str(ports[1]),
        "DYN_SYSTEM_PORT2": str(ports[2]),
    }
    proc = subprocess.Popen(
        [str(SCRIPT), "x", "y"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    started: list[int] = []
    try:
        wait_models(f"http://127.0.0.1:{ports[0]}", {"x", "y"}, proc)
        started = descendants_of(proc.pid)
        worker = next(
            p for p in started if b"--served-model-name\x00y" in open(f"/proc/{p}/cmdline", "rb").read()
        )
        os.kill(worker, signal.SIGKILL)
        assert proc.wait(timeout=20) != 0
        assert wait_gone(started) == []
    finally:
        if proc.poll() is None:
            proc.kill()
        kill_all(started)
        for p in ports:
            release_port(p)
