"""docs/sharding.md's CI recipes, run on this machine: three shards at once, each in a folder of its
own (a machine), their artifacts moved as GitHub Actions and GitLab move them, each recipe's merge;
and beside them an unsharded run of the same matrix, whose jobs and verdicts the merges must equal.

The matrix is small: a real same-model scenario on the embedded stack (a deployment, its ports),
first so that it runs at the same moment in its shard and in the unsharded run, and three tiny
notebooks that only save the verdict they are given (passed, reported, failed).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import nbformat
from nbformat.v4 import new_code_cell, new_notebook

from ..ci_recipes import GITHUB, GITLAB, commands, github_runs, here, recipe, step_using
from .conftest import BIN

DEADLINE_S = 400
SAYS = """\
import json
from pathlib import Path

Path(result_json).parent.mkdir(parents=True, exist_ok=True)
Path(result_json).write_text(json.dumps({
    "scenario": "says", "stack": "none", "verdict": verdict,
    "reasons": [] if verdict == "passed" else [f"told to say {verdict}"],
}))
"""
MATRIX = """\
[[params]]
name = "embedded-hash"
scenarios = ["same-model"]
stack = "embedded"
engine = "hash"
"""
VERDICTS = {"a": "passed", "b": "reported", "c": "failed"}


def write_matrix(folder: Path) -> Path:
    params = new_code_cell(
        "run_dir = ''\nresult_json = ''\nverdict = 'passed'", metadata={"tags": ["parameters"]}
    )
    meta = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}
    nbformat.write(new_notebook(cells=[params, new_code_cell(SAYS)], metadata=meta), folder / "says.ipynb")
    sets = "".join(
        f'[[params]]\nname = "{name}"\nnotebooks = ["says.ipynb"]\nverdict = "{verdict}"\n'
        for name, verdict in VERDICTS.items()
    )
    (folder / "m.toml").write_text(MATRIX + sets)
    return folder / "m.toml"


def start(command: str, cwd: Path) -> subprocess.Popen[str]:
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        ["bash", "-c", command], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def finish(proc: subprocess.Popen[str], cwd: Path) -> tuple[int, str, Path]:
    """Its exit code, its output, and the run folder it ends by printing (index.html's)."""
    try:
        out, err = proc.communicate(timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    lines = out.strip().splitlines()
    assert lines and lines[-1].endswith("index.html"), f"exit {proc.returncode}: {out[-2000:]}{err[-3000:]}"
    return proc.returncode, out + err, (cwd / lines[-1]).parent


def ran(run: Path) -> dict[str, Any]:
    """What a run holds, as a reader sees it: results.json's jobs and verdicts, the JUnit cases,
    the index's sections."""
    results = json.loads((run / "results.json").read_text())
    suite = ET.parse(run / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    page = (run / "index.html").read_text()
    return {
        "jobs": [(s["name"], s["verdict"]) for s in results["scenarios"]],
        "counts": results["counts"],
        "status": (results["status"], results["passed"], results["unfinished"]),
        "junit": sorted(
            (
                c.get("classname"),
                c.get("name"),
                [k.tag for k in c if k.tag in ("failure", "error", "skipped")],
            )
            for c in suite.iter("testcase")
        ),
        "index": re.findall(
            r'<div class="scenario" id="([^"]+)"><h3>[^<]*<span class="verdict (\w+)">', page
        ),
    }


def frontend_port(run: Path, job: str) -> int:
    found = re.search(r"--port (\d+)", (run / "logs" / job / "frontend.log").read_text())
    assert found, f"{run}/logs/{job}/frontend.log names no port"
    return int(found.group(1))


def test_three_shards_at_once_and_each_recipe_s_merge_equal_an_unsharded_run(tmp_path: Path) -> None:
    matrix = write_matrix(tmp_path)
    github = recipe(GITHUB)["jobs"]
    gitlab = recipe(GITLAB)
    (shard_step,) = commands(github_runs(github["regress"]), "--shard")
    upload = step_using(github["regress"], "actions/upload-artifact")["with"]
    download = step_using(github["merge"], "actions/download-artifact")["with"]
    count = len(github["regress"]["strategy"]["matrix"]["shard"])

    jobs = {
        i: start(
            here(shard_step, BIN, **{"matrix.shard": str(i), "strategy.job-total": str(count)})
            + f" --matrix {matrix}",
            tmp_path / f"machine-{i}",
        )
        for i in range(1, count + 1)
    }
    whole = start(f"{BIN}/embedlab regress --matrix {matrix} --out {tmp_path / 'whole'}", tmp_path)
    done = {i: finish(proc, tmp_path / f"machine-{i}") for i, proc in jobs.items()}
    whole_code, whole_out, whole_run = finish(whole, tmp_path)
    assert whole_code == 1, whole_out[-3000:]  # says--c fails, on purpose
    for i, (_, out, run) in done.items():
        assert re.search(rf"shard {i}/{count}, balanced by the job count", out), out[-3000:]
        assert run.name.endswith(f"-shard{i}of{count}")
    assert sorted(code for code, _, _ in done.values()) == [0, 0, 1]

    # GitHub: each machine's --out uploaded as regress-shard-<i>, downloaded into shards/<name>/.
    merge_dir = tmp_path / "github-merge"
    for i in range(1, count + 1):
        name = here(upload["name"], BIN, **{"matrix.shard": str(i)})
        assert fnmatch(name, download["pattern"])
        shutil.copytree(tmp_path / f"machine-{i}" / upload["path"], merge_dir / download["path"] / name)
    (github_merge,) = commands(github_runs(github["merge"]), "merge")
    # GitLab: every job's artifact paths restored into one working folder.
    gitlab_dir = tmp_path / "gitlab-merge"
    for i in range(1, count + 1):
        for path in gitlab["regress"]["artifacts"]["paths"]:
            shutil.copytree(tmp_path / f"machine-{i}" / path, gitlab_dir / path, dirs_exist_ok=True)
    (gitlab_merge,) = commands(gitlab["merge"]["script"], "merge")
    merges = [start(here(github_merge, BIN), merge_dir), start(here(gitlab_merge, BIN), gitlab_dir)]

    expected = ran(whole_run)
    assert [job for job, _ in expected["jobs"]] == [
        "same-model--embedded-hash",
        *(f"says--{name}" for name in VERDICTS),
    ]
    assert [verdict for _, verdict in expected["jobs"]] == ["passed", *VERDICTS.values()]
    for proc, folder in zip(merges, (merge_dir, gitlab_dir)):
        code, out, merged = finish(proc, folder)
        assert code == whole_code, out[-3000:]
        assert "4 notebook runs of 4 from 3 shards of 3: " in out and "INCOMPLETE" not in out, out
        assert merged.parent == folder / "outputs" and merged.name.endswith("-merged")
        assert ran(merged) == expected
        for href in re.findall(r'href="([^"#]+)"', (merged / "index.html").read_text()):
            assert (merged / href).exists(), f"{merged.name}/index.html links to a missing {href}"

    # The same-model deployments ran at once, first in its shard and in the unsharded run, on
    # ports of their own.
    (shard,) = [run for _, _, run in done.values() if (run / "logs" / "same-model--embedded-hash").is_dir()]
    assert frontend_port(shard, "same-model--embedded-hash") != frontend_port(
        whole_run, "same-model--embedded-hash"
    )
