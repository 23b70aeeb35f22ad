"""`embedlab regress` for real: every artifact, failures that keep their report, history, timeouts."""

from __future__ import annotations

import base64
import json
import re
import xml.etree.ElementTree as ET
from html import escape, unescape
from pathlib import Path

import nbformat
import pytest

from embedlab.reports.regress import PLAIN
from nbformat.v4 import new_code_cell, new_notebook

from embedlab import Deployment, DeploymentSpec
from embedlab.notebook.views.inline import png_size
from embedlab.reports.run_report import export_html

from .conftest import index_path, run_regress

EXPECTED_RUNS = {
    "same_model_load_balance--embedded-hash": "PASSED",
    "multi_model_dispatch--embedded-hash": "PASSED",
    "multi_model_dispatch--dynamo-hash": "PASSED",
    "failover--dynamo-hash": "REPORTED",
}


def test_regress_writes_every_artifact(regress_run) -> None:  # type: ignore[no-untyped-def]
    proc, index = regress_run
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    run = index.parent
    # Progress: a line as each notebook starts and ends.
    for name, verdict in EXPECTED_RUNS.items():
        assert re.search(rf"\[\d/4\] {re.escape(name)}: {verdict} in [\d.]+ s", proc.stdout), proc.stdout

    for name, verdict in EXPECTED_RUNS.items():
        nb = nbformat.read(run / f"{name}.ipynb", as_version=4)
        assert nb.metadata.papermill.parameters["result_json"].endswith(f"{name}.json")
        html = (run / f"{name}.html").read_text()
        assert (
            f'<span class="verdict {verdict.lower()}">{verdict}</span>' in html
            and "data:image/png;base64," in html
        )
        assert "ScenarioPlan.from_params" not in html, "code is hidden unless --show-code"
        assert not re.search(r"<script[^>]+src=\"https?:", html), (
            "the report must not load anything from the network"
        )

    results = json.loads((run / "results.json").read_text())
    assert results["passed"] is True and (results["counts"]["passed"], results["counts"]["reported"]) == (
        3,
        1,
    )
    by_name = {s["name"]: s for s in results["scenarios"]}
    # The command as typed, and no -k filter: every job of the matrix ran.
    assert results["command"].startswith("embedlab regress --matrix ") and results["command"].endswith(
        " --timeout 300"
    )
    assert (results["only"], results["matrix_jobs"]) == ([], 4)
    for name, scenario in by_name.items():
        notebook, slug = name.split("--")
        html = (run / f"{name}.html").read_text()
        assert f"<title>{notebook} — {slug}</title>" in html and f"<h1>{notebook} — {slug}</h1>" in html
        ran = re.search(
            r'<div class="meta">ran (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC) in ([\d.]+) s by <code>(.*?)</code>',
            html,
        )
        assert ran and abs(float(ran.group(2)) - scenario["seconds"]) <= 0.051, html[
            :3000
        ]  # the same run time
        assert ran.group(3) == escape(results["command"])
        # Every parameter in effect: the notebook's defaults, the matrix's values, what the run resolved.
        listed = re.search(r'<div class="params">parameters in effect: (.*?)</div>', html)
        assert listed, html[:3000]
        shown = unescape(listed.group(1))
        assert "concurrency=4" in shown and "busy=False" in shown and "run_dir=" not in shown, shown
        if notebook == "same_model_load_balance" and slug == "embedded-hash":
            assert re.search(r"requests=\d+ \(resolved by the run\)", shown) and "workers=3" in shown, shown
        # Every figure says what it shows, in the kernel's own words, and is drawn at 2x.
        assert "No description has been provided" not in html
        figures = [dict(re.findall(r'(\w+)="([^"]*)"', tag)) for tag in re.findall(r"<img\b[^>]*>", html)]
        assert len(figures) == 2, f"{name}: the deltas and the latency"
        for image in figures:
            alt = unescape(image["alt"])
            assert len(alt) > 30 and ("x: " in alt or "y: " in alt), alt
            png = base64.b64decode(image["src"].removeprefix("data:image/png;base64,"))
            assert png_size(png)[0] // 2 == int(image["width"]), (name, image["width"], "drawn at 2x")
        assert '<div class="embedlab-table">' in html and "overflow-x: auto" in html
    assert set(by_name) == set(EXPECTED_RUNS)
    same = by_name["same_model_load_balance--embedded-hash"]["figures"]
    assert same["verdict"] == "passed"
    # Three workers weighted 2:1:1, from the matrix's table for this notebook.
    assert [w["weight"] for w in by_name["same_model_load_balance--embedded-hash"]["result"]["workers"]] == [
        2,
        1,
        1,
    ]
    # The burst sized from the pool: an idle replica and a 0.9/0.1 skew caught with 99 % over 2:1:1.
    sent = by_name["same_model_load_balance--embedded-hash"]["result"]["params"]["requests"]
    assert sent > 40 and sum(same["deltas"]["embed-model"]) == sent
    assert all(d > 0 for d in same["deltas"]["embed-model"])
    assert len(same["deltas"]["embed-model"]) == 3
    assert 0.001 <= same["p_values"]["embed-model"] <= 1
    assert same["latency_ms"]["p50"] > 0 and same["latency_ms"]["p99"] >= same["latency_ms"]["p50"]
    dynamo = by_name["multi_model_dispatch--dynamo-hash"]
    assert dynamo["figures"]["deltas"] == {"model-a": [8, 0], "model-b": [0, 8]}
    assert dynamo["result"]["stack"] == "dynamo"
    failover = by_name["failover--dynamo-hash"]
    assert (failover["verdict"], failover["result"]["verdict"]) == ("reported", "reported")
    lost = failover["result"]["figures"]["failed_requests"]
    own = failover["figures"]["own"]
    assert own["lost"].startswith(f"{lost} of ") and own["out of dispatch"].endswith("ms after the kill"), own
    for scenario in results["scenarios"]:
        for key in ("report_html", "notebook_out", "result_json", "logs"):
            assert (run / scenario[key]).exists(), (scenario["name"], key)

    suite = ET.parse(run / "junit.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("tests") == "4" and suite.get("failures") == "0"
    assert {f"{c.get('classname')}:{c.get('name')}" for c in suite.iter("testcase")} == {
        f"embedlab.regress.{n.split('--')[0]}:{n.split('--')[1]}" for n in EXPECTED_RUNS
    }
    (reported,) = [c for c in suite.iter("testcase") if c.get("classname") == "embedlab.regress.failover"]
    assert f"{lost} of 120 requests failed" in (reported.findtext("system-out") or "")

    page = index.read_text()
    assert f"command <code>{escape(results['command'])}</code>" in page and "filtered" not in page
    assert (
        "No description has been provided" not in page
        and 'alt="same-model on embedded (hash): PASSED. ' in page
    )
    assert (
        "ALL PASSED" not in page
        and "NO FAILURES &middot; 1 REPORTED, NOT ASSERTED" in page
        and "No earlier run" in page
    )
    assert f"{lost} failed request" in page, "a lost request shows among the key figures"
    assert page.count('src="data:image/png;base64,') == 8, "two figures per run, inline"
    for href in re.findall(r'href="([^"#]+)"', page):
        assert (run / href).exists(), f"index.html links to a missing {href}"


def test_show_code_keeps_the_code_in_the_report(regress_run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _, index = regress_run
    executed = index.parent / "multi_model_dispatch--embedded-hash.ipynb"
    html = export_html(executed, tmp_path / "with-code.html", show_code=True).read_text()
    assert "ScenarioPlan" in html and "run_scenario" in html


def test_regress_fails_for_real_keeps_the_report_and_shows_the_flip(regress_run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _, first_index = regress_run
    out = first_index.parent.parent
    matrix = tmp_path / "attach.toml"
    with Deployment(
        DeploymentSpec.multi_model(["model-a", "model-b"]), run_dir=tmp_path / "deployment"
    ) as dep:
        # Attached to a running embedded deployment, with its models listed in the wrong
        # order: an expectation the deployment cannot meet. Named like the passing run of
        # the shared regress so that history compares the two.
        matrix.write_text(
            'notebooks = ["multi_model_dispatch"]\n[[params]]\nname = "embedded-hash"\n'
            f'frontend_url = "{dep.frontend_url}"\nsystem_urls = {json.dumps(dep.system_urls)}\n'
            'models = ["model-b", "model-a"]\nrequests = 5\n'
        )
        bad = run_regress("--matrix", matrix, "--out", out)
    assert bad.returncode == 1, bad.stdout + bad.stderr[-3000:]

    run = index_path(bad).parent
    report = run / "multi_model_dispatch--embedded-hash.html"
    # The output names the failed scenario and where its report is.
    assert "FAILED multi_model_dispatch--embedded-hash" in bad.stderr
    assert f"report: {report}" in bad.stderr
    assert "[1/1] multi_model_dispatch--embedded-hash: FAILED" in bad.stdout

    nb = nbformat.read(run / "multi_model_dispatch--embedded-hash.ipynb", as_version=4)
    raised = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert [o.ename for o in raised] == ["CheckFailedError"]  # verdict(result), an AssertionError too
    assert "traffic leaked onto worker 1" in raised[0].evalue
    # The verdict cell shows its line once: as the error, not printed above it as well.
    verdict_cell = [c for c in nb.cells if c.cell_type == "code"][-1]
    assert [o.output_type for o in verdict_cell.outputs] == ["error"], verdict_cell.outputs
    assert raised[0].traceback == [f"\x1b[0;31mCheckFailedError\x1b[0m: {raised[0].evalue}"]
    html = report.read_text()
    assert "FAILED" in html and "traffic leaked onto worker 1" in html and "data:image/png;base64," in html

    results = json.loads((run / "results.json").read_text())
    (scenario,) = results["scenarios"]
    assert results["passed"] is False and scenario["verdict"] == "failed"
    assert scenario["figures"]["deltas"] == {"model-b": [0, 5], "model-a": [5, 0]}
    failure = ET.parse(run / "junit.xml").getroot().find("testsuite/testcase/failure")
    assert failure is not None and "traffic leaked" in (failure.text or "")

    page = (run / "index.html").read_text()
    first_run = first_index.parent.name
    assert results["previous_run"] == first_run
    assert f"Changes since run <code>{first_run}</code>" in page
    assert "1 verdict flip;" in page
    assert re.search(r'verdict passed">PASSED</span> &rarr; <span class="verdict failed">FAILED', page), (
        "the flip is shown"
    )


def _plain_notebook(path: Path, code: str, *, parameters: str = "run_dir = ''\nresult_json = ''") -> None:
    """A notebook of `parameters` (the runner's) and one cell of `code`, on the plain python3 kernel."""
    notebook = new_notebook(
        cells=[new_code_cell(parameters, metadata={"tags": ["parameters"]}), new_code_cell(code)],
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
            "language_info": {"name": "python"},
        },
    )
    nbformat.write(notebook, path)


def test_a_hung_cell_is_cut_by_the_timeout_and_reported(tmp_path: Path) -> None:
    _plain_notebook(tmp_path / "hang.ipynb", "import threading\nthreading.Event().wait()")
    (tmp_path / "m.toml").write_text('notebooks = ["hang.ipynb"]\n[[params]]\nname = "forever"\n')
    proc = run_regress(
        "-k",
        "forever",
        "--matrix",
        tmp_path / "m.toml",
        "--out",
        tmp_path / "out",
        "--timeout",
        "3",
        timeout=120,
    )
    assert proc.returncode == 1
    run = index_path(proc).parent
    results = json.loads((run / "results.json").read_text())
    (scenario,) = results["scenarios"]
    # The filter chose what ran, and the index says so.
    assert results["only"] == ["forever"] and results["command"].startswith(
        "embedlab regress -k forever --matrix "
    )
    assert (
        "only the 1 job of the matrix's 1 whose name contains <code>forever</code>"
        in (run / "index.html").read_text()
    )
    assert scenario["verdict"] == "error" and "timed out" in scenario["error"].lower(), scenario["error"]
    assert (run / "hang--forever.ipynb").is_file() and (run / "hang--forever.html").is_file()
    assert "ERROR" in (run / "index.html").read_text()


def test_a_notebook_that_writes_no_result_is_an_error_in_the_index_the_junit_and_the_exit_code(
    tmp_path: Path,
) -> None:
    """Missing evidence is never green (issue 44): the notebook ran to its end, wrote nothing."""
    _plain_notebook(tmp_path / "silent.ipynb", "print('ran, asserted nothing')")
    (tmp_path / "m.toml").write_text('notebooks = ["silent.ipynb"]\n[[params]]\nname = "quiet"\n')
    proc = run_regress("--matrix", tmp_path / "m.toml", "--out", tmp_path / "out", timeout=120)
    assert proc.returncode == 1, proc.stdout[-2000:]
    run = index_path(proc).parent
    (scenario,) = json.loads((run / "results.json").read_text())["scenarios"]
    assert scenario["verdict"] == "error" and "wrote no result" in scenario["error"], scenario
    assert "ERROR" in (run / "index.html").read_text()
    suite = (run / "junit.xml").read_text()
    assert "<error" in suite and "wrote no result" in suite, suite


def test_a_plain_notebook_without_a_result_is_reported_as_plain_not_as_a_verdict(tmp_path: Path) -> None:
    """A notebook that takes no result_json asserts nothing: it runs, and is said to be plain."""
    _plain_notebook(tmp_path / "plain.ipynb", "print('a figure, say')", parameters="run_dir = ''")
    (tmp_path / "m.toml").write_text('notebooks = ["plain.ipynb"]\n[[params]]\nname = "as-is"\n')
    proc = run_regress("--matrix", tmp_path / "m.toml", "--out", tmp_path / "out", timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    run = index_path(proc).parent
    (scenario,) = json.loads((run / "results.json").read_text())["scenarios"]
    assert scenario["verdict"] == "reported" and scenario["reasons"] == [PLAIN], scenario
    assert "REPORTED" in (run / "index.html").read_text() and "PASSED" not in (run / "index.html").read_text()


@pytest.mark.parametrize(
    "matrix, message",
    [
        ('notebooks = ["multi_model_dispatch"]\n[[params]]\nbogus = 1\n', "takes no parameter ['bogus']"),
        ('notebooks = ["no_such_notebook"]\n', "no_such_notebook.ipynb does not exist"),
        ('notebooks = ["multi_model_dispatch"]\n[[params]]\nresult_json = "x"\n', "set by the runner"),
        ('notebooks = ["explore_routing"]\n[[params]]\nstop_at_end = false\n', "set by the runner"),
        ("notebooks = [\n", "not valid TOML"),
    ],
)
def test_a_bad_matrix_cannot_run(matrix: str, message: str, tmp_path: Path) -> None:
    (tmp_path / "m.toml").write_text(matrix)
    proc = run_regress("--matrix", tmp_path / "m.toml", "--out", tmp_path / "out", timeout=60)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert not (tmp_path / "out").exists(), "nothing is written for a matrix that cannot run"


def test_regress_stops_an_explore_notebook_in_its_own_cell(tmp_path: Path) -> None:
    """An explore notebook keeps its deployment up for people; a regress run sets stop_at_end."""
    from ..proctools import processes_under

    (tmp_path / "m.toml").write_text(
        'notebooks = ["explore_routing"]\n[[params]]\nname = "small"\nrequests = 10\nbursts = 1\n'
        "sweep_weights = [[1, 1], [3, 1]]\nsweep_requests = 20\n"
    )
    proc = run_regress("--matrix", tmp_path / "m.toml", "--out", tmp_path / "out", timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    run = index_path(proc).parent
    nb = nbformat.read(run / "explore_routing--small.ipynb", as_version=4)
    assert nb.metadata.papermill.parameters["stop_at_end"] is True
    (stop,) = [
        c
        for c in nb.cells
        if c.cell_type == "code" and c.source.startswith("stop_deployment(when=stop_at_end)")
    ]
    assert stop.get("execution_count") is not None and not [
        o for o in stop.outputs if o.output_type == "error"
    ]
    assert processes_under(run / "logs") == []
