"""notebooks/watch_pool.ipynb under papermill: a bounded watch of a demo pool, stopped with everything it started."""

from __future__ import annotations

from pathlib import Path

from .conftest import NOTEBOOKS, assert_torn_down, code_cells, execute, tagged
from .test_notebooks_run import errors, images


def test_the_watch_notebook_finds_a_leak_that_starts_late_and_stops_cleanly(
    tmp_path: Path, run_dir: Path
) -> None:
    # A leak of 1 in 20 from 5 s: the watch's own requests meet it within seconds (refused by the
    # wrong worker, proven by the response's header), so 40 s of watching bound the run.
    nb = execute(
        NOTEBOOKS / "watch_pool.ipynb", tmp_path / "out.ipynb", seconds=40.0, fault="leak:0.05@5s",
        run_dir=str(run_dir), refresh_s=5.0,
    )  # fmt: skip
    assert errors(nb) == []
    printed = "".join(o.get("text", "") for c in code_cells(nb) for o in c["outputs"])
    assert "watch PASSED (expected: an alarm, a fault was injected)" in printed, printed[-2000:]
    # The summary cell and the verdict cell say the same, to the second: the watch's clock stopped.
    said = {line for line in printed.splitlines() if line.startswith("watch PASSED")}
    assert len(said) == 1, said
    assert [len(images(c)) for c in tagged(nb, "report-figure")] == [1]
    assert_torn_down(run_dir)
