"""The transformers engine end to end: tiny BERT and tiny Qwen3 behind the embedded frontend."""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np

from embedlab import Deployment, DeploymentSpec, WorkerSpec, multi_model_dispatch
from embedlab.serving.openai import decode_embedding

from ..commands import run_embedlab


def test_tiny_bert_and_qwen3_serve_real_vectors(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    spec = DeploymentSpec(
        workers=(
            WorkerSpec(
                model="tiny-bert", engine="transformers", model_path=tiny_models["bert"], device="cpu"
            ),
            WorkerSpec(
                model="tiny-qwen3", engine="transformers", model_path=tiny_models["qwen3"], device="cpu"
            ),
        )
    )
    with Deployment(spec, run_dir=tmp_path) as dep:
        with httpx.Client(base_url=dep.frontend_url, timeout=60) as client:
            for model in ("tiny-bert", "tiny-qwen3"):
                body = client.post(
                    "/v1/embeddings",
                    json={
                        "model": model,
                        "input": ["hello there", "general kenobi"],
                        "encoding_format": "base64",
                    },
                )
                assert body.status_code == 200, body.text
                vectors = [decode_embedding(d["embedding"]) for d in body.json()["data"]]
                assert [v.shape for v in vectors] == [(64,), (64,)]
                np.testing.assert_allclose([np.linalg.norm(v) for v in vectors], 1.0, rtol=1e-5)
                assert not np.allclose(vectors[0], vectors[1])
                assert body.json()["usage"]["prompt_tokens"] > 2
            too_long = client.post("/v1/embeddings", json={"model": "tiny-bert", "input": "word " * 600})
            assert (
                too_long.status_code == 400 and too_long.json()["error"]["code"] == "context_length_exceeded"
            )
            dims = client.post("/v1/embeddings", json={"model": "tiny-bert", "input": "x", "dimensions": 8})
            assert dims.status_code == 400 and dims.json()["error"]["param"] == "dimensions"
        result = multi_model_dispatch(dep, requests=10)
    assert result.passed, result.summary()


def test_make_tiny_model_cli_builds_a_loadable_model(tmp_path: Path) -> None:
    out = tmp_path / "bert"
    proc = run_embedlab("make-tiny-model", "--arch", "bert", str(out), timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert (out / "config.json").is_file() and (out / "tokenizer.json").is_file()
    from transformers import AutoModel, AutoTokenizer

    AutoTokenizer.from_pretrained(out)
    assert AutoModel.from_pretrained(out).config.hidden_size == 64
