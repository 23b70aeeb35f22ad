"""One notebook run's report (its HTML page, its JUnit case) and the pieces every page shares.

The run folder's front pages, index.html and conformance.html, are `embedlab.pages`.

Every page is self-contained: figures are inline PNGs and nothing loads from the network,
so a run folder can be zipped, mailed, or opened years later.
"""

from __future__ import annotations

import html
import json
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .jsonio import load_json as load_results, write_bytes_atomic, write_json, write_text_atomic
from .verdicts import Verdict

__all__ = [
    "VERDICT_COLOURS",
    "VERDICT_CSS",
    "escape",
    "export_html",
    "load_results",
    "notebook_figures",
    "short",
    "verdict_badge",
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
VERDICT_CSS = "".join(f".verdict.{v} {{ background: {c}; }}\n" for v, c in VERDICT_COLOURS.items())

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
    + VERDICT_CSS
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
    return write_text_atomic(target, body)


def _banner(banner: Mapping[str, Any], target: Path) -> str:
    if not banner:
        return ""
    status = str(banner.get("verdict", ""))
    params = " ".join(f"{k}={short(v)}" for k, v in (banner.get("params") or {}).items())
    summary = str(banner.get("summary") or "")
    index = target.parent / "index.html"
    return (
        f'<div class="embedlab-banner"><span class="verdict {escape(status)}">{escape(status.upper())}</span> '
        f"<strong>{escape(banner.get('name', ''))}</strong>"
        + (f" &middot; {escape(summary)}" if summary and summary.lower() != status else "")
        + f' &middot; <a href="{escape(index.name)}">all scenarios</a>'
        + (f'<div class="params">{escape(params)}</div>' if params else "")
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
    unfinished = results.get("unfinished") or []  # a run stopped before them: skipped cases
    suite = ET.Element(
        "testsuite",
        name="embedlab.regress",
        tests=str(len(scenarios) + len(unfinished)),
        failures=str(sum(s["verdict"] in (Verdict.FAILED, Verdict.INCONCLUSIVE) for s in scenarios)),
        errors=str(sum(s["verdict"] == Verdict.ERROR for s in scenarios)),
        skipped=str(len(unfinished)),
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
    for job in unfinished:
        case = ET.SubElement(
            suite, "testcase", classname=f"embedlab.regress.{job['notebook']}", name=job["slug"], time="0"
        )
        ET.SubElement(case, "skipped", message=f"not run: the run is {results.get('status')}")
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return write_bytes_atomic(path, ET.tostring(root, encoding="utf-8", xml_declaration=True))


def verdict_badge(status: str | None) -> str:
    status = status or "none"
    return f'<span class="verdict {escape(status)}">{escape(status.upper())}</span>'


def short(value: Any, limit: int = 60) -> str:
    text = ",".join(str(v) for v in value) if isinstance(value, (list, tuple)) else str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def escape(value: Any) -> str:
    return html.escape(str(value), quote=True)
