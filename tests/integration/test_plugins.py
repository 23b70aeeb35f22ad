"""An engine of one's own, served by a real worker process that loads it as a plugin module."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from embedlab import ConfigError, Deployment, DeploymentSpec, WorkerSpec, register_engine
from embedlab.defaults import PLUGINS_ENV
from embedlab.engines import ENGINES, create_engine

from ..commands import run_embedlab
from ..proctools import processes_under

REPO = Path(__file__).resolve().parents[2]
PLUGIN = "tests.plugins.constant_engine"


def test_a_registered_engine_is_served_by_embedlab_worker_in_its_own_process(tmp_path: Path) -> None:
    # The harness never imports the plugin: the worker process does, from EMBEDLAB_PLUGINS.
    assert "constant" not in ENGINES.names()
    env = (
        (PLUGINS_ENV, PLUGIN),
        ("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])),
    )
    workers = (WorkerSpec(model="m", engine="constant", model_path=tmp_path), WorkerSpec(model="m"))
    with Deployment(DeploymentSpec(workers=workers, env=env), run_dir=tmp_path / "run") as dep:
        with httpx.Client(timeout=10) as client:
            health = client.get(f"{dep.system_urls[0]}/health").json()
            direct = dep.direct_url(0)
            assert direct is not None
            body = client.post(
                f"{direct}/v1/embeddings", json={"model": "m", "input": ["abc", "hello"]}
            ).json()
    assert health["engine"] == "constant"
    assert [d["embedding"] for d in body["data"]] == [[3.0] * 4, [5.0] * 4], body
    assert processes_under(tmp_path / "run") == []


def test_a_worker_whose_plugin_module_does_not_import_exits_with_one_line(tmp_path: Path) -> None:
    env = {**os.environ, PLUGINS_ENV: "tests.plugins.missing_engine", "PYTHONPATH": str(REPO)}
    proc = run_embedlab(
        "worker", "--engine", "constant", "--served-model-name", "m", timeout=60, env=env, cwd=tmp_path
    )
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert "cannot import plugin 'tests.plugins.missing_engine'" in line, line


def test_register_engine_checks_what_joins() -> None:
    with pytest.raises(ConfigError, match="an engine named 'hash' is already registered"):
        register_engine("hash", lambda options: create_engine("hash", options))
    with pytest.raises(ConfigError, match="engine 'broken': 42 is not an engine class"):
        register_engine("broken", 42)  # type: ignore[arg-type]
    assert "broken" not in ENGINES.names()
