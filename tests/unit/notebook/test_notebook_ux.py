"""What a notebook user meets first: plan checks, errors as one line, the kernel, progress text, tables."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from embedlab import (
    ConfigError,
    DeploymentStoppedError,
    EmbedlabError,
    LaunchProgress,
    ScenarioPlan,
    check_explore,
)
from embedlab.notebook import kernelspec
from embedlab.progress import LaunchStep
from embedlab.reports.regress import check_kernel


@pytest.mark.parametrize(
    "params, message",
    [
        ({"engine": "nonsense"}, "unknown engine 'nonsense'; choose from hash, transformers, vllm"),
        ({"stack": "nonsense"}, "unknown stack 'nonsense'; choose from embedded, dynamo"),
        ({"scenario": "nonsense"}, "unknown scenario 'nonsense'; choose from same-model"),
        ({"workers": 0}, "workers must be a whole number of at least 1, got 0"),
        ({"requests": 0}, "same-model: requests must be at least 1, got 0"),
        ({"concurrency": 2.5}, "same-model: concurrency must be a whole number, got 2.5"),
        ({"workers": 2, "weights": [1, 2, 3]}, "2 workers but 3 weights"),
        ({"workers": 3, "weights": [1, 0, 1]}, "weights must be positive"),
        ({"router_mode": "fastest"}, "the embedded frontend has no router mode 'fastest'; choose from"),
        ({"engine": "transformers", "models": ["mine"]}, "model 'mine' needs a model path"),
        (
            {
                "scenario": "multi-model",
                "engine": "vllm",
                "models": ["tiny-bert", "tiny-qwen3"],
                "model_paths": ["/a", "/b", "/c"],
            },
            "2 models but 3 model paths",
        ),
        (
            {"models": ["a", "b"]},
            "same-model takes one model, got 2 (a, b); a scenario over several models is multi-model",
        ),
        ({"unknown_knob": 1}, "unknown scenario parameters: unknown_knob"),
    ],
)
def test_the_plan_refuses_what_could_only_fail_after_launch(params: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(
        ConfigError, match="^" + message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
    ):
        ScenarioPlan.from_params(**{"scenario": "same-model", **params})


def test_the_plan_takes_what_can_work() -> None:
    plan = ScenarioPlan.from_params(
        scenario="same-model", workers=3, weights=[2, 1, 1], router_mode="round-robin"
    )
    assert plan.resolved().workers == 3
    # Attached plans launch nothing, so their launch counts are not checked.
    ScenarioPlan.from_params(
        scenario="same-model",
        frontend_url="http://h:1",
        system_urls=["http://h:2", "http://h:3", "http://h:4"],
        weights=[1, 1],
    )


@pytest.mark.parametrize(
    "options, message",
    [
        ({"new_weights": [5]}, "new_weights: 2 workers but 1 weights"),
        ({"sweep_weights": [[1, 1], [1, 2, 3]]}, "sweep_weights: 2 workers but 3 weights"),
        ({"sweep_weights": []}, "sweep_weights needs at least one weight vector"),
        ({"new_weights": [1, 0]}, "new_weights: weights must be positive numbers"),
        ({"bursts": 0}, "bursts must be a whole number of at least 1"),
        ({"sweep_requests": "60"}, "sweep_requests must be a whole number of at least 1"),
    ],
)
def test_the_explore_parameters_are_checked_with_the_plan(options: dict, message: str) -> None:  # type: ignore[type-arg]
    plan = ScenarioPlan.from_params(scenario="same-model")
    good = {"new_weights": [3, 1], "bursts": 4, "sweep_weights": [[1, 1], [9, 1]], "sweep_requests": 60}
    check_explore(plan, **good)
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        check_explore(plan, **{**good, **options})


def test_live_weights_need_a_stack_that_declares_them() -> None:
    plan = ScenarioPlan.from_params(scenario="same-model", stack="dynamo")
    # The stacks that have them are read from the registry (`live_weights`), not named in code.
    with pytest.raises(
        ConfigError, match=r"live weight changes need a stack with live weights \(embedded\), not 'dynamo'"
    ):
        check_explore(plan, new_weights=[3, 1], bursts=1, sweep_weights=[[1, 1]], sweep_requests=10)


def test_outside_ipython_the_render_hook_is_the_message() -> None:
    error = DeploymentStoppedError()
    assert error._render_traceback_() == [
        "\x1b[0;31mDeploymentStoppedError\x1b[0m: this deployment was stopped and its servers are gone; "
        "start a new one (in a notebook: run the Start cell again)"
    ]
    assert isinstance(error, EmbedlabError)


def test_launch_progress_in_a_log_is_one_line_per_step() -> None:
    log = io.StringIO()  # not a terminal, not a notebook: lines only, no bar
    progress = LaunchProgress(file=log, notebook=False)
    for event in [
        LaunchStep("starting", "frontend", "/run/frontend.log"),
        LaunchStep("starting", "worker 0", "/run/worker-0.log"),
        LaunchStep("waiting", "frontend", "its /health answered 200", 0.1),
        LaunchStep("poll", "frontend", "its /health answered 200", 0.4),
        LaunchStep("ready", "frontend", "its /health answered 200", 0.5),
        LaunchStep("waiting", "worker 0", "the frontend listed it", 0.6),
        LaunchStep("failed", "", "worker 0 exited with code 1 before the frontend listed it"),
    ]:
        progress(event)
    assert log.getvalue().splitlines() == [
        "started frontend, worker 0; waiting until each is ready",
        "frontend ready after 0.5 s (its /health answered 200)",
        "worker 0 FAILED: worker 0 exited with code 1 before the frontend listed it; everything started was stopped",
    ]


def test_check_kernel_says_how_to_install_a_missing_or_foreign_kernel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ConfigError, match="'embedlab-no-such' is not installed: run `make install`"):
        check_kernel("embedlab-no-such")
    spec = tmp_path / "kernels" / "embedlab-elsewhere" / "kernel.json"
    spec.parent.mkdir(parents=True)
    spec.write_text(
        json.dumps(
            {
                "argv": ["/other/.venv/bin/python", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "x",
                "language": "python",
            }
        )
    )
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    with pytest.raises(ConfigError, match="runs /other/.venv/bin/python, not this Python"):
        check_kernel("embedlab-elsewhere")


def test_the_kernel_make_install_writes_loads_the_cell_guard_and_one_without_it_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    where = Path(kernelspec.install(name="embedlab-guarded"))
    argv = json.loads((where / "kernel.json").read_text())["argv"]
    assert argv[0] == sys.executable and argv[-2:] == ["--ext", "embedlab.notebook.cellguard"]
    check_kernel("embedlab-guarded")
    # As `ipykernel install` writes it: this Python, but no extension.
    unguarded = tmp_path / "kernels" / "embedlab-unguarded" / "kernel.json"
    unguarded.parent.mkdir(parents=True)
    unguarded.write_text(json.dumps({"argv": argv[:-2], "display_name": "x", "language": "python"}))
    with pytest.raises(ConfigError, match=r"does not load the cell guard .*embedlab.notebook.kernelspec"):
        check_kernel("embedlab-unguarded")


def test_launch_progress_counts_processes_launched_after_a_first_wait() -> None:
    # The dynamo stack on etcd starts etcd and waits for it before it starts the rest.
    log = io.StringIO()
    progress = LaunchProgress(file=log, notebook=False)
    for event in [
        LaunchStep("starting", "etcd"),
        LaunchStep("waiting", "etcd", "its /health answered 200"),
        LaunchStep("ready", "etcd", "its /health answered 200", 0.3),
        LaunchStep("starting", "frontend"),
        LaunchStep("starting", "worker 0"),
        LaunchStep("waiting", "frontend", "its /health answered 200"),
        LaunchStep("ready", "frontend", "its /health answered 200", 0.6),
        LaunchStep("waiting", "worker 0", "listed"),
        LaunchStep("ready", "worker 0", "listed", 0.8),
        LaunchStep("done", seconds=1.2),
    ]:
        progress(event)
    assert log.getvalue().splitlines() == [
        "started etcd; waiting until each is ready",
        "etcd ready after 0.3 s (its /health answered 200)",
        "started frontend, worker 0; waiting until each is ready",
        "frontend ready after 0.6 s (its /health answered 200)",
        "worker 0 ready after 0.8 s (listed)",
        "all 3 processes ready in 1.2 s",
    ]


def test_replicas_alone_override_the_scenarios_workers_default() -> None:
    # The mixed notebook's cell: workers = None (the scenario's 2 each) unless replicas says.
    plan = ScenarioPlan.from_params(scenario="mixed", workers=None, replicas=[3, 1])
    assert [w.model for w in plan.deployment_spec().workers] == ["model-a"] * 3 + ["model-b"]
    plan = ScenarioPlan.from_params(scenario="mixed", workers=None, replicas=[])
    assert [w.model for w in plan.deployment_spec().workers] == ["model-a", "model-a", "model-b", "model-b"]
    plan = ScenarioPlan.from_params(scenario="mixed", workers=3)
    assert len(plan.deployment_spec().workers) == 6


def test_workers_and_replicas_both_set_say_which_to_clear() -> None:
    with pytest.raises(ConfigError) as err:
        ScenarioPlan.from_params(scenario="mixed", workers=2, replicas=[3, 1])
    assert str(err.value) == (
        "workers = 2 and replicas = [3, 1] both count the workers: set workers = None to use replicas, "
        "or replicas = [] to use workers (command line: leave out one of the two)"
    )


def test_the_mixed_notebook_takes_replicas_as_its_comment_says(tmp_path: Path) -> None:
    """The parameters cell with only `replicas` changed is a plan, as papermill would hand it (a matrix too)."""
    from embedlab.reports.matrix import load_matrix

    (tmp_path / "m.toml").write_text(
        'notebooks = ["mixed_traffic"]\n[[params]]\nname = "r"\nreplicas = [3, 1]\n'
    )
    (job,) = load_matrix(tmp_path / "m.toml").jobs
    assert job.params == {"replicas": [3, 1]}
    (tmp_path / "both.toml").write_text(
        'notebooks = ["mixed_traffic"]\n[[params]]\nworkers = 2\nreplicas = [3, 1]\n'
    )
    with pytest.raises(ConfigError, match=r"set workers = None to use replicas"):
        load_matrix(tmp_path / "both.toml")


@pytest.mark.parametrize(
    "urls, message",
    [
        (
            ["http://h:2", "http://h:2"],
            r"a system URL is given more than once \(http://h:2 as workers 0 and 1\)",
        ),
        (["http://h:2", "http://h:3", "http://h:2/"], r"\(http://h:2 as workers 0 and 2\)"),
    ],
)
def test_a_worker_given_twice_is_refused_by_attach_and_by_the_plan(urls: list[str], message: str) -> None:
    from embedlab import attach

    with pytest.raises(ConfigError, match=message):
        attach("http://h:1", urls)
    with pytest.raises(ConfigError, match=message):
        ScenarioPlan.from_params(scenario="same-model", frontend_url="http://h:1", system_urls=urls)


def test_worker_models_must_name_one_model_per_system_url() -> None:
    with pytest.raises(
        ConfigError,
        match=r"^2 system URLs but 3 worker models: give one per worker, in the order of the system URLs \(--worker-models a,a for 2 workers",
    ):
        ScenarioPlan.from_params(
            scenario="mixed", frontend_url="http://h:1", system_urls=["http://h:2", "http://h:3"],
            worker_models=["a", "a", "b"],
        )  # fmt: skip
