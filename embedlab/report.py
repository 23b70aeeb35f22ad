"""What `embedlab regress` leaves for people and CI: HTML reports, results.json, junit.xml, index.html.

Every page is self-contained: figures are inline PNGs and nothing loads from the network,
so a run folder can be zipped, mailed, or opened years later.
"""

from __future__ import annotations

import html
import json
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .jsonio import load_json as load_results, write_json
from .verdicts import Verdict
from .wording import counted

__all__ = [
    "compare_runs",
    "export_html",
    "load_results",
    "notebook_figures",
    "write_index",
    "write_json",
    "write_junit",
]

FIGURE_TAG = "report-figure"  # cells whose images index.html shows inline

# One colour per verdict, on every page. Only a pass is green; a report (figures shown,
# nothing asserted) is a neutral slate, so it never reads as a pass.
VERDICT_COLOURS = {
    Verdict.PASSED: "#2e7d32",
    Verdict.FAILED: "#c62828",
    Verdict.INCONCLUSIVE: "#ef6c00",
    Verdict.REPORTED: "#546e7a",
    Verdict.UNSUPPORTED: "#9e9e9e",
    Verdict.ERROR: "#6a1b9a",
}
_VERDICT_CSS = "".join(f".verdict.{v} {{ background: {c}; }}\n" for v, c in VERDICT_COLOURS.items())
LATENCY_CHANGE = 0.25  # a latency percentile that moves by more than this share is flagged

# nbconvert's lab template, minus everything it would fetch from a CDN (require.js,
# MathJax, mermaid, the widget manager: a progress bar saved its widget state, but shows as
# text), plus a banner with the verdict and a way back to the index.
_TEMPLATE = (
    """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block jupyter_widgets -%}{%- endblock jupyter_widgets -%}
{%- block extra_css -%}<style>"""
    + """
.embedlab-banner { font-family: system-ui, sans-serif; margin: 12px 24px; padding: 10px 14px; border-radius: 6px;
  border: 1px solid #ccc; background: #fafafa; }
.embedlab-banner .verdict { font-weight: 700; padding: 2px 8px; border-radius: 4px; color: #fff; }
.embedlab-banner .params { font-family: monospace; font-size: 12px; color: #444; margin-top: 6px; }
"""
    + _VERDICT_CSS
    + """</style>{%- endblock extra_css -%}
{%- block body_header -%}
{{ super() }}
{{ resources.embedlab_banner }}
{%- endblock body_header -%}
"""
)


# -- one notebook's report -------------------------------------------------------------------------


def export_html(
    notebook: Path, target: Path, *, show_code: bool = False, banner: Mapping[str, Any] | None = None
) -> Path:
    """The executed notebook as one HTML page: outputs (and code, if `show_code`), no network."""
    import jinja2
    import nbformat
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(
        extra_loaders=[jinja2.DictLoader({"embedlab.html.j2": _TEMPLATE})],
        template_file="embedlab.html.j2",
        exclude_input=not show_code,
        exclude_input_prompt=not show_code,
        exclude_output_prompt=True,
    )
    nb = nbformat.read(notebook, as_version=4)
    body, _ = exporter.from_notebook_node(nb, resources={"embedlab_banner": _banner(banner or {}, target)})
    target.write_text(body)
    return target


def _banner(banner: Mapping[str, Any], target: Path) -> str:
    if not banner:
        return ""
    status = str(banner.get("verdict", ""))
    params = " ".join(f"{k}={_short(v)}" for k, v in (banner.get("params") or {}).items())
    summary = str(banner.get("summary") or "")
    index = target.parent / "index.html"
    return (
        f'<div class="embedlab-banner"><span class="verdict {_e(status)}">{_e(status.upper())}</span> '
        f"<strong>{_e(banner.get('name', ''))}</strong>"
        + (f" &middot; {_e(summary)}" if summary and summary.lower() != status else "")
        + f' &middot; <a href="{_e(index.name)}">all scenarios</a>'
        + (f'<div class="params">{_e(params)}</div>' if params else "")
        + "</div>"
    )


def notebook_figures(notebook: Path) -> list[str]:
    """Base64 PNGs from the executed notebook's cells tagged `report-figure`, in order."""
    nb = json.loads(Path(notebook).read_text())
    found = []
    for cell in nb.get("cells", []):
        if FIGURE_TAG not in cell.get("metadata", {}).get("tags", []):
            continue
        for output in cell.get("outputs", []):
            png = output.get("data", {}).get("image/png")
            if png:
                found.append(
                    "".join(png).replace("\n", "") if isinstance(png, list) else png.replace("\n", "")
                )
    return found


# -- junit ----------------------------------------------------------------------------------------


def write_junit(path: Path, results: Mapping[str, Any]) -> Path:
    """One testcase per notebook and parameter set; a failed verdict is a <failure>, a crash an <error>."""
    scenarios = results.get("scenarios", [])
    suite = ET.Element(
        "testsuite",
        name="embedlab.regress",
        tests=str(len(scenarios)),
        failures=str(sum(s["verdict"] in (Verdict.FAILED, Verdict.INCONCLUSIVE) for s in scenarios)),
        errors=str(sum(s["verdict"] == Verdict.ERROR for s in scenarios)),
        time=f"{results.get('wall_seconds', 0):.2f}",
        timestamp=str(results.get("started_at", "")),
    )
    for s in scenarios:
        case = ET.SubElement(
            suite,
            "testcase",
            classname=f"embedlab.regress.{s['notebook']}",
            name=s["slug"],
            time=f"{s['seconds']:.2f}",
        )
        report = s.get("report_html") or s.get("notebook_out") or "(no report)"
        status = Verdict(s["verdict"])
        if not status.ok:
            kind = "error" if status == Verdict.ERROR else "failure"
            detail = "\n".join([s.get("summary") or "", *(s.get("reasons") or []), f"report: {report}"])
            ET.SubElement(case, kind, message=s.get("summary") or status, type=status).text = detail
        out = [f"verdict: {status}", f"report: {report}", f"params: {json.dumps(s.get('params', {}))}"]
        if status == Verdict.REPORTED:
            # A passing case that asserted nothing: its figures are what a reader must see.
            out[1:1] = [
                f"reported, not asserted: {s.get('summary') or ''}",
                *(f"  {r}" for r in s.get("reasons") or []),
            ]
        ET.SubElement(case, "system-out").text = "\n".join(out)
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    path.write_bytes(ET.tostring(root, encoding="utf-8", xml_declaration=True))
    return path


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
    + _VERDICT_CSS
    + """
.params, .figs { font-family: ui-monospace, monospace; font-size: 12px; }
.flag { color: #c62828; font-weight: 700; } .warn { color: #ef6c00; font-weight: 700; } .muted { color: #777; }
.scenario { border-top: 1px solid #ddd; padding-top: 8px; margin-top: 18px; }
.scenario .row { display: flex; flex-wrap: wrap; gap: 12px; align-items: flex-start; }
.scenario img { max-width: 100%; margin: 8px 0; border: 1px solid #eee; }
.reason { color: #c62828; font-size: 13px; } .reason.reported { color: #37474f; }
"""
)


def write_index(
    path: Path,
    results: Mapping[str, Any],
    *,
    previous: Mapping[str, Any] | None = None,
    figures: Mapping[str, Sequence[str]] | None = None,
) -> Path:
    """The run's front page: summary table, changes since `previous`, and every figure inline."""
    scenarios = results.get("scenarios", [])
    counts = results.get("counts", {})
    tally = ", ".join(f"{n} {k}" for k, n in counts.items() if n) or "nothing ran"
    reported = counts.get(Verdict.REPORTED, 0)
    if not results.get("passed"):
        overall, heading = Verdict.FAILED, "FAILED"
    elif reported:
        overall, heading = Verdict.REPORTED, f"NO FAILURES &middot; {reported} REPORTED, NOT ASSERTED"
    else:
        overall, heading = Verdict.PASSED, "ALL PASSED"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>embedlab regress {_e(results.get('run_id', ''))}: {overall.upper()}</title><style>{_CSS}</style></head><body>",
        f'<h1>embedlab regress <span class="verdict {overall}">{heading}</span></h1>',
        f'<p class="meta">run <code>{_e(results.get("run_id", ""))}</code> &middot; started {_e(results.get("started_at", ""))}'
        f" &middot; wall {results.get('wall_seconds', 0):.1f} s &middot; {counted(len(scenarios), 'run')}: {_e(tally)}"
        f" &middot; matrix <code>{_e(results.get('matrix', ''))}</code></p>",
        _history_section(results, previous),
        _summary_table(scenarios),
        "<h2>Figures</h2>",
        *(_scenario_section(s, (figures or {}).get(s["name"], ())) for s in scenarios),
        "</body></html>",
    ]
    path.write_text("\n".join(parts))
    return path


def _summary_table(scenarios: Sequence[Mapping[str, Any]]) -> str:
    rows = []
    for s in scenarios:
        links = [
            f'<a href="{_e(s[key])}">{label}</a>'
            for key, label in (
                ("report_html", "report"),
                ("notebook_out", "notebook"),
                ("result_json", "result"),
                ("logs", "logs"),
            )
            if s.get(key)
        ]
        rows.append(
            f'<tr><td><a href="#{_e(s["name"])}">{_e(s["notebook"])}</a><br><span class="muted">{_e(s["slug"])}</span></td>'
            f'<td class="params">{_params_html(s.get("params", {}))}</td>'
            f'<td>{_verdict(s["verdict"])}</td><td class="figs">{_figures_text(s.get("figures") or {})}</td>'
            f"<td>{' &middot; '.join(links)}</td></tr>"
        )
    return (
        "<h2>Scenarios</h2><table><tr><th>scenario</th><th>parameters</th><th>verdict</th>"
        "<th>key figures</th><th>links</th></tr>" + "".join(rows) + "</table>"
    )


def _scenario_section(s: Mapping[str, Any], pngs: Sequence[str]) -> str:
    reasons = s.get("reasons") or ([s["error"]] if s.get("error") else [])
    style = "reason reported" if s["verdict"] == Verdict.REPORTED else "reason"
    images = (
        "".join(
            f'<img alt="{_e(s["name"])} figure {i + 1}" src="data:image/png;base64,{png}">'
            for i, png in enumerate(pngs)
        )
        or '<p class="muted">no figures: the notebook stopped before drawing them (see its report)</p>'
    )
    report = f' &middot; <a href="{_e(s["report_html"])}">full report</a>' if s.get("report_html") else ""
    return (
        f'<div class="scenario" id="{_e(s["name"])}"><h3>{_e(s["name"])} {_verdict(s["verdict"])}{report}</h3>'
        + "".join(f'<div class="{style}">{_e(r)}</div>' for r in reasons)
        + f'<div class="row">{images}</div></div>'
    )


def _history_section(results: Mapping[str, Any], previous: Mapping[str, Any] | None) -> str:
    if previous is None:
        return '<h2>Changes</h2><p class="muted">No earlier run in this outputs folder to compare with.</p>'
    rows = []
    for row in compare_runs(previous, results):
        verdict = (
            f"{_verdict(row['old_status'])} &rarr; {_verdict(row['new_status'])}"
            if row["change"] == "flipped"
            else _verdict(row["new_status"] or row["old_status"])
            + f' <span class="muted">{row["change"]}</span>'
        )
        p_text = (
            "<br>".join(
                f"{_e(k)}: {_num(a, 'p')} &rarr; {_num(b, 'p')}" for k, (a, b) in row["p_values"].items()
            )
            or "&ndash;"
        )
        latency = "<br>".join(
            f"{pct} {_num(row[pct][0], 'ms')} &rarr; {_num(row[pct][1], 'ms')} {_change(row[f'{pct}_change'])}"
            for pct in ("p50", "p99")
        )
        flag = ' class="flag"' if row["change"] == "flipped" else ""
        rows.append(
            f'<tr><td{flag}>{_e(row["name"])}</td><td>{verdict}</td><td class="figs">{p_text}</td><td class="figs">{latency}</td></tr>'
        )
    flips = sum(r["change"] == "flipped" for r in compare_runs(previous, results))
    return (
        f"<h2>Changes since run <code>{_e(previous.get('run_id', '?'))}</code></h2>"
        f'<p class="meta">{counted(flips, "verdict flip")}; latency changes over {LATENCY_CHANGE:.0%} are flagged.</p>'
        "<table><tr><th>scenario</th><th>verdict</th><th>p-values (before &rarr; now)</th><th>latency (before &rarr; now)</th></tr>"
        + "".join(rows)
        + "</table>"
    )


def _figures_text(fig: Mapping[str, Any]) -> str:
    """A run's key figures (`ScenarioResult.key_figures()`): the bursts' own, then the scenario's."""
    lines = [
        f"p({_e(burst)}) = {_num(p, 'p')}"
        for burst, p in (fig.get("p_values") or {}).items()
        if p is not None
    ]
    failed = fig.get("failed_requests")
    if failed:
        lines.append(f'<span class="flag">{counted(failed, "failed request")}</span>')
    lines += [
        f"{_e(label)}: {_e(value)}" for label, value in (fig.get("own") or {}).items() if value is not None
    ]
    lat = fig.get("latency_ms") or {}
    if lat:
        lines.append(f"p50 {_num(lat.get('p50'), 'ms')} &middot; p99 {_num(lat.get('p99'), 'ms')}")
    for burst, deltas in (fig.get("deltas") or {}).items():
        if deltas is not None:
            counts = ", ".join(f"worker {i}: {d:g}" for i, d in enumerate(deltas))
            lines.append(f"requests counted per worker, burst {_e(burst)}: {counts}")
    return "<br>".join(lines) or "&ndash;"


def _params_html(params: Mapping[str, Any]) -> str:
    return "<br>".join(f"{_e(k)}={_e(_short(v))}" for k, v in params.items()) or "&ndash;"


def _verdict(status: str | None) -> str:
    status = status or "none"
    return f'<span class="verdict {_e(status)}">{_e(status.upper())}</span>'


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


def _short(value: Any, limit: int = 60) -> str:
    text = ",".join(str(v) for v in value) if isinstance(value, (list, tuple)) else str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


# -- conformance.html ---------------------------------------------------------------------------


def write_conformance(path: Path, matrix: Mapping[str, Any]) -> Path:
    """The router x check matrix: each cell's verdict and figure, linked to its notebook report."""
    cells = {(c["stack"], c["check"]): c for c in matrix.get("cells", [])}
    head = "".join(f"<th>{_e(check)}</th>" for check in matrix["checks"])
    rows = []
    for stack in matrix["stacks"]:
        tds = []
        for check in matrix["checks"]:
            cell = cells.get((stack, check))
            if cell is None:
                tds.append('<td class="muted">not run</td>')
                continue
            link = f' <a href="{_e(cell["report"])}">report</a>' if cell.get("report") else ""
            tds.append(
                f'<td>{_verdict(cell["verdict"])}{link}<div class="figs">{_e(cell["text"])}</div></td>'
            )
        version = matrix.get("versions", {}).get(stack, "")
        rows.append(
            f'<tr><th>{_e(stack)}<br><span class="muted">{_e(version)}</span></th>{"".join(tds)}</tr>'
        )
    counts = ", ".join(f"{n} {v}" for v, n in sorted(matrix.get("counts", {}).items()) if n)
    page = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>embedlab conformance {_e(matrix.get('run_id', ''))}</title><style>{_CSS}</style></head><body>",
        "<h1>embedlab conformance: every check against every router</h1>",
        f'<p class="meta">run <code>{_e(matrix.get("run_id", ""))}</code> &middot; started {_e(matrix.get("started_at", ""))}'
        f" &middot; wall {matrix.get('wall_seconds', 0):.0f} s &middot; {_e(counts)}</p>",
        '<p class="meta">passed: the check held; failed: it did not; reported: figures shown, not asserted (what the '
        "router decides); unsupported: the router cannot do what the check needs, in its own words.</p>",
        f'<table class="matrix"><tr><th>stack</th>{head}</tr>{"".join(rows)}</table>',
        "</body></html>",
    ]
    path.write_text("\n".join(page))
    return path


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
