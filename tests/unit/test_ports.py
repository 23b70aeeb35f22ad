"""Port reservations: one live owner per port, across processes (xdist's workers reserve side by side)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from embedlab.cluster import ports

LOW = 25000


@pytest.fixture
def port_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(ports, "_DIR", tmp_path)
    return tmp_path


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_a_dead_owners_reservation_is_taken_over_and_released(
    port_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ports, "LOW", LOW)
    monkeypatch.setattr(ports, "HIGH", LOW + 1)
    (port_dir / str(LOW)).write_text(str(dead_pid()))
    assert ports.reserve_port() == LOW
    assert (port_dir / str(LOW)).read_text() == str(os.getpid())
    ports.release_port(LOW)
    # Nothing of the reservation is left: no port file, no staging file (the lock file stays).
    assert [p.name for p in port_dir.iterdir()] == [".takeover.lock"]


def test_a_live_owners_or_an_unreadable_reservation_is_never_taken(
    port_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ports, "LOW", LOW)
    monkeypatch.setattr(ports, "HIGH", LOW + 2)
    (port_dir / str(LOW)).write_text(str(os.getppid()))
    # Empty: a reservation caught between its creation and its PID's write.
    (port_dir / str(LOW + 1)).write_text("")
    with pytest.raises(OSError, match="no free port"):
        ports.reserve_port(attempts=20)
    assert (port_dir / str(LOW)).read_text() == str(os.getppid())
    assert (port_dir / str(LOW + 1)).read_text() == ""
    ports.release_port(LOW)  # not ours: left alone
    assert (port_dir / str(LOW)).exists()


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
    dead = dead_pid()
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
