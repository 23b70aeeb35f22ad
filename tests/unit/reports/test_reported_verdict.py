"""`reported`: figures shown, nothing asserted. It is never shown as a pass, and never hidden."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from embedlab.reports.index import compare_runs, write_index
from embedlab.reports.matrix import shown_path
from embedlab.reports.regress import _verdict
from embedlab.reports.run_report import VERDICT_COLOURS, write_junit
from embedlab.scenarios.builtin.resilience import FailoverFigures
from embedlab.scenarios.result import ScenarioResult
from embedlab.verdicts import Verdict

from ...conftest import REPO

FAILOVER = ScenarioResult(
    scenario="failover",
    stack="dynamo",
    params={},
    workers=[],
    bursts=[],
    verdict=Verdict.REPORTED,
    reasons=["2 of 200 requests failed", "out of dispatch 9600 ms after the kill"],
    figures=FailoverFigures(
        victim=1,
        kill_after_responses=50,
        requests=200,
        killed_at_s=0.4,
        excluded_after_s=9.6,
        lease_ttl_s=None,
        failed_requests=2,
        codes={"503": 2},
        responses_after_kill=150,
        errors_window_s=9.0,
        asserted=False,
        victim_counter_before=0.0,
        served_by={},
    ),  # fmt: skip
)
FAILOVER_RESULT = FAILOVER.to_json()


def run_entry(name: str, verdict: str, result: dict | None = None) -> dict:  # type: ignore[type-arg]
    notebook, slug = name.split("--")
    result = result or {"verdict": verdict, "reasons": []}
    return {
        "name": name,
        "notebook": notebook,
        "slug": slug,
        "verdict": verdict,
        "seconds": 1.0,
        "summary": f"{notebook} on dynamo: {verdict.upper()}",
        "reasons": result.get("reasons", []),
        "params": {"stack": "dynamo"},
        "report_html": f"{name}.html",
        "figures": result.get("key_figures") or {},
        "result": result,
    }


def test_only_a_pass_is_green_and_a_report_is_ok_but_not_a_pass() -> None:
    assert Verdict.REPORTED.ok and Verdict.PASSED.ok
    assert not any(Verdict(v).ok for v in ("failed", "inconclusive", "error"))
    assert Verdict.worst([Verdict.PASSED, Verdict.REPORTED]) == Verdict.REPORTED
    assert Verdict.worst([Verdict.REPORTED, Verdict.FAILED]) == Verdict.FAILED
    assert Verdict.worst([Verdict.FAILED, Verdict.INCONCLUSIVE]) == Verdict.INCONCLUSIVE
    greens = [v for v, colour in VERDICT_COLOURS.items() if colour == VERDICT_COLOURS[Verdict.PASSED]]
    assert greens == [Verdict.PASSED] and set(VERDICT_COLOURS) == set(Verdict)


def test_a_notebook_that_reported_gets_the_reported_status() -> None:
    assert _verdict(None, FAILOVER_RESULT) == (Verdict.REPORTED, None)
    boom = "AssertionError: boom (cell 5)"
    assert _verdict(boom, FAILOVER_RESULT) == (Verdict.ERROR, boom)
    assert _verdict(None, {"verdict": "failed"}) == (Verdict.FAILED, None)
    assert _verdict(boom, {"verdict": "inconclusive"}) == (Verdict.INCONCLUSIVE, boom)
    assert _verdict(None, {"verdict": "passed"}) == (Verdict.PASSED, None)


@pytest.mark.parametrize(
    ("result", "said"),
    [
        (None, "the notebook wrote no result"),
        ({"verdict": "error"}, "the notebook's result has verdict 'error'"),
        ({"verdict": "ok"}, "the notebook's result has verdict 'ok'"),
        ({}, "the notebook's result has verdict None"),
    ],
)
def test_missing_evidence_is_an_error_never_green(result: dict[str, str] | None, said: str) -> None:
    verdict, error = _verdict(None, result)
    assert verdict == Verdict.ERROR and error is not None and error.startswith(said), error


def test_lost_requests_and_time_out_of_dispatch_are_key_figures() -> None:
    own = FAILOVER.key_figures()["own"]
    assert own == {"lost": "2 of 200 (HTTP 503)", "out of dispatch": "9600 ms after the kill"}
    assert FAILOVER_RESULT["key_figures"]["own"] == own, "the same in results.json"


def test_junit_counts_a_report_as_a_passing_case_with_its_figures(tmp_path: Path) -> None:
    results = {"scenarios": [run_entry("failover--dynamo-hash", "reported", FAILOVER_RESULT)]}
    suite = ET.parse(write_junit(tmp_path / "junit.xml", results)).getroot().find("testsuite")
    assert suite is not None and (suite.get("failures"), suite.get("errors")) == ("0", "0")
    (case,) = suite.findall("testcase")
    assert case.find("failure") is None and case.find("error") is None
    out = case.findtext("system-out") or ""
    assert "verdict: reported" in out and "reported, not asserted" in out
    assert "2 of 200 requests failed" in out and "out of dispatch 9600 ms after the kill" in out


def test_index_shows_a_report_in_a_neutral_badge_with_the_lost_requests(tmp_path: Path) -> None:
    results = {
        "run_id": "r2",
        "passed": True,
        "counts": {"passed": 1, "reported": 1},
        "matrix": "embedlab/reports/matrices/default.toml",
        "scenarios": [
            run_entry("same_model_load_balance--dynamo-hash", "passed"),
            run_entry("failover--dynamo-hash", "reported", FAILOVER_RESULT),
        ],
    }
    previous = {"run_id": "r1", "scenarios": [run_entry("failover--dynamo-hash", "passed")]}
    html = write_index(tmp_path / "index.html", results, previous=previous).read_text()
    assert "ALL PASSED" not in html and "1 REPORTED, NOT ASSERTED" in html
    row = re.search(r"<tr><td><a href=\"#failover--dynamo-hash\">.*?</tr>", html, re.S)
    assert row is not None
    assert '<span class="verdict reported">REPORTED</span>' in row.group(0)
    assert "lost: 2 of 200 (HTTP 503)" in row.group(
        0
    ) and "out of dispatch: 9600 ms after the kill" in row.group(0)
    assert f".verdict.reported {{ background: {VERDICT_COLOURS[Verdict.REPORTED]}; }}" in html
    # The history diff names the change from a pass to a report as a flip.
    (flip,) = [r for r in compare_runs(previous, results) if r["name"] == "failover--dynamo-hash"]
    assert (flip["change"], flip["old_status"], flip["new_status"]) == ("flipped", "passed", "reported")
    assert (
        '<span class="verdict passed">PASSED</span> &rarr; <span class="verdict reported">REPORTED</span>'
        in html
    )
    assert "<code>embedlab/reports/matrices/default.toml</code>" in html


def test_the_matrix_path_is_shown_relative_to_the_repository_when_inside_it(tmp_path: Path) -> None:
    assert (
        shown_path(REPO / "embedlab" / "reports" / "matrices" / "default.toml")
        == "embedlab/reports/matrices/default.toml"
    )
    outside = tmp_path / "m.toml"
    assert shown_path(outside) == str(outside.resolve())


def test_help_opens_with_a_sentence_for_users() -> None:
    from embedlab.cli.entry import build_parser

    text = build_parser().format_help()
    first = text.split("\n\n")[1]
    assert first.startswith("Prove how a frontend routes /v1/embeddings traffic"), first
    assert "parse, call one library function" not in text
    assert "exit codes: 0 passed (or figures reported, not asserted)" in text


def test_ci_runs_only_the_readme_commands() -> None:
    lines = [ln.strip() for ln in (REPO / ".ci" / "run").read_text().splitlines()]
    commands = [ln for ln in lines if ln and not ln.startswith("#") and not ln.startswith(("set ", "cd "))]
    assert commands == ["make test", "make run"]
