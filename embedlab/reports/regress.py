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

and `<out>/index.html` lists every run in `<out>`, newest first.

A failed notebook never stops the run: papermill writes the executed notebook before it
raises, and its report is exported like any other, so the evidence survives.

A stopped run keeps what it finished: its files are rewritten whole after every notebook,
with the run's status, running, interrupted or complete (`embedlab.reports.runfiles`, which also
says what a SIGKILL leaves). Ctrl-C (SIGINT) or SIGTERM interrupts the running notebook's
cell (`embedlab.reports.kernels`); the run then writes "interrupted" and exits 130 (143). Only a
complete run is history: the next run compares with the newest complete one.

The matrix (which notebooks and scenarios, with which parameters) is `embedlab.reports.matrix`.
`shard=Shard(2, 3)` (`--shard 2/3`) runs the second of three parts of it (`embedlab.reports.shards`
splits it, the same on every machine), into a folder whose run id ends `-shard2of3`;
`embedlab.reports.merge` makes one run of the parts' folders.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..cluster.managed_process import register_cleanup, unregister_cleanup
from ..defaults import CELL_GUARD_EXTENSION, CELL_TIMEOUT_S, KERNEL_NAME
from ..errors import ConfigError, NotebookRunError
from ..verdicts import RunStatus, Verdict
from ..wording import counted
from .kernels import Stop, Stopped, ipc_kernel_manager, kernel_folder, off_main_thread, stopping_on_signals
from .matrix import Job, load_matrix, notebook_parameters, params_in_effect, shown_path
from .run_report import ReportImage
from .runfiles import RunFiles, history, latest_results, mark_command, new_run_dir
from .shards import (
    Shard,
    current_commit,
    default_durations_path,
    load_durations,
    matrix_hash,
    shard_record,
    split,
)

__all__ = [
    "Outcome",
    "RegressRun",
    "RunInterrupted",
    "check_kernel",
    "latest_results",
    "new_run_dir",
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
    """The notebooks' kernel is installed, runs this Python and loads the cell guard; else a
    `ConfigError` saying how to fix it.

    The kernel is a user-level kernelspec (`make install`), which another checkout's
    `make install` may have pointed at its own venv: its notebooks would then run another
    embedlab, silently. One written by a plain `ipykernel install` does not load the guard:
    its notebooks run unguarded, as silently.
    """
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    install = f"run `make install`, or: {sys.executable} -m embedlab.notebook.kernelspec --name {name}"
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
    if not any(CELL_GUARD_EXTENSION in arg for arg in spec.argv):
        raise ConfigError(
            f"the Jupyter kernel {name!r} does not load the cell guard ({CELL_GUARD_EXTENSION}): {install}"
        )


# What a notebook that takes no `result_json` is said to be: it ran, and asserted nothing.
PLAIN = (
    "a plain notebook (it takes no result_json parameter): it ran to its end, and nothing in it is asserted"
)


def run_job(
    job: Job,
    run_dir: Path,
    *,
    timeout: float = CELL_TIMEOUT_S,
    show_code: bool = False,
    stop: Stop | None = None,
    command: str = "",
) -> Outcome:
    """Execute one notebook with papermill, then export its report; never raises for a failed notebook.

    With `stop` (`run_jobs`'), a notebook that a signal cut short raises `kernels.Stopped`: it did not finish.
    """
    import papermill
    from papermill.exceptions import PapermillExecutionError

    from .run_report import export_html, notebook_figures

    notebook_out = run_dir / f"{job.name}.ipynb"
    result_json = run_dir / "results" / f"{job.name}.json"
    logs = run_dir / "logs" / job.name
    takes = notebook_parameters(job.notebook)
    # Absolute: the kernel runs in the run folder, where a relative path would nest. Only what the
    # notebook takes: a plain notebook (no result_json) is run as it is, and said to be plain.
    runner = {"run_dir": str(logs.resolve()), "result_json": str(result_json.resolve()), "stop_at_end": True}
    # stop_at_end: an explore notebook keeps its deployment up for people; a run stops it in its own cell.
    params = {**job.params, **{k: v for k, v in runner.items() if k in takes}}
    plain = "result_json" not in takes
    started = time.monotonic()
    error = None
    stop = stop or Stop()
    try:
        with kernel_folder() as sockets:
            off_main_thread(
                lambda: papermill.execute_notebook(
                    str(job.notebook),
                    str(notebook_out),
                    parameters=params,
                    kernel_name=KERNEL_NAME,
                    progress_bar=False,
                    execution_timeout=timeout,
                    cwd=str(run_dir.resolve()),
                    kernel_manager_class=ipc_kernel_manager(sockets, stop.kernel_started),
                    on_cell_start=stop.before_cell,
                )
            )
    except PapermillExecutionError as exc:
        error = f"{exc.ename}: {_first_line(exc.evalue)} (cell {exc.exec_count})"
    except Exception as exc:  # a dead kernel, a cell timeout: record it, keep running the matrix
        error = f"{exc.__class__.__name__}: {_first_line(str(exc))}"
    finally:
        stop.kernel_started(None)
    if error is not None and stop.signum is not None:
        raise Stopped(error)
    seconds = time.monotonic() - started
    result = json.loads(result_json.read_text()) if result_json.is_file() else None
    if plain and result is None:
        result = {"verdict": str(Verdict.REPORTED), "reasons": [PLAIN]}
    verdict, error = _verdict(error, result)
    html = None
    figures: list[ReportImage] = []
    if notebook_out.is_file():
        banner = {
            "name": job.name,
            "verdict": verdict,
            "params": params_in_effect(takes, job.params, result),
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
    on_outcome: Callable[[Outcome], None] = lambda outcome: None,
) -> list[Outcome]:
    """Every job in turn into `run_dir`, a line to `say` as each starts and ends (`name` names a
    job, `after` adds to its last line, `command` heads each report), `on_outcome` called as
    each ends; `embedlab regress` and `embedlab conformance` both run so.

    SIGINT or SIGTERM (on the main thread) stops the run (`kernels.Stop`): the jobs that had
    finished come with `RunInterrupted`; the one it cut short is not among them.
    """
    outcomes: list[Outcome] = []
    with stopping_on_signals() as stop:
        for number, job in enumerate(jobs, 1):
            if stop.signum is not None:
                break
            say(f"[{number}/{len(jobs)}] {name(job)}: running")
            try:
                outcome = run_job(
                    job, run_dir, timeout=timeout, show_code=show_code, stop=stop, command=command
                )
            except Stopped:
                say(f"[{number}/{len(jobs)}] {name(job)}: interrupted")
                break
            outcomes.append(outcome)
            say(f"[{number}/{len(jobs)}] {name(job)}: {outcome.verdict.upper()} {after(outcome)}")
            on_outcome(outcome)
    if stop.signum is not None and len(outcomes) < len(jobs):
        raise RunInterrupted(outcomes=outcomes, signum=stop.signum)
    return outcomes


class RunInterrupted(KeyboardInterrupt):
    """A signal stopped `run_jobs` before its last job: `outcomes` are the jobs that finished."""

    def __init__(self, *, outcomes: list[Outcome], signum: int) -> None:
        self.outcomes = outcomes
        self.signum = signum
        self.signal = signal.Signals(signum).name
        super().__init__(f"interrupted by {self.signal} after {counted(len(outcomes), 'finished job')}")


def _verdict(error: str | None, result: dict[str, Any] | None) -> tuple[Verdict, str | None]:
    """A run's verdict from its error and the result it wrote, and the error to show with it.

    A failed or inconclusive result stands even where its verdict cell raised (that is how a
    notebook fails). Evidence that is missing is never green: a run that wrote no result, or a
    result whose verdict regress does not know, is an ERROR that says so.
    """
    said = (result or {}).get("verdict")
    if said in (Verdict.FAILED, Verdict.INCONCLUSIVE):
        return Verdict(said), error
    if error is not None:
        return Verdict.ERROR, error
    if result is None:
        return (
            Verdict.ERROR,
            "the notebook wrote no result (its result_json file is missing): nothing shows what it checked",
        )
    if said not in (Verdict.PASSED, Verdict.REPORTED, Verdict.UNSUPPORTED):
        known = ", ".join(v for v in Verdict if v != Verdict.ERROR)
        return Verdict.ERROR, f"the notebook's result has verdict {said!r}, not one of {known}"
    return Verdict(said), None


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
    shard: Shard | str | None = None,
    durations: str | Path | None = None,
) -> RegressRun:
    """Run every job of `matrix` (default: the packaged default matrix) into a new folder under `out`.

    `timeout` bounds each cell, in seconds. `only` keeps the jobs whose name contains one
    of its strings (as `embedlab regress -k`). `progress`, when given, gets one line as each
    notebook starts and one as it ends. `command`, the command line that ran it (the CLI's
    own), heads every report and the index. `shard` (`Shard(2, 3)` or "2/3") runs only that
    part of the jobs, balanced by the `durations` file (a results.json or a durations file;
    default: the one beside the matrix, where there is one; else by count).

    The run's files are written after every notebook (see the module's docstring). A
    signal that stops it raises `RunInterrupted` (a `KeyboardInterrupt`) once they say
    "interrupted".
    """
    plan = (full := load_matrix(matrix)).only(only)
    jobs: Sequence[Job] = plan.jobs
    part = Shard.parse(shard) if isinstance(shard, str) else shard
    record = None
    if part is not None:
        jobs, record = _shard_of(plan.jobs, part, matrix=plan.path, durations=durations)
    check_kernel()  # before anything runs: otherwise every notebook fails the same way
    out = Path(out)
    run_id, run_dir = new_run_dir(out, suffix=part.suffix if part else "")
    previous, passed_over = history(out, exclude=run_dir)
    say = progress or (lambda line: None)
    run = RunFiles(
        run_id=run_id,
        run_dir=run_dir,
        matrix=shown_path(plan.path),
        jobs=jobs,
        previous=previous,
        not_compared=passed_over,
        command=command,
        only=tuple(only),
        matrix_jobs=len(full.jobs),
        matrix_hash=matrix_hash(plan.jobs),
        commit=current_commit(),
        shard=record,
    )
    which = f"shard {part}, balanced by {record['balanced_by']}: " if part and record else ""
    say(f"embedlab regress: {which}{counted(len(jobs), 'notebook run')} from {plan.path} -> {run_dir}")
    # Registered before the first "running" is written: a SIGKILL at any moment after it
    # leaves a run that says "interrupted" once the watchdog has run this.
    mark = mark_command(run_dir)
    register_cleanup(mark)
    try:
        run.write(RunStatus.RUNNING)
        outcomes = run_jobs(
            jobs,
            run_dir,
            timeout=timeout,
            show_code=show_code,
            say=say,
            on_outcome=run.finished,
            command=command,
        )
    except BaseException as exc:
        stopped_by = exc.signal if isinstance(exc, RunInterrupted) else None
        run.write(RunStatus.INTERRUPTED, interrupted_by=stopped_by)
        unregister_cleanup(mark)
        say(
            f"embedlab regress: interrupted{f' by {stopped_by}' if stopped_by else ''} after "
            f"{len(run.outcomes)} of {counted(len(jobs), 'notebook run')}; what finished: {run.index_html}"
        )
        raise
    run.write(RunStatus.COMPLETE)
    unregister_cleanup(mark)
    return RegressRun(
        run_id=run_id,
        run_dir=run_dir,
        outcomes=outcomes,
        wall_seconds=run.wall_seconds,
        index_html=run.index_html,
        results_json=run.results_json,
        junit_xml=run.junit_xml,
        previous=previous,
    )


def _shard_of(
    jobs: Sequence[Job], shard: Shard, *, matrix: Path, durations: str | Path | None
) -> tuple[tuple[Job, ...], dict[str, Any]]:
    """The jobs of `shard`, and the record its results.json keeps of the split."""
    source = Path(durations) if durations is not None else default_durations_path(matrix)
    recorded = load_durations(source) if durations is not None or source.is_file() else {}
    parts = split(jobs, shard.count, durations=recorded)
    known = sum(job.name in recorded for job in jobs)
    balanced_by = (
        f"the durations in {shown_path(source)} ({known} of {counted(len(jobs), 'job')} recorded)"
        if known
        else "the job count (no durations recorded)"
    )
    return parts[shard.index - 1], shard_record(shard, parts, all_jobs=jobs, balanced_by=balanced_by)
