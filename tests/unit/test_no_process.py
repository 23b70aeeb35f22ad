"""tests/unit/conftest.py refuses every way a unit test could start a process, and names it."""

from __future__ import annotations

import asyncio
import multiprocessing
import subprocess

import pytest


def test_each_way_of_starting_a_process_is_refused_and_named(no_process_started: list[str]) -> None:
    with pytest.raises(PermissionError, match="a unit test starts no process .*move it to tests/integration"):
        subprocess.run(["true"], check=False)

    async def exec_one() -> None:
        await asyncio.create_subprocess_exec("true")

    with pytest.raises(PermissionError):
        asyncio.run(exec_one())
    for method in ("fork", "spawn", "forkserver"):
        with pytest.raises(PermissionError):
            multiprocessing.get_context(method).Process(target=print).start()
    assert no_process_started[:2] == ["subprocess true", "subprocess true"], no_process_started
    assert no_process_started[2] == "os.fork()"
    assert len(no_process_started) == 5, no_process_started
    assert all(s.startswith("multiprocessing ") for s in no_process_started[3:]), no_process_started
    no_process_started.clear()  # each was refused on purpose
