"""A real JupyterLab for the browser tests, and the page moves a user makes in it.

JupyterLab is the venv's, on 127.0.0.1 with a token and a free port, serving a temp folder
of notebooks (the committed ones are never touched). It runs as a ManagedProcess, stopped
by process group also when a test fails, and nothing it started (kernel, frontend, workers)
outlives it: checked by PID. Every wait is for a concrete state of the page (an execution
count, an output's text), never a fixed sleep.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from embedlab.cluster.ports import release_port, reserve_port
from embedlab.cluster.managed_process import ManagedProcess
from embedlab.defaults import KERNEL_DISPLAY_NAME, RUN_ROOT_ENV

from ..proctools import descendants_of, kill_all, processes_under, wait_gone
from .browser import chromium, keep_screenshot

BIN = Path(sys.executable).parent
# One step on a loaded 2-core machine: a launch, or Run All of the whole notebook.
WAIT_MS = int(os.environ.get("EMBEDLAB_BROWSER_WAIT_MS", 240_000))
# JupyterLab's own chatter would float toasts over the cells; none of it is under test.
SETTINGS = {"@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False}}


@dataclass
class LabServer:
    """The JupyterLab under test, and everything it was seen to start."""

    proc: ManagedProcess
    url: str
    token: str
    runs: Path  # EMBEDLAB_RUN_ROOT of its kernels: every deployment's run folder lies here
    seen: set[int] = field(default_factory=set)

    def notebook_url(self, name: str) -> str:
        # `reset`: this notebook alone, not the documents an earlier page of the test left open.
        return f"{self.url}/lab/tree/{name}?reset&token={self.token}"

    def remember(self) -> set[int]:
        """Every process below the server now (kernel, frontend, workers), by PID."""
        assert self.proc.pid is not None
        self.seen |= set(descendants_of(self.proc.pid)) | set(processes_under(self.runs))
        return self.seen

    def deployment_pids(self) -> set[int]:
        return set(processes_under(self.runs))

    def shutdown(self) -> list[int]:
        """Stop the server's process group; returns whatever it started that is still alive."""
        self.remember()
        # SIGTERM: the server shuts its kernels down, and a kernel's exit stops its deployment.
        self.proc.stop()
        return wait_gone(sorted(self.seen), timeout=60)


@contextmanager
def lab_server(tmp_path: Path, root: Path) -> Iterator[LabServer]:
    """JupyterLab serving the notebooks in `root`; on leaving, it is stopped and nothing it
    started may outlive it."""
    settings = tmp_path / "settings"
    for name, values in SETTINGS.items():
        path = settings / f"{name}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))

    port = reserve_port()
    token = secrets.token_hex(16)
    runs = tmp_path / "runs"
    env = {**os.environ, RUN_ROOT_ENV: str(runs), "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")}
    argv = [
        str(BIN / "jupyter-lab"),
        "--no-browser",
        "--ip",
        "127.0.0.1",
        "--port",
        str(port),
        "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        f"--LabApp.workspaces_dir={tmp_path / 'workspaces'}",
        f"--LabApp.user_settings_dir={settings}",
        # Trust records stay in memory, not in the user's Jupyter data folder.
        "--NotebookNotary.db_file=:memory:",
        f"--NotebookNotary.secret_file={tmp_path / 'notebook_secret'}",
    ]
    if os.geteuid() == 0:
        argv.append("--allow-root")  # JupyterLab refuses root without it, and containers often run as root
    # The server asks each kernel to shut down, and a kernel stops its deployment as it exits: time for both.
    proc = ManagedProcess("jupyterlab", argv, log_path=tmp_path / "jupyterlab.log", env=env, stop_timeout=60)
    server = LabServer(proc=proc, url=f"http://127.0.0.1:{port}", token=token, runs=runs)
    try:
        proc.start()
        with httpx.Client(timeout=5.0) as client:
            proc.wait_ready(
                lambda: client.get(f"{server.url}/api/status", params={"token": token}).status_code == 200,
                timeout=120,
                what="its /api/status answered 200",
            )
        yield server
    finally:
        survivors = server.shutdown()
        kill_all(survivors)  # the last resort, by PID: a failed test must not leave servers behind
        release_port(port)
    assert survivors == [], f"processes JupyterLab started outlived it: {survivors}"


def lab_page(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A Chromium page for a fixture (`yield from`); a failed test keeps a screenshot of it."""
    for browser in chromium():
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        page.set_default_timeout(WAIT_MS)
        try:
            yield page
            if getattr(request.node, "failed_call", False):
                # What the page showed when the test failed, for people and CI.
                page.screenshot(path=str(tmp_path / "jupyterlab-failure.png"), full_page=True)
                keep_screenshot(tmp_path / "jupyterlab-failure.png")
        finally:
            context.close()


def cell(page: Any, marker: str) -> Any:
    """The one cell whose source contains `marker`.

    JupyterLab attaches a notebook's cells and their editors after its first paint, so a cell
    far down can still lack its editor when the kernel reports idle (CI saw 0 matches once):
    wait for one to match, then count.
    """
    found = page.locator(".jp-Notebook .jp-Cell", has=page.locator(".cm-content", has_text=marker))
    found.first.wait_for(state="attached")
    assert found.count() == 1, f"{found.count()} cells contain {marker!r}"
    return found


def execution_count(cell: Any) -> int | None:
    """The number in the cell's `[n]:` prompt; None while unrun or queued (`[ ]:`, `[*]:`).

    textContent, not innerText: JupyterLab skips rendering cells out of view, and their
    innerText is empty.
    """
    match = re.search(r"\[(\d+)\]", cell.locator(".jp-InputPrompt").text_content() or "")
    return int(match.group(1)) if match else None


def wait_executed(page: Any, cell: Any, *, after: int | None) -> int:
    """Wait until `cell` shows an execution count other than `after`: its run has finished."""
    handle = cell.element_handle()
    page.wait_for_function(
        """([el, after]) => {
            const m = (el.querySelector('.jp-InputPrompt')?.textContent || '').match(/\\[(\\d+)\\]/);
            return m !== null && Number(m[1]) !== after;
        }""",
        arg=[handle, after],
    )
    count = execution_count(cell)
    assert count is not None
    return count


def run(page: Any, cell: Any) -> int:
    """Run one cell as a user does (click into it, Shift+Enter); returns its new execution count."""
    before = execution_count(cell)
    cell.locator(".cm-content").click()
    page.keyboard.press("Shift+Enter")
    return wait_executed(page, cell, after=before)


def outputs(cell: Any) -> str:
    """The text of the cell's outputs (textContent: out of view, JupyterLab renders nothing to read)."""
    # tqdm's notebook bar writes figure spaces (U+2007) to keep its text aligned.
    return (cell.locator(".jp-OutputArea").text_content() or "").replace("\u2007", " ")


def error_text(cell: Any) -> str:
    """What the cell's error output shows, as a reader sees it."""
    error = cell.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    return (error.text_content() or "").strip()


def has_error(cell: Any) -> bool:
    """Whether the cell shows an error now (no waiting: `error_text` waits for one to appear)."""
    return cell.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']").count() > 0


def add_cell_below(page: Any, above: Any, source: str) -> Any:
    """Insert a code cell below `above` holding `source` (JupyterLab's keys: Escape, B, Enter)."""
    above.locator(".cm-content").click()
    page.keyboard.press("Escape")
    page.keyboard.press("b")
    page.keyboard.press("Enter")
    page.keyboard.insert_text(source)
    # The new cell is the active one; cells inserted later go further down, so its place holds.
    index = page.evaluate(
        "() => [...document.querySelectorAll('.jp-Notebook .jp-Cell')].findIndex(c => c.classList.contains('jp-mod-active'))"
    )
    added = page.locator(".jp-Notebook .jp-Cell").nth(index)
    assert added.locator(".cm-content").inner_text() == source
    return added


def replace_source(page: Any, cell: Any, source: str) -> None:
    cell.locator(".cm-content").click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(source)


def delete_cell(page: Any, cell: Any) -> None:
    """Delete `cell` as a user does (JupyterLab's keys: Escape, D, D)."""
    count = page.locator(".jp-Notebook .jp-Cell").count()
    cell.locator(".cm-content").click()
    page.keyboard.press("Escape")
    page.keyboard.press("d")
    page.keyboard.press("d")
    page.wait_for_function(
        "n => document.querySelectorAll('.jp-Notebook .jp-Cell').length === n - 1", arg=count
    )


def shot_cells(page: Any, tmp_path: Path, cells: list[Any], name: str) -> None:
    """One screenshot of several neighbouring cells, kept in outputs/screenshots/."""
    cells[0].scroll_into_view_if_needed()
    boxes = [c.bounding_box() for c in cells]
    top, left = min(b["y"] for b in boxes), min(b["x"] for b in boxes)
    bottom, right = max(b["y"] + b["height"] for b in boxes), max(b["x"] + b["width"] for b in boxes)
    path = tmp_path / name
    page.screenshot(path=str(path), clip={"x": left, "y": top, "width": right - left, "height": bottom - top})
    keep_screenshot(path)


def shot(page: Any, tmp_path: Path, target: Any, name: str) -> None:
    """A screenshot of one cell, kept in outputs/screenshots/."""
    target.scroll_into_view_if_needed()
    path = tmp_path / name
    target.screenshot(path=str(path))
    keep_screenshot(path)


def run_all(page: Any) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()


def wait_settled(page: Any) -> None:
    """Until no cell is queued or running (`[*]`) and the kernel is idle."""
    page.wait_for_function(
        """() => ![...document.querySelectorAll('.jp-Notebook .jp-InputPrompt')].some(p => p.textContent.includes('*'))
            && document.querySelector('.jp-Notebook-ExecutionIndicator')?.dataset.status === 'idle'"""
    )


def open_notebook(page: Any, lab: LabServer, name: str) -> None:
    page.goto(lab.notebook_url(name))
    page.wait_for_function(
        "name => document.querySelector('.jp-Toolbar-kernelName')?.innerText.trim() === name",
        arg=KERNEL_DISPLAY_NAME,
    )
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']")
    # Committed metadata matches what the kernel reports: opening it changed nothing to save.
    assert page.locator(".lm-TabBar-tab.jp-mod-dirty").count() == 0, "the notebook opened as modified"
