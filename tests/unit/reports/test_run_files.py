"""What a reader makes of a run folder: a run's status now, the history it compares with, the
outputs index. Real processes stand for a run's writer: this one, and a pid no process holds."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from embedlab.jsonio import write_json
from embedlab.reports.runfiles import history, run_status, this_process, write_outputs_index
from embedlab.verdicts import RunStatus

from ...proctools import unused_pid


def gone_process() -> dict[str, Any]:
    """The `process` record of a writer that has exited: a pid no process holds."""
    return {**this_process(), "pid": unused_pid()}


def run(out: Path, run_id: str, ts: float, **fields: Any) -> Path:
    return write_json(
        out / run_id / "results.json",
        {"run_id": run_id, "started_ts": ts, "started_at": f"t{ts:g}", "scenarios": [], **fields},
    )


def test_running_is_running_only_while_its_process_is() -> None:
    assert run_status({"status": "running", "process": this_process()}) == RunStatus.RUNNING
    assert run_status({"status": "running", "process": gone_process()}) == RunStatus.INTERRUPTED
    # The same pid, another process (a pid reused): its start time tells them apart.
    reused = {**this_process(), "started": this_process()["started"] - 1}
    assert run_status({"status": "running", "process": reused}) == RunStatus.INTERRUPTED
    # On another host nothing can be told: still running, so never history either.
    elsewhere = {**gone_process(), "host": "another-host"}
    assert run_status({"status": "running", "process": elsewhere}) == RunStatus.RUNNING
    assert run_status({}) == RunStatus.COMPLETE, "a results.json from before the field: written at the end"
    assert run_status({"status": "interrupted", "process": this_process()}) == RunStatus.INTERRUPTED


def test_history_is_the_newest_complete_run_and_names_the_newer_ones_passed_over(tmp_path: Path) -> None:
    old = run(tmp_path, "r1", 1.0)
    complete = run(tmp_path, "r2", 2.0, status="complete")
    run(tmp_path, "r3", 3.0, status="interrupted")
    run(tmp_path, "r4", 4.0, status="running", process=gone_process())
    run(tmp_path, "r5", 5.0, status="running", process=this_process())
    (tmp_path / "r6").mkdir()
    (tmp_path / "r6" / "results.json").write_text('{"run_id": "r6", "started_ts": 6.0, "status": "compl')
    assert history(tmp_path) == (complete, ["r5", "r4", "r3"])
    assert history(tmp_path, exclude=complete.parent) == (old, ["r5", "r4", "r3"])
    assert history(tmp_path / "missing") == (None, [])


def test_the_outputs_index_lists_every_run_newest_first_with_its_status_now(tmp_path: Path) -> None:
    run(tmp_path, "r1", 1.0, status="complete", passed=True, counts={"passed": 2}, planned=2)
    run(tmp_path, "r2", 2.0, status="running", process=gone_process(), planned=4)
    run(tmp_path, "r3", 3.0, status="running", process=this_process(), planned=4)
    page = write_outputs_index(tmp_path).read_text()
    assert re.findall(r'href="([^"]+)"', page) == ["r3/index.html", "r2/index.html", "r1/index.html"]
    badges = re.findall(r'<span class="verdict (\w+)">', page)
    assert badges == ["running", "interrupted", "passed"]
    assert "0 of 4" in page and "2 passed" in page
