"""Committed notebooks carry no outputs, and stay thin: parameters, library calls, a verdict."""

from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from embedlab.defaults import KERNEL_NAME

from .conftest import NOTEBOOKS, REPO, code_cells, tagged

SCENARIO_NOTEBOOKS = {
    "same_model_load_balance": "same-model",
    "multi_model_dispatch": "multi-model",
    "prefix_affinity": "prefix-affinity",
    "failover": "failover",
    "mixed_traffic": "mixed",
    "scenario": None,
    "cluster_faults": None,
}
# The generic notebooks take any scenario's knobs in `params`; the cluster faults take no seed.
CLUSTER_PARAMETERS = {
    "stack",
    "engine",
    "models",
    "model_paths",
    "params",
    "run_dir",
    "result_json",
    "discovery",
    "hosts",
}
COMMON_PARAMETERS = {"stack", "engine", "models", "model_paths", "seed", "run_dir", "result_json"}


def committed_notebooks() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "*.ipynb"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    return [REPO / line for line in listed.splitlines() if line]


def test_every_notebook_is_committed() -> None:
    names = {p.stem for p in committed_notebooks() if p.parent == NOTEBOOKS}
    assert {*SCENARIO_NOTEBOOKS, "explore_routing"} <= names, names


@pytest.mark.parametrize("path", committed_notebooks(), ids=lambda p: p.name)
def test_committed_notebook_has_no_outputs_and_the_project_kernel(path: Path) -> None:
    nb = json.loads(path.read_text())
    for index, cell in enumerate(code_cells(nb)):
        assert cell.get("outputs") == [], f"{path.name}: code cell {index} carries outputs"
        assert cell.get("execution_count") is None, f"{path.name}: code cell {index} has an execution count"
    # The project's kernel (`make install` registers it), so any JupyterLab runs them on embedlab's Python.
    assert nb["metadata"]["kernelspec"]["name"] == KERNEL_NAME, (
        f"{path.name} must name the kernel {KERNEL_NAME!r}"
    )
    assert nb["metadata"]["language_info"]["name"] == "python", "papermill needs language_info"
    assert "papermill" not in nb["metadata"], (
        f"{path.name} is an executed papermill output, not a source notebook"
    )
    # nbformat 4.5 requires cell ids; without them every papermill run warns and rewrites them.
    missing = [i for i, cell in enumerate(nb["cells"]) if not cell.get("id")]
    assert not missing, f"{path.name}: cells {missing} have no id (nbformat.validator.normalize adds them)"


@pytest.fixture(scope="module")
def kernel_reports() -> dict[str, Any]:
    """What the project's kernel says of itself, as JupyterLab reads it when a notebook opens."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import start_new_kernel

    spec = KernelSpecManager().get_kernel_spec(KERNEL_NAME)
    manager, client = start_new_kernel(kernel_name=KERNEL_NAME)
    try:
        info = client.kernel_info(reply=True, timeout=60)["content"]
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    kernelspec = {"display_name": spec.display_name, "language": spec.language, "name": KERNEL_NAME}
    return {"kernelspec": kernelspec, "language_info": info["language_info"]}


@pytest.mark.parametrize("path", committed_notebooks(), ids=lambda p: p.name)
def test_opening_and_saving_a_notebook_changes_nothing(path: Path, kernel_reports: dict[str, Any]) -> None:
    """JupyterLab writes the kernel's kernelspec and language_info into a notebook it opens:
    any difference marks it modified (the tab's dot) and a save rewrites the tracked file."""
    import nbformat

    text = path.read_text()
    nb = nbformat.reads(text, as_version=4)
    for key, reported in kernel_reports.items():
        assert nb.metadata[key] == reported, (
            f"{path.name}: metadata.{key} {nb.metadata[key]} != the kernel's {reported}"
        )
    # And saved as JupyterLab saves (nbformat's writer): byte for byte what is committed.
    assert nbformat.writes(nb) + "\n" == text, f"{path.name} is not in the form a save writes"


@pytest.mark.parametrize("path", committed_notebooks(), ids=lambda p: p.name)
def test_notebook_is_thin(path: Path) -> None:
    nb = json.loads(path.read_text())
    cells = code_cells(nb)
    first = cells[0]
    assert "parameters" in first.get("metadata", {}).get("tags", []), (
        "the first code cell must be tagged `parameters`"
    )
    for assignment in ast.parse("".join(first["source"])).body:
        # Plain values only: a literal papermill can replace, never a computation.
        assert isinstance(assignment, ast.Assign), ast.dump(assignment)
        ast.literal_eval(assignment.value)
    for cell in cells:
        source = "\n".join(
            line for line in "".join(cell["source"]).splitlines() if not line.lstrip().startswith("%")
        )
        defined = [
            n
            for n in ast.walk(ast.parse(source))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda))
        ]
        assert not defined, (
            f"{path.name} defines {[getattr(n, 'name', 'lambda') for n in defined]}: logic belongs in the package"
        )
    # The verdict is asserted last; an explore notebook stops its deployment after it, when papermill runs it.
    sources = ["".join(c["source"]) for c in cells]
    if sources[-1] == "stop_deployment(when=stop_at_end)":
        sources.pop()
    assert sources[-1].startswith("verdict("), "the last cell asserts the verdict: verdict(result)"
    assert len(tagged(nb, "report-figure")) >= 1, "index.html shows the cells tagged report-figure"


@pytest.mark.parametrize("name", [n for n, scenario in SCENARIO_NOTEBOOKS.items() if scenario])
def test_a_scenario_notebooks_parameters_are_written_from_its_params_class(name: str) -> None:
    """The parameters cell and the plan call are generated (embedlab.notebook.parameters): a knob
    added to its params class, a default or a help text changed there, shows here until
    `python -m embedlab.notebook.parameters notebooks/*.ipynb` rewrites them."""
    from embedlab.notebook.parameters import generate

    path = NOTEBOOKS / f"{name}.ipynb"
    assert generate(path) == path.read_text(), (
        f"{name}'s parameters differ from its params class: python -m embedlab.notebook.parameters {path}"
    )


@pytest.mark.parametrize("name", SCENARIO_NOTEBOOKS)
def test_scenario_notebook_parameters(name: str) -> None:
    """Each scenario notebook takes the common parameters, hands every one of them to its plan,
    and names a registered scenario in its metadata (the matrix checks its parameters by it)."""
    from embedlab import ScenarioPlan
    from embedlab.scenarios.registry import get_scenario

    nb = json.loads((NOTEBOOKS / f"{name}.ipynb").read_text())
    source = "".join(code_cells(nb)[0]["source"])
    names = {t.id for node in ast.parse(source).body for t in node.targets}  # type: ignore[attr-defined]
    assert (CLUSTER_PARAMETERS if name == "cluster_faults" else COMMON_PARAMETERS) <= names, names
    scenario = SCENARIO_NOTEBOOKS[name]
    assert nb["metadata"].get("embedlab", {}).get("scenario") == scenario
    if scenario is None:
        assert {"scenario", "params"} <= names, "the generic notebook takes the scenario's name and knobs"
    else:
        from embedlab.scenarios.params import knobs

        defaults = {k.name: k.default for k in knobs(get_scenario(scenario).params)}
        assert set(defaults) <= names, f"{name} lacks its knobs {set(defaults) - names}"
        if not get_scenario(scenario).launches:
            assert {"frontend_url", "system_urls"} <= names, (
                "a scenario that can attach takes the attach parameters"
            )
    if name == "same_model_load_balance":
        assert {"workers", "weights"} <= names
    plan_fields = set(ScenarioPlan.__dataclass_fields__)
    if scenario is not None:
        plan_fields |= set(defaults)
    assert names - {"result_json"} <= plan_fields, (
        f"{name} takes parameters no plan has: {names - plan_fields}"
    )
    code = "".join("".join(c["source"]) for c in code_cells(nb))
    handed = code[code.index("ScenarioPlan.from_params(") :]
    handed = handed[: handed.index(")")]
    missing = sorted(n for n in names - {"result_json"} if f"{n}={n}" not in handed)
    assert not missing, f"{name} never hands {missing} to its plan: a silent no-op"
    for call in (
        "run_scenario(plan, progress=True)",
        "table(result)",
        "plot(result)",
        "plot_latency(result)",
        "save_json(result_json)",
    ):
        assert call in code, f"{name} lacks {call}"
