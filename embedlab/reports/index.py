"""The run folders' front pages: index.html (every run, its key figures and figures, and what
changed since the last run in the folder) and conformance.html (the stack x check matrix), and
the matrix as Markdown for docs/conformance.md. The outputs folder's index.html, its runs, is
`embedlab.reports.runfiles`.

Every page is self-contained: figures are inline PNGs and nothing loads from the network.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..jsonio import write_text_atomic
from ..verdicts import RunStatus, Verdict
from ..wording import counted
from .run_report import VERDICT_CSS, ReportImage, escape, short, shown_time, verdict_badge

__all__ = [
    "APPENDIX_MARKER",
    "KV_MARKER",
    "SERVERS_MARKER",
    "compare_runs",
    "conformance_markdown",
    "replace_appendix",
    "write_conformance",
    "write_conformance_markdown",
    "write_index",
]

LATENCY_CHANGE = 0.25  # a latency percentile that moves by more than this share is flagged


# -- history --------------------------------------------------------------------------------------


def compare_runs(previous: Mapping[str, Any], current: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per scenario in either run: verdict flips, p-value and latency p50/p99 changes."""
    before = {s["name"]: s for s in previous.get("scenarios", [])}
    now = {s["name"]: s for s in current.get("scenarios", [])}
    rows = []
    for name in [*now, *(n for n in before if n not in now)]:
        old, new = before.get(name), now.get(name)
        row: dict[str, Any] = {
            "name": name,
            "old_status": old and old["verdict"],
            "new_status": new and new["verdict"],
        }
        row["change"] = (
            "new"
            if old is None
            else "removed"
            if new is None
            else ("flipped" if old["verdict"] != new["verdict"] else "same")
        )
        old_fig = (old or {}).get("figures") or {}
        new_fig = (new or {}).get("figures") or {}
        old_p, new_p = old_fig.get("p_values") or {}, new_fig.get("p_values") or {}
        row["p_values"] = {
            k: (old_p.get(k), new_p.get(k))
            for k in [*new_p, *(k for k in old_p if k not in new_p)]
            if (old_p.get(k), new_p.get(k)) != (None, None)  # bursts without a fairness test
        }
        for pct in ("p50", "p99"):
            a = (old_fig.get("latency_ms") or {}).get(pct)
            b = (new_fig.get("latency_ms") or {}).get(pct)
            row[pct] = (a, b)
            row[f"{pct}_change"] = (
                (b - a) / a if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a > 0 else None
            )
        rows.append(row)
    return rows


# -- index.html -----------------------------------------------------------------------------------

_CSS = (
    """
body { font-family: system-ui, -apple-system, Segoe UI, sans-serif; margin: 24px; color: #222; max-width: 1400px; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 18px; margin-top: 28px; } h3 { font-size: 15px; }
.meta { color: #555; font-size: 13px; }
table { border-collapse: collapse; font-size: 13px; width: 100%; }
th, td { border: 1px solid #ddd; padding: 5px 8px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
.verdict { font-weight: 700; padding: 1px 7px; border-radius: 4px; color: #fff; white-space: nowrap; }
"""
    + VERDICT_CSS
    + """
.params, .figs { font-family: ui-monospace, monospace; font-size: 12px; }
.flag { color: #c62828; font-weight: 700; } .warn { color: #ef6c00; font-weight: 700; } .muted { color: #777; }
.scenario { border-top: 1px solid #ddd; padding-top: 8px; margin-top: 18px; }
.scenario .row { display: flex; flex-wrap: wrap; gap: 12px; align-items: flex-start; }
.scenario img { max-width: 100%; margin: 8px 0; border: 1px solid #eee; }
.reason { color: #c62828; font-size: 13px; } .reason.reported { color: #37474f; }
.verdict.running, .verdict.interrupted, .verdict.incomplete, .verdict.missing { background: #ef6c00; }
.verdict.complete { background: #546e7a; }
"""
)


def write_index(
    path: Path,
    results: Mapping[str, Any],
    *,
    previous: Mapping[str, Any] | None = None,
    figures: Mapping[str, Sequence[ReportImage]] | None = None,
) -> Path:
    """The run's front page: summary table, changes since `previous`, and every figure inline."""
    scenarios = results.get("scenarios", [])
    counts = results.get("counts", {})
    tally = ", ".join(f"{n} {k}" for k, n in counts.items() if n) or "nothing ran"
    reported = counts.get(Verdict.REPORTED, 0)
    status = results.get("status", RunStatus.COMPLETE)
    overall: Verdict | RunStatus  # the badge: the run's status until it completes, then its verdict
    if status != RunStatus.COMPLETE:
        overall = RunStatus(status)
        heading = (
            f"{status.upper()} &middot; {len(scenarios)} OF {results.get('planned', len(scenarios))} FINISHED"
        )
    elif not results.get("passed"):
        overall, heading = Verdict.FAILED, "FAILED"
    elif reported:
        overall, heading = Verdict.REPORTED, f"NO FAILURES &middot; {reported} REPORTED, NOT ASSERTED"
    else:
        overall, heading = Verdict.PASSED, "ALL PASSED"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>embedlab regress {escape(results.get('run_id', ''))}: {overall.upper()}</title><style>{_CSS}</style></head><body>",
        f'<h1>embedlab regress <span class="verdict {overall}">{heading}</span></h1>',
        f'<p class="meta">run <code>{escape(results.get("run_id", ""))}</code> &middot; started {escape(shown_time(results.get("started_at")))}'
        f" &middot; wall {results.get('wall_seconds', 0):.1f} s &middot; {counted(len(scenarios), 'run')}: {escape(tally)}"
        f" &middot; matrix <code>{escape(results.get('matrix', ''))}</code></p>",
        _command_line(results),
        _parts(results),
        _unfinished(results),
        _history_section(results, previous),
        _summary_table(scenarios),
        "<h2>Figures</h2>",
        *(_scenario_section(s, (figures or {}).get(s["name"], ())) for s in scenarios),
        "</body></html>",
    ]
    return write_text_atomic(path, "\n".join(parts))


def _unfinished(results: Mapping[str, Any]) -> str:
    """Where a run stopped, or had got to: the notebooks that did not run (yet). A merge of
    shards says it with its parts (`_parts`), shard by shard."""
    names = [job["name"] for job in results.get("unfinished") or []]
    if not names or results.get("merged"):
        return ""
    status = results.get("status")
    why = (
        f"interrupted by {results['interrupted_by']}"
        if results.get("interrupted_by")
        else "its process ended before it finished"
        if status == RunStatus.INTERRUPTED
        else "still running"
    )
    return f'<p class="meta">{escape(why)}; not run: {escape(", ".join(names))}</p>'


def _parts(results: Mapping[str, Any]) -> str:
    """Which part of the matrix a shard is, or which shards a merged run was made of, and what
    was wrong with them (`embedlab.reports.shards`, `embedlab.reports.merge`)."""
    of = f"matrix <code>{escape(results.get('matrix_hash') or '?')}</code> at commit <code>{escape(short(results.get('commit') or 'unknown', 14))}</code>"
    shard = results.get("shard")
    if shard:
        return (
            f'<p class="meta shard">shard {shard["index"]} of {shard["count"]} of {of}; '
            f"{counted(sum(j['shard'] == shard['index'] for j in shard['plan']), 'job')} of {len(shard['plan'])}, "
            f"balanced by {escape(shard.get('balanced_by') or '')}</p>"
        )
    merged = results.get("merged")
    if not merged:
        return ""
    rows = "".join(
        f"<tr><td>{part['index']} of {merged['count']}</td><td><code>{escape(part.get('run_id') or '')}</code></td>"
        f"<td>{verdict_badge(part['status'])}</td><td>{part.get('finished', 0)} of {part.get('planned', 0)}</td>"
        f"<td>{escape(part.get('host') or '')}</td><td>{_wall(part.get('wall_seconds'))}</td></tr>"
        for part in merged.get("shards", [])
    )
    problems = "".join(f'<p class="meta flag">{escape(line)}</p>' for line in merged.get("problems", []))
    found = sum(part["status"] != "missing" for part in merged.get("shards", []))
    return (
        f'<p class="meta merged">merged from {counted(found, "shard")} of '
        f"{merged['count']}, of {of}</p>{problems}"
        "<table><tr><th>shard</th><th>run</th><th>status</th><th>jobs</th><th>host</th><th>wall</th></tr>"
        + rows
        + "</table>"
    )


def _wall(seconds: Any) -> str:
    return f"{seconds:.1f} s" if isinstance(seconds, (int, float)) else "&ndash;"


def _command_line(results: Mapping[str, Any]) -> str:
    """The command that made the run, and which jobs a `-k` filter kept."""
    only = results.get("only") or []
    command = results.get("command")
    if not command and not only:
        return ""
    chosen = ""
    if only:
        total = results.get("matrix_jobs")
        of = f" of the matrix's {total}" if isinstance(total, int) else ""
        chosen = (
            f" &middot; <strong>filtered</strong>: only the {counted(len(results.get('scenarios', [])), 'job')}{of}"
            f" whose name contains {' or '.join(f'<code>{escape(k)}</code>' for k in only)}"
        )
    ran = f"command <code>{escape(command)}</code>" if command else ""
    return f'<p class="meta command">{ran}{chosen}</p>'


def _summary_table(scenarios: Sequence[Mapping[str, Any]]) -> str:
    rows = []
    for s in scenarios:
        links = [
            f'<a href="{escape(s[key])}">{label}</a>'
            for key, label in (
                ("report_html", "report"),
                ("notebook_out", "notebook"),
                ("result_json", "result"),
                ("logs", "logs"),
            )
            if s.get(key)
        ]
        rows.append(
            f'<tr><td><a href="#{escape(s["name"])}">{escape(s["notebook"])}</a><br><span class="muted">{escape(s["slug"])}</span></td>'
            f'<td class="params">{_params_html(s.get("params", {}))}</td>'
            f'<td>{verdict_badge(s["verdict"])}{_seconds(s)}</td><td class="figs">{_figures_text(s.get("figures") or {})}</td>'
            f"<td>{' &middot; '.join(links)}</td></tr>"
        )
    return (
        "<h2>Scenarios</h2><table><tr><th>scenario</th><th>parameters</th><th>verdict</th>"
        "<th>key figures</th><th>links</th></tr>" + "".join(rows) + "</table>"
    )


def _seconds(s: Mapping[str, Any]) -> str:
    seconds = s.get("seconds")
    return f'<br><span class="muted">{seconds:.1f} s</span>' if isinstance(seconds, (int, float)) else ""


def _scenario_section(s: Mapping[str, Any], pngs: Sequence[ReportImage]) -> str:
    reasons = s.get("reasons") or ([s["error"]] if s.get("error") else [])
    style = "reason reported" if s["verdict"] == Verdict.REPORTED else "reason"
    images = (
        "".join(png.tag() for png in pngs)
        or '<p class="muted">no figures: the notebook stopped before drawing them (see its report)</p>'
    )
    report = f' &middot; <a href="{escape(s["report_html"])}">full report</a>' if s.get("report_html") else ""
    return (
        f'<div class="scenario" id="{escape(s["name"])}"><h3>{escape(s["name"])} {verdict_badge(s["verdict"])}{report}</h3>'
        + "".join(f'<div class="{style}">{escape(r)}</div>' for r in reasons)
        + f'<div class="row">{images}</div></div>'
    )


def _history_section(results: Mapping[str, Any], previous: Mapping[str, Any] | None) -> str:
    passed_over = results.get("not_compared") or []
    skipped = (
        f'<p class="muted">Not compared: {counted(len(passed_over), "newer run")} that did not complete '
        f"({escape(', '.join(passed_over))}).</p>"
        if passed_over
        else ""
    )
    if previous is None:
        return (
            '<h2>Changes</h2><p class="muted">No earlier run in this outputs folder to compare with.</p>'
            + skipped
        )
    rows = []
    for row in compare_runs(previous, results):
        verdict = (
            f"{verdict_badge(row['old_status'])} &rarr; {verdict_badge(row['new_status'])}"
            if row["change"] == "flipped"
            else verdict_badge(row["new_status"] or row["old_status"])
            + f' <span class="muted">{row["change"]}</span>'
        )
        p_text = (
            "<br>".join(
                f"{escape(k)}: {_num(a, 'p')} &rarr; {_num(b, 'p')}" for k, (a, b) in row["p_values"].items()
            )
            or "&ndash;"
        )
        latency = "<br>".join(
            f"{pct} {_num(row[pct][0], 'ms')} &rarr; {_num(row[pct][1], 'ms')} {_change(row[f'{pct}_change'])}"
            for pct in ("p50", "p99")
        )
        flag = ' class="flag"' if row["change"] == "flipped" else ""
        rows.append(
            f'<tr><td{flag}>{escape(row["name"])}</td><td>{verdict}</td><td class="figs">{p_text}</td><td class="figs">{latency}</td></tr>'
        )
    flips = sum(r["change"] == "flipped" for r in compare_runs(previous, results))
    return (
        f"<h2>Changes since run <code>{escape(previous.get('run_id', '?'))}</code></h2>"
        f'<p class="meta">{counted(flips, "verdict flip")}; latency changes over {LATENCY_CHANGE:.0%} are flagged.</p>'
        + skipped
        + "<table><tr><th>scenario</th><th>verdict</th><th>p-values (before &rarr; now)</th><th>latency (before &rarr; now)</th></tr>"
        + "".join(rows)
        + "</table>"
    )


def _figures_text(fig: Mapping[str, Any]) -> str:
    """A run's key figures (`ScenarioResult.key_figures()`): the bursts' own, then the scenario's."""
    lines = [
        f"p({escape(burst)}) = {_num(p, 'p')}"
        for burst, p in (fig.get("p_values") or {}).items()
        if p is not None
    ]
    failed = fig.get("failed_requests")
    if failed:
        lines.append(f'<span class="flag">{counted(failed, "failed request")}</span>')
    lines += [
        f"{escape(label)}: {escape(value)}"
        for label, value in (fig.get("own") or {}).items()
        if value is not None
    ]
    lat = fig.get("latency_ms") or {}
    if lat:
        lines.append(f"p50 {_num(lat.get('p50'), 'ms')} &middot; p99 {_num(lat.get('p99'), 'ms')}")
    for burst, deltas in (fig.get("deltas") or {}).items():
        if deltas is not None:
            counts = ", ".join(f"worker {i}: {d:g}" for i, d in enumerate(deltas))
            lines.append(f"requests counted per worker, burst {escape(burst)}: {counts}")
    return "<br>".join(lines) or "&ndash;"


def _params_html(params: Mapping[str, Any]) -> str:
    return "<br>".join(f"{escape(k)}={escape(short(v))}" for k, v in params.items()) or "&ndash;"


def _num(value: Any, unit: str) -> str:
    if not isinstance(value, (int, float)):
        return "&ndash;"
    return f"{value:.3g}" if unit == "p" else f"{value:.2f} ms"


def _change(share: float | None) -> str:
    if share is None:
        return ""
    text = f"({share:+.0%})"
    return (
        f'<span class="warn">{text}</span>'
        if abs(share) > LATENCY_CHANGE
        else f'<span class="muted">{text}</span>'
    )


# -- conformance.html ---------------------------------------------------------------------------


def write_conformance(path: Path, matrix: Mapping[str, Any]) -> Path:
    """The router x check matrix: each cell's verdict and figure, linked to its notebook report."""
    cells = {(c["stack"], c["check"]): c for c in matrix.get("cells", [])}
    head = "".join(f"<th>{escape(check)}</th>" for check in matrix["checks"])
    rows = []
    for stack in matrix["stacks"]:
        tds = []
        for check in matrix["checks"]:
            cell = cells.get((stack, check))
            if cell is None:
                tds.append('<td class="muted">not run</td>')
                continue
            link = f' <a href="{escape(cell["report"])}">report</a>' if cell.get("report") else ""
            tds.append(
                f'<td>{verdict_badge(cell["verdict"])}{link}<div class="figs">{escape(cell["text"])}</div></td>'
            )
        version = matrix.get("versions", {}).get(stack, "")
        rows.append(
            f'<tr><th>{escape(stack)}<br><span class="muted">{escape(version)}</span></th>{"".join(tds)}</tr>'
        )
    counts = ", ".join(f"{n} {v}" for v, n in sorted(matrix.get("counts", {}).items()) if n)
    page = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>embedlab conformance {escape(matrix.get('run_id', ''))}</title><style>{_CSS}</style></head><body>",
        "<h1>embedlab conformance: every check against every router</h1>",
        f'<p class="meta">run <code>{escape(matrix.get("run_id", ""))}</code> &middot; started {escape(matrix.get("started_at", ""))}'
        f" &middot; wall {matrix.get('wall_seconds', 0):.0f} s &middot; {escape(counts)}</p>",
        '<p class="meta">passed: the check held; failed: it did not; reported: figures shown, not asserted (what the '
        "router decides); unsupported: the router cannot do what the check needs, in its own words.</p>",
        f'<table class="matrix"><tr><th>stack</th>{head}</tr>{"".join(rows)}</table>',
        "</body></html>",
    ]
    return write_text_atomic(path, "\n".join(page))


def conformance_markdown(matrix: Mapping[str, Any], *, command: str) -> str:
    """The matrix as a Markdown page (docs/conformance.md), with the versions it was measured on."""
    cells = {(c["stack"], c["check"]): c for c in matrix.get("cells", [])}
    lines = [
        "# Router conformance",
        "",
        f"Generated by `{command}` on {matrix.get('started_at', '')}; do not edit by hand. Each cell is a registered",
        "scenario run against the stack with its own defaults (the router's default policy included), hash",
        "workers behind it, verdicts from the workers' own counters. passed: the check held; failed: it did",
        "not; reported: figures shown, not asserted (what the router decides); unsupported: the router cannot",
        "do what the check needs, in its own words.",
        "",
        "| stack | version | " + " | ".join(matrix["checks"]) + " |",
        "|---|---|" + "---|" * len(matrix["checks"]),
    ]
    for stack in matrix["stacks"]:
        row = [
            f"**{c['verdict'].upper()}** {c['text']}".replace("|", "/")
            if (c := cells.get((stack, check)))
            else "not run"
            for check in matrix["checks"]
        ]
        lines.append(f"| {stack} | {matrix.get('versions', {}).get(stack, '')} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


# Where docs/conformance.md's matrix ends and sections that other generators write begin
# (bench/render_docs.py's 16-replica split, from a benchmark's JSON): `embedlab conformance
# --markdown` rewrites the matrix and keeps them; each of them rewrites only its part.
APPENDIX_MARKER = "<!-- appended by other generators (bench/render_docs.py); kept by embedlab conformance -->"
# Where the rows of routers over other worker servers begin (`embedlab conformance
# --worker-servers`, conformance.write_servers_markdown): the main matrix's run keeps them.
SERVERS_MARKER = (
    "<!-- worker-server rows (embedlab conformance --worker-servers); kept by the main matrix's run -->"
)
# Where the KV checks' rows begin (`embedlab conformance --kv`, conformance.write_kv_markdown),
# after the worker-server rows: the main matrix's run keeps them too.
KV_MARKER = "<!-- KV rows (embedlab conformance --kv); kept by the main matrix's run -->"


def write_conformance_markdown(path: Path, matrix: Mapping[str, Any], *, command: str) -> Path:
    """The matrix as Markdown at `path`, keeping the sections after it in the page there (from the
    first of `SERVERS_MARKER`, `KV_MARKER` and `APPENDIX_MARKER` it holds)."""
    kept = ""
    if path.exists():
        text = path.read_text()
        found = [
            at for marker in (SERVERS_MARKER, KV_MARKER, APPENDIX_MARKER) if (at := text.find(marker)) >= 0
        ]
        kept = text[min(found) :] if found else ""
    page = conformance_markdown(matrix, command=command)
    return write_text_atomic(path, page + ("\n" + kept if kept else ""))


def replace_appendix(page: str, section: str) -> str:
    """`page` with what follows its `APPENDIX_MARKER` (or nothing, where it has none) replaced by `section`."""
    at = page.find(APPENDIX_MARKER)
    head = (page[:at] if at >= 0 else page).rstrip() + "\n"
    return f"{head}\n{APPENDIX_MARKER}\n\n{section.strip()}\n"
