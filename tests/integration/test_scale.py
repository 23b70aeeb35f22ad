"""A pool of 32 workers through the command line, as a user runs it: the verdict, then nothing left."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from ..commands import run_embedlab
from ..proctools import processes_under

WORKERS = 32


@pytest.mark.parametrize(
    "extra",
    [
        # The burst follows from the pool: 1713 requests over 32 workers leave one still with
        # probability 7.7e-23 and catch a 0.9/0.1 skew with 99 % (power.required_requests).
        (),
        # 384: every worker must move (a correct router leaves one of 32 still less often than
        # 0.001), but a 0.9/0.1 skew is caught far less often than 99 %: never PASSED.
        ("--requests", "384"),
    ],
    ids=["default-burst", "underpowered-burst"],
)
def test_same_model_over_32_workers_passes_and_leaves_nothing(tmp_path: Path, extra: tuple[str, ...]) -> None:
    run_dir, out = tmp_path / "run", tmp_path / "result.json"
    started = time.monotonic()
    proc = run_embedlab(
        "scenario",
        "same-model",
        "--workers",
        str(WORKERS),
        *extra,
        "--json",
        str(out),
        "--run-dir",
        str(run_dir),
        timeout=300,
    )
    took = time.monotonic() - started
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    if extra:
        assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert (
            last.startswith("same-model on embedded (hash): INCONCLUSIVE") and "send 1713 or more" in last
        ), last
    else:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert last == "same-model on embedded (hash): PASSED"
    result = json.loads(out.read_text())
    deltas = result["bursts"][0]["deltas"]
    requests = int(extra[1]) if extra else 1713
    assert len(deltas) == WORKERS and sum(deltas) == requests and all(d > 0 for d in deltas), deltas
    assert result["power"].startswith(f"{requests} requests over {WORKERS} replicas"), result["power"]
    assert processes_under(run_dir) == [], "every worker and the frontend were stopped"
    print(f"{WORKERS} workers, {requests} requests: {took:.1f} s from the command to its exit")
