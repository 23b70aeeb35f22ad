"""The tests' process helpers wait for the state the tests then assert, and a process embedlab
SIGKILLed counts as killed at once: on real multi-threaded processes, as the Dynamo frontend is."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from embedlab.cluster.managed_process import ManagedProcess

from ..proctools import alive, group_members, wait_gone

# Threads busy outside the GIL, as a Tokio runtime's are: after a SIGKILL the leader shows 'Z'
# while they are still exiting, and waitpid reports the exit only once the last one is gone.
THREADS = r"""
import hashlib, sys, threading
data = b"x" * (1 << 20)
def spin():
    while True:
        hashlib.sha256(data).digest()
for _ in range(16):
    threading.Thread(target=spin, daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
"""


def busy_child() -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-c", THREADS],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    return proc


def test_a_killed_process_is_gone_only_once_its_parent_can_reap_it() -> None:
    """wait_gone returns when waitpid reports the exit, never while a zombie's threads still exit.

    Counting 'Z' as gone, 2 of 10 `kill_host(0)`s had `poll()` still running right after."""
    for _ in range(20):
        proc = busy_child()
        try:
            proc.send_signal(signal.SIGKILL)
            assert wait_gone([proc.pid], timeout=10) == []
            # No wait here: what the helper returned on is what the parent sees.
            assert proc.poll() == -signal.SIGKILL
            assert not alive(proc.pid) and group_members(proc.pid) == []
        finally:
            proc.kill()
            proc.wait()
            proc.stdout.close()  # type: ignore[union-attr]


def test_a_process_embedlab_sigkilled_is_killed_at_once_and_its_code_follows(tmp_path: Path) -> None:
    proc = ManagedProcess(
        "spinner", [sys.executable, "-c", THREADS], log_path=tmp_path / "spinner.log"
    ).start()
    try:
        proc.wait_ready(lambda: "ready" in proc.log_tail(), timeout=30)
        proc.signal(signal.SIGCONT)  # another signal kills nothing
        assert not proc.killed and proc.alive()
        proc.signal(signal.SIGKILL)
        assert proc.killed
        assert proc.wait_exit(10) == -signal.SIGKILL and not proc.alive()
    finally:
        proc.stop()
