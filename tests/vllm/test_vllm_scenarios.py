"""The regression scenarios with two vLLM workers: same-model (embedded, from the CLI with
its default tiny model) and multi-model on the Dynamo stack."""

from __future__ import annotations

import json
import os
from pathlib import Path

from embedlab import Deployment, DeploymentSpec, multi_model_dispatch
from embedlab.stacks.dynamo import dynamo_installed

from ..commands import run_embedlab
from ..conftest import REPO
from ..proctools import assert_groups_gone, deployment_pids
from .conftest import MAX_MODEL_LEN, STARTUP_TIMEOUT, HostSnapshot, tiny_vllm_workers


def test_same_model_scenario_from_the_cli_with_default_tiny_models(
    tiny_models: dict[str, Path], tmp_path: Path
) -> None:
    # No --model-path: the CLI takes the tiny BERT from EMBEDLAB_CACHE (the tests' model cache).
    env = {**os.environ, "EMBEDLAB_CACHE": str(tiny_models["bert"].parent)}
    before = HostSnapshot.take()
    result_json = tmp_path / "result.json"
    proc = run_embedlab(
        "scenario",
        "same-model",
        "--engine",
        "vllm",
        "--workers",
        "2",
        "--max-model-len",
        str(MAX_MODEL_LEN),
        "--startup-timeout",
        str(STARTUP_TIMEOUT),
        "--run-dir",
        str(tmp_path / "run"),
        "--json",
        str(result_json),
        timeout=STARTUP_TIMEOUT + 120,
        env=env,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "same-model on embedded (vllm): PASSED" in proc.stdout
    result = json.loads(result_json.read_text())
    assert [w["model"] for w in result["workers"]] == ["tiny-bert", "tiny-bert"], result["workers"]
    # Both workers really ran vLLM on the tiny BERT, with its MEAN pooling.
    for index in (0, 1):
        log = (tmp_path / "run" / f"worker-{index}.log").read_text()
        assert "vLLM engine ready: " + str(tiny_models["bert"].resolve()) in log and "pooling MEAN" in log
    # pytest's run dir is too deep for a socket path: the engine linked to it from /tmp, and
    # the link went at exit.
    assert before.new_files() == []


def test_multi_model_on_the_dynamo_stack(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    assert dynamo_installed(), "ai-dynamo is not installed: run `make dynamo`"
    before = HostSnapshot.take()
    spec = DeploymentSpec(
        stack="dynamo",
        workers=tiny_vllm_workers(tiny_models),
        startup_timeout=STARTUP_TIMEOUT,
    )
    with Deployment(spec, run_dir=tmp_path) as dep:
        result = multi_model_dispatch(dep, requests=10)
        assert result.passed, result.summary()
        pids = deployment_pids(dep)
    assert_groups_gone(pids)
    assert before.new_files() == []
    # vLLM's own log line: the Qwen3 worker pooled LAST, as its model asks, with no flag.
    assert "pooling_type=LAST(source=user)" in (tmp_path / "worker-1.log").read_text()
    assert "pooling_type=MEAN(source=user)" in (tmp_path / "worker-0.log").read_text()
