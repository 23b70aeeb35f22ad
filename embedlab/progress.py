"""Progress people can watch: a deployment's launch, step by step, and bars that end as text.

    dep = Deployment(spec, progress=LaunchProgress())
    dep.start()    # which process is starting, what its readiness waits for, the time so far

Where the bar shows depends on where embedlab runs:

- **In a notebook** (JupyterLab, papermill): a tqdm widget while it runs, replaced by a
  line of text when it ends. A saved notebook, and the HTML report made from it, shows
  that line: never a widget frozen at "0%", which is all a saved tqdm widget keeps.
- **On a terminal**: a tqdm bar on stderr.
- **Anywhere else** (a log file, CI): no bar, one line per step on stderr.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TextIO

__all__ = ["Bar", "LaunchObserver", "LaunchProgress", "LaunchStep", "StepKind", "in_notebook"]

StepKind = Literal["starting", "waiting", "poll", "ready", "failed", "done"]


@dataclass(frozen=True)
class LaunchStep:
    """One step of a deployment's start, as `Deployment(progress=...)` reports it.

    - `starting`: `process` was launched; `detail` is its log file.
    - `waiting`: the harness waits for `process` to be ready; `detail` says what for.
    - `poll`: still waiting (several times a second).
    - `ready`: `process` is ready.
    - `failed`: the start failed, in the wait under way if any; `detail` is the error's
      first line (the full error, with its log tail, is what `start()` raises).
    - `done`: every process was ready; `seconds` is the whole start.

    `seconds` of `waiting`, `poll` and `ready` count from the process's launch.
    """

    kind: StepKind
    process: str = ""
    detail: str = ""
    seconds: float = 0.0


LaunchObserver = Callable[[LaunchStep], None]


def in_notebook() -> bool:
    """True inside a Jupyter kernel (JupyterLab, papermill) where ipywidgets can draw a bar."""
    module = sys.modules.get("IPython")
    shell = module.get_ipython() if module is not None else None
    if shell is None or getattr(shell, "kernel", None) is None:
        return False
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return True


class Bar:
    """A tqdm bar that ends as text: `close(final)` leaves `final` where the bar was.

    `write(line)` adds a line that stays (above the bar in a notebook); `describe(desc,
    detail=...)` labels the bar, with a longer line of detail while it runs. Keyword-only options:
    `total`, `desc`, `unit`, `bar_format` (tqdm's; default its own), `file` (terminal or log;
    default stderr), `notebook` (default: detected), `lines` (a notebook keeps room for
    `write` and `detail` above the bar; without it they are printed).
    """

    def __init__(
        self,
        *,
        total: int,
        desc: str = "",
        unit: str = "it",
        bar_format: str | None = None,
        file: TextIO | None = None,
        notebook: bool | None = None,
        lines: bool = False,
    ) -> None:
        self._file = file or sys.stderr
        self._notebook = in_notebook() if notebook is None else notebook
        self._lines: list[str] = []
        self._detail = ""
        self._lines_handle: Any = None
        self._bar_handle: Any = None
        self._closed = False
        fmt = bar_format
        if self._notebook:
            from IPython.display import display
            from tqdm.notebook import tqdm as notebook_tqdm

            # The widget draws the bar itself where the format says {bar}, at whatever width.
            fmt = re.sub(r"\{bar:\d+\}", "{bar}", fmt) if fmt else fmt
            # Displayed through handles of our own, so that close() can replace the widget by text.
            self._tqdm: Any = notebook_tqdm(
                total=total, desc=desc, unit=unit, leave=False, display=False, bar_format=fmt
            )
            if lines:
                self._lines_handle = display(_text(""), raw=True, display_id=True)
            self._bar_handle = display(self._tqdm.container, display_id=True)
        elif _is_terminal(self._file):
            from tqdm import tqdm

            self._tqdm = tqdm(
                total=total,
                desc=desc,
                unit=unit,
                leave=False,
                file=self._file,
                bar_format=fmt,
                dynamic_ncols=True,
            )
        else:
            self._tqdm = None

    def update(self, n: int = 1) -> None:
        if self._tqdm is not None:
            self._tqdm.update(n)

    def grow(self, n: int = 1) -> None:
        """`n` more to do than the bar was made with (a process launched after the first wait)."""
        if self._tqdm is None:
            return
        self._tqdm.total += n
        if self._notebook:
            self._tqdm.container.children[-2].max = self._tqdm.total  # the widget's own scale
        self._tqdm.refresh()

    def describe(self, desc: str, *, detail: str = "") -> None:
        """Label the bar with `desc` (short) and redraw it, with its elapsed time.

        `detail`, a longer line, goes below the lines that stay in a notebook (where a
        widget's label is narrow) and after `desc` on a terminal (which cuts what does not
        fit); it goes when the bar closes. A log gets neither: only lines that stay.
        """
        if self._tqdm is None:
            return
        if self._notebook:
            if detail != self._detail and self._lines_handle is not None:
                self._detail = detail
                self._show_lines()
            self._tqdm.set_description_str(desc, refresh=True)
        else:
            self._tqdm.set_description_str(f"{desc}: {detail}" if detail else desc, refresh=True)

    def _show_lines(self) -> None:
        self._lines_handle.update(
            _text("\n".join([*self._lines, *([self._detail] if self._detail else [])])), raw=True
        )

    def write(self, line: str) -> None:
        """A line that stays: what happened, for the notebook, the terminal or the log."""
        self._lines.append(line)
        if self._lines_handle is not None:
            self._show_lines()
        elif self._notebook:
            print(line, flush=True)  # stdout: an ordinary output line, not stderr's red
        elif self._tqdm is not None:
            self._tqdm.write(line, file=self._file)
        else:
            print(line, file=self._file, flush=True)

    def close(self, final: str = "") -> None:
        """Remove the bar; `final` (if any) takes its place. Safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        if self._notebook:
            # The text replaces the widget first, so no saved notebook keeps a frozen bar.
            self._bar_handle.update(_text(final), raw=True)
            if self._detail and self._lines_handle is not None:
                self._detail = ""
                self._show_lines()
            self._tqdm.close()
            return
        if self._tqdm is not None:
            self._tqdm.close()
        if final:
            print(final, file=self._file, flush=True)


def _text(text: str) -> dict[str, str]:
    return {"text/plain": text}


def _is_terminal(file: TextIO) -> bool:
    isatty = getattr(file, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


# Counts and time first, the process and what it waits for last: a narrow terminal cuts the end.
LAUNCH_FORMAT = "{n_fmt}/{total_fmt} ready [{elapsed}] {bar:12} {desc}"


@dataclass(kw_only=True)
class LaunchProgress:
    """Shows a deployment's start: which process it waits for, on what, and for how long.

    Pass it as `Deployment(spec, progress=LaunchProgress())`; `embedlab.start_deployment`
    and `run_scenario(plan, progress=True)` do. Keyword options: `file` (default stderr,
    outside notebooks), `notebook` (default: detected), `refresh_s` (how often the elapsed
    time is redrawn while a process starts).
    """

    file: TextIO | None = None
    notebook: bool | None = None
    refresh_s: float = 0.5
    _started: list[str] = field(default_factory=list)
    _unannounced: list[str] = field(default_factory=list)
    _bar: Bar | None = None
    _current: str = ""
    _what: str = ""
    _last_draw: float = 0.0
    _ready: list[tuple[str, float]] = field(default_factory=list)

    def __call__(self, event: LaunchStep) -> None:
        handler = getattr(self, f"_on_{event.kind}", None)
        if handler is not None:
            handler(event)

    def _on_starting(self, event: LaunchStep) -> None:
        self._started.append(event.process)
        self._unannounced.append(event.process)
        if self._bar is not None:  # launched after a first wait (etcd first, then the rest)
            self._bar.grow(1)

    def _on_waiting(self, event: LaunchStep) -> None:
        if self._bar is None:
            self._bar = Bar(
                total=len(self._started),
                unit="ready",
                bar_format=LAUNCH_FORMAT,
                file=self.file,
                notebook=self.notebook,
                lines=True,
            )
        if self._unannounced:
            self._bar.write(f"started {', '.join(self._unannounced)}; waiting until each is ready")
            self._unannounced.clear()
        self._current, self._what = event.process, event.detail
        self._draw(event.seconds)

    def _on_poll(self, event: LaunchStep) -> None:
        now = time.monotonic()
        if now - self._last_draw >= self.refresh_s:
            self._draw(event.seconds)

    def _draw(self, seconds: float) -> None:
        # Whole seconds, floored as tqdm floors its elapsed time beside them.
        self._last_draw = time.monotonic()
        if self._bar is not None:
            self._bar.describe(
                f"{self._current}, {int(seconds)} s",
                detail=f"waiting for {self._current}: ready once {self._what}",
            )

    def _on_ready(self, event: LaunchStep) -> None:
        self._ready.append((event.process, event.seconds))
        if self._bar is not None:
            self._bar.update(1)
            self._bar.write(f"{event.process} ready after {event.seconds:.1f} s ({event.detail})")

    def _on_done(self, event: LaunchStep) -> None:
        self._finish(f"all {len(self._ready)} processes ready in {event.seconds:.1f} s")

    def _on_failed(self, event: LaunchStep) -> None:
        who = event.process or self._current or "the launch"
        self._finish(f"{who} FAILED: {event.detail}; everything started was stopped")

    def _finish(self, final: str) -> None:
        if self._bar is None:  # failed before any wait began: nothing was drawn yet
            self._bar = Bar(
                total=max(1, len(self._started)),
                unit="ready",
                file=self.file,
                notebook=self.notebook,
                lines=True,
            )
        self._bar.close(final)
