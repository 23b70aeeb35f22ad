"""Each notebook, executed for real by papermill with small parameters."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from papermill.exceptions import PapermillExecutionError

from .conftest import (
    BIN,
    NOTEBOOKS,
    REPO,
    assert_torn_down,
    code_cells,
    execute,
    processes_under,
    read,
    tagged,
)


def images(cell: dict) -> list[str]:  # type: ignore[type-arg]
    return [o["data"]["image/png"] for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]


def errors(nb: dict) -> list[str]:  # type: ignore[type-arg]
    return [
        f"{o['ename']}: {o['evalue']}"
        for c in code_cells(nb)
        for o in c.get("outputs", [])
        if o["output_type"] == "error"
    ]


WIDGET = "application/vnd.jupyter.widget-view+json"


def launch_output(nb: dict, marker: str) -> str:  # type: ignore[type-arg]
    """The text a saved notebook keeps of the launch in the cell whose source holds `marker`.

    A tqdm widget saved in a notebook keeps only its first frame ("0%"): the launch must
    leave text instead.
    """
    (cell,) = [c for c in code_cells(nb) if marker in "".join(c["source"])]
    assert not [o for o in cell["outputs"] if WIDGET in o.get("data", {})], (
        "a frozen progress widget was saved"
    )
    return "".join(
        "".join(o.get("data", {}).get("text/plain", "")) + "".join(o.get("text", "")) for o in cell["outputs"]
    )


@pytest.mark.parametrize("cwd", ["repo-root", "notebooks"])
def test_multi_model_by_hand_with_the_papermill_command(cwd: str, tmp_path: Path, run_dir: Path) -> None:
    """`papermill notebooks/multi_model_dispatch.ipynb out.ipynb -p engine hash`, as the README says."""
    where = REPO if cwd == "repo-root" else NOTEBOOKS
    notebook = "notebooks/multi_model_dispatch.ipynb" if cwd == "repo-root" else "multi_model_dispatch.ipynb"
    out = tmp_path / "out.ipynb"
    proc = subprocess.run(
        [str(BIN / "papermill"), notebook, str(out), "-p", "engine", "hash", "-p", "run_dir", str(run_dir)],
        cwd=where,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    nb = read(out)
    assert errors(nb) == []
    printed = "".join(o.get("text", "") for c in code_cells(nb) for o in c["outputs"])
    assert "multi-model on embedded (hash): PASSED" in printed
    launch = launch_output(nb, "run_scenario(plan")
    assert "frontend ready after" in launch and "all 3 processes ready in" in launch, launch
    assert_torn_down(run_dir)


def test_mixed_notebook_takes_replicas_as_its_cell_says(tmp_path: Path, run_dir: Path) -> None:
    """Issue 28: `replicas = [3, 1]` alone (workers left at None) launches 3 + 1 workers, and
    each of model-a's replicas expects a third of its requests: 83 per model, the burst that
    catches an idle replica and a 0.9/0.1 skew of three with 99 % (issue 30), shown as 27.667."""
    result_json = tmp_path / "result.json"
    nb = execute(
        NOTEBOOKS / "mixed_traffic.ipynb",
        tmp_path / "out.ipynb",
        replicas=[3, 1],
        run_dir=str(run_dir),
        result_json=str(result_json),
    )
    assert errors(nb) == []
    result = json.loads(result_json.read_text())
    assert [w["model"] for w in result["workers"]] == ["model-a"] * 3 + ["model-b"], result["workers"]
    (cell,) = [c for c in code_cells(nb) if "".join(c["source"]) == "table(result)"]
    (shown,) = [o["data"]["text/html"] for o in cell["outputs"] if "text/html" in o.get("data", {})]
    assert shown.count(">27.667<") == 6 and ">27.700<" not in shown
    assert [len(images(c)) for c in tagged(nb, "report-figure")] == [1, 1]
    last = "".join(code_cells(nb)[-1]["outputs"][-1]["text"]).strip()
    assert last == "mixed on embedded (hash): PASSED", last
    assert_torn_down(run_dir)


def test_multi_model_notebook_on_tiny_transformers(tmp_path: Path, run_dir: Path) -> None:
    # No model_paths: the tiny models come from the same cache `make run` uses, built on first use.
    result_json = tmp_path / "result.json"
    execute(
        NOTEBOOKS / "multi_model_dispatch.ipynb",
        tmp_path / "out.ipynb",
        engine="transformers",
        models=["tiny-bert", "tiny-qwen3"],
        requests=6,
        run_dir=str(run_dir),
        result_json=str(result_json),
    )
    result = json.loads(result_json.read_text())
    assert result["verdict"] == "passed", result["reasons"]
    assert [b["deltas"] for b in result["bursts"]] == [[6, 0], [0, 6]]
    assert_torn_down(run_dir)


EXPLORE_SMALL = dict(requests=10, bursts=2, sweep_weights=[[1, 1], [4, 1]], sweep_requests=30)


def test_explore_notebook_sweeps_and_stops_its_deployment(tmp_path: Path, run_dir: Path) -> None:
    # As `embedlab regress` runs it: stop_at_end stops the deployment in its own cell. On the
    # real all-MiniLM-L6-v2, whose similarities through the deployment are the documented ones.
    result_json = tmp_path / "sweep.json"
    nb = execute(
        NOTEBOOKS / "explore_routing.ipynb",
        tmp_path / "out.ipynb",
        run_dir=str(run_dir),
        result_json=str(result_json),
        stop_at_end=True,
        engine="transformers",
        models=["all-MiniLM-L6-v2"],
        **EXPLORE_SMALL,
    )
    assert errors(nb) == []
    (similarity,) = [c for c in code_cells(nb) if "similarity_table(dep" in "".join(c["source"])]
    shown = "".join("".join(o.get("data", {}).get("text/plain", "")) for o in similarity["outputs"])
    rows = {
        line.split(".")[0].split("  ")[-1].strip(): re.findall(r"\d\.\d+", line)
        for line in shown.splitlines()[1:]
    }
    weather, stadium = rows["The weather is lovely today"], rows["He drove to the stadium"]
    assert [round(float(v), 3) for v in (weather[1], stadium[0], stadium[1])] == [0.666, 0.105, 0.141], shown
    sweep = json.loads(result_json.read_text())
    assert sweep["verdict"] == "passed", sweep["reasons"]
    assert [p["weights"] for p in sweep["points"]] == [[1, 1], [4, 1]]
    assert [p["expected_shares"] for p in sweep["points"]] == [[0.5, 0.5], [0.8, 0.2]]
    assert all(sum(p["deltas"]) == 30 for p in sweep["points"])
    # Convergence figure and sweep figure, both drawn.
    assert [len(images(c)) for c in tagged(nb, "report-figure")] == [1, 1]
    launch = launch_output(nb, "start_deployment(plan)")
    assert "worker 1 ready after" in launch and "all 3 processes ready in" in launch, launch
    assert_torn_down(run_dir)


def test_explore_notebook_left_running_by_run_all_stops_with_its_kernel(
    tmp_path: Path, run_dir: Path
) -> None:
    # stop_at_end left False, as in JupyterLab: the deployment outlives the last cell, and
    # only the kernel's exit at the end of the papermill run takes it down.
    nb = execute(
        NOTEBOOKS / "explore_routing.ipynb", tmp_path / "out.ipynb", run_dir=str(run_dir), **EXPLORE_SMALL
    )
    assert errors(nb) == []
    assert (run_dir / "worker-1.log").is_file(), "the deployment had started"
    assert_torn_down(run_dir)
    assert processes_under(run_dir) == []


@pytest.mark.parametrize(
    "notebook, bad, message",
    [
        (
            "explore_routing",
            {"engine": "nonsense"},
            "ConfigError: unknown engine 'nonsense'; choose from hash, transformers, vllm",
        ),
        ("explore_routing", {"new_weights": [5]}, "ConfigError: new_weights: 2 workers but 1 weights ([5])"),
        (
            "same_model_load_balance",
            {"workers": 0},
            "ConfigError: workers must be a whole number of at least 1, got 0",
        ),
        (
            "multi_model_dispatch",
            {"stack": "nonsense"},
            "ConfigError: unknown stack 'nonsense'; choose from embedded, dynamo",
        ),
    ],
)
def test_a_bad_parameter_is_one_line_at_the_plan_cell_before_anything_launches(
    notebook: str,
    bad: dict,
    message: str,
    tmp_path: Path,
    run_dir: Path,  # type: ignore[type-arg]
) -> None:
    out = tmp_path / "out.ipynb"
    with pytest.raises(PapermillExecutionError) as err:
        execute(NOTEBOOKS / f"{notebook}.ipynb", out, run_dir=str(run_dir), **bad)
    plan_cell = code_cells(read(out))[2]  # after the parameters cell and papermill's injected one
    assert "ScenarioPlan.from_params(" in "".join(plan_cell["source"])
    (error,) = [o for o in plan_cell["outputs"] if o["output_type"] == "error"]
    # The message alone, no frames: IPython shows what embedlab's errors render.
    (line,) = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in error["traceback"]]
    assert line.startswith(message), line
    assert err.value.ename == "ConfigError"
    assert not run_dir.exists() or not any(run_dir.iterdir()), "nothing launched"


@pytest.mark.parametrize("stack", ["embedded", "dynamo"])
def test_failover_notebook(stack: str, tmp_path: Path, run_dir: Path) -> None:
    result_json = tmp_path / "result.json"
    nb = execute(
        NOTEBOOKS / "failover.ipynb",
        tmp_path / "out.ipynb",
        stack=stack,
        requests=120,
        kill_after=30,
        run_dir=str(run_dir),
        result_json=str(result_json),
    )
    assert errors(nb) == []
    result = json.loads(result_json.read_text())
    assert result["figures"]["killed_at_s"] is not None
    if stack == "embedded":
        assert result["verdict"] == "passed", result["reasons"]
        assert result["figures"]["failed_requests"] == 0 and result["figures"]["asserted"] is True
    else:
        # Dynamo decides its failover; the notebook shows the figures and asserts nothing.
        assert result["verdict"] == "reported" and result["figures"]["asserted"] is False, result["reasons"]
    last = "".join(code_cells(nb)[-1]["outputs"][-1]["text"]).strip()
    assert last.startswith(f"failover on {stack} (hash): {result['verdict'].upper()}"), last
    assert any(images(c) for c in tagged(nb, "report-figure")), "the timeline figure is missing"
    assert_torn_down(run_dir)


def test_cluster_faults_notebook_runs_the_etcd_restart_and_saves_its_figures(
    tmp_path: Path, run_dir: Path
) -> None:
    result_json = tmp_path / "result.json"
    nb = execute(
        NOTEBOOKS / "cluster_faults.ipynb",
        tmp_path / "out.ipynb",
        scenario="etcd-restart",
        hosts=1,
        run_dir=str(run_dir),
        result_json=str(result_json),
    )
    assert errors(nb) == []
    result = json.loads(result_json.read_text())
    assert result["verdict"] == "passed" and result["figures"]["recovered"] is True, result["reasons"]
    assert result["figures"]["served_during_fault"] > 0 and result["figures"]["samples"]
    assert sum(1 for c in tagged(nb, "report-figure") if images(c)) == 2
    assert_torn_down(run_dir)
