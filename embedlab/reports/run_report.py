"""One notebook run's report (its HTML page, its JUnit case) and the pieces every page shares.

The run folder's front pages, index.html and conformance.html, are `embedlab.reports.index`.

Every page is self-contained: figures are inline PNGs and nothing loads from the network,
so a run folder can be zipped, mailed, or opened years later.
"""

from __future__ import annotations

import html
import json
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..defaults import IMAGE_ALT_KEY
from ..jsonio import load_json as load_results, write_bytes_atomic, write_json, write_text_atomic
from ..verdicts import Verdict

__all__ = [
    "INDEX_HTML",
    "JUNIT_XML",
    "RESULTS_JSON",
    "VERDICT_COLOURS",
    "VERDICT_CSS",
    "ReportImage",
    "escape",
    "export_html",
    "load_results",
    "notebook_figures",
    "report_title",
    "shown_time",
    "short",
    "verdict_badge",
    "write_json",
    "write_junit",
]

# The files every run folder holds (and the outputs folder's index): named here only.
RESULTS_JSON = "results.json"
JUNIT_XML = "junit.xml"
INDEX_HTML = "index.html"

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
.embedlab-banner h1 { font-size: 20px; margin: 0 0 6px 0; }
.embedlab-banner .meta { font-size: 13px; color: #444; margin-top: 6px; }
.embedlab-banner code { font-size: 12px; background: #eee; padding: 1px 4px; border-radius: 3px; }
"""
    + VERDICT_CSS
    + """</style>{%- endblock extra_css -%}
{%- block body_header -%}
{{ super() }}
{{ resources.embedlab_banner }}
{%- endblock body_header -%}
"""
    # The lab template's image, with the description the kernel drew it with as its alt
    # (`export_html` gives one to every image): nbconvert's own stand-in says nothing.
    + """{% block data_png scoped %}
<div class="jp-RenderedImage jp-OutputArea-output {{ extra_class }}">
<img src="data:image/png;base64,{{ output.data['image/png'] | escape_html }}"
alt="{{ output | get_metadata('"""
    + IMAGE_ALT_KEY
    + """', 'image/png') | escape_html }}"
{%- set width=output | get_metadata('width', 'image/png') -%}
{%- if width is not none %} width={{ width | escape_html }}{%- endif %}
{%- set height=output | get_metadata('height', 'image/png') -%}
{%- if height is not none %} height={{ height | escape_html }}{%- endif %}
{%- if output | get_metadata('needs_background', 'image/png') == 'light' %} class="jp-needs-light-background"{%- endif %}
>
</div>
{%- endblock data_png %}
"""
)


# -- one notebook's report -------------------------------------------------------------------------


def export_html(
    notebook: Path, target: Path, *, show_code: bool = False, banner: Mapping[str, Any] | None = None
) -> Path:
    """The executed notebook as one HTML page: outputs (and code, if `show_code`), no network.

    Its title (the page's and its heading) is the notebook and its parameter set; `banner`
    adds the verdict, the date and run time, the command that ran it and the parameters.
    Where `banner` leaves the date or the run time out, papermill's record in the notebook
    gives them. Every image has an alt text: the figure's own description, else the heading
    of the section it is in.
    """
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
    facts = {**_papermill_facts(nb), **{k: v for k, v in (banner or {}).items() if v not in (None, "")}}
    title = str(facts.get("title") or report_title(Path(notebook).stem))
    nb.metadata["title"] = title  # the page's <title>; the file keeps its own metadata
    for output, alt in _images(nb):
        output.setdefault("metadata", {}).setdefault("image/png", {})[IMAGE_ALT_KEY] = alt
    body, _ = exporter.from_notebook_node(nb, resources={"embedlab_banner": _banner(title, facts, target)})
    return write_text_atomic(target, body)


def report_title(name: str) -> str:
    """`same_model_load_balance--embedded-hash` as a title: `same_model_load_balance — embedded-hash`."""
    return " — ".join(part for part in name.split("--") if part)


def shown_time(stamp: str | None) -> str:
    """An ISO time as people read it, in UTC: `2026-12-01 14:03:05 UTC` ("" for none)."""
    from datetime import UTC, datetime

    if not stamp:
        return ""
    try:
        when = datetime.fromisoformat(str(stamp))
    except ValueError:
        return str(stamp)
    when = when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
    return when.strftime("%Y-%m-%d %H:%M:%S UTC")


def _papermill_facts(nb: Any) -> dict[str, Any]:
    """When the notebook ran and for how long, as papermill recorded it in the notebook."""
    record = nb.metadata.get("papermill") or {}
    return {"started_at": record.get("start_time"), "seconds": record.get("duration")}


def _banner(title: str, banner: Mapping[str, Any], target: Path) -> str:
    ran = [
        f"ran {escape(shown_time(banner.get('started_at')))}" if banner.get("started_at") else "",
        f"in {float(banner['seconds']):.1f} s" if isinstance(banner.get("seconds"), (int, float)) else "",
        f"by <code>{escape(banner['command'])}</code>" if banner.get("command") else "",
    ]
    meta = " ".join(part for part in ran if part)
    head = f"<h1>{escape(title)}</h1>" + (f'<div class="meta">{meta}</div>' if meta else "")
    if "verdict" not in banner:
        return f'<div class="embedlab-banner">{head}</div>'
    status = str(banner.get("verdict", ""))
    params = " ".join(f"{k}={short(v)}" for k, v in (banner.get("params") or {}).items())
    summary = str(banner.get("summary") or "")
    index = target.parent / INDEX_HTML
    return (
        f'<div class="embedlab-banner">{head}<div><span class="verdict {escape(status)}">{escape(status.upper())}</span>'
        + (f" &middot; {escape(summary)}" if summary and summary.lower() != status else "")
        + f' &middot; <a href="{escape(index.name)}">all scenarios</a></div>'
        + (f'<div class="params">parameters in effect: {escape(params)}</div>' if params else "")
        + "</div>"
    )


@dataclass(frozen=True)
class ReportImage:
    """One figure of an executed notebook: its base64 PNG, its description and its CSS size."""

    png: str
    alt: str
    width: int | None = None
    height: int | None = None

    def tag(self) -> str:
        """The figure as an <img>, at its CSS size: a 2x PNG drawn at its pixel size would be twice as big."""
        size = "".join(
            f' {name}="{value}"' for name, value in (("width", self.width), ("height", self.height)) if value
        )
        return f'<img alt="{escape(self.alt)}"{size} src="data:image/png;base64,{self.png}">'


def notebook_figures(notebook: Path) -> list[ReportImage]:
    """The PNGs of the executed notebook's cells tagged `report-figure`, in order."""
    import nbformat

    nb = nbformat.read(notebook, as_version=4)
    found = []
    for output, alt in _images(nb, tag=FIGURE_TAG):
        size = output.get("metadata", {}).get("image/png", {})
        found.append(
            ReportImage(
                png="".join(output["data"]["image/png"]).replace("\n", ""),
                alt=alt,
                width=size.get("width"),
                height=size.get("height"),
            )
        )
    return found


def _images(nb: Any, *, tag: str | None = None) -> Iterator[tuple[Any, str]]:
    """Each PNG output (of the cells tagged `tag`, where given) and its alt text: the description
    the figure carries, else the heading of the section it is in, else the notebook's title."""
    heading = str(nb.metadata.get("title") or "")
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            found = [line.lstrip("#").strip() for line in cell.source.splitlines() if line.startswith("#")]
            heading = found[-1] if found else heading
            continue
        if tag is not None and tag not in cell.get("metadata", {}).get("tags", []):
            continue
        for output in cell.get("outputs", []):
            if "image/png" not in output.get("data", {}):
                continue
            own = output.get("metadata", {}).get("image/png", {}).get(IMAGE_ALT_KEY)
            yield output, str(own or (f"Figure: {heading}" if heading else "Figure"))


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
        why = job.get("why") or f"the run is {results.get('status')}"  # a merge says why, per job
        ET.SubElement(case, "skipped", message=f"not run: {why}")
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
