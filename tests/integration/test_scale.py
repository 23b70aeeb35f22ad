"""A pool of 32 workers through the command line, as a user runs it: the verdict, then nothing left."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..proctools import processes_under

WORKERS = 32


@pytest.mark.parametrize(
    "extra",
    [
        # The check's own burst (40): over 32 workers some stay still by chance, so it judges the
        # split and the count, not "every worker moved".
        (),
        # 384: the smallest multiple of 32 at which a correct router leaves one of 32 workers
        # still less often than the fairness alpha (0.001): now every worker must move.
        ("--requests", "384"),
    ],
    ids=["default-burst", "every-worker-moves"],
)
def test_same_model_over_32_workers_passes_and_leaves_nothing(tmp_path: Path, extra: tuple[str, ...]) -> None:
    run_dir, out = tmp_path / "run", tmp_path / "result.json"
    started = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "embedlab",
            "scenario",
            "same-model",
            "--workers",
            str(WORKERS),
            *extra,
            "--json",
            str(out),
            "--run-dir",
            str(run_dir),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "same-model on embedded (hash): PASSED"
    result = json.loads(out.read_text())
    deltas = result["bursts"][0]["deltas"]
    requests = int(extra[1]) if extra else 40
    assert len(deltas) == WORKERS and sum(deltas) == requests
    if extra:
        assert all(d > 0 for d in deltas), deltas
    assert processes_under(run_dir) == [], "every worker and the frontend were stopped"
    print(f"{WORKERS} workers, {requests} requests: {took:.1f} s from the command to its exit")
