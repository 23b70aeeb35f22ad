"""`Table`: the DataFrame every view returns, drawn whole in a notebook and its HTML report.

pandas' own notebook repr cuts a long cell short (`.../f...` for a log path) and lets the
browser wrap a long one onto several lines (an endpoint); people then can neither read nor
copy it. A `Table` is a plain DataFrame for code (filter it, `to_string()` it, save it);
only its notebook repr differs: every cell on one line and in full, the index hidden, a
caption where the view has one (what the check asserted), and rows of a burst that did not
pass shaded.

A table wider than its output scrolls inside its own box (`SCROLL_BOX`), in JupyterLab
and in the nbconvert report alike: kept whole on one line, a wide one (the endpoint column)
would otherwise run past the output's right edge and be cut there. The caption stands above
the box and wraps to the output's width: as the table's own <caption> it would be as wide
as the table, and half of it out of view.
"""

from __future__ import annotations

import html
from typing import Any

import pandas as pd

__all__ = ["SCROLL_BOX", "Table", "table_of"]

# A row whose `verdict` is one of these is shaded in the notebook: the reason is in the row.
_MARKED = {"failed": "#fde7e9", "inconclusive": "#fff1e0", "error": "#f3e5f5"}
# Inline styles, not a stylesheet: the repr is all a notebook output keeps. `max-width` bounds
# the box by the output's width however wide the table is; the box then scrolls.
SCROLL_BOX = "overflow-x: auto; max-width: 100%"
_CAPTION = "text-align: left; color: #444; margin: 0 0 4px 0"


class Table(pd.DataFrame):
    """A DataFrame whose notebook repr shows every cell whole; `caption` says what it shows."""

    _metadata = ["caption"]
    caption: str = ""

    @property
    def _constructor(self) -> type[Table]:
        return Table

    def _repr_html_(self) -> str:
        styler = self.style.hide(axis="index").format(precision=3, na_rep="")
        styler = styler.set_table_styles(
            [
                {"selector": "td, th", "props": "white-space: nowrap; text-align: left; padding: 2px 8px"},
            ]
        )
        caption = ""
        if self.caption:
            # Still the table's description for a screen reader, by reference.
            caption_id = f"T_{styler.uuid}_caption"
            styler = styler.set_table_attributes(f'aria-describedby="{caption_id}"')
            caption = f'<p id="{caption_id}" style="{_CAPTION}">{html.escape(self.caption)}</p>'
        if "verdict" in self.columns:
            styler = styler.apply(_shade, axis=1)
        return (
            f'<div class="embedlab-table">{caption}<div style="{SCROLL_BOX}">{styler.to_html()}</div></div>'
        )


def _shade(row: pd.Series) -> list[str]:
    colour = _MARKED.get(str(row.get("verdict", "")).lower())
    return [f"background-color: {colour}" if colour else ""] * len(row)


def table_of(rows: list[dict[str, Any]], columns: list[str], *, caption: str = "") -> Table:
    frame = Table(rows, columns=columns)
    frame.caption = caption
    return frame
