"""Process-tree helpers for tests that prove nothing is left behind (by PID, never by name)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from embedlab import Deployment


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command may contain spaces and parentheses: fields start after the last ')'.
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def descendants_of(pid: int) -> list[int]:
    out: list[int] = []
    frontier = [pid]
    while frontier:
        kids = [c for p in frontier for c in children_of(p)]
        out += kids
        frontier = kids
    return out


def _state(stat: str) -> str:
    # The command may contain spaces and parentheses: fields start after the last ')'.
    return stat[stat.rindex(")") + 2]


def _exited(pid: int, state: str) -> bool:
    """Whether `pid` (in `state`) has exited as its parent's waitpid sees it.

    A thread-group leader shows 'Z' as soon as its own thread exits, while the process's other
    threads (a Tokio runtime's, the Dynamo frontend's) are still exiting: waitpid, and so
    `Popen.poll()` and `ManagedProcess.alive()`, reports the exit only once the last of them is
    gone: 2 to 120 ms later on this 2-core box, measured after SIGKILL (a frontend whose /proc
    showed 'Z' with 2 tasks left while `poll()` still said running, in 2 of 10 `kill_host(0)`s).
    Such a process still holds its sockets and files: it is not gone.
    """
    if state != "Z":
        return False
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")] in ([pid], [])
    except OSError:
        return True


def wait_until(check: Callable[[], object], timeout: float) -> bool:
    """Whether `check()` came true within `timeout` seconds (asked every 50 ms, and once at the end)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return bool(check())


def unused_pid() -> int:
    """A pid no process holds, found without starting one: one above the kernel's `pid_max`,
    which it never gives out (kill says "no such process", /proc has no entry)."""
    return int(Path("/proc/sys/kernel/pid_max").read_text()) + 1


def alive(pid: int) -> bool:
    """Not yet exited: running, or a zombie some of whose threads are still exiting. A zombie whose
    every thread is gone counts as dead (its parent has yet to reap it: that is the parent's to do)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return not _exited(pid, _state(stat))


def group_members(pgid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[2]) == pgid and not _exited(int(entry.name), fields[0]):
                members.append(int(entry.name))
    return members


def wait_gone(pids: list[int], timeout: float = 15.0) -> list[int]:
    """Wait until every pid has exited, as `alive` says (a zombie counts as dead once its every
    thread is gone: when its parent's waitpid reports it); returns the survivors."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [p for p in pids if alive(p)]
        if not left:
            return []
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def kill_all(pids: list[int]) -> None:
    import signal

    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def deployment_pids(dep: Deployment) -> dict[int, list[int]]:
    """Process group id -> every live process of that group and below (by PID, never by name)."""
    found: dict[int, list[int]] = {}
    for proc in dep.processes:
        if proc.pgid is not None and proc.pid is not None:
            found[proc.pgid] = sorted(
                set(group_members(proc.pgid)) | set(descendants_of(proc.pid)) | {proc.pid}
            )
    return found


def assert_all_gone(
    pids: Iterable[int], groups: Iterable[int], what: str = "after teardown", *, timeout: float = 15.0
) -> None:
    """Every pid dead (as `alive` says) and every process group empty, within `timeout`."""
    deadline = time.monotonic() + timeout
    survivors = wait_gone(list(pids), timeout=timeout)
    assert survivors == [], f"{what}: processes survived: {survivors}"
    groups = list(groups)
    # A member not among `pids` (a grandchild) may still be exiting: wait for it as for them.
    while (left := {g: members for g in groups if (members := group_members(g))}) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.05)
    assert not left, f"{what}: a process group survived: {left}"


def assert_groups_gone(by_group: Mapping[int, Iterable[int]], *, timeout: float = 15.0) -> None:
    """`assert_all_gone` for `deployment_pids`' map."""
    assert_all_gone([p for members in by_group.values() for p in members], by_group, timeout=timeout)


def processes_under(run_dir: Path) -> list[int]:
    """PIDs whose EMBEDLAB_STATE_DIR lies under `run_dir`: what a notebook's deployment started.

    Found by the folder the test gave it, never by a process name.
    """
    marker = f"EMBEDLAB_STATE_DIR={run_dir}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if any(item.startswith(marker) for item in environ.split(b"\0")):
            found.append(int(entry.name))
    return found
