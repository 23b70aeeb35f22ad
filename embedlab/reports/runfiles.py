"""A regress run's files on disk, and what readers make of them.

`write_run` writes a run's results.json, junit.xml and index.html whole (each through
`jsonio.write_bytes_atomic`), and `write_outputs_index` the outputs folder's index.html,
every run in it; `regression.regress` calls them after every notebook. A results.json
records the run's `status` (`verdicts.RunStatus`) and `process` (host, pid, start time):

    running       written while notebooks run; from a process that is gone: interrupted
    interrupted   stopped by a signal (`interrupted_by`), or marked after its process died
    complete      every notebook ran; only such a run is history (`history`, `latest_results`)
    incomplete    a merge of shards (`embedlab.reports.merge`) that lacks a part, or a job

A run's results.json also names its `commit`, its matrix (`matrix_hash`), each job's duration
(`durations`, what the next `--shard` split balances by) and, for a shard, which part it is
(`shard`, `embedlab.reports.shards`). A shard is part of a run, never history on its own.

After a SIGKILL the harness's watchdog runs `python -m embedlab.reports.runfiles
--mark-interrupted RUN_DIR` (`mark_command`), which rewrites the run as interrupted.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import sys
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from ..cluster.ports import pid_alive
from ..jsonio import load_json, write_json, write_text_atomic
from ..verdicts import RunStatus, Verdict
from ..wording import counted
from .index import write_index
from .matrix import Job
from .run_report import (
    INDEX_HTML,
    JUNIT_XML,
    RESULTS_JSON,
    VERDICT_CSS,
    ReportImage,
    escape,
    notebook_figures,
    verdict_badge,
    write_junit,
)

__all__ = [
    "Finished",
    "RunFiles",
    "RunFolder",
    "history",
    "latest_results",
    "mark_command",
    "mark_interrupted",
    "new_run_dir",
    "run_status",
    "this_process",
    "write_outputs_index",
    "write_run",
    "write_runs_index",
]

_CSS = (
    """
body { font-family: system-ui, -apple-system, Segoe UI, sans-serif; margin: 24px; color: #222; max-width: 1400px; }
h1 { font-size: 22px; margin-bottom: 4px; } .meta { color: #555; font-size: 13px; }
table { border-collapse: collapse; font-size: 13px; width: 100%; }
th, td { border: 1px solid #ddd; padding: 5px 8px; text-align: left; vertical-align: top; } th { background: #f3f3f3; }
.verdict { font-weight: 700; padding: 1px 7px; border-radius: 4px; color: #fff; white-space: nowrap; }
.verdict.running, .verdict.interrupted, .verdict.incomplete { background: #ef6c00; }
"""
    + VERDICT_CSS
)


class Finished(Protocol):
    """What `RunFiles` reads of a finished notebook run (a `regression.Outcome` is one)."""

    job: Job
    verdict: Verdict
    figures: list[ReportImage]

    @property
    def passed(self) -> bool: ...

    def to_json(self, root: Path) -> dict[str, Any]: ...


class RunFolder:
    """The files of a run folder (`run_dir`), by path: a regress run's, a merged one's."""

    run_dir: Path

    @property
    def results_json(self) -> Path:
        return self.run_dir / RESULTS_JSON

    @property
    def junit_xml(self) -> Path:
        return self.run_dir / JUNIT_XML

    @property
    def index_html(self) -> Path:
        return self.run_dir / INDEX_HTML


@dataclass(kw_only=True)
class RunFiles(RunFolder):
    """One regress run's results.json, junit.xml and index.html, and the outputs folder's index,
    rewritten from the outcomes so far (`finished`, `write`)."""

    run_id: str
    run_dir: Path
    matrix: str
    jobs: Sequence[Job]
    previous: Path | None  # the complete run history compares with
    not_compared: list[str]  # newer runs that were not complete
    command: str = ""  # the command line that ran it, shown at the head of every page
    only: Sequence[str] = ()  # the -k filters; empty: every job of the matrix ran
    matrix_jobs: int | None = None  # how many jobs the matrix has before the filters
    matrix_hash: str = ""  # the filtered matrix's content (`shards.matrix_hash`)
    commit: str = "unknown"  # what ran (`shards.current_commit`)
    shard: Mapping[str, Any] | None = None  # which part of the matrix (`shards.shard_record`); None: all
    outcomes: list[Finished] = field(default_factory=list)
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    t0: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self._previous_results = load_json(self.previous) if self.previous else None
        if self._previous_results is not None and self.shard is not None:
            # A shard compares its own jobs: the others are not "removed", they ran elsewhere.
            mine = {job.name for job in self.jobs}
            scenarios = self._previous_results.get("scenarios", [])
            self._previous_results["scenarios"] = [s for s in scenarios if s.get("name") in mine]
        self._listed: RunStatus | None = None  # the status the outputs index shows

    @property
    def wall_seconds(self) -> float:
        return time.monotonic() - self.t0

    def finished(self, outcome: Finished) -> None:
        self.outcomes.append(outcome)
        self.write(RunStatus.RUNNING)

    def write(self, status: RunStatus, *, interrupted_by: str | None = None) -> None:
        """The run's files as they stand; the outputs index too, where the status changes (it
        reads every run in the folder, and lists a running run without its count)."""
        outcomes = self.outcomes
        scenarios = [o.to_json(self.run_dir) for o in outcomes]
        results = {
            "run_id": self.run_id,
            "started_at": self.started_at.isoformat(timespec="seconds"),
            "started_ts": self.started_at.timestamp(),
            "wall_seconds": round(self.wall_seconds, 2),
            "matrix": self.matrix,
            "command": self.command,
            "only": list(self.only),
            "matrix_jobs": self.matrix_jobs if self.matrix_jobs is not None else len(self.jobs),
            "status": status,
            "interrupted_by": interrupted_by,
            "process": this_process(),
            "planned": len(self.jobs),
            "unfinished": [
                {"name": job.name, "notebook": job.label or job.notebook.stem, "slug": job.slug}
                for job in self.jobs[len(outcomes) :]
            ],
            # Only a run that ran everything can have passed.
            "passed": status == RunStatus.COMPLETE and all(o.passed for o in outcomes),
            "counts": {str(v): sum(o.verdict == v for o in outcomes) for v in Verdict},
            "previous_run": str(self.previous.parent.name) if self.previous else None,
            "not_compared": self.not_compared,
            "commit": self.commit,
            "matrix_hash": self.matrix_hash,
            "shard": self.shard,
            "durations": {s["name"]: s["seconds"] for s in scenarios},
            "scenarios": scenarios,
        }
        write_run(
            self.run_dir,
            results,
            previous=self._previous_results,
            figures={o.job.name: o.figures for o in outcomes},
            list_run=status != self._listed,
        )
        self._listed = status


def write_run(
    run_dir: Path,
    results: Mapping[str, Any],
    *,
    previous: Mapping[str, Any] | None,
    figures: Mapping[str, Sequence[ReportImage]],
    list_run: bool = True,
) -> None:
    """The run's pages, then its results.json: a reader who sees a status finds pages that say it."""
    write_junit(run_dir / JUNIT_XML, results)
    write_index(run_dir / INDEX_HTML, results, previous=previous, figures=figures)
    write_json(run_dir / RESULTS_JSON, results)
    if list_run:
        write_outputs_index(run_dir.parent)


def mark_command(run_dir: Path) -> tuple[str, ...]:
    return (sys.executable, "-m", "embedlab.reports.runfiles", "--mark-interrupted", str(run_dir.resolve()))


def mark_interrupted(run_dir: Path) -> bool:
    """Rewrite a run that says "running" as "interrupted": its results.json, junit.xml, index.html
    (figures read back from its executed notebooks) and the outputs index. True if it did.

    The watchdog runs this once a regress process is gone without its last write (a
    SIGKILL, a crash); nothing else writes that run any more.
    """
    try:
        results = load_json(run_dir / RESULTS_JSON)
    except (OSError, ValueError):
        return False
    if results.get("status") != RunStatus.RUNNING:
        return False
    results["status"] = RunStatus.INTERRUPTED
    figures = {}
    for scenario in results.get("scenarios", []):
        with contextlib.suppress(OSError, ValueError, TypeError):
            figures[scenario["name"]] = notebook_figures(run_dir / scenario["notebook_out"])
    previous = None
    if results.get("previous_run"):
        with contextlib.suppress(OSError, ValueError):
            previous = load_json(run_dir.parent / results["previous_run"] / RESULTS_JSON)
    write_run(run_dir, results, previous=previous, figures=figures)
    return True


# -- the run's process, and what readers make of a run ---------------------------------------------


def _started(pid: int) -> int | None:
    """When process `pid` started (clock ticks since boot, /proc/PID/stat field 22); None
    if there is no such process or it is a zombie. With the pid, it names one process:
    a pid is reused, the pair is not."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return None if fields[0] == "Z" else int(fields[19])


def this_process() -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": os.getpid(), "started": _started(os.getpid())}


def _alive(process: Mapping[str, Any]) -> bool:
    """Whether the process a results.json names still runs. One on another host cannot be
    told apart from a live one, and counts as alive."""
    pid = process.get("pid")
    if process.get("host") != socket.gethostname():
        return True
    if not isinstance(pid, int):
        return False
    if not Path("/proc/self/stat").exists():
        return pid_alive(pid)
    started = _started(pid)
    return started is not None and process.get("started") in (None, started)


def run_status(results: Mapping[str, Any]) -> RunStatus:
    """A run's status now: "running" written by a process that is gone is "interrupted".

    A results.json without a status was written once, at the end of its run: complete.
    """
    status = results.get("status", RunStatus.COMPLETE)
    if status == RunStatus.RUNNING and not _alive(results.get("process") or {}):
        return RunStatus.INTERRUPTED
    try:
        return RunStatus(status)
    except ValueError:
        return RunStatus.INTERRUPTED  # not complete: not history


def new_run_dir(out: Path, *, suffix: str = "") -> tuple[str, Path]:
    # Time first so folders sort by age; the random part keeps two runs in one second apart,
    # and a clash (two runs that drew the same one) draws again. `suffix` says what the run
    # is (`-shard2of3`, `-merged`).
    while True:
        run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}{suffix}"
        run_dir = out / run_id
        try:
            run_dir.mkdir(parents=True)
        except FileExistsError:
            continue
        return run_id, run_dir


def _runs(out: Path, *, exclude: Path | None = None) -> list[tuple[Path, dict[str, Any]]]:
    """Every run folder's results.json in `out`, newest first by its own start time."""
    found: list[tuple[float, Path, dict[str, Any]]] = []
    for candidate in _children(out):
        path = candidate / RESULTS_JSON
        if candidate == exclude or not path.is_file():
            continue
        try:
            results = load_json(path)
            found.append((float(results.get("started_ts", 0.0)), path, results))
        except (OSError, ValueError, AttributeError, TypeError):
            continue  # a foreign file is not history
    found.sort(key=lambda item: (item[0], str(item[1])), reverse=True)
    return [(path, results) for _, path, results in found]


def history(out: Path, *, exclude: Path | None = None) -> tuple[Path | None, list[str]]:
    """The newest complete run's results.json, and the run ids of the newer runs passed over.

    A shard (`--shard`) is not a run of the matrix: it is neither history nor passed over; the
    merge of the shards is a run like any other."""
    passed_over: list[str] = []
    for path, results in _runs(out, exclude=exclude):
        if results.get("shard"):
            continue
        if run_status(results) == RunStatus.COMPLETE:
            return path, passed_over
        passed_over.append(str(results.get("run_id") or path.parent.name))
    return None, passed_over


def latest_results(out: Path, *, exclude: Path | None = None) -> Path | None:
    """The newest earlier complete run's results.json in `out`, judged by its own start time.

    A run that was interrupted, or is still running, is not history.
    """
    return history(out, exclude=exclude)[0]


def write_outputs_index(out: Path) -> Path:
    """`out/index.html`: every regress run in `out`, newest first, each with its status now.

    Rebuilt from the run folders on disk, under an exclusive lock on `out` itself: runs
    writing into one folder at once take turns, and the last to write has read every
    other run's last write, so the page lists them all.
    """
    with _locked(out):
        runs = [
            {
                **{k: results.get(k) for k in ("run_id", "started_at", "matrix", "counts", "previous_run")},
                "status": run_status(results),
                "passed": results.get("passed"),
                "finished": len(results.get("scenarios", [])),
                "planned": results.get("planned", len(results.get("scenarios", []))),
                "index": f"{path.parent.name}/index.html",
            }
            for path, results in _runs(out)
        ]
        return write_runs_index(out / INDEX_HTML, runs)


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    import fcntl

    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # released when the fd closes, or its process dies
        yield
    finally:
        os.close(fd)


def _children(folder: Path) -> Iterable[Path]:
    try:
        return [p for p in folder.iterdir() if p.is_dir()]
    except OSError:
        return []


def write_runs_index(path: Path, runs: Sequence[Mapping[str, Any]]) -> Path:
    """Every regress run in an outputs folder, as given (newest first), each linked to its index.html.

    A run is a mapping with `run_id`, `started_at`, `status` (now, not as last written),
    `passed`, `counts`, `finished`, `planned`, `matrix`, `previous_run` and `index` (its page).
    """
    rows = []
    for run in runs:
        status = run["status"]
        counts = run.get("counts") or {}
        if status == RunStatus.COMPLETE:
            badge = verdict_badge(
                Verdict.FAILED
                if not run.get("passed")
                else Verdict.REPORTED
                if counts.get(Verdict.REPORTED)
                else Verdict.PASSED
            )
            progress = counted(run.get("finished", 0), "run")
        else:
            badge = verdict_badge(status)
            progress = (
                "running"
                if status == RunStatus.RUNNING
                else f"{run.get('finished', 0)} of {run.get('planned')}"
            )
        tally = escape(", ".join(f"{n} {k}" for k, n in counts.items() if n)) or "&ndash;"
        rows.append(
            f'<tr><td><a href="{escape(run["index"])}">{escape(run.get("run_id") or "")}</a></td>'
            f"<td>{escape(run.get('started_at') or '')}</td><td>{badge}</td><td>{progress}</td>"
            f"<td>{tally}</td><td><code>{escape(run.get('matrix') or '')}</code></td>"
            f"<td>{escape(run.get('previous_run') or '')}</td></tr>"
        )
    page = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>embedlab regress: {counted(len(runs), 'run')}</title><style>{_CSS}</style></head><body>",
        "<h1>embedlab regress runs</h1>",
        '<p class="meta">Newest first. Only a complete run is compared with by the next one; an interrupted '
        "run keeps the reports of the notebooks it finished.</p>",
        "<table><tr><th>run</th><th>started</th><th>status</th><th>notebook runs</th><th>verdicts</th>"
        "<th>matrix</th><th>compared with</th></tr>" + "".join(rows) + "</table>",
        "</body></html>",
    ]
    return write_text_atomic(path, "\n".join(page))


if __name__ == "__main__":
    # The watchdog's cleanup for a regress run whose process died (`mark_command`).
    if sys.argv[1:2] == ["--mark-interrupted"]:
        mark_interrupted(Path(sys.argv[2]))
