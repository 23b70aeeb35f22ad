"""`embedlab conformance`: the battery of checks against every stack, each cell a notebook run.

    run = conformance(stacks=["embedded", "vllm-router"], out="outputs")
    run.html, run.json, run.junit

One run writes `<out>/<run-id>/`: `conformance.html` (the stack x check matrix, each cell
linked to its report), `conformance.json`, `junit.xml`, and each cell's executed notebook,
report and logs, as `embedlab regress` writes them (`notebooks/scenario.ipynb` runs each).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from ..cluster.stack_registry import battery_stacks
from ..defaults import CELL_TIMEOUT_S
from ..jsonio import write_json
from ..scenarios.battery import BATTERY, Cell, ConformanceTable, cell_text, check_battery, stack_versions
from ..verdicts import Verdict
from .index import write_conformance
from .matrix import GENERIC_NOTEBOOK, Job, default_notebook_dir
from .regress import Outcome, check_kernel, new_run_dir, run_jobs
from .run_report import write_junit

__all__ = ["ConformanceRun", "conformance"]


@dataclass(kw_only=True)
class ConformanceRun:
    run_dir: Path
    matrix: ConformanceTable
    outcomes: list[Outcome]
    html: Path
    json: Path
    junit: Path

    @property
    def complete(self) -> bool:
        """Every cell ran to a verdict (none broke): what the command's exit status says."""
        return all(c.verdict != Verdict.ERROR for c in self.matrix.cells)


def conformance(
    *,
    stacks: Sequence[str] | None = None,
    checks: Sequence[str] = BATTERY,
    out: str | Path = "outputs",
    timeout: float = CELL_TIMEOUT_S,
    progress: Callable[[str], None] | None = None,
) -> ConformanceRun:
    """Run every check (a registered scenario) against every stack, with each stack's defaults.

    `stacks` left out: every registered stack that is `in_battery`, plugins' included.
    """
    stacks = battery_stacks() if stacks is None else stacks
    check_battery(stacks=stacks, checks=checks)
    check_kernel()  # every cell is a notebook on the project's kernel
    notebook = (default_notebook_dir() / f"{GENERIC_NOTEBOOK}.ipynb").resolve()
    run_id, run_dir = new_run_dir(Path(out))
    say = progress or (lambda line: None)
    started_at = datetime.now(UTC)
    t0 = time.monotonic()
    jobs = [
        Job(notebook=notebook, slug=stack, params={"scenario": check, "stack": stack}, label=check)
        for stack in stacks
        for check in checks
    ]
    outcomes = run_jobs(
        jobs,
        run_dir,
        timeout=timeout,
        say=say,
        name=lambda job: f"{job.label} on {job.slug}",
        after=lambda outcome: f"({cell_text(outcome.result, error=outcome.error)})",
    )
    cells = [
        Cell(
            o.job.slug,
            o.job.label,
            o.verdict,
            cell_text(o.result, error=o.error),
            o.html.name if o.html else None,
        )
        for o in outcomes
    ]
    matrix = ConformanceTable(
        stacks=list(stacks), checks=list(checks), cells=cells, versions=stack_versions(stacks)
    )
    data = {
        "run_id": run_id,
        "started_at": started_at.isoformat(timespec="seconds"),
        "wall_seconds": round(time.monotonic() - t0, 1),
        "counts": {str(v): sum(c.verdict == v for c in cells) for v in Verdict},
        **matrix.to_json(),
        "scenarios": [o.to_json(run_dir) for o in outcomes],
    }
    json_path = write_json(run_dir / "conformance.json", data)
    junit = write_junit(
        run_dir / "junit.xml", {"wall_seconds": data["wall_seconds"], "scenarios": data["scenarios"]}
    )
    html = write_conformance(run_dir / "conformance.html", data)
    return ConformanceRun(
        run_dir=run_dir, matrix=matrix, outcomes=outcomes, html=html, json=json_path, junit=junit
    )
