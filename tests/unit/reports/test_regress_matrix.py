"""Regress's pure parts: matrices, slugs, history, junit."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from embedlab import ConfigError, load_matrix
from embedlab.jsonio import write_json
from embedlab.reports.index import compare_runs
from embedlab.reports.matrix import notebook_parameters, params_slug
from embedlab.reports.run_report import write_junit

from ...conftest import REPO

NOTEBOOKS = REPO / "notebooks"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "m.toml"
    path.write_text(text)
    return path


def test_defaults_then_set_values_then_the_notebook_table(tmp_path: Path) -> None:
    matrix = load_matrix(
        write(
            tmp_path,
            """
notebooks = ["same_model_load_balance", "multi_model_dispatch"]
[defaults]
seed = 1
requests = 5
[[params]]
stack = "dynamo"
requests = 7
[params.multi_model_dispatch]
requests = 9
models = ["x", "y"]
""",
        ),
        notebook_dir=NOTEBOOKS,
    )
    same, multi = matrix.jobs
    assert same.params == {"seed": 1, "requests": 7, "stack": "dynamo"}
    assert multi.params == {"seed": 1, "requests": 9, "stack": "dynamo", "models": ["x", "y"]}
    assert same.name == "same_model_load_balance--seed=1-requests=7-dynamo"
    assert multi.name == "multi_model_dispatch--seed=1-requests=9-dynamo-x+y"


def test_a_set_may_pick_its_own_notebooks(tmp_path: Path) -> None:
    matrix = load_matrix(
        write(
            tmp_path,
            """
notebooks = ["same_model_load_balance", "multi_model_dispatch"]
[[params]]
name = "all"
[[params]]
name = "only-multi"
notebooks = ["multi_model_dispatch"]
""",
        ),
        notebook_dir=NOTEBOOKS,
    )
    assert [j.name for j in matrix.jobs] == [
        "same_model_load_balance--all",
        "multi_model_dispatch--all",
        "multi_model_dispatch--only-multi",
    ]


def test_a_scenario_entry_runs_the_generic_notebook_with_its_name(tmp_path: Path) -> None:
    matrix = load_matrix(
        write(
            tmp_path,
            """
scenarios = ["drain"]
[[params]]
name = "embedded-hash"
requests = 12
[params.drain]
victim = 0
""",
        ),
        notebook_dir=NOTEBOOKS,
    )
    (job,) = matrix.jobs
    assert job.name == "drain--embedded-hash" and job.notebook == (NOTEBOOKS / "scenario.ipynb").resolve()
    # The scenario's knobs reach the generic notebook in its `params` mapping.
    assert job.params == {"scenario": "drain", "params": {"requests": 12, "victim": 0}}


@pytest.mark.parametrize(
    "text, message",
    [
        (
            'notebooks = ["multi_model_dispatch"]\n[[params]]\nkill_after = 3\n',
            "takes no parameter ['kill_after']",
        ),
        ('notebooks = ["multi_model_dispatch"]\n[[params]]\nrun_dir = "/x"\n', "set by the runner"),
        (
            'notebooks = ["multi_model_dispatch"]\n[[params]]\nname = "a"\n[[params]]\nname = "a"\n',
            "overwrite each other",
        ),
        ('notebook = ["multi_model_dispatch"]\n', "unknown top-level keys ['notebook']"),
        ("[[params]]\nstack = 'embedded'\n", "nothing to run"),
        (
            'scenarios = ["no-such-scenario"]\n',
            "unknown scenario 'no-such-scenario'; registered: same-model, multi-model, mixed, failover, failover-no-retries, drain",
        ),
        (
            'notebooks = ["multi_model_dispatch"]\n[[params]]\nstack = "nonsense"\n',
            "unknown stack 'nonsense'",
        ),
        (
            'scenarios = ["partition"]\n[[params]]\nstack = "embedded"\n',
            "partition needs etcd discovery, which the embedded stack does not have (stacks with it: dynamo)",
        ),
        (
            'notebooks = ["same_model_load_balance"]\n[[params]]\nworkers = 0\n',
            "workers must be a whole number of at least 1",
        ),
    ],
)
def test_matrices_that_cannot_work_fail_before_anything_runs(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_matrix(write(tmp_path, text), notebook_dir=NOTEBOOKS)
    assert message in str(caught.value)


def test_the_default_matrix_loads_from_the_package() -> None:
    names = [job.name for job in load_matrix(notebook_dir=NOTEBOOKS).jobs]
    assert len(names) == len(set(names)), "two runs would overwrite each other"
    # Every scenario runs on both stacks with the hash engine, and on real models.
    for notebook in ("same_model_load_balance", "multi_model_dispatch", "failover"):
        for stack in ("embedded", "dynamo"):
            assert f"{notebook}--{stack}-hash" in names, names
    for notebook in ("same_model_load_balance", "multi_model_dispatch"):
        assert f"{notebook}--embedded-transformers-tiny" in names, names
    jobs = {job.name: job.params for job in load_matrix(notebook_dir=NOTEBOOKS).jobs}
    for stack in ("embedded", "dynamo"):
        for notebook in ("same_model_load_balance", "multi_model_dispatch", "failover"):
            assert jobs[f"{notebook}--{stack}-hash"]["engine"] == "hash"
    assert jobs["same_model_load_balance--embedded-transformers-tiny"]["models"] == ["tiny-bert"]
    assert jobs["same_model_load_balance--embedded-transformers-tiny"]["workers"] == 2
    assert jobs["multi_model_dispatch--embedded-transformers-tiny"]["models"] == ["tiny-bert", "tiny-qwen3"]
    # drain runs through the generic notebook, on the embedded stack.
    assert jobs["drain--embedded-hash"] == {"scenario": "drain", "stack": "embedded", "engine": "hash"}


def test_the_default_matrix_runs_failover_as_specified() -> None:
    """200 requests at concurrency 8, one worker SIGKILLed after 50 responses."""
    jobs = {job.name: job for job in load_matrix(notebook_dir=NOTEBOOKS).jobs}
    defaults = notebook_parameters(NOTEBOOKS / "failover.ipynb")
    for stack in ("embedded", "dynamo"):
        params = {**defaults, **{k: repr(v) for k, v in jobs[f"failover--{stack}-hash"].params.items()}}
        assert (params["requests"], params["concurrency"], params["kill_after"]) == ("200", "8", "50"), params


def test_notebook_parameters_reads_the_tagged_cell() -> None:
    params = notebook_parameters(NOTEBOOKS / "same_model_load_balance.ipynb")
    assert params["stack"] == '"embedded"' and params["system_urls"] == "[]"


def test_params_slug_is_file_safe_and_bounded() -> None:
    slug = params_slug(
        {"stack": "embedded", "models": ["org/model a", "b"], "frontend_url": "http://h:1", "run_dir": "/tmp"}
    )
    assert slug == "embedded-org_model_a+b-attached"
    long = params_slug({"models": [f"model-{i}" for i in range(40)]})
    assert len(long) == 80 and long != params_slug({"models": [f"model-{i}" for i in range(41)]})


def scenario(name: str, status: str, p: float | None, p50: float, p99: float) -> dict:  # type: ignore[type-arg]
    notebook, slug = name.split("--")
    return {
        "name": name,
        "notebook": notebook,
        "slug": slug,
        "verdict": status,
        "seconds": 1.0,
        "summary": f"it {status}",
        "reasons": ["model-b: traffic leaked onto worker 0 (+3)"] if status == "failed" else [],
        "params": {"stack": "embedded"},
        "report_html": f"{name}.html",
        "figures": {"p_values": {"m": p}, "latency_ms": {"p50": p50, "p99": p99}},
    }


def test_history_shows_flips_p_values_latency_and_new_and_removed_runs() -> None:
    before = {
        "scenarios": [scenario("a--x", "passed", 0.5, 10, 20), scenario("gone--x", "passed", None, 1, 2)]
    }
    now = {
        "scenarios": [scenario("a--x", "failed", 0.0001, 10.5, 40), scenario("new--x", "passed", None, 1, 2)]
    }
    rows = {r["name"]: r for r in compare_runs(before, now)}
    assert rows["a--x"]["change"] == "flipped"
    assert (rows["a--x"]["old_status"], rows["a--x"]["new_status"]) == ("passed", "failed")
    assert rows["a--x"]["p_values"] == {"m": (0.5, 0.0001)}
    assert rows["a--x"]["p50_change"] == pytest.approx(0.05) and rows["a--x"]["p99_change"] == pytest.approx(
        1.0
    )
    assert rows["new--x"]["change"] == "new" and rows["gone--x"]["change"] == "removed"


def test_junit_has_one_case_per_run_and_a_failure_for_a_failed_verdict(tmp_path: Path) -> None:
    results = {
        "wall_seconds": 3.0,
        "scenarios": [scenario("a--x", "passed", 0.5, 1, 2), scenario("b--y", "failed", 0.1, 1, 2)],
    }
    root = ET.parse(write_junit(tmp_path / "junit.xml", results)).getroot()
    suite = root.find("testsuite")
    assert suite is not None and (suite.get("tests"), suite.get("failures"), suite.get("errors")) == (
        "2",
        "1",
        "0",
    )
    passed, failed = suite.findall("testcase")
    assert passed.find("failure") is None
    failure = failed.find("failure")
    assert (
        failure is not None
        and "traffic leaked" in (failure.text or "")
        and "report: b--y.html" in (failure.text or "")
    )


def test_write_json_turns_nan_into_null(tmp_path: Path) -> None:
    path = write_json(
        tmp_path / "r.json", {"p50": float("nan"), "nested": [float("inf"), 1.5], "path": tmp_path}
    )
    assert json.loads(path.read_text()) == {"p50": None, "nested": [None, 1.5], "path": str(tmp_path)}


def test_a_failed_run_raises_notebook_run_error_with_its_report(tmp_path: Path) -> None:
    from embedlab import NotebookRunError
    from embedlab.reports.regress import Job, Outcome, RegressRun

    def outcome(name: str, status: str) -> Outcome:
        job = Job(notebook=NOTEBOOKS / "multi_model_dispatch.ipynb", slug=name, params={})
        return Outcome(
            job=job,
            verdict=status,
            seconds=1.0,
            notebook_out=tmp_path / f"{job.name}.ipynb",
            html=tmp_path / f"{job.name}.html",
            result_json=tmp_path / "r.json",
            logs=tmp_path,
            result={
                "scenario": "multi-model",
                "stack": "attached",
                "verdict": status,
                "reasons": ["it leaked"],
            },
        )

    def run(*outcomes: Outcome) -> RegressRun:
        return RegressRun(
            run_id="r",
            run_dir=tmp_path,
            outcomes=list(outcomes),
            wall_seconds=1.0,
            index_html=tmp_path / "index.html",
            results_json=tmp_path / "results.json",
            junit_xml=tmp_path / "junit.xml",
        )

    run(outcome("good", "passed")).raise_for_failures()
    with pytest.raises(NotebookRunError) as caught:
        run(outcome("good", "passed"), outcome("bad", "failed")).raise_for_failures()
    assert caught.value.report == tmp_path / "multi_model_dispatch--bad.html"
    assert (
        "1 of 2 notebook runs failed; first: multi_model_dispatch--bad: multi-model on attached: FAILED (it leaked)"
        in str(caught.value)
    )
