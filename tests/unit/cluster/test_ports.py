"""Port reservations: one live owner per port, across processes (xdist's workers reserve side by side)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from embedlab.cluster import ports

from ...proctools import unused_pid

LOW = 25000


@pytest.fixture
def port_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(ports, "_DIR", tmp_path)
    return tmp_path


def test_a_dead_owners_reservation_is_taken_over_and_released(
    port_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ports, "LOW", LOW)
    monkeypatch.setattr(ports, "HIGH", LOW + 1)
    (port_dir / str(LOW)).write_text(str(unused_pid()))
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
