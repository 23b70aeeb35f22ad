"""A tiny process that outlives a killed harness just long enough to stop its servers.

The harness writes the process groups it owns into a file; the watchdog polls the
harness's PID. When the harness is gone (even by SIGKILL, which runs no Python
cleanup) it sends SIGTERM, then SIGKILL, to every group still listed, and exits. When
the harness exits cleanly it empties the file first, so the watchdog has nothing to do.

    python -m embedlab.watchdog PARENT_PID GROUPS_FILE
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from .ports import pid_alive

POLL_SECONDS = 0.2
TERM_GRACE_SECONDS = 3.0


def _groups(path: Path) -> list[int]:
    try:
        return [int(line) for line in path.read_text().split() if line.strip().isdigit()]
    except OSError:
        return []


def _signal_groups(groups: list[int], sig: int) -> list[int]:
    alive = []
    for pgid in groups:
        try:
            os.killpg(pgid, sig)
            alive.append(pgid)
        except ProcessLookupError:
            pass
    return alive


def watch(parent: int, path: Path) -> None:
    while pid_alive(parent) and os.getppid() == parent:
        time.sleep(POLL_SECONDS)
    groups = _signal_groups(_groups(path), signal.SIGTERM)
    deadline = time.monotonic() + TERM_GRACE_SECONDS
    while groups and time.monotonic() < deadline:
        time.sleep(0.05)
        groups = _signal_groups(groups, 0)
    _signal_groups(groups, signal.SIGKILL)
    try:
        path.unlink()
    except OSError:
        pass


if __name__ == "__main__":
    watch(int(sys.argv[1]), Path(sys.argv[2]))
