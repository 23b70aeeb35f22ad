"""Debian's Prometheus for the tests and benches that read through it: one way to start it in a
folder on 127.0.0.1, wait until it sees what they need, and stop it by its process group."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from embedlab.cluster.ports import release_port, reserve_port


@contextmanager
def prometheus_server(
    folder: Path, config: str, *, ready: Callable[[str], bool], what: str, wait_s: float = 60.0
) -> Iterator[str]:
    """Prometheus with `config` (prometheus.yml's text), its data and log in `folder`; yields its
    URL once `ready(url)` holds (a read it cannot make yet counts as not ready), within `wait_s`
    seconds, else fails naming `what` it waited for. Stopped by its process group, also on failure."""
    binary = shutil.which("prometheus")
    assert binary is not None, "prometheus is missing: `make test` installs it (apt-get install prometheus)"
    (folder / "prometheus.yml").write_text(config)
    port = reserve_port()
    argv = [
        binary, f"--config.file={folder / 'prometheus.yml'}", f"--storage.tsdb.path={folder / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]  # fmt: skip
    with open(folder / "prometheus.log", "w") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        end = time.monotonic() + wait_s
        while True:
            assert proc.poll() is None, (folder / "prometheus.log").read_text()[-3000:]
            try:
                if ready(url):
                    break
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            assert time.monotonic() < end, f"prometheus did not {what} in {wait_s:g} s"
            time.sleep(0.2)
        yield url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        release_port(port)


def scrapes_up(targets: int) -> Callable[[str], bool]:
    """Ready once Prometheus has scraped `targets` targets up."""

    def ready(url: str) -> bool:
        active = httpx.get(f"{url}/api/v1/targets", timeout=2).json()["data"]["activeTargets"]
        return len([t for t in active if t["health"] == "up"]) == targets

    return ready


def answers_ready(url: str) -> bool:
    """Ready once its own /-/ready says so."""
    return httpx.get(f"{url}/-/ready", timeout=2).status_code == 200
