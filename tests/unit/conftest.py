"""Unit tests start no process: a test that does fails, naming what it started.

A unit test is of pure logic, in this process: a subprocess (a server, a kernel, `python -c`,
the CLI, a shell script, a forked worker) makes it slow, timing-dependent on a loaded
machine, and able to leave something behind. Such tests live in tests/integration (or
tests/notebooks), where the house rules for processes apply. Every way a process starts
from Python ends in one of the calls replaced here: `subprocess` (and asyncio's
subprocesses, and `os.popen`) in `Popen._execute_child`, `multiprocessing`'s fork start in
`os.fork`, its spawn and forkserver starts in `multiprocessing.util.spawnv_passfds`.
What runs in-process is fine (mypy's `mypy.api`, import-linter's `lint_imports`).
"""

from __future__ import annotations

import multiprocessing.util
import os
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest

# Where a process would start, and how to name what it was asked to run.
_STARTS: list[tuple[Any, str, Callable[..., str]]] = [
    (subprocess.Popen, "_execute_child", lambda self, args, *a, **k: f"subprocess {_argv(args)}"),
    (multiprocessing.util, "spawnv_passfds", lambda path, args, *a, **k: f"multiprocessing {_argv(args)}"),
    *[(os, name, lambda *a, _n=name, **k: f"os.{_n}()") for name in ("fork", "forkpty")],
    *[
        (os, name, lambda path, *a, _n=name, **k: f"os.{_n}({path!r})")
        for name in ("posix_spawn", "posix_spawnp", "system", "execv", "execve", "execvp", "execvpe")
        if hasattr(os, name)
    ],
]


def _argv(args: Any) -> str:
    words = [os.fsdecode(a) for a in args] if isinstance(args, list | tuple) else [os.fsdecode(args)]
    return " ".join(words)[:200]


_CALL_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    if call.when == "call":
        item.stash[_CALL_FAILED] = outcome.get_result().failed


@pytest.fixture(autouse=True)
def no_process_started(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[list[str]]:
    """Fail a unit test that starts a process, even one whose code catches the error it gets;
    yields what was refused (a test of this fixture empties it)."""
    started: list[str] = []

    def refusing(describe: Callable[..., str]) -> Callable[..., Any]:
        def refuse(*args: Any, **kwargs: Any) -> Any:
            what = describe(*args, **kwargs)
            started.append(what)
            raise PermissionError(
                f"a unit test starts no process (it started {what}): move it to tests/integration"
            )

        return refuse

    for owner, name, describe in _STARTS:
        monkeypatch.setattr(owner, name, refusing(describe))
    yield started
    if started and not request.node.stash.get(_CALL_FAILED, False):  # else the error is its failure
        pytest.fail(
            f"a unit test starts no process, and this one started {started[0]}"
            f"{f' (and {len(started) - 1} more)' if len(started) > 1 else ''}: move it to tests/integration",
            pytrace=False,
        )
