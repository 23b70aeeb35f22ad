"""Port reservations across processes: four reserving side by side never share a port, each
taking dead owners' reservations over (one process's logic: tests/unit/cluster/test_ports.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ..proctools import unused_pid

LOW = 25000


RESERVER = f"""
import json, sys
from embedlab.cluster import ports
ports.LOW, ports.HIGH = {LOW}, {LOW + 64}
sys.stdin.readline()  # all start together
print(json.dumps([ports.reserve_port() for _ in range(8)]), flush=True)
sys.stdin.read()  # hold the ports (stay alive) until the test has read every process's
"""


def test_processes_reserving_side_by_side_never_share_a_port(tmp_path: Path) -> None:
    # Every port of the range starts as a dead process's reservation, so that every one of
    # these reservations goes through a takeover.
    dead = unused_pid()
    for port in range(LOW, LOW + 64):
        (tmp_path / str(port)).write_text(str(dead))
    env = {**os.environ, "EMBEDLAB_PORT_DIR": str(tmp_path)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RESERVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(4)
    ]
    try:
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        held = [json.loads(proc.stdout.readline()) for proc in procs if proc.stdout is not None]
        owners = {port: proc.pid for proc, taken in zip(procs, held) for port in taken}
        assert sum(map(len, held)) == len(owners) == 32, held
        for port, pid in owners.items():
            assert (tmp_path / str(port)).read_text() == str(pid)
    finally:
        for proc in procs:
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(timeout=30)
            if proc.stdout is not None:
                proc.stdout.close()
