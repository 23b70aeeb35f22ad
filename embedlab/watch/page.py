"""`embedlab watch --html DIR`: a page that reloads itself, and the JSON it is drawn from.

    DIR/index.html   the verdicts now, a timeline of each check's verdict, the alarms and events
    DIR/watch.json   the same as data

Both are rewritten whole (jsonio.write_text_atomic) at most every `every_s`, so a browser
reloading it every few seconds never reads half a page. The timeline is inline SVG: the page
needs nothing but itself.
"""

from __future__ import annotations

import html
import math
import time
from dataclasses import asdict
from pathlib import Path

from ..jsonio import write_json, write_text_atomic
from .exporter import WatchSnapshot
from .names import FAILING, INCONCLUSIVE, OK
from .runner import Watch

__all__ = ["Page"]

_COLOURS = {OK: "#2e7d32", FAILING: "#c62828", INCONCLUSIVE: "#9e9e9e"}
_REFRESH_S = 5


class Page:
    def __init__(self, folder: str | Path, *, every_s: float = 2.0) -> None:
        self.folder = Path(folder)
        self.every_s = every_s
        self._last = -math.inf

    def write(self, watch: Watch, snap: WatchSnapshot, *, force: bool = False) -> None:
        if not force and time.monotonic() - self._last < self.every_s:
            return
        self._last = time.monotonic()
        self.folder.mkdir(parents=True, exist_ok=True)
        write_json(self.folder / "watch.json", _data(watch, snap))
        write_text_atomic(self.folder / "index.html", _page(watch, snap))


def _data(watch: Watch, snap: WatchSnapshot) -> dict[str, object]:
    return {
        "frontend_url": watch.frontend,
        "counters": {"source": snap.counters[0], "url": snap.counters[1], "said": snap.counters_said},
        "scrape_wait_s": snap.scrape_wait_s,
        "uptime_s": snap.uptime_s,
        "states": [{**asdict(s), "key": {"check": s.key.check, "model": s.key.model}} for s in snap.states],
        "shares": [asdict(s) for s in snap.shares],
        "request_rates": snap.request_rates,
        "pool_rate": snap.pool_rate,
        "blocks": snap.blocks,
        "transitions": [
            {
                "at": t.at,
                "check": t.key.check,
                "model": t.key.model,
                "old": t.old,
                "new": t.new,
                "why": t.why,
                "alarm": t.alarm,
            }
            for t in watch.transitions
        ],  # fmt: skip
        "events": [asdict(e) for e in watch.events],
    }


def _page(watch: Watch, snap: WatchSnapshot) -> str:
    e = html.escape
    rows = "".join(
        f"<tr><td>{e(s.key.check)}</td><td>{e(s.key.model)}</td>"
        f'<td style="color:{_COLOURS[s.state]};font-weight:bold">{e(s.state)}</td>'
        f"<td>{s.evidence_log10:.2f} / {s.threshold_log10:.2f}</td><td>{_num(s.ruled_out)}</td>"
        f"<td>{s.alarms}</td><td>{e(s.why)}</td></tr>"
        for s in snap.states
    )
    alarms = [t for t in watch.transitions if t.alarm]
    alarm_rows = (
        "".join(f"<li>{t.at:.0f} s: {e(str(t.key))}: {e(t.why)}</li>" for t in reversed(alarms))
        or "<li>none</li>"
    )
    events = "".join(
        f"<li>{ev.at:.0f} s <b>{e(ev.kind)}</b>: {e(ev.detail)}</li>" for ev in list(watch.events)[-50:][::-1]
    )
    rate = f"{snap.pool_rate:.1f}" if not math.isnan(snap.pool_rate) else "?"
    own = ", ".join(f"{e(m)} {_num(r, 2)}" for m, r in snap.request_rates.items())
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><meta http-equiv="refresh" content="{_REFRESH_S}">
<title>embedlab watch: {e(watch.frontend)}</title>
<style>body{{font-family:sans-serif;margin:1.5em}} td,th{{padding:2px 8px;text-align:left}}
table{{border-collapse:collapse}} tr:nth-child(even){{background:#f4f4f4}}</style></head>
<body><h1>embedlab watch</h1>
<p>{e(watch.frontend)}, {len(watch.pool.models)} workers; watching for {snap.uptime_s:.0f} s;
the pool's rate {rate} req/s, the check's own (req/s): {own}; blocks: {e(str(snap.blocks))}</p>
<p>{e(snap.counters_said)}</p>
<table><tr><th>check</th><th>model</th><th>verdict</th><th>evidence (log10 e / alarm at)</th>
<th>smallest fault ruled out</th><th>alarms</th><th>why</th></tr>{rows}</table>
<h2>Timeline</h2>{_timeline(watch, snap)}
<h2>Alarms</h2><ul>{alarm_rows}</ul>
<h2>Events (newest first)</h2><ul>{events}</ul>
</body></html>
"""


def _timeline(watch: Watch, snap: WatchSnapshot) -> str:
    """One bar per check, coloured by its verdict over time."""
    width, row, left = 900, 22, 170
    end = max(snap.uptime_s, 1.0)
    scale = (width - left) / end
    bars = []
    for k, state in enumerate(snap.states):
        y = 10 + k * row
        bars.append(f'<text x="0" y="{y + 13}" font-size="12">{html.escape(str(state.key))}</text>')
        changes = [t for t in watch.transitions if t.key == state.key]
        spans, at, current = [], 0.0, INCONCLUSIVE
        for t in changes:
            spans.append((at, t.at, current))
            at, current = t.at, t.new
        spans.append((at, end, current))
        for start, stop, verdict in spans:
            if stop > start:
                bars.append(
                    f'<rect x="{left + start * scale:.1f}" y="{y}" width="{(stop - start) * scale:.1f}" '
                    f'height="{row - 6}" fill="{_COLOURS[verdict]}"><title>{verdict} from {start:.0f} s</title></rect>'
                )
        for t in changes:
            if t.alarm:
                bars.append(f'<text x="{left + t.at * scale:.1f}" y="{y + 13}" font-size="14">&#9888;</text>')
    height = 20 + len(snap.states) * row
    axis = f'<text x="{left}" y="{height}" font-size="11">0 s</text><text x="{width - 40}" y="{height}" font-size="11">{end:.0f} s</text>'
    return f'<svg width="{width}" height="{height + 5}">{"".join(bars)}{axis}</svg>'


def _num(x: float, digits: int = 3) -> str:
    return "?" if math.isnan(x) else ("any" if math.isinf(x) else f"{x:.{digits}g}")
