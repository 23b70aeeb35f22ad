"""What a vLLM worker is given before it starts: flags, default models, environment, matrix."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from embedlab import ScenarioPlan, load_matrix
from embedlab.cli.entry import build_parser, engine_options_from_args
from embedlab.cluster.provisioning import vllm_worker_env
from embedlab.engines.vllm_config import CPU_KV_CACHE_BYTES, cpu_kv_cache_bytes, position_limit
from embedlab.errors import ConfigError

from ...conftest import REPO


def test_the_seed_worker_flags_parse(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(
        [
            "worker",
            "--engine",
            "vllm",
            "--model-path",
            "/m",
            "--served-model-name",
            "m",
            "--endpoint",
            "a.b.c",
            "--runner",
            "pooling",
            "--dtype",
            "float32",
            "--pooler-config",
            '{"pooling_type": "LAST", "use_activation": false}',
            "--max-model-len",
            "2048",
            "--engine-arg",
            "max_num_seqs=8",
        ]
    )
    options = engine_options_from_args(args)
    assert (options.pooling, options.dtype, options.max_model_len) == ("last", "float32", 2048)
    assert options.extra_args == {"max_num_seqs": 8, "pooler_config": {"use_activation": False}}
    base = ["worker", "--engine", "vllm", "--served-model-name", "m", "--endpoint", "a.b.c"]
    # An embedding worker pools: argparse refuses any other runner, and says which it takes.
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args([*base, "--runner", "generate"])
    assert (
        exit_.value.code == 2
        and "invalid choice: 'generate' (choose from 'pooling')" in capsys.readouterr().err
    )
    with pytest.raises(ConfigError, match="--pooler-config must be a JSON object, got 'MEAN'"):
        engine_options_from_args(build_parser().parse_args([*base, "--pooler-config", "MEAN"]))
    # The dynamo worker takes the same flags.
    dyn = build_parser().parse_args(
        [
            "dynamo-worker",
            "--engine",
            "vllm",
            "--served-model-name",
            "m",
            "--endpoint",
            "a.b.c",
            "--runner",
            "pooling",
            "--pooler-config",
            '{"pooling_type": "MEAN"}',
        ]
    )
    assert engine_options_from_args(dyn).pooling == "mean"


@pytest.mark.parametrize(
    "scenario,models", [("same-model", ["tiny-bert"] * 2), ("multi-model", ["tiny-bert", "tiny-qwen3"])]
)
def test_scenarios_default_to_the_tiny_models(
    scenario: str, models: list[str], tiny_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EMBEDLAB_CACHE", str(tiny_models["bert"].parent))
    spec = ScenarioPlan(scenario=scenario, engine="vllm").deployment_spec()
    assert [w.model for w in spec.workers] == models
    assert [Path(str(w.model_path)).name for w in spec.workers] == [
        m.replace("tiny-", "") + "-seed0" for m in models
    ]
    assert all(w.engine == "vllm" and w.pooling is None for w in spec.workers)  # each model's own pooling


def test_vllm_workers_get_a_shared_cache_and_a_core_each(tmp_path: Path) -> None:
    cores = sorted(os.sched_getaffinity(0))
    envs = [vllm_worker_env(i, run_dir=tmp_path, env={}, on_gpu=False) for i in range(3)]
    assert {e["EMBEDLAB_VLLM_CACHE"] for e in envs} == {str(tmp_path / "vllm-cache")}
    assert [e["VLLM_CPU_OMP_THREADS_BIND"] for e in envs] == [str(cores[i % len(cores)]) for i in range(3)]
    # The user's settings win; a GPU worker is not pinned to a core.
    mine = vllm_worker_env(
        1,
        run_dir=tmp_path,
        env={"VLLM_CPU_OMP_THREADS_BIND": "0-1", "EMBEDLAB_VLLM_CACHE": "/c"},
        on_gpu=False,
    )
    assert mine == {"EMBEDLAB_VLLM_CACHE": "/c"}
    assert "VLLM_CPU_OMP_THREADS_BIND" not in vllm_worker_env(0, run_dir=tmp_path, env={}, on_gpu=True)


def test_the_cpu_kv_cache_fits_one_sequence(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    assert cpu_kv_cache_bytes(tiny_models["qwen3"], 128, "float32") == CPU_KV_CACHE_BYTES
    # Qwen3-Embedding-0.6B's shapes: 28 layers, 8 KV heads of 128; 2048 tokens in fp32 need 448 MiB.
    (tmp_path / "config.json").write_text(
        '{"num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "hidden_size": 1024}'
    )
    assert cpu_kv_cache_bytes(tmp_path, 2048, "float32") == 448 * 2**20 * 5 // 4
    assert cpu_kv_cache_bytes(tmp_path, 2048, "bfloat16") == 224 * 2**20 * 5 // 4


def test_the_default_matrix_runs_both_scenarios_on_two_vllm_workers() -> None:
    jobs = {job.name: job.params for job in load_matrix(notebook_dir=REPO / "notebooks").jobs}
    same = jobs["same_model_load_balance--embedded-vllm-tiny"]
    multi = jobs["multi_model_dispatch--embedded-vllm-tiny"]
    assert (same["engine"], same["stack"], same["models"], same["workers"]) == (
        "vllm",
        "embedded",
        ["tiny-bert"],
        2,
    )
    # The real all-MiniLM-L6-v2 (the packaged directory, MEAN pooling) beside a tiny Qwen3 (LAST).
    assert (multi["engine"], multi["stack"], multi["models"]) == (
        "vllm",
        "embedded",
        ["all-MiniLM-L6-v2", "tiny-qwen3"],
    )
    from embedlab.engines.models import ModelDefaults, resolve_model_path, serving_defaults

    minilm = resolve_model_path("all-MiniLM-L6-v2")
    assert (minilm / "modules.json").is_file() and serving_defaults(minilm) == ModelDefaults(
        pooling="mean", normalize=True
    )


def test_the_models_own_position_limit(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    # The seed's --max-model-len 2048 is held to this for the tiny models (512 positions).
    assert position_limit(tiny_models["bert"]) == position_limit(tiny_models["qwen3"]) == 512
    (tmp_path / "config.json").write_text(
        '{"max_position_embeddings": 4096, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}'
    )
    assert position_limit(tmp_path) is None  # scaled: vLLM's own derivation decides
