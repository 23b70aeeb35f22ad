"""`embedlab regress` stopped halfway keeps what it finished: SIGKILL, Ctrl-C and SIGTERM, and
two runs into one outputs folder at once.

The notebooks are tiny ones written here: `quick` saves a result and ends; `hold` starts
a real embedded deployment and waits until it is stopped, so a run is always stopped while
its third notebook holds servers.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from ..proctools import descendants_of, kill_all, processes_under, wait_gone
from .conftest import BIN, index_path, run_regress

DEADLINE_S = 240.0
META = {
    "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
    "language_info": {"name": "python"},
}
QUICK = """\
import json
from pathlib import Path

Path(result_json).parent.mkdir(parents=True, exist_ok=True)
Path(result_json).write_text(json.dumps({
    "scenario": "quick", "stack": "none", "verdict": "passed",
    "key_figures": {"latency_ms": {"p50": 1.0, "p99": 2.0}},
}))
"""
HOLD = """\
from embedlab import Deployment, DeploymentSpec

dep = Deployment(DeploymentSpec.multi_model(["model-a"]), run_dir=run_dir)
dep.start()
print("deployment " + "up", flush=True)
"""
WAIT = """\
import threading

try:
    threading.Event().wait()
finally:
    dep.stop()
"""
# quick--a, quick--b, hold--c (stopped there), quick--d
HALTING = """\
notebooks = ["quick.ipynb"]
[[params]]
name = "a"
[[params]]
name = "b"
[[params]]
name = "c"
notebooks = ["hold.ipynb"]
[[params]]
name = "d"
"""
COMPLETING = 'notebooks = ["quick.ipynb"]\n[[params]]\nname = "a"\n[[params]]\nname = "b"\n'


@pytest.fixture
def matrices(tmp_path: Path) -> dict[str, Path]:
    params = new_code_cell("run_dir = ''\nresult_json = ''", metadata={"tags": ["parameters"]})
    nbformat.write(
        new_notebook(cells=[params, new_code_cell(QUICK)], metadata=META), tmp_path / "quick.ipynb"
    )
    nbformat.write(
        new_notebook(cells=[params, new_code_cell(HOLD), new_code_cell(WAIT)], metadata=META),
        tmp_path / "hold.ipynb",
    )
    (tmp_path / "halting.toml").write_text(HALTING)
    (tmp_path / "completing.toml").write_text(COMPLETING)
    return {"halting": tmp_path / "halting.toml", "completing": tmp_path / "completing.toml"}


def wait_for(what: str, check: Callable[[], bool], *, proc: subprocess.Popen[str] | None = None) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        assert proc is None or proc.poll() is None, f"regress exited ({proc.returncode}) before {what}"
        assert time.monotonic() < deadline, f"not within {DEADLINE_S:.0f} s: {what}"
        time.sleep(0.1)


def results_of(run: Path) -> dict[str, Any]:
    try:
        return json.loads((run / "results.json").read_text())
    except (OSError, ValueError):
        return {}


def holding(run: Path) -> bool:
    """The third notebook's deployment is up: its cell printed so (papermill saved the output)."""
    try:
        nb = nbformat.read(run / "hold--c.ipynb", as_version=4)
    except (OSError, ValueError):
        return False
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    return any("deployment up" in o.get("text", "") for o in outputs)


def start_halting_run(matrix: Path, out: Path) -> tuple[subprocess.Popen[str], Path, list[int]]:
    """A real regress, in a session of its own (as a shell runs a job), stopped in hold--c.

    Returns it, its run folder and every process it and its notebook started."""
    proc = subprocess.Popen(
        [str(BIN / "embedlab"), "regress", "--matrix", str(matrix), "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()
    found = re.search(r"-> (\S+)$", first.strip())
    assert found, f"regress said {first!r}; stderr: {proc.stderr.read() if proc.poll() is not None else ''}"
    run = Path(found.group(1)).resolve()
    wait_for("two notebooks finished", lambda: len(results_of(run).get("scenarios", [])) == 2, proc=proc)
    wait_for("the third notebook's deployment is up", lambda: holding(run), proc=proc)
    return proc, run, descendants_of(proc.pid) + processes_under(run / "logs")


class _Hrefs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found += [v for k, v in attrs if k == "href" and v and not v.startswith("#")]


def links(page: Path) -> list[str]:
    """The page's links to files, read by an HTML parser (the page must parse)."""
    parser = _Hrefs()
    parser.feed(page.read_text())
    parser.close()
    return parser.found


def kernel_files(out: Path, pid: int) -> list[Path]:
    return [*out.rglob("kernel-ipc*"), *Path(tempfile.gettempdir()).glob(f"embedlab-kernel-{pid}-*")]


def assert_kept_what_finished(run: Path, *, interrupted_by: str | None) -> None:
    results = results_of(run)
    assert (results["status"], results["interrupted_by"], results["passed"]) == (
        "interrupted",
        interrupted_by,
        False,
    )
    assert [s["name"] for s in results["scenarios"]] == ["quick--a", "quick--b"]
    assert [j["name"] for j in results["unfinished"]] == ["hold--c", "quick--d"] and results["planned"] == 4
    page = run / "index.html"
    text = page.read_text()
    assert "INTERRUPTED &middot; 2 OF 4 FINISHED" in text and "not run: hold--c, quick--d" in text
    hrefs = links(page)
    for name in ("quick--a", "quick--b"):
        assert (run / f"{name}.html").is_file() and f"{name}.html" in hrefs
    for href in hrefs:
        assert (run / href).exists(), f"index.html links to a missing {href}"
    suite = ET.parse(run / "junit.xml").getroot().find("testsuite")
    assert suite is not None and (suite.get("tests"), suite.get("skipped")) == ("4", "2")
    listing = (run.parent / "index.html").read_text()
    assert re.search(
        rf'{run.name}</a></td><td>[^<]*</td><td><span class="verdict interrupted">INTERRUPTED', listing
    )


def test_a_sigkilled_regress_keeps_what_it_finished_and_history_skips_it(
    matrices: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    first = run_regress("--matrix", matrices["completing"], "--out", out, timeout=300)
    assert first.returncode == 0, first.stdout + first.stderr[-3000:]
    complete = index_path(first).parent.resolve()

    proc, run, started = start_halting_run(matrices["halting"], out)
    try:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)
        # The watchdog (among `started`) marks the run interrupted once it sees the harness
        # gone, then exits; the kernel exits as its parent goes, and its own watchdog stops its servers.
        assert wait_gone(started, timeout=DEADLINE_S) == [], "the kernel, its servers or a watchdog survived"
        assert_kept_what_finished(run, interrupted_by=None)
        assert "its process ended before it finished" in (run / "index.html").read_text()
        assert kernel_files(out, proc.pid) == []
    finally:
        kill_all(wait_gone(started, timeout=60))  # a watchdog still at work is let finish

    after = run_regress("--matrix", matrices["completing"], "--out", out, timeout=300)
    assert after.returncode == 0, after.stdout + after.stderr[-3000:]
    latest = index_path(after).parent
    results = results_of(latest)
    assert (results["previous_run"], results["not_compared"]) == (complete.name, [run.name])
    page = (latest / "index.html").read_text()
    assert f"Changes since run <code>{complete.name}</code>" in page and run.name in page
    listing = (out / "index.html").read_text()
    assert [m for m in re.findall(r'href="([^"]+)/index.html"', listing)] == [
        latest.name,
        run.name,
        complete.name,
    ]


@pytest.mark.parametrize(("sig", "code", "to_group"), [("SIGINT", 130, True), ("SIGTERM", 143, False)])
def test_ctrl_c_or_sigterm_stops_the_notebook_and_keeps_what_finished(
    matrices: dict[str, Path], tmp_path: Path, sig: str, code: int, to_group: bool
) -> None:
    out = tmp_path / "out"
    proc, run, started = start_halting_run(matrices["halting"], out)
    try:
        # Ctrl-C in a terminal signals the whole foreground group; a supervisor's SIGTERM the process.
        (os.killpg if to_group else os.kill)(proc.pid, getattr(signal, sig))
        stdout, stderr = proc.communicate(timeout=DEADLINE_S)
        assert proc.returncode == code, stdout + stderr[-3000:]
        assert "[3/4] hold--c: interrupted" in stdout and "[4/4]" not in stdout
        assert f"interrupted by {sig} after 2 of 4 notebook runs; what finished: " in stdout
        assert_kept_what_finished(run, interrupted_by=sig)
        # The cell was interrupted, not its kernel killed: its `finally` stopped the deployment.
        nb = nbformat.read(run / "hold--c.ipynb", as_version=4)
        errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
        assert [o.ename for o in errors] == ["KeyboardInterrupt"]
        assert wait_gone(started, timeout=60) == []
        assert kernel_files(out, proc.pid) == []
    finally:
        kill_all(wait_gone(started, timeout=60))  # a watchdog still at work is let finish


def test_two_runs_into_one_folder_at_once_both_keep_their_runs_and_one_index(
    matrices: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    argv = [str(BIN / "embedlab"), "regress", "--matrix", str(matrices["completing"]), "--out", str(out)]
    procs = [
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)
    ]
    done = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e[-2000:] for _, e in done]
    runs = {Path(stdout.strip().splitlines()[-1]).parent.name for stdout, _ in done}
    assert len(runs) == 2 and {p.name for p in out.iterdir() if p.is_dir()} == runs
    for name in runs:
        results = results_of(out / name)
        assert results["status"] == "complete" and len(results["scenarios"]) == 2
        for href in links(out / name / "index.html"):
            assert (out / name / href).exists()
    listing = out / "index.html"
    assert sorted(h.split("/")[0] for h in links(listing)) == sorted(runs)
    assert listing.read_text().count('<span class="verdict passed">PASSED</span>') == 2
    assert [p.name for p in out.iterdir() if p.name.endswith(".tmp")] == []
