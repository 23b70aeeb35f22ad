"""explore_routing.ipynb in a real JupyterLab, under headless Chromium: the first minutes of a user.

Run All shows the launch as it happens and keeps the deployment up; a burst cell re-runs
and passes; a typo in a cell of one's own leaves `table(explorer)` showing; a second Start
replaces the deployment (proved by PID); a burst after a stop is one line that says to run
Start again; a bad engine in the parameters is one line at the plan cell, and `%tb verbose`
still shows the full traceback. In same_model_load_balance.ipynb, a typo after a good Run
All leaves `table(result)` showing, also once the typo's cell is deleted; after a bad
parameter, Run All shows nothing of the earlier run below the plan cell.


The server and the page moves are `lab`'s.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..proctools import wait_gone
from .browser import keep_screenshot
from .conftest import NOTEBOOKS
from .lab import (
    LabServer,
    add_cell_below,
    cell,
    delete_cell,
    error_text,
    execution_count,
    has_error,
    lab_page,
    lab_server,
    open_notebook,
    outputs,
    replace_source,
    run,
    run_all,
    shot,
    shot_cells,
    wait_executed,
    wait_settled,
)

pytestmark = [pytest.mark.browser, pytest.mark.heavy]

# tiny-bert workers take seconds to start on 2 cores: long enough to watch the launch live.
ENGINE = "transformers"
# A cell of one's own below the notebook's, showing the good run's table.
MINE = "table(result)  # mine"


# The watch notebook with a leak from 5 s: the watch's own requests meet it within seconds.
WATCH_PARAMS = {"seconds = 75.0": "seconds = 30.0", 'fault = ""': 'fault = "leak:0.05@5s"'}


def watch_notebook() -> dict[str, Any]:
    notebook = json.loads((NOTEBOOKS / "watch_pool.ipynb").read_text())
    params = next(c for c in notebook["cells"] if "parameters" in c["metadata"].get("tags", []))
    source = "".join(params["source"])
    for old, new in WATCH_PARAMS.items():
        assert old in source, old
        source = source.replace(old, new)
    params["source"] = source
    return notebook


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[LabServer]:
    root = tmp_path / "root"
    root.mkdir()
    notebook = json.loads((NOTEBOOKS / "explore_routing.ipynb").read_text())
    params = next(c for c in notebook["cells"] if "parameters" in c["metadata"].get("tags", []))
    source = "".join(params["source"])
    assert 'engine = "hash"' in source
    params["source"] = source.replace('engine = "hash"', f'engine = "{ENGINE}"')
    (root / "explore_routing.ipynb").write_text(json.dumps(notebook))
    # Byte for byte as committed: opening it must not mark it modified.
    shutil.copy(NOTEBOOKS / "same_model_load_balance.ipynb", root / "same_model_load_balance.ipynb")
    (root / "watch_pool.ipynb").write_text(json.dumps(watch_notebook()))
    with lab_server(tmp_path, root) as server:
        yield server


@pytest.fixture
def page(lab: LabServer, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    yield from lab_page(request, tmp_path)


def test_explore_notebook_in_jupyterlab(lab: LabServer, page: Any, tmp_path: Path) -> None:
    # The notebook names the project's kernel, found among the user's kernels, and it is ready.
    open_notebook(page, lab, "explore_routing.ipynb")
    start, burst, last = (
        cell(page, "start_deployment(plan)"),
        cell(page, "step = explorer.burst("),
        cell(page, "verdict(sweep)"),
    )

    run_all(page)

    # The launch, live: a bar, the process it waits for, on what, and the time so far.
    live = start.locator(".jp-OutputArea .widget-hprogress")
    live.wait_for(state="visible")
    # Two displays update one after the other: wait until both show the same worker, and
    # keep the text of that moment.
    progress = page.wait_for_function(
        r"""el => {
            const text = el.innerText.replaceAll('\u2007', ' ');
            const waiting = text.match(/waiting for (worker \d): ready once its \/health answered 200/);
            const bar = text.match(/\d\/3 ready \[\d\d:\d\d\]\s*(worker \d), \d+ s/);
            return waiting && bar && waiting[1] === bar[1] ? text : null;
        }""",
        arg=start.element_handle(),
    ).json_value()
    assert "frontend ready after" in progress and "and the frontend listed model 'tiny-bert'" in progress, (
        progress
    )
    shot(page, tmp_path, start, "jupyterlab-1-start-progress.png")

    last_count = wait_executed(page, last, after=None)
    assert "weight sweep on embedded" in outputs(last) and "PASSED" in outputs(last), outputs(last)
    # The bar is gone; what stays says what each process waited for and how long it took.
    assert live.count() == 0
    started = outputs(start)
    assert "frontend ready after" in started and "worker 1 ready after" in started, started
    assert "all 3 processes ready in" in started and "worker 1" in started, started
    assert "waiting for" not in started, "the line of what it waited for went with the bar"
    shot(page, tmp_path, start, "jupyterlab-2-start-after-run-all.png")

    # Run All left the deployment up: a burst cell runs again, and passes, on the same processes.
    deployment = lab.deployment_pids()
    assert len(deployment) >= 3, deployment  # frontend and two workers at least
    lab.remember()
    assert run(page, burst) > last_count
    table = outputs(burst)
    assert re.search(r"burst \d+ under w=3:1: PASSED", table) and "Error" not in table, table
    assert len(re.findall(r"dynamo\.embed-worker-\d\.generate", table)) == 2, (
        "that burst's rows only: one per worker"
    )
    assert lab.deployment_pids() == deployment
    shot(page, tmp_path, burst, "jupyterlab-3-burst-after-run-all.png")

    # A typo in a cell of one's own makes nothing stale: the explorer's bursts still show.
    typo = add_cell_below(page, burst, "tabel(explorer)")
    run(page, typo)
    assert "NameError" in error_text(typo), error_text(typo)
    mine = add_cell_below(page, typo, "table(explorer)")
    run(page, mine)
    assert mine.locator(".jp-OutputArea-output table").count() == 1 and not has_error(mine), outputs(mine)
    shown = outputs(mine)
    assert "per worker, in order: worker 0 / worker 1" in shown and "3:1" in shown, shown
    shot_cells(page, tmp_path, [typo, mine], "jupyterlab-3b-typo-then-explorer-table.png")

    # Start again: the old deployment is stopped first, never leaked.
    run(page, start)
    assert "all 3 processes ready in" in outputs(start), outputs(start)
    # ...and says what it stopped.
    assert "stopped the deployment this notebook started (frontend and 2 workers" in outputs(start)
    replaced = lab.deployment_pids()
    assert len(replaced) >= 3 and not replaced & deployment, (deployment, replaced)
    assert wait_gone(sorted(deployment)) == [], "the first deployment outlived a second Start"
    lab.remember()

    # Stopped by hand: a burst then says so in one line.
    stop = add_cell_below(page, burst, "dep.stop()  # by hand")
    run(page, stop)
    assert wait_gone(sorted(replaced)) == []
    run(page, burst)
    stopped = error_text(burst)
    assert stopped.splitlines() == [
        "DeploymentStoppedError: this deployment was stopped and its servers are gone; start a new one "
        "(in a notebook: run the Start cell again)"
    ], stopped
    shot(page, tmp_path, burst, "jupyterlab-4-burst-after-stop.png")

    # A bad engine: one line at the plan cell, before anything launches.
    params, plan = cell(page, "# live weight changes need"), cell(page, "ScenarioPlan.from_params(")
    source = params.locator(".cm-content").inner_text()
    replace_source(page, params, source.replace(f'engine = "{ENGINE}"', 'engine = "nonsense"'))
    run(page, params)
    run(page, plan)
    assert error_text(plan).splitlines() == [
        "ConfigError: unknown engine 'nonsense'; choose from hash, transformers, vllm"
    ], error_text(plan)
    assert lab.deployment_pids() == set(), "nothing launched"
    shot(page, tmp_path, plan, "jupyterlab-5-bad-engine.png")

    # ...and the full traceback is one magic away, as the notebook says.
    tb = add_cell_below(page, plan, "%tb verbose")
    run(page, tb)
    full = error_text(tb)
    assert "Traceback" in full and "plan.py" in full and "unknown engine 'nonsense'" in full, full
    shot(page, tmp_path, tb, "jupyterlab-6-tb-verbose.png")

    lab.remember()
    assert lab.shutdown() == [], "the kernel or its deployment outlived JupyterLab"


def test_run_all_with_a_bad_parameter_shows_no_earlier_verdict(
    lab: LabServer, page: Any, tmp_path: Path
) -> None:
    """Issue 19's finding, by a real Run All: after a good run, `engine = "nonsense"` fails the plan
    cell, and no cell below it shows the previous run's verdict, table or figure."""
    open_notebook(page, lab, "same_model_load_balance.ipynb")
    last = cell(page, "verdict(result)")
    run_all(page)
    wait_executed(page, last, after=None)
    wait_settled(page)
    assert "same-model on embedded (hash): PASSED" in outputs(last), outputs(last)
    shot(page, tmp_path, page.locator(".jp-Notebook"), "jupyterlab-7-good-run-all.png")
    # The figure is drawn at 2x and shown at its own size (or narrower, to fit), as in the report.
    image = cell(page, "plot(result)").locator(".jp-OutputArea-output img")
    sizes = image.evaluate(
        "i => ({natural: i.naturalWidth, size: Number(i.getAttribute('width')), shown: i.width})"
    )
    assert sizes["natural"] // 2 == sizes["size"] and 300 < sizes["shown"] <= sizes["size"], sizes
    wide_table_scrolls_in_its_box(page, cell(page, "table(result)"), tmp_path)

    # A typo in a new cell, then the table of the good run: it shows, again, and once the typo is gone.
    typo = add_cell_below(page, last, "tabel(result)")
    run(page, typo)
    assert "NameError: name 'tabel' is not defined" in error_text(typo), error_text(typo)
    mine = add_cell_below(page, typo, MINE)
    for _ in range(2):
        run(page, mine)
        assert mine.locator(".jp-OutputArea-output table").count() == 1 and not has_error(mine), outputs(mine)
        assert mine.locator(".jp-OutputArea-output table tbody tr").count() == 2, "one row per worker"
    shot_cells(page, tmp_path, [typo, mine], "jupyterlab-7b-typo-then-table.png")
    delete_cell(page, typo)
    mine = cell(page, MINE)  # a place further up now
    run(page, mine)
    assert mine.locator(".jp-OutputArea-output table").count() == 1 and not has_error(mine), outputs(mine)
    shot(page, tmp_path, mine, "jupyterlab-7c-table-after-typo-deleted.png")
    # That cell stays: the Run All below must refuse it too, as every cell below the plan cell.

    params, plan = cell(page, "# the stack: "), cell(page, "ScenarioPlan.from_params(")
    # Run All left the page at its end; a cell out of view has no innerText until it is drawn.
    params.scroll_into_view_if_needed()
    page.wait_for_function(
        "el => el.innerText.includes('engine = ')", arg=params.locator(".cm-content").element_handle()
    )
    source = params.locator(".cm-content").inner_text()
    assert 'engine = "hash"' in source, source
    replace_source(page, params, source.replace('engine = "hash"', 'engine = "nonsense"'))
    before = execution_count(plan)
    run_all(page)
    wait_executed(page, plan, after=before)
    wait_settled(page)
    assert error_text(plan).splitlines() == [
        "ConfigError: unknown engine 'nonsense'; choose from hash, transformers, vllm"
    ], error_text(plan)
    code = page.locator(".jp-Notebook .jp-Cell.jp-CodeCell")
    index = next(
        i for i in range(code.count()) if "ScenarioPlan.from_params(" in (code.nth(i).text_content() or "")
    )
    below = [code.nth(i) for i in range(index + 1, code.count())]
    assert below, "cells below the plan cell"
    sources = [c.locator(".cm-content").text_content() or "" for c in below]
    assert MINE in sources, "one's own cell, added below"
    failed_at = execution_count(plan)
    for later in below:
        shown = outputs(later).strip()
        assert "PASSED" not in shown and "FAILED" not in shown.replace("failed (ConfigError", ""), shown
        assert later.locator(".jp-OutputArea-output img").count() == 0, "a figure of the earlier run"
        assert later.locator(".jp-OutputArea-output table").count() == 0, "a table of the earlier run"
        if shown:  # ran, and refused in one line; otherwise aborted, with nothing shown
            (line,) = error_text(later).splitlines()
            assert line.startswith(
                f"EarlierCellFailedError: the plan cell (In [{failed_at}]) failed (ConfigError: unknown engine"
            ), line
            assert line.endswith(
                "is still what an earlier run left: fix that cell and run it again, then this one"
            ), line
    assert lab.deployment_pids() == set(), "nothing launched from the earlier plan"
    shot_cells(page, tmp_path, [plan, below[0]], "jupyterlab-8a-bad-plan-then-run-cell.png")
    # Run All may have aborted that cell: run by hand, it refuses the earlier run's result, in one line.
    mine = cell(page, MINE)
    run(page, mine)
    assert error_text(mine).splitlines() == [
        f"EarlierCellFailedError: the plan cell (In [{failed_at}]) failed (ConfigError: unknown engine 'nonsense'; "
        "choose from hash, transformers, vllm), so `result` is still what an earlier run left: fix that cell "
        "and run it again, then this one"
    ], error_text(mine)
    assert mine.locator(".jp-OutputArea-output table").count() == 0
    shot(page, tmp_path, mine, "jupyterlab-8b-table-refused-after-bad-plan.png")
    cell(
        page, MINE
    ).scroll_into_view_if_needed()  # the notebook's end: the last refusals, one's own cell's too
    page.locator(".jp-Notebook").screenshot(path=str(tmp_path / "jupyterlab-8-bad-run-all.png"))
    keep_screenshot(tmp_path / "jupyterlab-8-bad-run-all.png")


def test_watch_notebook_in_jupyterlab_redraws_as_it_watches_and_finds_the_leak(
    lab: LabServer, page: Any, tmp_path: Path
) -> None:
    """Issue 32: watch_pool.ipynb by Run All. The watch's figure is shown while its cell still runs
    and is redrawn in place (one display, a new image), the leak raises its alarm, the verdict cell
    says so, and the last cell stops everything the notebook started."""
    open_notebook(page, lab, "watch_pool.ipynb")
    watching, verdict_cell = cell(page, "live = watch_live("), cell(page, "verdict(live)")
    last = cell(page, "stop_deployment(when=stop_at_end)")
    run_all(page)
    image = watching.locator(".jp-OutputArea-output img")
    image.first.wait_for(state="visible")
    first = image.first.get_attribute("src")
    assert execution_count(watching) is None, "the figure shows while the watch runs"
    # Redrawn in place: the one image's source changes before the cell ends.
    page.wait_for_function(
        """([el, first]) => {
            const images = el.querySelectorAll('.jp-OutputArea-output img');
            return images.length === 1 && images[0].getAttribute('src') !== first;
        }""",
        arg=[watching.element_handle(), first],
    )
    shot(page, tmp_path, watching, "jupyterlab-9a-watch-redrawn.png")
    wait_executed(page, last, after=None)
    wait_settled(page)
    assert watching.locator(".jp-OutputArea-output img").count() == 1, "one display, redrawn"
    assert "watch PASSED (expected: an alarm, a fault was injected)" in outputs(watching), outputs(watching)
    assert "watch PASSED" in outputs(verdict_cell) and not has_error(verdict_cell), outputs(verdict_cell)
    assert not has_error(last), error_text(last)
    assert lab.deployment_pids() == set(), "the pool stopped in the last cell"
    shot(page, tmp_path, page.locator(".jp-Notebook"), "jupyterlab-9-watch-run-all.png")


def wide_table_scrolls_in_its_box(page: Any, table_cell: Any, tmp_path: Path) -> None:
    """Issue 28: in a window narrower than the per-worker table, the table scrolls inside its
    own box, which stays within its output, and its last column (`endpoint`) can be scrolled
    into view; it is not cut at the output's right edge."""
    page.set_viewport_size({"width": 720, "height": 1000})
    box = table_cell.locator(".embedlab-table > div")
    box.scroll_into_view_if_needed()
    wide = page.wait_for_function(
        """el => {
            if (el.scrollWidth <= el.clientWidth) return null;  // until JupyterLab has laid out the narrower window
            const output = el.closest('.jp-OutputArea-output').getBoundingClientRect();
            const right = el.getBoundingClientRect().right;
            el.scrollLeft = el.scrollWidth;
            const last = [...el.querySelectorAll('th')].pop();
            return {scroll: el.scrollWidth, client: el.clientWidth, right, output: output.right,
                    window: window.innerWidth, last: last.innerText, last_right: last.getBoundingClientRect().right};
        }""",
        arg=box.element_handle(),
    ).json_value()
    assert wide["right"] <= wide["output"] + 1 and wide["right"] <= wide["window"], wide
    assert wide["last"] == "endpoint" and wide["last_right"] <= wide["right"] + 1, wide
    shot(page, tmp_path, table_cell, "jupyterlab-7b-wide-table-scrolled.png")
    page.set_viewport_size({"width": 1400, "height": 1000})
