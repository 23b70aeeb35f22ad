"""Two vLLM workers on the embedded stack: tiny BERT (MEAN) and tiny Qwen3 (LAST).

One deployment serves every test here (each vLLM worker costs ~40 s to start on 2 cores).
The last test stops it and proves nothing is left behind; run alone, it starts one itself.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from embedlab import Deployment, DeploymentSpec, multi_model_dispatch
from embedlab.engines import EngineOptions, create_engine
from embedlab.serving.openai import decode_embedding

from ..proctools import assert_groups_gone, deployment_pids, descendants_of
from .conftest import MAX_MODEL_LEN, STARTUP_TIMEOUT, HostSnapshot, tiny_vllm_workers

TEXTS = [
    "Hello world!",
    "The quick brown fox jumps over the lazy dog.",
    "a",
    "Embedding workers serve vectors; the frontend routes each request by its model name. " * 3,
]


class Lab:
    def __init__(self, dep: Deployment, before: HostSnapshot, models: dict[str, Path]) -> None:
        self.dep = dep
        self.before = before
        self.models = models
        self.pids_at_start = deployment_pids(dep)

    def post(self, payload: dict[str, object]) -> httpx.Response:
        with httpx.Client(base_url=self.dep.frontend_url, timeout=120) as client:
            return client.post("/v1/embeddings", json=payload)

    def served_vectors(self, model: str, inputs: list[str] | list[list[int]]) -> np.ndarray:
        response = self.post({"model": model, "input": inputs, "encoding_format": "base64"})
        assert response.status_code == 200, response.text
        return np.stack([decode_embedding(d["embedding"]) for d in response.json()["data"]])


@pytest.fixture(scope="module")
def lab(tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    before = HostSnapshot.take()
    spec = DeploymentSpec(
        workers=tiny_vllm_workers(tiny_models),
        startup_timeout=STARTUP_TIMEOUT,
        seed=0,
    )
    with Deployment(spec, run_dir=tmp_path_factory.mktemp("vllm-embedded")) as dep:
        yield Lab(dep, before, tiny_models)


def test_multi_model_dispatch_passes(lab: Lab) -> None:
    result = multi_model_dispatch(lab.dep, requests=10)
    assert result.passed, result.summary()
    print(f"startup seconds: {json.dumps(lab.dep.startup_seconds)}")


def reference(model_dir: Path, pooling: str, inputs: list[str] | list[list[int]]) -> np.ndarray:
    """The same model and pooling through plain transformers (embedlab's transformers engine)."""

    async def run() -> np.ndarray:
        engine = create_engine(
            "transformers", EngineOptions(model_path=model_dir, pooling=pooling, device="cpu")
        )
        await engine.start()
        try:
            return (await engine.embed(inputs)).vectors
        finally:
            await engine.close()

    return asyncio.run(run())


@pytest.mark.parametrize(
    "model,arch,pooling", [("tiny-bert", "bert", "mean"), ("tiny-qwen3", "qwen3", "last")]
)
def test_vectors_match_transformers(lab: Lab, model: str, arch: str, pooling: str) -> None:
    served = lab.served_vectors(model, TEXTS)
    expected = reference(lab.models[arch], pooling, TEXTS)
    assert served.shape == expected.shape == (len(TEXTS), 64)
    np.testing.assert_allclose(served, expected, atol=1e-4)
    cosine = np.sum(served * expected, axis=1) / (
        np.linalg.norm(served, axis=1) * np.linalg.norm(expected, axis=1)
    )
    assert cosine.min() > 0.9999, cosine
    # The pooling matters: a vector pooled the other way must not pass the same check.
    other = reference(lab.models[arch], "last" if pooling == "mean" else "mean", TEXTS)
    assert np.abs(served - other).max() > 1e-2


def test_token_ids_give_the_vectors_of_their_text(lab: Lab) -> None:
    from transformers import AutoTokenizer

    ids = [
        list(map(int, AutoTokenizer.from_pretrained(lab.models["qwen3"])(t)["input_ids"])) for t in TEXTS[:2]
    ]
    response = lab.post({"model": "tiny-qwen3", "input": ids})
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["prompt_tokens"] == sum(len(i) for i in ids)
    from_ids = np.stack([decode_embedding(d["embedding"]) for d in response.json()["data"]])
    np.testing.assert_allclose(from_ids, lab.served_vectors("tiny-qwen3", TEXTS[:2]), atol=1e-6)


def test_input_over_max_model_len_is_a_400(lab: Lab) -> None:
    for model, payload in (
        ("tiny-bert", [[5] * (MAX_MODEL_LEN + 1)]),
        ("tiny-qwen3", ["hello"] + ["word " * 400]),  # the second input of two is too long
    ):
        response = lab.post({"model": model, "input": payload})
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["code"] == "context_length_exceeded" and str(MAX_MODEL_LEN) in error["message"], error
    # Exactly the limit is fine, and the engine still serves after the rejections.
    assert lab.post({"model": "tiny-bert", "input": [[5] * MAX_MODEL_LEN]}).status_code == 200
    bad_id = lab.post({"model": "tiny-bert", "input": [[10**6]]})
    assert bad_id.status_code == 400 and "vocabulary" in bad_id.json()["error"]["message"]


def test_each_worker_has_its_own_core(lab: Lab) -> None:
    """vLLM's default binds every engine to core 0; Deployment gives worker i core i."""
    cores = sorted(os.sched_getaffinity(0))
    bound = []
    for proc in lab.dep.workers:
        assert proc.pid is not None
        # The engine's model-running process is the one whose CPU set vLLM narrowed.
        sets = {_allowed_cpus(pid) for pid in descendants_of(proc.pid)} - {tuple(cores)}
        assert len(sets) == 1, f"{proc.name}: expected one bound engine process, CPU sets {sets}"
        bound.append(sets.pop())
    if len(cores) >= 2:
        assert bound == [(cores[0],), (cores[1],)], bound


def _allowed_cpus(pid: int) -> tuple[int, ...]:
    try:
        return tuple(sorted(os.sched_getaffinity(pid)))
    except OSError:  # exited meanwhile
        return ()


def test_a_dead_engine_answers_500_and_the_other_worker_serves_on(lab: Lab) -> None:
    # Second to last: it kills tiny-qwen3's engine. Its model process is found by PID,
    # under that worker's own process tree.
    worker = lab.dep.workers[1]
    assert worker.pid is not None
    engine = [
        p for p in descendants_of(worker.pid) if Path(f"/proc/{p}/comm").read_text().strip() == "VLLM::Worker"
    ]
    assert len(engine) == 1, engine
    os.kill(engine[0], signal.SIGKILL)
    deadline = time.monotonic() + 60
    while (response := lab.post({"model": "tiny-qwen3", "input": "hello"})).status_code == 200:
        assert time.monotonic() < deadline, "the engine still answered a minute after its process was killed"
        time.sleep(0.2)
    assert response.status_code >= 500, response.text
    assert lab.post({"model": "tiny-bert", "input": "hello"}).status_code == 200


def test_teardown_leaves_no_process_and_no_file_outside_the_run_dir(lab: Lab) -> None:
    # Runs last in this module: it stops the shared deployment (stop is idempotent).
    pids = deployment_pids(lab.dep)
    # vLLM's processes (EngineCore, Worker, resource tracker) live in their worker's group.
    assert len(pids[lab.dep.workers[0].pgid]) >= 4, pids  # type: ignore[index]
    run_dir = lab.dep.run_dir
    # While it runs, each worker's state and vLLM's model-class cache are inside the run dir.
    assert all((run_dir / f"{w}-state").is_dir() for w in ("worker-0", "worker-1"))
    assert list((run_dir / "vllm-cache").rglob("*.json")), "vLLM's model-class cache should be in the run dir"
    lab.dep.stop()
    assert_groups_gone(pids)
    assert_groups_gone(lab.pids_at_start)
    assert all(w.returncode == 0 for w in lab.dep.workers), [w.returncode for w in lab.dep.workers]
    assert lab.before.new_files() == []
    # Then only the logs stay: the state folders, their sockets and the cache are gone.
    left = [p.name for p in run_dir.rglob("*") if not (p.is_file() and p.suffix == ".log")]
    assert left == [], left
