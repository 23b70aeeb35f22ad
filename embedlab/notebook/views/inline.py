"""How a figure of the views shows in a notebook: a PNG at twice its size, with alt text.

IPython's inline backend draws a figure at 1x (a 9.6-inch figure is an 891 x 351 px PNG
at 100 dpi), soft on a 2x display, and with no description: nbconvert then writes "No
description has been provided for this image" into every report. A `NotebookFigure`
displays itself instead (`_ipython_display_`), in every kernel that shows it: JupyterLab's
and papermill's alike, whatever `%matplotlib inline` or `InlineBackend.figure_formats` said.
It draws at twice the figure's dpi, says its size in CSS pixels (the output's `width` and
`height` metadata, which JupyterLab and nbconvert both honour), and carries a description
built from its titles, axis labels and legends (`describe`) in the output's metadata under
`IMAGE_ALT_KEY`, where `embedlab.reports.run_report` finds it for the report's `alt`.

matplotlib is imported here at the top: this module is imported when a figure is made.
"""

from __future__ import annotations

import io
import struct
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ...defaults import IMAGE_ALT_KEY

__all__ = ["SCALE", "NotebookFigure", "adopt", "describe", "png_bundle"]

SCALE = 2  # device pixels per CSS pixel the PNG is drawn for
ALT_LIMIT = 600  # characters: a screen reader reads all of it


class NotebookFigure(Figure):
    """A matplotlib Figure that shows itself in a notebook as a 2x PNG with alt text."""

    def _ipython_display_(self) -> None:
        from IPython.display import display

        data, metadata = png_bundle(self)
        display(data, metadata=metadata, raw=True)


def adopt(fig: Figure) -> Figure:
    """`fig` as a `NotebookFigure`: a plain Figure (a scenario's own `plot`) gains its display.

    Only the class changes: `NotebookFigure` adds methods and no state.
    """
    if type(fig) is Figure:
        fig.__class__ = NotebookFigure
    return fig


def png_bundle(fig: Figure) -> tuple[dict[str, Any], dict[str, Any]]:
    """The display data of `fig`: a base64 PNG at `SCALE` x its dpi, its CSS size and description.

    Cut to the drawn content with a margin, as the inline backend does (`bbox_inches`
    "tight"): the legends sit outside the axes and would be cut by the figure's edge.
    """
    import base64

    buffer = io.BytesIO()
    fig.savefig(
        buffer,
        format="png",
        dpi=fig.dpi * SCALE,
        bbox_inches="tight",
        facecolor=fig.get_facecolor(),
        edgecolor=fig.get_edgecolor(),
    )
    png = buffer.getvalue()
    width, height = png_size(png)
    alt = describe(fig)
    return (
        {"image/png": base64.b64encode(png).decode("ascii"), "text/plain": alt},
        {"image/png": {"width": width // SCALE, "height": height // SCALE, IMAGE_ALT_KEY: alt}},
    )


def png_size(png: bytes) -> tuple[int, int]:
    """Pixel width and height from a PNG's header (its IHDR chunk comes first)."""
    width, height = struct.unpack(">II", png[16:24])
    return width, height


def describe(fig: Figure) -> str:
    """What `fig` shows, in words: its title, then each panel's title, axes and legend.

    Built from the figure's own text, so it says what the figure says: "same-model on
    embedded: PASSED. Panel 1: burst 'embed-model': ok, p = 0.53; x: worker 0 embed-model,
    worker 1 embed-model; y: requests counted (delta); legend: expected, observed. Panel 2: ..."
    """
    suptitle = fig.get_suptitle()
    panels = [text for ax in fig.axes if ax.get_visible() and (text := _describe_axes(ax))]
    parts = [_flat(suptitle)] if suptitle else []
    if len(panels) == 1:
        parts.append(panels[0])
    else:
        parts += [f"Panel {n}: {text}" for n, text in enumerate(panels, 1)]
    text = ". ".join(p.rstrip(".") for p in parts if p) or f"A figure with {len(fig.axes)} panels"
    return text if len(text) <= ALT_LIMIT else text[: ALT_LIMIT - 1] + "…"


def _describe_axes(ax: Axes) -> str:
    title = "; ".join(_flat(t) for t in (ax.get_title("left"), ax.get_title(), ax.get_title("right")) if t)
    bits = [title] if title else []
    for axis, label in (("x", ax.get_xlabel()), ("y", ax.get_ylabel())):
        categories = _categories(ax, axis)
        if label or categories:
            bits.append(f"{axis}: " + (_flat(label) if label else categories))
    legend = ax.get_legend()
    if legend is not None:
        names = [t.get_text() for t in legend.get_texts() if t.get_text()]
        if names:
            bits.append("legend: " + ", ".join(_flat(n) for n in names))
    return "; ".join(bits)


def _categories(ax: Axes, axis: str) -> str:
    """The tick labels of an axis of names (workers, stacks), else "": numbers say nothing here."""
    which = ax.xaxis if axis == "x" else ax.yaxis
    labels = [_flat(t.get_text(), joiner=" ") for t in which.get_ticklabels()]
    labels = [label for label in labels if label]
    return "" if all(_numeric(label) for label in labels) else ", ".join(labels)


def _numeric(label: str) -> bool:
    try:
        float(label.replace("\N{MINUS SIGN}", "-"))
    except ValueError:
        return False
    return True


def _flat(text: str, *, joiner: str = ", ") -> str:
    """One line: a title's lines joined, as a reader would say them."""
    return joiner.join(line.strip() for line in str(text).splitlines() if line.strip())
