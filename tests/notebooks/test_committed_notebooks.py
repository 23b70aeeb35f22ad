"""Committed notebooks carry no outputs, and stay thin: parameters, library calls, a verdict."""

from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path

import pytest

from .conftest import NOTEBOOKS, REPO, code_cells, tagged

SCENARIO_NOTEBOOKS = ["same_model_load_balance", "multi_model_dispatch"]
COMMON_PARAMETERS = {"stack", "engine", "models", "model_paths", "requests", "concurrency", "seed", "run_dir", "result_json"}


def committed_notebooks() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "*.ipynb"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [REPO / line for line in listed.splitlines() if line]


def test_the_three_notebooks_are_committed() -> None:
    names = {p.stem for p in committed_notebooks() if p.parent == NOTEBOOKS}
    assert {"same_model_load_balance", "multi_model_dispatch", "explore_routing"} <= names, names


@pytest.mark.parametrize("path", committed_notebooks(), ids=lambda p: p.name)
def test_committed_notebook_has_no_outputs_and_the_python3_kernel(path: Path) -> None:
    nb = json.loads(path.read_text())
    for index, cell in enumerate(code_cells(nb)):
        assert cell.get("outputs") == [], f"{path.name}: code cell {index} carries outputs"
        assert cell.get("execution_count") is None, f"{path.name}: code cell {index} has an execution count"
    assert nb["metadata"]["kernelspec"]["name"] == "python3", "papermill needs kernelspec python3"
    assert nb["metadata"]["language_info"]["name"] == "python", "papermill needs language_info"
    assert "papermill" not in nb["metadata"], f"{path.name} is an executed papermill output, not a source notebook"
    # nbformat 4.5 requires cell ids; without them every papermill run warns and rewrites them.
    missing = [i for i, cell in enumerate(nb["cells"]) if not cell.get("id")]
    assert not missing, f"{path.name}: cells {missing} have no id (nbformat.validator.normalize adds them)"


@pytest.mark.parametrize("path", committed_notebooks(), ids=lambda p: p.name)
def test_notebook_is_thin(path: Path) -> None:
    nb = json.loads(path.read_text())
    cells = code_cells(nb)
    first = cells[0]
    assert "parameters" in first.get("metadata", {}).get("tags", []), "the first code cell must be tagged `parameters`"
    for assignment in ast.parse("".join(first["source"])).body:
        # Plain values only: a literal papermill can replace, never a computation.
        assert isinstance(assignment, ast.Assign), ast.dump(assignment)
        ast.literal_eval(assignment.value)
    for cell in cells:
        source = "\n".join(line for line in "".join(cell["source"]).splitlines() if not line.lstrip().startswith("%"))
        defined = [n for n in ast.walk(ast.parse(source)) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda))]
        assert not defined, f"{path.name} defines {[getattr(n, 'name', 'lambda') for n in defined]}: logic belongs in the package"
    assert "".join(cells[-1]["source"]).startswith("assert "), "the last cell asserts the verdict"
    assert len(tagged(nb, "report-figure")) >= 1, "index.html shows the cells tagged report-figure"


@pytest.mark.parametrize("name", SCENARIO_NOTEBOOKS)
def test_scenario_notebook_parameters(name: str) -> None:
    nb = json.loads((NOTEBOOKS / f"{name}.ipynb").read_text())
    source = "".join(code_cells(nb)[0]["source"])
    names = {t.id for node in ast.parse(source).body for t in node.targets}  # type: ignore[attr-defined]
    assert COMMON_PARAMETERS | {"frontend_url", "system_urls"} <= names, names
    if name == "same_model_load_balance":
        assert {"workers", "weights"} <= names
    code = "".join("".join(c["source"]) for c in code_cells(nb))
    for call in ("ScenarioPlan.from_params(", "run_scenario(plan)", "result.table", "result.plot()", "result.plot_latency()", "save_json(result_json)"):
        assert call in code, f"{name} lacks {call}"
