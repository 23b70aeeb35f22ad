"""Notebook tests: real papermill runs, a shared `embedlab regress` run, and leftover-process checks."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from embedlab.defaults import KERNEL_NAME

from ..proctools import kill_all, processes_under, wait_gone

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"
BIN = Path(sys.executable).parent
CELL_TIMEOUT = 300


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """`item.failed_call`: whether the test itself failed, for fixtures that keep evidence then."""
    outcome = yield
    if call.when == "call":
        item.failed_call = outcome.get_result().failed  # type: ignore[attr-defined]


@pytest.fixture(scope="session", autouse=True)
def project_kernel() -> None:
    """The notebooks run on the `embedlab` kernel: installed (`make install`) and on this Python."""
    from embedlab.reports.regress import check_kernel

    check_kernel()


def assert_torn_down(run_dir: Path) -> None:
    """Nothing the notebook launched outlives its kernel (waits for exit, does not sleep)."""
    survivors = wait_gone(processes_under(run_dir), timeout=20)
    assert survivors == [], f"processes under {run_dir} survived the notebook: {survivors}"


@pytest.fixture
def run_dir(tmp_path: Path) -> Iterator[Path]:
    """Where the notebook's deployment writes logs; whatever is left there is killed, by PID."""
    path = tmp_path / "logs"
    yield path
    kill_all(processes_under(path))


def execute(notebook: Path, output: Path, **parameters: Any) -> dict[str, Any]:
    """Run `notebook` through papermill's Python API; returns the executed notebook (texts joined)."""
    import papermill

    papermill.execute_notebook(
        str(notebook),
        str(output),
        parameters=parameters,
        kernel_name=KERNEL_NAME,
        progress_bar=False,
        execution_timeout=CELL_TIMEOUT,
        cwd=str(output.parent),
    )
    return read(output)


def read(path: Path) -> Any:
    import nbformat

    return nbformat.read(path, as_version=4)


def code_cells(nb: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


def tagged(nb: dict[str, Any], tag: str) -> list[dict[str, Any]]:
    return [c for c in code_cells(nb) if tag in c.get("metadata", {}).get("tags", [])]


def run_regress(*args: str | Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """The real CLI, as `make run` calls it."""
    return subprocess.run(
        [str(BIN / "embedlab"), "regress", *map(str, args)], capture_output=True, text=True, timeout=timeout
    )


def index_path(proc: subprocess.CompletedProcess[str]) -> Path:
    """`embedlab regress` ends by printing the path of index.html."""
    lines = proc.stdout.strip().splitlines()
    assert lines, f"regress printed nothing; stderr:\n{proc.stderr[-3000:]}"
    return Path(lines[-1])


SMALL_MATRIX = """
notebooks = ["same_model_load_balance", "multi_model_dispatch"]

[defaults]
concurrency = 4
seed = 0

[[params]]
name = "embedded-hash"
stack = "embedded"
engine = "hash"

[params.same_model_load_balance]
workers = 3
weights = [2, 1, 1]

[params.multi_model_dispatch]
requests = 8

[[params]]
name = "dynamo-hash"
notebooks = ["multi_model_dispatch"]
stack = "dynamo"
engine = "hash"
requests = 8

# Dynamo decides its own failover: reported, not asserted.
[[params]]
name = "dynamo-hash"
notebooks = ["failover"]
stack = "dynamo"
engine = "hash"
requests = 120
kill_after = 30
"""


@pytest.fixture(scope="session")
def regress_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """One small real regress run, shared by the artifact, failure and browser tests: (process, index.html)."""
    root = tmp_path_factory.mktemp("regress")
    matrix = root / "small.toml"
    matrix.write_text(SMALL_MATRIX)
    proc = run_regress("--matrix", matrix, "--out", root / "outputs", "--timeout", CELL_TIMEOUT)
    return proc, index_path(proc)
