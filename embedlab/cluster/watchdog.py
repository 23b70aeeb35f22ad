"""A tiny process that outlives a killed harness just long enough to stop its servers.

The harness writes the process groups it owns into a file, and the commands that undo
what else it made (`run ["ip", "netns", "del", NAME]`); the watchdog polls the harness's
PID. When the harness is gone (even by SIGKILL, which runs no Python cleanup) it sends
SIGTERM, then SIGKILL, to every group still listed, then runs the commands, last listed
first, and exits. When the harness exits cleanly it empties the file first, so the
watchdog has nothing to do.

    python -m embedlab.cluster.watchdog PARENT_PID GROUPS_FILE
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from .ports import pid_alive

POLL_SECONDS = 0.2
TERM_GRACE_SECONDS = 3.0


def _read(path: Path) -> tuple[list[int], list[list[str]]]:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return [], []
    groups = [int(line) for line in lines if line.strip().isdigit()]
    commands = []
    for line in lines:
        if line.startswith("run "):
            try:
                commands.append([str(a) for a in json.loads(line[4:])])
            except ValueError:
                continue
    return groups, commands


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
    listed, commands = _read(path)
    groups = _signal_groups(listed, signal.SIGTERM)
    deadline = time.monotonic() + TERM_GRACE_SECONDS
    while groups and time.monotonic() < deadline:
        time.sleep(0.05)
        groups = _signal_groups(groups, 0)
    _signal_groups(groups, signal.SIGKILL)
    for argv in reversed(commands):
        try:
            subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=30,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            continue
    try:
        path.unlink()
    except OSError:
        pass


if __name__ == "__main__":
    watch(int(sys.argv[1]), Path(sys.argv[2]))
