"""`embedlab regress`: every notebook of a matrix, for every parameter set, through papermill.

    run = regress(matrix="my.toml", out="outputs")
    run.passed, run.index_html, run.failed

One run writes one folder, `<out>/<run-id>/`:

    <notebook>--<params-slug>.ipynb   the executed notebook, also when it failed
    <notebook>--<params-slug>.html    its report (nbconvert; code hidden unless show_code)
    results/<name>.json               the result each notebook saved (result_json parameter)
    logs/<name>/                      that run's server logs (run_dir parameter)
    results.json                      every scenario's figures: deltas, p-values, latency, verdicts
    junit.xml                         one testcase per notebook and parameter set
    index.html                        summary table with figures inline, changes since the last run

A failed notebook never stops the run: papermill writes the executed notebook before it
raises, and its report is exported like any other, so the evidence survives.

The matrix (which notebooks and scenarios, with which parameters) is `embedlab.matrix`.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .defaults import CELL_TIMEOUT_S, KERNEL_NAME
from .errors import ConfigError, NotebookRunError
from .matrix import Job, Matrix, load_matrix, notebook_parameters, shown_path
from .report import ReportImage
from .verdicts import Verdict
from .wording import counted

__all__ = [
    "Matrix",
    "Outcome",
    "RegressRun",
    "check_kernel",
    "load_matrix",
    "regress",
    "run_job",
    "run_jobs",
]


# -- one run ------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class Outcome:
    """What one notebook run left behind."""

    job: Job
    verdict: Verdict  # the run's: the scenario's own, or error where the notebook broke first
    seconds: float
    notebook_out: Path
    html: Path | None
    result_json: Path
    logs: Path
    result: dict[str, Any] | None = None
    error: str | None = None
    figures: list[ReportImage] = field(default_factory=list)  # for index.html

    def __post_init__(self) -> None:
        self.verdict = Verdict(self.verdict)

    @property
    def passed(self) -> bool:
        """Nothing asserted failed: the notebook passed, or only reported its figures."""
        return self.verdict.ok

    @property
    def summary(self) -> str:
        if self.error and (self.result is None or self.result.get("ok", self.result.get("passed"))):
            return self.error
        if self.result is not None:
            r = self.result
            reasons = r.get("reasons") or []
            head = f"{r.get('scenario', self.job.notebook.stem)} on {r.get('stack', '?')}: {str(r.get('verdict', self.verdict)).upper()}"
            return head + (f" ({'; '.join(reasons)})" if reasons else "")
        return self.verdict.upper()

    def to_json(self, root: Path) -> dict[str, Any]:
        """Paths relative to the run folder, so the folder can be moved and shared whole."""

        def rel(path: Path | None) -> str | None:
            return os.path.relpath(path, root) if path is not None and path.exists() else None

        result = self.result or {}
        return {
            "name": self.job.name,
            "notebook": self.job.label or self.job.notebook.stem,
            "slug": self.job.slug,
            "params": self.job.params,
            "verdict": self.verdict,
            "summary": self.summary,
            "reasons": result.get("reasons", []),
            "error": self.error,
            "seconds": round(self.seconds, 3),
            "report_html": rel(self.html),
            "notebook_out": rel(self.notebook_out),
            "result_json": rel(self.result_json),
            "logs": rel(self.logs),
            "figures": result.get("key_figures") or {},
            "result": self.result,
        }


def check_kernel(name: str = KERNEL_NAME) -> None:
    """The notebooks' kernel is installed and runs this Python; else a `ConfigError` saying how to fix it.

    The kernel is a user-level kernelspec (`make install`), which another checkout's
    `make install` may have pointed at its own venv: its notebooks would then run another
    embedlab, silently.
    """
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    install = f"run `make install`, or: {sys.executable} -m ipykernel install --user --name {name}"
    try:
        spec = KernelSpecManager().get_kernel_spec(name)
    except NoSuchKernel:
        raise ConfigError(f"the notebooks' Jupyter kernel {name!r} is not installed: {install}") from None
    python = Path(spec.argv[0]) if spec.argv else None
    # Compared as written, not resolved: every venv's python links to the same interpreter.
    if python is not None and python.is_absolute() and python.parent != Path(sys.executable).parent:
        raise ConfigError(
            f"the Jupyter kernel {name!r} runs {python}, not this Python ({sys.executable}): {install}"
        )


@functools.cache
def _ipc_kernel_manager() -> type:
    """A kernel manager whose kernel talks over Unix sockets instead of loopback TCP.

    The kernel then opens no port at all, and ipykernel's warning about unencrypted TCP,
    printed once per notebook, does not apply.
    """
    from jupyter_client.manager import AsyncKernelManager
    from traitlets import default

    class IpcKernelManager(AsyncKernelManager):
        @default("transport")
        def _default_transport(self) -> str:
            return "ipc"

    return IpcKernelManager


def run_job(
    job: Job, run_dir: Path, *, timeout: float = CELL_TIMEOUT_S, show_code: bool = False, command: str = ""
) -> Outcome:
    """Execute one notebook with papermill, then export its report; never raises for a failed notebook."""
    import papermill
    from papermill.exceptions import PapermillExecutionError

    from .report import export_html, notebook_figures

    notebook_out = run_dir / f"{job.name}.ipynb"
    result_json = run_dir / "results" / f"{job.name}.json"
    logs = run_dir / "logs" / job.name
    # Absolute: the kernel runs in the run folder, where a relative path would nest.
    params = {**job.params, "run_dir": str(logs.resolve()), "result_json": str(result_json.resolve())}
    if "stop_at_end" in notebook_parameters(job.notebook):
        # An explore notebook keeps its deployment up for people; a run stops it in its own cell.
        params["stop_at_end"] = True
    started = time.monotonic()
    error = None
    try:
        papermill.execute_notebook(
            str(job.notebook),
            str(notebook_out),
            parameters=params,
            kernel_name=KERNEL_NAME,
            progress_bar=False,
            execution_timeout=timeout,
            cwd=str(run_dir.resolve()),
            kernel_manager_class=_ipc_kernel_manager(),
        )
    except PapermillExecutionError as exc:
        error = f"{exc.ename}: {_first_line(exc.evalue)} (cell {exc.exec_count})"
    except Exception as exc:  # a dead kernel, a cell timeout: record it, keep running the matrix
        error = f"{exc.__class__.__name__}: {_first_line(str(exc))}"
    seconds = time.monotonic() - started
    result = json.loads(result_json.read_text()) if result_json.is_file() else None
    verdict = _verdict(error, result)
    html = None
    figures: list[str] = []
    if notebook_out.is_file():
        banner = {
            "name": job.name,
            "verdict": verdict,
            "params": job.params,
            "summary": error or (result or {}).get("verdict", ""),
            "seconds": seconds,  # the date is papermill's, in the notebook
            "command": command,
        }
        try:
            html = export_html(
                notebook_out, notebook_out.with_suffix(".html"), show_code=show_code, banner=banner
            )
            figures = notebook_figures(notebook_out)
        except Exception as exc:  # a broken export must not hide the notebook's own verdict
            error = (error + "; " if error else "") + f"HTML export failed: {exc.__class__.__name__}: {exc}"
            verdict = Verdict.ERROR
    return Outcome(
        job=job,
        verdict=verdict,
        seconds=seconds,
        notebook_out=notebook_out,
        html=html,
        result_json=result_json,
        logs=logs,
        result=result,
        error=error,
        figures=figures,
    )


def run_jobs(
    jobs: Sequence[Job],
    run_dir: Path,
    *,
    timeout: float = CELL_TIMEOUT_S,
    show_code: bool = False,
    say: Callable[[str], None] = lambda line: None,
    name: Callable[[Job], str] = lambda job: job.name,
    after: Callable[[Outcome], str] = lambda outcome: f"in {outcome.seconds:.1f} s",
    command: str = "",
) -> list[Outcome]:
    """Every job in turn into `run_dir`, a line to `say` as each starts and ends (`name` names a
    job, `after` adds to its last line, `command` heads each report); `embedlab regress` and
    `embedlab conformance` both run so."""
    outcomes = []
    for number, job in enumerate(jobs, 1):
        say(f"[{number}/{len(jobs)}] {name(job)}: running")
        outcome = run_job(job, run_dir, timeout=timeout, show_code=show_code, command=command)
        outcomes.append(outcome)
        say(f"[{number}/{len(jobs)}] {name(job)}: {outcome.verdict.upper()} {after(outcome)}")
    return outcomes


def _verdict(error: str | None, result: dict[str, Any] | None) -> Verdict:
    verdict = (result or {}).get("verdict")
    if verdict in (Verdict.FAILED, Verdict.INCONCLUSIVE):
        return Verdict(verdict)
    if error is not None:
        return Verdict.ERROR
    return Verdict(verdict) if verdict in (Verdict.REPORTED, Verdict.UNSUPPORTED) else Verdict.PASSED


def _first_line(text: str) -> str:
    lines = [line for line in str(text).strip().splitlines() if line.strip()]
    return lines[0] if lines else ""


# -- a whole matrix -----------------------------------------------------------------------------


@dataclass(kw_only=True)
class RegressRun:
    run_id: str
    run_dir: Path
    outcomes: list[Outcome]
    wall_seconds: float
    index_html: Path
    results_json: Path
    junit_xml: Path
    previous: Path | None = None

    @property
    def passed(self) -> bool:
        return bool(self.outcomes) and all(o.passed for o in self.outcomes)

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.passed]

    def raise_for_failures(self) -> None:
        """Raise NotebookRunError, naming the first failed run and its report, if any run failed."""
        if not self.failed:
            return
        first = self.failed[0]
        report = first.html or first.notebook_out
        raise NotebookRunError(
            f"{len(self.failed)} of {counted(len(self.outcomes), 'notebook run')} failed; first: {first.job.name}: "
            f"{first.summary}. Its report: {report}; all runs: {self.index_html}",
            report=report,
        )


def regress(
    *,
    matrix: str | Path | None = None,
    out: str | Path = "outputs",
    timeout: float = CELL_TIMEOUT_S,
    show_code: bool = False,
    only: Sequence[str] = (),
    progress: Callable[[str], None] | None = None,
    command: str = "",
) -> RegressRun:
    """Run every job of `matrix` (default: the packaged default matrix) into a new folder under `out`.

    `timeout` bounds each cell, in seconds. `only` keeps the jobs whose name contains one
    of its strings (as `embedlab regress -k`). `progress`, when given, gets one line as each
    notebook starts and one as it ends. `command`, the command line that ran it (the CLI's
    own), heads every report and the index.
    """
    from .pages import write_index
    from .report import load_results, write_json, write_junit

    plan = (full := load_matrix(matrix)).only(only)
    check_kernel()  # before anything runs: otherwise every notebook fails the same way
    out = Path(out)
    run_id, run_dir = new_run_dir(out)
    previous = latest_results(out, exclude=run_dir)
    say = progress or (lambda line: None)
    started_at = datetime.now(UTC)
    t0 = time.monotonic()
    say(f"embedlab regress: {counted(len(plan.jobs), 'notebook run')} from {plan.path} -> {run_dir}")

    outcomes = run_jobs(plan.jobs, run_dir, timeout=timeout, show_code=show_code, say=say, command=command)

    wall = time.monotonic() - t0
    results = {
        "run_id": run_id,
        "started_at": started_at.isoformat(timespec="seconds"),
        "started_ts": started_at.timestamp(),
        "wall_seconds": round(wall, 2),
        "matrix": shown_path(plan.path),
        "command": command,
        "only": list(only),  # the -k filters; empty: every job of the matrix ran
        "matrix_jobs": len(full.jobs),
        "passed": all(o.passed for o in outcomes),
        "counts": {str(v): sum(o.verdict == v for o in outcomes) for v in Verdict},
        "previous_run": str(previous.parent.name) if previous else None,
        "scenarios": [o.to_json(run_dir) for o in outcomes],
    }
    results_json = write_json(run_dir / "results.json", results)
    junit_xml = write_junit(run_dir / "junit.xml", results)
    index_html = write_index(
        run_dir / "index.html",
        results,
        previous=load_results(previous) if previous else None,
        figures={o.job.name: o.figures for o in outcomes},
    )
    return RegressRun(
        run_id=run_id,
        run_dir=run_dir,
        outcomes=outcomes,
        wall_seconds=wall,
        index_html=index_html,
        results_json=results_json,
        junit_xml=junit_xml,
        previous=previous,
    )


def new_run_dir(out: Path) -> tuple[str, Path]:
    # Time first so folders sort by age; the suffix keeps two runs in one second apart.
    run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    run_dir = out / run_id
    run_dir.mkdir(parents=True)
    return run_id, run_dir


def latest_results(out: Path, *, exclude: Path | None = None) -> Path | None:
    """The newest earlier run's results.json in `out`, judged by its own start time."""
    found: list[tuple[float, Path]] = []
    for candidate in _children(out):
        path = candidate / "results.json"
        if candidate == exclude or not path.is_file():
            continue
        try:
            found.append((float(json.loads(path.read_text()).get("started_ts", 0.0)), path))
        except (OSError, ValueError):
            continue  # a half-written or foreign file is not history
    return max(found)[1] if found else None


def _children(folder: Path) -> Iterable[Path]:
    try:
        return [p for p in folder.iterdir() if p.is_dir()]
    except OSError:
        return []
