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

REPO = Path(__file__).resolve().parents[2]

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
    assert _verdict(None, FAILOVER_RESULT) == Verdict.REPORTED
    assert _verdict("AssertionError: boom (cell 5)", FAILOVER_RESULT) == Verdict.ERROR
    assert _verdict(None, {"verdict": "failed"}) == Verdict.FAILED
    assert _verdict(None, None) == Verdict.PASSED


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


@pytest.fixture
def stub_bin(tmp_path: Path) -> Path:
    """A PATH of stubs that record their calls: the install logic, not a real apt-get."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls"
    for name in ("apt-get", "sudo", "present-tool"):
        stub = bin_dir / name
        body = f'echo "{name} $*" >> {log}\n'
        if name == "sudo":
            body += '[ "$1" = "-n" ] && shift\n"$@"\n'
        stub.write_text("#!/bin/sh\n" + body)
        stub.chmod(0o755)
    return bin_dir


def ensure(stub_bin: Path, *pairs: str, uid: int) -> tuple[int, str, list[str]]:
    import subprocess

    (stub_bin / "id").write_text(f"#!/bin/sh\necho {uid}\n")
    (stub_bin / "id").chmod(0o755)
    # PATH holds the stubs alone, so the machine's own apt-get and sudo are out of reach.
    proc = subprocess.run(
        [
            "/bin/bash",
            str(REPO / "scripts" / "ensure-debs"),
            "or skip it on purpose: make test SKIP=1",
            *pairs,
        ],
        capture_output=True,
        text=True,
        env={"PATH": str(stub_bin)},
        timeout=30,
    )
    log = stub_bin.parent / "calls"
    return proc.returncode, proc.stderr, log.read_text().splitlines() if log.exists() else []


def test_ensure_debs_installs_what_is_missing_as_root(stub_bin: Path) -> None:
    code, err, calls = ensure(stub_bin, "present-tool:dash", "no-such-command-here:chromium", uid=0)
    assert code == 0, err
    assert calls[0] == "apt-get update -qq"
    assert calls[1].startswith("apt-get install") and calls[1].endswith(" chromium"), calls


def test_ensure_debs_goes_through_sudo_when_not_root(stub_bin: Path) -> None:
    code, err, calls = ensure(stub_bin, "no-such-command-here:chromium", uid=1000)
    assert code == 0, err
    assert "sudo -n apt-get update -qq" in calls
    assert any(c.startswith("sudo -n apt-get install") and c.endswith(" chromium") for c in calls), calls


def test_ensure_debs_installs_nothing_when_everything_is_there(stub_bin: Path) -> None:
    assert ensure(stub_bin, "present-tool:dash", uid=0) == (0, "", [])


def test_ensure_debs_that_cannot_install_says_so_in_one_line(stub_bin: Path) -> None:
    (stub_bin / "apt-get").unlink()
    (stub_bin / "sudo").unlink()
    code, err, calls = ensure(stub_bin, "no-such-command-here:chromium", uid=1000)
    assert code == 1 and calls == []
    assert err.strip().count("\n") == 0
    assert "chromium" in err and "sudo apt-get install -y chromium" in err and "make test SKIP=1" in err


def test_ci_runs_only_the_readme_commands() -> None:
    lines = [ln.strip() for ln in (REPO / ".ci" / "run").read_text().splitlines()]
    commands = [ln for ln in lines if ln and not ln.startswith("#") and not ln.startswith(("set ", "cd "))]
    assert commands == ["make test", "make run"]
