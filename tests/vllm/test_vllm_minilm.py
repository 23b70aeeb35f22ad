"""all-MiniLM-L6-v2 on the vllm engine: one vLLM worker (about 30 s to start on 2 cores)."""

from __future__ import annotations

from pathlib import Path

import pytest

from embedlab import Deployment, DeploymentSpec, WorkerSpec

from ..minilm import EXPECTED, served_similarities
from ..proctools import processes_under
from .conftest import STARTUP_TIMEOUT

# One vLLM engine at a time: these may run beside a two-engine pool (tests/xdist_groups.py).
pytestmark = pytest.mark.vllm(engines=1)


def test_minilm_through_a_vllm_worker_reproduces_the_sentence_transformers_docs(tmp_path: Path) -> None:
    # By name, with no --pooling: the vllm engine reads MEAN and Normalize from the model's files.
    spec = DeploymentSpec(
        workers=(
            WorkerSpec(model="minilm", engine="vllm", model_path="all-MiniLM-L6-v2", max_model_len=128),
        ),
        startup_timeout=STARTUP_TIMEOUT,
    )
    with Deployment(spec, run_dir=tmp_path) as deployment:
        assert served_similarities(deployment, "minilm") == pytest.approx(EXPECTED, abs=5e-4)
    assert processes_under(tmp_path) == []
