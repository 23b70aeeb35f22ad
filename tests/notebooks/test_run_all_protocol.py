"""Run All after a good run, with a bad parameter, spoken to the `embedlab` kernel as JupyterLab speaks.

JupyterLab's Run All sends every cell at once, each with `stop_on_error`, and ipykernel
executes those that arrive after it has drained its queue of the aborted ones: a cell
below a failed plan cell could show the previous Run All's verdict (issue 19). Here each
scenario notebook runs once with good, cheap parameters (so a plan, a result and a
deployment of that run are bound in the kernel), then three times more with a bad
parameter, every cell sent 0, 20 and 50 ms apart with its cell id in the metadata, as
JupyterLab sends it. After the failing cell nothing may show anything: each later cell is
aborted, or fails with the one line of `EarlierCellFailedError` naming the failed cell by
its role and its own `In [N]`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from embedlab.defaults import KERNEL_NAME, RUN_ROOT_ENV

from ..proctools import kill_all, processes_under, wait_gone
from .conftest import NOTEBOOKS, code_cells, read

GAPS_S = (0.0, 0.02, 0.05)
# Good parameters that run in seconds; then one bad value that fails the plan cell.
NOTEBOOKS_UNDER_TEST: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "same_model_load_balance": ({}, {"engine": "nonsense"}),
    "multi_model_dispatch": ({}, {"engine": "nonsense"}),
    "mixed_traffic": ({"requests": 44}, {"engine": "nonsense"}),
    "failover": ({}, {"engine": "nonsense"}),
    "scenario": ({"scenario": "same-model"}, {"engine": "nonsense"}),
    "explore_routing": (
        {"sweep_weights": [[1, 1]], "sweep_requests": 20, "bursts": 1},
        {"engine": "nonsense"},
    ),
    # Its good run is a quick same-model burst on Dynamo; what matters is that a result is bound.
    "cluster_faults": ({"scenario": "same-model", "discovery": "file", "hosts": 1}, {"engine": "nonsense"}),
    "router_conformance": ({"stacks": ["embedded"], "checks": ["same-model"]}, {"stacks": ["nonsense"]}),
}
VERDICT_WORDS = ("PASSED", "FAILED", "REPORTED", "INCONCLUSIVE", "UNSUPPORTED")


class Kernel:
    """The `embedlab` kernel, its messages collected per request."""

    def __init__(self, env: dict[str, str]) -> None:
        from jupyter_client.manager import KernelManager

        # Its sockets in a folder of its own: by default they are kernel-ipc-1 to -5 in the current
        # directory, which every xdist worker shares, so two kernels starting at once can take the
        # same sockets (and reject each other's messages: "Invalid Signature").
        self.folder = Path(tempfile.mkdtemp(prefix="embedlab-test-kernel-"))
        self.manager = KernelManager(
            kernel_name=KERNEL_NAME, transport="ipc", connection_file=str(self.folder / "kernel.json")
        )
        self.manager.start_kernel(env=env)
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=120)
        self.counts: list[int | None] = []  # the execution count of each cell the last run_all sent

    def send(self, code: str, cell_id: str) -> str:
        content = {
            "code": code,
            "silent": False,
            "store_history": True,
            "user_expressions": {},
            "allow_stdin": False,
            "stop_on_error": True,
        }
        msg = self.client.session.msg("execute_request", content, metadata={"cellId": cell_id})
        self.client.shell_channel.send(msg)
        return msg["header"]["msg_id"]

    def collect(
        self, ids: list[str], *, timeout: float
    ) -> tuple[dict[str, dict[str, Any]], dict[str, list[dict[str, Any]]]]:
        """Every reply's content and every iopub output, by request, until all replies are in."""
        statuses: dict[str, dict[str, Any]] = {}
        outputs: dict[str, list[dict[str, Any]]] = {i: [] for i in ids}
        idle: set[str] = set()
        deadline = time.monotonic() + timeout
        while (len(statuses) < len(ids) or idle < set(ids)) and time.monotonic() < deadline:
            for channel, get in ((self.client.shell_channel, "reply"), (self.client.iopub_channel, "iopub")):
                while channel.msg_ready():
                    msg = channel.get_msg(timeout=1)
                    parent = msg["parent_header"].get("msg_id")
                    if parent not in outputs:
                        continue
                    kind = msg["header"]["msg_type"]
                    if get == "reply":
                        statuses[parent] = msg["content"]
                    elif kind == "status" and msg["content"]["execution_state"] == "idle":
                        idle.add(parent)
                    elif kind in ("stream", "display_data", "execute_result", "error", "update_display_data"):
                        outputs[parent].append({"type": kind, **msg["content"]})
            time.sleep(0.005)
        assert len(statuses) == len(ids), f"{len(ids) - len(statuses)} replies never came"
        return statuses, outputs

    def run_all(
        self, cells: list[tuple[str, str]], *, gap: float | None, timeout: float = 240
    ) -> list[tuple[str, list[dict[str, Any]]]]:
        """Send every cell; `gap` None waits for each reply first (a careful user, or papermill).
        Returns each cell's reply status and outputs; `self.counts` holds their execution counts."""
        if gap is None:
            found, self.counts = [], []
            for code, cell_id in cells:
                msg_id = self.send(code, cell_id)
                statuses, outputs = self.collect([msg_id], timeout=timeout)
                found.append((statuses[msg_id]["status"], outputs[msg_id]))
                self.counts.append(statuses[msg_id].get("execution_count"))
            return found
        ids = []
        for code, cell_id in cells:
            ids.append(self.send(code, cell_id))
            if gap:
                time.sleep(gap)
        statuses, outputs = self.collect(ids, timeout=timeout)
        self.counts = [statuses[i].get("execution_count") for i in ids]
        return [(statuses[i]["status"], outputs[i]) for i in ids]

    def close(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=False)
        shutil.rmtree(self.folder, ignore_errors=True)


@pytest.fixture
def runs(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "runs"
    yield path
    assert wait_gone(processes_under(path), timeout=30) == [], "a deployment outlived its kernel"
    kill_all(processes_under(path))


def cells_with(notebook: str, params: dict[str, Any]) -> list[tuple[str, str]]:
    """The notebook's code cells (source, cell id), its parameters cell followed by `params`."""
    nb = read(NOTEBOOKS / f"{notebook}.ipynb")
    cells = []
    for cell in code_cells(nb):
        source = cell["source"]
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            source += "".join(f"\n{name} = {value!r}" for name, value in params.items())
        cells.append((source, cell["id"]))
    return cells


def text_of(output: dict[str, Any]) -> str:
    if output["type"] == "stream":
        return output["text"]
    if output["type"] == "error":
        return "\n".join(output["traceback"])
    return "\n".join(str(v) for v in output.get("data", {}).values())


@pytest.mark.parametrize("notebook", list(NOTEBOOKS_UNDER_TEST))
def test_run_all_after_a_good_run_never_shows_a_verdict_below_the_failed_cell(
    notebook: str, runs: Path
) -> None:
    good, bad = NOTEBOOKS_UNDER_TEST[notebook]
    kernel = Kernel({**os.environ, RUN_ROOT_ENV: str(runs)})
    try:
        first = kernel.run_all(cells_with(notebook, good), gap=None)
        assert [status for status, _ in first] == ["ok"] * len(first), [
            text_of(o) for _, outputs in first for o in outputs if o["type"] == "error"
        ]
        assert any(w in text_of(o) for _, outputs in first for o in outputs for w in VERDICT_WORDS), (
            "the good run printed its verdict"
        )
        for gap in GAPS_S:
            replies = kernel.run_all(cells_with(notebook, bad), gap=gap)
            statuses = [status for status, _ in replies]
            assert statuses[0] == "ok" and statuses[1] == "error", (gap, statuses)
            failed = next(o for o in replies[1][1] if o["type"] == "error")
            assert failed["ename"] == "ConfigError", failed
            # Each refusal names the plan (or battery) cell by its role and this very execution.
            failed_cell = f" cell (In [{kernel.counts[1]}]) failed (ConfigError: "
            for number, (status, outputs) in enumerate(replies[2:], start=2):
                shown = [o for o in outputs if o["type"] != "error"]
                assert not shown, (
                    f"gap {gap * 1000:.0f} ms: cell {number} ran and showed {[text_of(o) for o in shown]}"
                )
                if status == "aborted":
                    continue
                assert status == "error", (gap, number, status)
                (error,) = [o for o in outputs if o["type"] == "error"]
                assert error["ename"] == "EarlierCellFailedError", (gap, number, error)
                (line,) = error["traceback"]  # one line, naming the cell that failed first
                assert failed_cell in line and "fix that cell and run it again" in line, line
                assert not any(w in line for w in VERDICT_WORDS), line
    finally:
        kernel.close()


def test_a_cell_that_fails_below_the_launch_stops_the_watch_notebooks_pool(runs: Path) -> None:
    """The watch notebook says it stops everything: its verdict cell fails (here on purpose, after
    the launch and a short watch), Run All halts there and never reaches the last cell, and still
    no process of the pool is left while the kernel lives on."""
    kernel = Kernel({**os.environ, RUN_ROOT_ENV: str(runs)})
    try:
        cells = cells_with("watch_pool", {"seconds": 4.0, "refresh_s": 2.0, "other_rate": 0.0})
        at = next(i for i, (source, _) in enumerate(cells) if source.startswith("verdict(live)"))
        cells[at] = ("raise RuntimeError('the verdict cell failed')", cells[at][1])
        replies = kernel.run_all(cells[: at + 1], gap=None)
        assert [status for status, _ in replies] == ["ok"] * at + ["error"], [
            text_of(o) for _, outputs in replies for o in outputs if o["type"] == "error"
        ]
        said = "".join(text_of(o) for o in replies[at][1] if o["type"] == "stream")
        assert "a cell failed: stopped the deployment this notebook started" in said, said
        assert wait_gone(processes_under(runs), timeout=30) == [], "the pool outlived its failed cell"
        [(status, outputs)] = kernel.run_all([("print(1 + 1)", "after")], gap=None)
        assert status == "ok" and "2" in text_of(outputs[0])  # the kernel lives on
    finally:
        kernel.close()
