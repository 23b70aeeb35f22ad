"""A run from a folder of stray modules: no process embedlab starts imports them.

`python -m` puts the current folder first on `sys.path`; a `json.py` there would be imported
by every worker in place of the standard library's. The harness here is the `embedlab`
console script, as a user runs it (its own path starts with its bin folder, not the cwd).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from embedlab.defaults import PLUGINS_ENV, SAFE_PATH_ENV
from embedlab.stacks.dynamo import dynamo_installed

from ..commands import python_c
from ..proctools import processes_under

REPO = Path(__file__).resolve().parents[2]
STRAYS = ("json", "attr", "http")
PLUGIN = REPO / "tests" / "plugins" / "constant_engine.py"


def stray_folder(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    for name in STRAYS:
        (work / f"{name}.py").write_text(f"raise RuntimeError('the stray {name}.py of the current folder')\n")
    return work


def embedlab_from(
    work: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    pythonpath = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return subprocess.run(
        [str(Path(sys.executable).parent / "embedlab"), *args],
        cwd=work,
        env={**os.environ, "PYTHONPATH": pythonpath, **(env or {})},
        capture_output=True,
        text=True,
        timeout=400,
    )


def assert_clean(proc: subprocess.CompletedProcess[str], run_dir: Path) -> None:
    logs = {p.name: p.read_text(errors="replace") for p in run_dir.glob("*.log")}
    said = proc.stdout[-2000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, said + "".join(f"\n--- {n}\n{t[-1500:]}" for n, t in logs.items())
    assert logs and not [n for n, t in logs.items() if "the stray" in t], logs
    assert processes_under(run_dir) == []


def test_an_embedded_run_with_a_plugin_file_named_relative_to_a_folder_of_strays(tmp_path: Path) -> None:
    # The plugin is named by its file, relative to where the user runs: the workers import it
    # (they serve its engine), and nothing else from that folder.
    work = stray_folder(tmp_path)
    shutil.copy(PLUGIN, work / "my_engine.py")
    run_dir = tmp_path / "run"
    proc = embedlab_from(
        work,
        *("scenario", "same-model", "--engine", "constant", "--model-path", str(work)),
        *("--models", "m", "--run-dir", str(run_dir)),
        env={"EMBEDLAB_PLUGINS": "my_engine.py"},
    )
    assert_clean(proc, run_dir)
    assert "same-model on embedded (constant): PASSED" in proc.stdout, proc.stdout[-2000:]


@pytest.mark.dynamo
def test_a_dynamo_run_from_a_folder_of_strays(tmp_path: Path) -> None:
    # Dynamo's own `python -m dynamo.frontend` and its workers run from that folder too.
    assert dynamo_installed(), "ai-dynamo is not installed: run `make dynamo`"
    work = stray_folder(tmp_path)
    run_dir = tmp_path / "run"
    proc = embedlab_from(work, "scenario", "same-model", "--stack", "dynamo", "--run-dir", str(run_dir))
    assert_clean(proc, run_dir)
    assert "same-model on dynamo (hash): PASSED" in proc.stdout, proc.stdout[-2000:]


def test_a_plugin_module_of_the_current_folder_fails_in_safe_path_mode_saying_to_name_its_file(
    tmp_path: Path,
) -> None:
    (tmp_path / "my_plugin.py").write_text("")
    code = "from embedlab.plugins import load_plugins; load_plugins(['my_plugin'])"
    proc = python_c(code, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO), SAFE_PATH_ENV: "1"})
    assert proc.returncode != 0
    assert f"name the file, {PLUGINS_ENV}={tmp_path / 'my_plugin.py'}" in proc.stderr, proc.stderr[-1000:]
